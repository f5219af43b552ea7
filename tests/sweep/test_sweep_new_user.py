"""What a new user met with ``trainplan sweep``, ``sweep-plot`` and ``frontier`` in a fresh
process, each command run as the user ran it:

* a grid with ``objective = "cost"`` and no ``gpu_hour_price`` ran every point into the same
  error, in the CLI's words (``give --gpu-hour-price``), exit 0: refused at load, exit 2;
* ``sweep-plot`` on results where every point errored blamed ``--metric: 'step-time'``, which
  the user had not given: it says that no point ran, how many errored and the first error;
* ``sweep-plot --kind heatmap`` without ``--what-if`` named the parameter ``what_if:``;
* ``sweep --group-by gpus`` over two models named no model in its best-per table;
* ``frontier --objective time-to-train`` headed "time-to-train against memory" over a column of
  step times: the objective's own column comes first;
* the scaling figure's value axis was log whatever the range (MFU 44.04–44.11 % labelled
  4.404×10¹): linear below a decade and for MFU (:func:`interface.render.plots.value_scale`).
"""

from __future__ import annotations

import pytest

from tests.cli_runs import refusal, run_many, trainplan

pytest.importorskip("pyarrow", reason="pip install -e '.[sweep]'")

ERRORED = 'model = "megatron-1.7b"\nglobal_batch = 96\n[space]\ntp = [3]\npp = [1]\n[sweep]\ngpus = [16, 24]\n'
"""Every point refused: sequence parallelism at tp 3 needs 2,048 tokens divisible by 3."""
TWO_MODELS = (
    'global_batch = 96\n[space]\npp = [1]\nrecompute = ["none"]\n[sweep]\n'
    'model = ["megatron-1.7b", "llama3-8b"]\ngpus = [16, 32]\n'
)


def test_a_cost_grid_without_prices_is_refused_before_it_runs(tmp_path):
    (tmp_path / "cost.toml").write_text(
        'model = "megatron-1.7b"\nobjective = "cost"\ntokens = 1e11\n[sweep]\ngpus = [16]\n'
    )
    (tmp_path / "ttt.toml").write_text('model = "megatron-1.7b"\nobjective = "time-to-train"\n'
                                       "[sweep]\ngpus = [16]\n")  # fmt: skip
    done = run_many(
        {g: ["sweep", f"{g}.toml", "--workers", "1"] for g in ("cost", "ttt")}, tmp_path
    )
    assert refusal(done["cost"]) == (
        "grid cost.toml: objective: 'cost' needs gpu_hour_price for every part; none for "
        "H100-SXM (gpu_hour_price = 2.5, or { H100-SXM = 2.5 })"
    )
    assert refusal(done["ttt"]) == (
        "grid ttt.toml: objective: 'time-to-train' needs tokens, the token budget (tokens = 15e12)"
    )
    assert not (tmp_path / "cost.parquet").exists()


def test_sweep_plot_of_results_no_point_of_which_ran(tmp_path):
    (tmp_path / "e.toml").write_text(ERRORED)
    swept = trainplan("sweep", "e.toml", "--workers", "1", cwd=tmp_path)
    assert swept.returncode == 0 and "2 error" in swept.stdout, swept.stderr[-2000:]
    done = run_many(
        {
            "scaling": ["sweep-plot", "e.parquet", "--png", "e.png"],
            "heatmap": ["sweep-plot", "e.parquet", "--png", "h.png", "--kind", "heatmap"],
        },
        tmp_path,
    )
    assert refusal(done["scaling"]) == (
        "results: no point of these results ran (2 points: 2 errored); the first error, point 0: "
        "tp: sequence parallelism needs seq_len / cp = 2,048 divisible by tp = 3"
    )
    assert refusal(done["heatmap"]) == (
        "--what-if: --kind heatmap needs it, e.g. --what-if hbm_capacity"
    )


def test_best_per_gpu_count_names_the_model(tmp_path):
    """Grouped by GPU count, each row's winner is one of two models: the table names it (its
    second column; megatron-1.7b's steps are the shorter at both counts)."""
    (tmp_path / "m.toml").write_text(TWO_MODELS)
    done = trainplan("sweep", "m.toml", "--workers", "1", "--group-by", "gpus", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.split("Best per gpus (least step-time):\n")[1].splitlines()
    assert lines[0].split()[:4] == ["gpus", "model", "part", "GPUs"], lines[0]
    assert [line.split()[:2] for line in lines[2:4]] == [
        ["16", "megatron-1.7b"],
        ["32", "megatron-1.7b"],
    ]


def test_frontier_shows_its_objective_column(tmp_path):
    """4,000,000 tokens at 2,048 × 8,192 tokens a step: the first point's time to train is its
    tokens ÷ its tokens per second, well under its 28.9 s step; the column holds it."""
    done = trainplan(
        "frontier", "--model", "llama3-8b", "--gpus", "64", "--objective", "time-to-train",
        "--tokens", "4,000,000", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    from trainplan.interface.render.frontier_text import frontier_text

    rows = json.loads(done.stdout)["points"]
    first = rows[0]
    assert first["objective_s"] == pytest.approx(4e6 / first["tokens_per_s"], rel=1e-6)
    table = frontier_text(rows, "memory", "time-to-train").splitlines()
    assert table[0].split()[:4] == ["time", "to", "train", "step"], table[0]
    assert table[2].split()[:2] == [f"{first['objective_s']:,.3f}", "s"], table[2]
    cost = frontier_text([{**first, "objective_usd": 61336.4}], "memory", "cost").splitlines()
    assert cost[0].split()[:2] == ["cost", "step"] and cost[2].split()[0] == "$61,336"


def test_value_axis_is_log_only_past_a_decade():
    """The tester's figures: MFU 44.04–44.11 % and a cost of $1,151,750 about 1.15175×10⁶ were
    on log axes; a decade (10×) or less reads linear, MFU always."""
    from trainplan.interface.render.plots import tick_decimals, value_scale

    assert value_scale([44.04, 44.11], bounded=True) == "linear"
    assert value_scale([4.0, 90.0], bounded=True) == "linear"
    assert value_scale([1_151_750.0, 1_151_790.0], bounded=False) == "linear"
    assert value_scale([1.0, 10.0], bounded=False) == "linear"
    assert value_scale([1.0, 10.01], bounded=False) == "log"
    assert value_scale([0.0, 50.0], bounded=False) == "linear"  # no log of 0
    # labels: 1,151,760 … at a step of 10, 44.04 … at 0.02, 0.025 needs three decimals
    assert tick_decimals([1_151_750.0, 1_151_760.0, 1_151_770.0]) == 0
    assert tick_decimals([44.04, 44.06, 44.08]) == 2
    assert tick_decimals([0.025, 0.05, 0.075]) == 3


def test_megatron_core_takes_the_two_layouts_the_tester_asked_about():
    """Megatron-Core (NVIDIA/Megatron-LM at d98e8a64dd) builds both splits from
    ``--pipeline-model-parallel-layout``: ``PipelineParallelLayerLayout.__init__`` asserts only
    that pp divides the number of stages; ``validate_layer_layout`` that the embedding comes
    first and the loss last, once each, and that the decoder layers number ``--num-layers``; no
    stage must hold a layer (``pretty_repr`` prints "(empty stage)"). Without a layout
    ``get_num_layers_to_build`` asserts ``num_layers_per_pipeline_rank % vp_size == 0``, which
    80 / 4 = 20 layers a rank at v 3 fails, so the plan writes the layout:
    Llama 3 70B's 80 layers as 0, 40, 22, 18 and, at pp 4 × v 3, twelve chunks of 6 or 7."""
    from trainplan.interface.launch_split import pipeline_layout

    def megatron_core_takes(layout: str, pp: int, num_layers: int) -> bool:
        stages = layout.split("|")
        flat = "".join(stages)
        decoders = sum(int(n) for n in flat.replace("E", "").replace("L", "").split("t*") if n)
        return (
            len(stages) % pp == 0
            and flat[0] == "E" and flat[-1] == "L"
            and flat.count("E") == 1 == flat.count("L")
            and decoders == num_layers
        )  # fmt: skip

    empty_first = pipeline_layout((0, 40, 22, 18))
    assert empty_first == "E|t*40|t*22|t*18L"
    assert megatron_core_takes(empty_first, 4, 80)
    chunks = (6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 6, 6)  # 12 chunks, 80 layers, in model order
    assert sum(chunks) == 80 and 80 // 4 % 3 != 0
    assert megatron_core_takes(pipeline_layout(chunks), 4, 80)
    done = trainplan(
        "evaluate", "--model", "llama3-70b", "--gpu", "H100-SXM", "--tp", "8", "--pp", "4",
        "--dp", "1", "--schedule", "interleaved", "--virtual-stages", "3",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        "--pipeline-model-parallel-layout 'Et*6|t*6|t*7|t*7|t*7|t*7|t*7|t*7|t*7|t*7|t*6|t*6L'"
        in done.stdout
    )
