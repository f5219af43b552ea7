"""The full search's features: GPU ranges and accelerators, objectives, scenario files, rank orders
and fabrics, the frontier CSV, the largest model that fits, explanations (issue 4)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from trainplan.interface.cli import cli, register_commands
from trainplan.interface.inputs import build_case
from trainplan.interface.scenario import build_problem, load_scenario
from trainplan.model.errors import InfeasibleError, InputError, ScenarioError
from trainplan.model.estimate import objective_ns
from trainplan.optimizer.params_search import params_search
from trainplan.optimizer.problem import Objective, gpu_counts
from trainplan.optimizer.search import frontier, search

register_commands()
SMALL = {
    "model": "megatron-1.7b",
    "gpu": "A100-80GB",
    "global_batch": 32,
    "space": {"max_micro_batch": 2},
}


def test_gpu_counts():
    assert gpu_counts("64..4096") == [
        64,
        96,
        128,
        192,
        256,
        384,
        512,
        768,
        1024,
        1536,
        2048,
        3072,
        4096,
    ]
    assert gpu_counts(["2048", "4096"]) == gpu_counts("2048;4096") == [2048, 4096]
    assert gpu_counts("16,384") == [16384]  # a comma groups thousands, never a list
    with pytest.raises(InputError):
        gpu_counts("100..10")


def test_range_and_accelerators_pick_one_job_each_with_its_own_shapes():
    problem = build_problem({}, {**SMALL, "gpus": "8..32", "gpu": "A100-40GB,A100-80GB"})
    assert [(j.num_gpus, j.case.device.name) for j in problem.jobs] == [
        (g, d) for d in ("A100-40GB", "A100-80GB") for g in (8, 12, 16, 24, 32)
    ]
    best = search(problem).best
    # the step-time objective with B fixed prefers the most GPUs; the answer uses all of them
    assert best.estimate.layout.num_gpus == best.job.num_gpus == 32


def test_time_to_train_objective_scales_by_steps():
    problem = build_problem(
        {}, {**SMALL, "gpus": "16", "objective": "time-to-train", "tokens": "1e9"}
    )
    result = search(problem)
    est = result.best.estimate
    steps = 10**9 / (32 * est.training.seq_len)
    assert result.best.objective == pytest.approx(
        sum(objective_ns(est.time_terms)) * steps, rel=1e-6
    )


def test_cost_objective_needs_prices():
    with pytest.raises(InputError):
        build_problem({}, {**SMALL, "gpus": "16", "objective": "cost"})
    with pytest.raises(InputError):  # and a token budget
        build_problem({}, {**SMALL, "gpus": "16", "objective": "cost", "gpu_hour_price": "2.5"})
    with pytest.raises(InputError):  # and a positive price
        build_problem(
            {},
            {**SMALL, "gpus": "16", "objective": "cost", "gpu_hour_price": "-2.5", "tokens": "1e9"},
        )
    problem = build_problem(
        {},
        {
            **SMALL,
            "gpus": ["8", "16"],
            "objective": "cost",
            "gpu_hour_price": "2.5",
            "tokens": "1e9",
        },
    )
    assert search(problem).best.job.gpu_hour_price == 2.5


@pytest.mark.exhaustive  # every deeper member in every layout: 40 s to 2 minutes
def test_maximize_params_finds_the_deepest_member_that_fits():
    problem = build_problem({}, {**SMALL, "gpus": "8", "objective": "params", "max_layers": 96})
    best = params_search(problem).result.best
    layers = best.estimate.model.arch.num_layers
    assert best.estimate.fits
    deeper = [j for j in problem.jobs if j.case.model.arch.num_layers > layers]
    for job in deeper:  # nothing deeper fits in any layout
        single = build_problem({}, {**SMALL, "gpus": "8"})
        single = type(single)(jobs=(type(job)(job.case, 8, job.label),), space=single.space)
        with pytest.raises(InfeasibleError):
            search(single)


def test_frontier_csv_rows_are_non_dominated_and_re_evaluate(tmp_path):
    path = tmp_path / "f.csv"
    runner = CliRunner()
    res = runner.invoke(
        cli,
        [
            "frontier",
            "--model",
            "megatron-1.7b",
            "--gpus",
            "8",
            "--gpu",
            "A100-80GB",
            "--global-batch",
            "32",
            "--max-micro-batch",
            "2",
            "--csv",
            str(path),
        ],
    )
    assert res.exit_code == 0, res.output
    df = pd.read_csv(path)
    for column in (
        "dp tp pp cp ep zero_stage recompute micro_batch_size schedule virtual_stages num_gpus gpu "
        "total_bytes step_s mfu fits framework"
    ).split():
        assert column in df.columns
    # the text table names each point's framework, as the CSV does (row for row)
    lines = res.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("step "))
    start = lines[header].index("framework")
    printed = [line[start:].split()[0] for line in lines[header + 2 : header + 2 + len(df)]]
    assert printed == list(df["framework"]) == ["megatron"] * len(df)
    assert list(df["step_s"]) == sorted(df["step_s"]) and list(df["total_bytes"]) == sorted(
        df["total_bytes"], reverse=True
    )
    for row in df.itertuples():
        case = build_case(
            {
                "model": "megatron-1.7b",
                "gpu": "A100-80GB",
                "global_batch_size": 32,
                "dp": row.dp,
                "tp": row.tp,
                "pp": row.pp,
                "cp": row.cp,
                "ep": row.ep,
                "zero_stage": row.zero_stage,
                "recompute": row.recompute,
                "micro_batch_size": row.micro_batch_size,
                "schedule": row.schedule,
                "virtual_stages": row.virtual_stages,
            }
        )
        est = case.evaluate()
        assert est.step_s == pytest.approx(row.step_s, rel=1e-12)
        assert float(est.total_bytes) == pytest.approx(row.total_bytes, rel=1e-12)


def test_frontier_text_tells_two_frameworks_apart():
    """Two points alike but for the framework (Megatron-LM's and FSDP2's ZeRO-3 at the same
    degrees) print apart: the framework is a column of the frontier's text table, always (as the
    search's answer names it)."""
    from trainplan.interface.render.frontier_text import frontier_text

    point = {
        "step_s": 0.5, "total_bytes": 15e9, "fit_bytes": 15e9, "mfu": 0.5, "num_gpus": 8, "gpu": "A100-80GB",
        "dp": 8, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero_stage": 3, "recompute": "none",
        "micro_batch_size": 1, "schedule": "1f1b", "virtual_stages": 1,
    }  # fmt: skip
    rows = [{**point, "framework": "megatron"}, {**point, "framework": "fsdp2"}]
    lines = frontier_text(rows, "memory").splitlines()
    head = ["step", "memory/GPU", "fit/GPU", "MFU", "GPUs", "framework", "layout"]
    assert lines[0].split() == head
    assert lines[2] != lines[3]
    # "500.0 ms  15.00 GB  15.00 GB  50.0%  8 × A100-80GB  megatron  dp 8 …": the 11th word
    assert lines[2].split()[10] == "megatron" and lines[3].split()[10] == "fsdp2"


def test_frontier_against_gpus():
    result = frontier(build_problem({}, {**SMALL, "gpus": "4..16"}), "gpus")
    gpus = [a.job.num_gpus for a in result.points]
    steps = [a.objective for a in result.points]
    assert gpus == sorted(gpus, reverse=True) and steps == sorted(steps)


def test_scenario_file_and_overrides(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        'model = "megatron-1.7b"\ngpu = "A100-80GB"\ngpus = 8\nglobal_batch = 32\n'
        "[space]\nmax_micro_batch = 2\ntp = [1, 2]\n[constraints]\nheadroom = 0.1\n"
    )
    values = load_scenario(path)
    problem = build_problem(values, {"gpus": "16"})
    assert [j.num_gpus for j in problem.jobs] == [16]
    assert problem.space.tp == (1, 2) and problem.constraints.headroom == 0.1
    best = search(problem).best
    assert best.estimate.layout.tp in (1, 2)
    assert best.estimate.total_bytes <= 0.9 * best.estimate.device.memory_bytes
    path.write_text('model = "megatron-1.7b"\ngpus = 8\nbogus = 1\n')
    with pytest.raises(ScenarioError):
        load_scenario(path)


def test_rank_order_and_fabric_change_links():
    base = {"model": "llama3-8b", "tp": 4, "pp": 2, "dp": 4, "global_batch_size": 32}
    default = {r.traffic.axis: r.link for r in build_case(base).evaluate().traffic}
    inner_pp = {
        r.traffic.axis: r.link
        for r in build_case({**base, "rank_order": "tp-pp-cp-ep-dp"}).evaluate().traffic
    }
    assert default["pp"] == "scale-out" and inner_pp["pp"] == "nvlink"
    over = build_case(
        {
            **base,
            "dp": 64,
            "global_batch_size": 256,
            "fabric": "fat-tree",
            "pod_size": 64,
            "oversubscription": 2,
        }
    ).evaluate()
    dp = next(r for r in over.traffic if r.traffic.axis == "dp")
    assert dp.bandwidth_bytes_per_s == pytest.approx(25e9)  # 50 GB/s NIC halved above the pod


def test_search_chooses_among_rank_orders():
    problem = build_problem(
        {},
        {
            "model": "llama3-8b",
            "gpu": "H100-SXM",
            "gpus": "16",
            "global_batch": 32,
            "space": {
                "max_micro_batch": 1,
                "tp": [4],
                "pp": [2],
                "rank_order": ["tp-cp-ep-dp-pp", "tp-pp-cp-ep-dp"],
            },
        },
    )
    assert search(problem).best.estimate.layout.rank_order in (
        ("tp", "cp", "ep", "dp", "pp"),
        ("tp", "pp", "cp", "ep", "dp"),
    )


def test_infeasible_explanation_and_json_exit_code():
    runner = CliRunner()
    res = runner.invoke(
        cli,
        [
            "search",
            "--model",
            "megatron-1.7b",
            "--gpus",
            "8",
            "--gpu",
            "A100-80GB",
            "--global-batch",
            "32",
            "--min-mfu",
            "0.95",
            "--json",
        ],
    )
    assert res.exit_code == 1
    out = json.loads(res.output)
    assert out["status"] == "infeasible" and out["explanation"][0].startswith("min_mfu:")


def test_top_k_json():
    runner = CliRunner()
    res = runner.invoke(
        cli,
        [
            "search",
            "--model",
            "megatron-1.7b",
            "--gpus",
            "8",
            "--gpu",
            "A100-80GB",
            "--global-batch",
            "32",
            "--max-micro-batch",
            "2",
            "--top",
            "3",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    answers = json.loads(res.output)["answers"]
    assert len(answers) == 3 and [a["objective_s"] for a in answers] == sorted(
        a["objective_s"] for a in answers
    )
    assert len({json.dumps(a["layout"], sort_keys=True) for a in answers}) == 3


def test_objective_enum_values():
    assert {o.value for o in Objective} == {
        "step-time",
        "tokens-per-gpu",
        "time-to-train",
        "cost",
        "params",
    }


def test_time_limit_bounds_table_building_and_returns_the_best_so_far(monkeypatch):
    """--time-limit covers the tables too: blocks not started within it are left out, and the
    answer is the best of those tabulated, status feasible. Every job holds its first block
    before a cut (the jobs share one round: optimizer.tables.block_shapes); with blocks of 4
    shapes here, each of the two jobs keeps its first 4."""
    from trainplan.optimizer import table_blocks as tables
    from trainplan.optimizer.search import search

    problem = build_problem({}, {**SMALL, "gpus": ["8", "16"]})
    full = search(problem)
    assert full.status == "optimal"
    monkeypatch.setattr(tables, "BLOCK_SHAPES", 8)
    monkeypatch.setattr(tables, "MIN_BLOCK_SHAPES", 1)
    cut = search(problem, time_limit_s=1e-9)
    assert cut.status == "feasible"
    assert cut.num_shapes == 8 < full.num_shapes


def test_a_recipe_no_framework_runs_is_its_rule_not_no_layout():
    """`search --offload-activations … --framework fsdp2` names the rule (exit 2), as evaluate
    does, instead of "no legal combination"; a degree that divides no GPU count is named (exit 1)
    unless a rule of the model refuses it anyway: tp 3 does not divide Llama 3 8B's 32 heads, the
    rule evaluate states (exit 2; it was "tp: 3 divides no GPU count searched (8)", exit 1)."""
    from click.testing import CliRunner

    from trainplan.interface.cli import cli, register_commands

    register_commands()
    base = ["search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM"]
    r = CliRunner().invoke(
        cli, [*base, "--set", "offload_activations=attn_norm", "--framework", "fsdp2"]
    )
    assert r.exit_code == 2 and "fsdp2 has no fine-grained activation offload" in r.output
    twelve = ["search", "--model", "llama3-8b", "--gpus", "12", "--gpu", "H100-SXM"]
    r = CliRunner().invoke(cli, [*twelve, "--tp", "8"])  # 8 divides the 32 and 8 heads, not 12
    assert r.exit_code == 1 and "tp: 8 divides no GPU count searched (12)" in r.output
    r = CliRunner().invoke(cli, [*base, "--tp", "3"])
    assert r.exit_code == 2 and "--tp: 3 does not divide num_attention_heads = 32" in r.output


def test_no_layout_for_a_gpu_count_names_the_count_and_the_batch():
    """1,000 GPUs under the default global batch of 2,048: no dp divides the batch with the
    rest equal to 1,000. The explanation (exit 1) names the GPU count, the batch and the way
    out; with --global-batch 2000 the same count has a layout."""
    from tests.cli_runs import trainplan

    base = ["search", "--model", "llama3-70b", "--gpus", "1,000"]
    done = trainplan(*base)
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "No layout satisfies the constraints:",
        "  - divisibility: no legal combination of degrees, batch and micro-batch: no dp·tp·pp·cp "
        "of the allowed degrees equals 1,000 GPUs with the global batch (2,048 sequences) "
        "divisible by micro-batch × dp (--global-batch, or a GPU count whose dp divides it)",
    ]
    assert trainplan(*base, "--global-batch", "2000").returncode == 0
