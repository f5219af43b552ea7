"""The command-line and interface parts of tests/optimizer/test_per_stage_frontier.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

import json

import pytest

from tests.optimizer.test_per_stage_frontier import tiny_problem
from trainplan.optimizer.per_stage_frontier import per_stage_frontier


def test_per_stage_frontier_json_says_its_default_budget_of_searches(monkeypatch):
    """Without --per-stage-searches the per-stage frontier against memory runs at most
    PER_STAGE_FRONTIER_SEARCHES (4) searches (against GPUs every job) and no wall-clock limit,
    and says so; a budget or
    a limit given is the one said and the one run under; the proof is said in the CLI's
    words."""
    from trainplan.interface import commands

    seen: list[tuple[float | None, int | None]] = []

    def fake(problem, against, shapes, limit, workers, progress=None, max_searches=None):  # type: ignore[no-untyped-def]
        seen.append((limit, max_searches))
        # 2 GPUs fit nothing (searched: the first search runs whatever the limit); 4 unsearched
        return per_stage_frontier(tiny_problem((2, 4), 160e6), "gpus", time_limit_s=1e-9)

    monkeypatch.setattr("trainplan.interface.per_stage_frontier_command.per_stage_frontier", fake)
    kw = {"model": "llama3-8b", "gpus": (8,), "gpu": ("H100-SXM",)}
    out = commands.per_stage_frontier_json(dict(kw), "memory").json
    assert commands.PER_STAGE_FRONTIER_SEARCHES == 4
    got = (out["max_searches"], out["max_searches_default"], out["time_limit_seconds"])
    assert got == (4, True, None)
    out = commands.per_stage_frontier_json(dict(kw), "gpus").json  # every job: no default cap
    assert (out["max_searches"], out["max_searches_default"]) == (None, True)
    out = commands.per_stage_frontier_json({**kw, "time_limit": 7}, "gpus", None, 9).json
    got = (out["max_searches"], out["max_searches_default"], out["time_limit_seconds"])
    assert got == (9, False, 7.0)
    assert seen == [(None, 4), (None, None), (7.0, 9)]
    assert out["stopped"] == "time"
    assert out["proof"] == "best found within the time limit of 7 s, not proven"


def _run(monkeypatch, capsys, *args):
    from trainplan.interface.cli import main

    monkeypatch.setattr("sys.argv", ["trainplan", "frontier", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_cli_frontier_per_stage_json_text_and_csv(monkeypatch, capsys, tmp_path):
    """Llama 3 70B at 8K on 16 and 32 H100 against GPU count: on 16 the per-stage plan (40 + 40
    layers, 39 and 38 recomputed) is 1.013× the uniform one (as search --per-stage; 39/37 and
    1.021× before the tp 8 ring's NVLink SHARP buffers, 2 + 256 MiB, took one more layer's room
    on the last stage: 1,535.13 → 1,545.87 s against the uniform 1,566.77 s, 1.014×); on 32 the
    uniform plan (tp 8 × pp 2) recomputes nothing, but tp 4 × pp 4 with 19, 20, 21, 20 layers
    and 7, 3, 0, 0 recomputed is 1.081× faster (its uniform form must recompute every layer),
    found since every shape is searched. NVLink SHARP leaves that plan as it was: its busiest
    stage 82.70 → 82.91 GB of 83.21 (the tp 4 ring's 130 MiB, the dp pair's in a node 66 and
    four rings' 2 MiB of credits), 531.678 s then.

    NCCL's SM charge reaches the layers' and the output layer's asynchronous tp collectives
    (model.step_time.kind_parts) and Megatron-Core's interleaved schedule waits for rank 0's
    chunk-0 reduction (model.pipeline_reduce), as test_per_stage_cli derives: on 16 the
    per-stage plan 1,545.87 → 1,571.12 s, the uniform 1,566.77 → 1,592.01 s, 1.014× → 1.013×
    (test_cli_per_stage_prints_the_plan_gain_proof_and_flags); on 32 the per-stage plan
    (1F1B, tp 4) 531.678 → 537.758 s, the uniform (interleaved, tp 8) 568.828 → 581.449 s with
    the charge, 581.520 s with chunk 0's wait: 1.070× → 1.081×
    (test_every_shape_is_searched_by_default). Since the charge follows the algorithm NCCL runs
    each group's collectives as (model.nccl_channels; the same tests derive it): on 16 1,573.68 s
    against 1,594.58 s, 1.013×; on 32 538.275 s against 582.770 s, 1.083×. With 1F1B's bubble
    the order's own on stages of unequal time (model.pipeline_onef): 1,573.671 s and 538.211 s;
    with the distributed optimizer's whole FP32 gradient buffer zeroed at the step
    (model.terms.optimizer_time.whole_buffer_zeroing_bytes; test_every_shape_is_searched_by_default
    derives it) 538.214 s against 582.768 s on 32 (16 GPUs' plan, dp 1, owns its whole buffer);
    with Megatron-Core's own optimizer-step passes (model.step_passes: the clip's scaling and the
    master's second read, 12 B an element stepped; the same tests derive them) 1,573.689 s
    against 1,594.593 s on 16 and 538.223 s against 582.777 s on 32.

    The run is at 6K: at 8K Transformer Engine's placeholder weight gradients (model/terms/
    dummy_wgrads.py, one BF16 tensor per distinct weight shape held for the run; 213,909,504 B on
    a tp 8 stage, 478,150,656 B on the last) leave the 16-GPU plan no layer kept whole, so its
    point is uniform (test_per_stage_cli). At 6K on 16: 40, 40 layers, 38 and 37 recomputed,
    1,167.074 s against the uniform 1,190.706 s (1.020×); on 32: tp 4 × pp 4, 19, 20, 21, 20
    layers, 3, 0, 0, 0 recomputed, 393.665 s against 415.509 s (1.055×)."""
    args = [
        "--model",
        "llama3-70b",
        "--gpus",
        "16",
        "--gpus",
        "32",
        "--seq-len",
        "6144",
        "--gpu",
        "H100-SXM",
    ]
    args += ["--against", "gpus", "--per-stage"]
    csv = tmp_path / "f.csv"
    # one run (the frontier takes 15 s): its JSON, the CSV it writes beside it, and the text
    # table the command prints, which interface.cli.frontier renders from that same object
    code, out, _ = _run(monkeypatch, capsys, *args, "--json", "--csv", str(csv))
    assert code in (0, None)
    d = json.loads(out)
    assert (d["status"], d["against"], d["per_stage"]) == ("optimal", "gpus", True)
    second, first = d["points"]  # fastest first
    assert (first["num_gpus"], first["plan"]) == (16, "per-stage")
    assert first["stage_layers"] == [40, 40] and first["recompute_layers"] == [38, 37]
    assert first["gain"] == pytest.approx(1190.706 / 1167.074, abs=1e-3)
    assert first["uniform_step_s"] == pytest.approx(first["step_s"] * first["gain"])
    assert (second["num_gpus"], second["plan"]) == (32, "per-stage")
    assert (second["tp"], second["pp"], second["stage_layers"]) == (4, 4, [19, 20, 21, 20])
    assert second["recompute_layers"] == [3, 0, 0, 0]
    assert second["step_s"] == pytest.approx(393.665, abs=1e-3)
    assert second["uniform_step_s"] == pytest.approx(415.509, abs=1e-3)
    assert second["gain"] == pytest.approx(415.509 / 393.665, abs=1e-4)
    assert second["gain"] == pytest.approx(1.0555, abs=1e-3)
    from trainplan.interface.render.chart_layout import layout_key  # the --png key beside the plot

    assert layout_key(first, True).endswith("per stage: layers 40/40, fully recomputed 38/37")
    assert layout_key(second, True).endswith("layers 19/20/21/20, fully recomputed 3/0/0/0")
    from trainplan.interface.cli.frontier import _headline
    from trainplan.interface.render.frontier_text import frontier_text

    text = _headline(d, "step-time", "gpus", True) + "\n" + frontier_text(d["points"], "gpus")
    assert "Pareto frontier, uniform or per stage: step-time against gpus, 2 points" in text
    assert "40/40 / 38/37" in text and "1.020×" in text and "1.055×" in text
    header = csv.read_text().splitlines()[0].split(",")
    assert {"plan", "stage_layers", "recompute_layers", "uniform_step_s", "gain"} <= set(header)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--model", "llama3-8b", "--gpus", "8", "--objective", "tokens-per-gpu"],
            "--per-stage: objective tokens-per-gpu — the per-stage search minimises step-time",
        ),
        (
            ["--model", "llama3-8b", "--gpus", "8", "--against", "price"],
            "against: 'price' needs --gpu-hour-price",
        ),
    ],
)
def test_cli_frontier_per_stage_refusals_are_one_line(monkeypatch, capsys, args, message):
    code, _, err = _run(monkeypatch, capsys, *args, "--gpu", "H100-SXM", "--per-stage")
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def test_scenario_per_stage_reaches_frontier(monkeypatch, capsys, tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        'model = "llama3-70b"\ngpus = 16\nseq_len = 8192\ngpu = "H100-SXM"\nper_stage = true\n'
    )
    code, out, _ = _run(monkeypatch, capsys, "--scenario", str(scenario), "--against", "gpus")
    assert code in (0, None)
    assert "uniform or per stage" in out and "per-stage" in out


def _row(step_s: float, plan: str, gap_s: float | None, proven: bool = True) -> dict:
    """A per-stage frontier point as its JSON gives it (the fields the text table reads)."""
    return {
        "step_s": step_s,
        "num_gpus": 32,
        "gpu": "H100-SXM",
        "fit_bytes": 82_710_000_000,
        "mfu": 0.417,
        "framework": "megatron",
        **{"dp": 2, "tp": 4, "pp": 4, "cp": 1, "ep": 1, "zero_stage": 1, "recompute": "none"},
        **{"micro_batch_size": 1, "schedule": "1f1b", "virtual_stages": 1},
        "plan": plan,
        "proven": proven,
        "gap_s": gap_s,
        "stage_layers": [19, 20, 21, 20] if plan == "per-stage" else None,
        "recompute_layers": [7, 3, 0, 0] if plan == "per-stage" else None,
        "uniform_step_s": 582.765,
        "gain": 582.765 / step_s,
    }


def test_the_text_table_gives_each_points_proven_gap():
    """``frontier --per-stage``'s table has a ``proven gap`` column, each point's ``gap_s``
    written as ``search --per-stage`` writes its gap (interface.render.per_stage_report.gap_text):
    1 ns; 12.5 ms where a time limit stopped a proof with a bound 12.5 ms under the step; none
    where it stopped before any bound. The uniform frontier's table has no such column."""
    from trainplan.interface.render.frontier_text import frontier_text

    rows = [
        _row(538.211, "per-stage", 1e-9),
        _row(540.0, "per-stage", 0.0125, proven=False),
        _row(582.765, "uniform", None, proven=False),
    ]
    header, _, *lines = frontier_text(rows, "gpus").splitlines()
    at = header.index("proven gap")
    assert header.index("layers / recomputed per stage") < at < header.index("uniform step")
    gaps = [line[at:].split("  ")[0] for line in lines]
    assert gaps == ["1 ns", "12.5 ms", "none proven (time limit)"]
    assert "per-stage, not proven" in lines[1]
    uniform = {k: v for k, v in rows[0].items() if k not in ("plan", "gap_s")}
    assert "proven gap" not in frontier_text([uniform], "gpus")


def test_a_per_stage_frontier_stopped_by_ctrl_c_says_so():
    """What ``frontier --per-stage`` prints after Ctrl-C (stopped ``interrupted``:
    tests/optimizer/test_interrupt.py), in the headline, its JSON ``proof`` and the page."""
    from trainplan.interface.per_stage_frontier_command import per_stage_proof

    out = {"stopped": "interrupted", "status": "feasible", "time_limit_seconds": None}
    assert per_stage_proof(out) == "interrupted (Ctrl-C): the points found before it, not proven"
