"""The per-stage frontier (issue 13, item 3: ``frontier --per-stage``): its points equal what
per_stage_search gives per job / per ε by hand, are non-dominated, are never slower than the
uniform frontier at the same axis value, and each per-stage point's step time equals an
exhaustive oracle over its base layout (every composition of L and every recomputed count,
each evaluated with ``evaluate()``) at the point's own byte capacity.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.optimizer.test_per_stage import oracle_at, tiny_case
from trainplan.model.errors import InfeasibleError
from trainplan.optimizer.per_stage import peak_bytes, per_stage_search
from trainplan.optimizer.per_stage_frontier import per_stage_frontier
from trainplan.optimizer.problem import Constraints, Job, Problem
from trainplan.optimizer.search import frontier
from trainplan.optimizer.space import SearchSpace


def tiny_problem(gpus: tuple[int, ...], capacity: float | None = None, price: float | None = None):
    """The 6-layer tiny model of test_per_stage on H100 (s 8192, B 8, b 1), tp 1 when a
    ``capacity`` (bytes per GPU, through the headroom) is given so that pipelining is what
    saves memory."""
    case = tiny_case(6, 1)
    headroom = 0.0 if capacity is None else 1 - capacity / case.device.usable_bytes(True)
    jobs = tuple(Job(case, g, f"{g} GPUs", price) for g in gpus)
    tp = None if capacity is None else (1,)
    space = SearchSpace(num_gpus=gpus[0], max_micro_batch_size=1, tp=tp)
    return Problem(jobs=jobs, space=space, constraints=Constraints(headroom=headroom))


def non_dominated(found):
    """(value, step, kind) ascending in value, each strictly faster than every cheaper one."""
    out = []
    for value, step, kind in sorted(found):
        if not out or step < out[-1][1]:
            out.append((value, step, kind))
    return out


def staircase(points, value):
    """The least step time among (value, step) points at or below ``value`` (None if none)."""
    steps = [s for v, s in points if v <= value]
    return min(steps) if steps else None


def check_per_stage_points(result, capacity_of):
    for p in result.points:
        if p.kind != "per-stage":
            assert p.estimate.layout.stage_layers is None
            continue
        lay = p.estimate.layout
        base = lay.with_(stage_layers=None, recompute_layers=None)
        assert oracle_at(p.job.case, base, capacity_of(p))[0] == pytest.approx(p.step_ns, abs=2)


def test_memory_frontier_equals_the_sweep_by_hand_the_oracle_and_beats_uniform():
    """Against memory on 2 GPUs: ε sweep by hand with per_stage_search (fresh tables each ε)
    gives the same points; the 16 points run from the uniform full recomputation's
    112,609,792 B (33.05 ms) through per-stage plans (the first at 120,998,400 B, 31.54 ms: the
    last stage also holds the loss's working set) to the uniform 526,195,712 B plan without
    recomputation (13.87 ms)."""
    problem = tiny_problem((2,))
    got = per_stage_frontier(problem, "memory")
    assert got.status == "optimal"
    found, eps = [], None
    while True:
        try:
            r = per_stage_search(problem, max_bytes=eps, without_uniform=True)
        except InfeasibleError:
            break
        assert r.uniform is not None
        value = peak_bytes(r.plan) if r.per_stage else r.uniform.peak_bytes
        found.append((value, r.plan_ns, "per-stage" if r.per_stage else "uniform"))
        eps = value - 1
    want = non_dominated(found)
    assert [(p.value, p.step_ns, p.kind) for p in got.points] == want[::-1]  # fastest first
    assert len(want) == 16
    assert want[0] == (112_609_792, 33_050_219, "uniform")
    assert want[1] == (120_998_400, 31_539_459, "per-stage")
    assert want[-1] == (526_195_712, 13_869_301, "uniform")
    assert got.points[-1].uniform_ns == 33_050_219
    # non-dominated: step time up, value down, strictly
    values = [p.value for p in got.points]
    steps = [p.step_ns for p in got.points]
    assert steps == sorted(set(steps)) and values == sorted(set(values), reverse=True)
    # the uniform frontier: never faster at the same axis value; each point's uniform step time
    # is the uniform frontier's at its own value
    uniform = [(a.peak_bytes, a.objective) for a in frontier(problem, "memory").points]
    for value, step in uniform:
        assert staircase([(p.value, p.step_ns) for p in got.points], value) <= step
    for p in got.points:
        assert p.uniform_ns == staircase(uniform, p.value)
        assert all(s.total_bytes <= p.value for s in p.estimate.stages)
    check_per_stage_points(got, lambda p: p.value)


def test_gpus_frontier_per_job_by_hand_includes_a_job_no_uniform_layout_fits():
    """tp 1 and 160 MB per GPU: 1 GPU holds no plan; on 2 no uniform layout fits (pp 2 under
    full recomputation needs 165,142,016 B) but 4 + 2 layers with 4 and 2 recomputed do (the
    last stage also holds the loss's working set); 3
    and 6 GPUs gain 1.107× per stage; 4 and 8 keep the uniform plan (interleaved v = 3 and 4: the
    per-stage search takes a shape's first-ranked v only, where no split beats them)."""
    capacity = 160e6
    problem = tiny_problem((1, 2, 3, 4, 6, 8), capacity)
    got = per_stage_frontier(problem, "gpus")
    assert got.status == "optimal"
    found = []
    for job in problem.jobs:
        try:
            r = per_stage_search(replace(problem, jobs=(job,)), without_uniform=True)
        except InfeasibleError:
            assert job.num_gpus == 1
            continue
        found.append((job.num_gpus, r.plan_ns, "per-stage" if r.per_stage else "uniform"))
        if job.num_gpus == 2:
            assert r.uniform is None
            assert r.plan.layout.stage_layers == (4, 2)
            assert r.plan.layout.recompute_layers == (4, 2)
    want = non_dominated(found)
    assert [(p.value, p.step_ns, p.kind) for p in got.points] == want[::-1]  # fastest first
    assert [(v, k) for v, _, k in want] == [
        (2, "per-stage"), (3, "per-stage"), (4, "uniform"), (6, "per-stage"), (8, "uniform")
    ]  # fmt: skip
    uniform = [(a.job.num_gpus, a.objective) for a in frontier(problem, "gpus").points]
    for value, step in uniform:
        assert staircase([(p.value, p.step_ns) for p in got.points], value) <= step
    for p in got.points:
        assert p.uniform_ns == staircase(uniform, p.value)
    assert got.points[-1].gain is None
    assert got.points[-2].gain == pytest.approx(17_074_584 / 15_422_677)
    cap = int(problem.jobs[0].case.device.usable_bytes(True) * (1 - problem.constraints.headroom))
    check_per_stage_points(got, lambda p: cap)


def test_price_frontier_is_the_gpu_frontier_in_cents():
    """One accelerator at $2.5 per GPU-hour: the price axis orders the jobs as GPU counts do,
    each value G × 250 cents per hour."""
    problem = tiny_problem((2, 4, 8), 160e6, price=2.5)
    by_price = per_stage_frontier(problem, "price")
    by_gpus = per_stage_frontier(problem, "gpus")
    assert [(p.value, p.step_ns) for p in by_price.points] == [
        (p.value * 250, p.step_ns) for p in by_gpus.points
    ]


def test_nothing_fits_is_infeasible_on_every_axis():
    """1 GPU at 160 MB per GPU holds no plan, uniform or per stage."""
    problem = tiny_problem((1,), 160e6, price=2.5)
    for against in ("gpus", "price", "memory"):
        with pytest.raises(InfeasibleError, match="memory: no layout fits 0.16 GB") as err:
            per_stage_frontier(problem, against)
        assert err.value.explanation[-1].startswith("per_stage: no split of the 1 base layout")


def test_time_limit_spent_returns_what_it_has_not_a_proof():
    problem = tiny_problem((2, 4), 160e6)
    spent = per_stage_frontier(problem, "gpus", time_limit_s=1e-9)
    assert (spent.status, spent.points) == ("feasible", ())


# --- what users see ---------------------------------------------------------------------------


def _run(monkeypatch, capsys, *args):
    from trainplan.interface.cli import main

    monkeypatch.setattr("sys.argv", ["trainplan", "frontier", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_cli_frontier_per_stage_json_text_and_csv(monkeypatch, capsys, tmp_path):
    """Llama 3 70B at 8K on 16 and 32 H100 against GPU count: on 16 the per-stage plan (40 + 40
    layers, 37 and 33 recomputed) is 1.026× the uniform one (as search --per-stage); on 32 the
    uniform plan (tp 8 × pp 2) recomputes nothing, but tp 4 × pp 4 with 19, 20, 21, 20 layers and
    6, 2, 0, 0 recomputed is 1.077× faster (its uniform form must recompute every layer: 713 s),
    found since every shape is searched."""
    args = [
        "--model",
        "llama3-70b",
        "--gpus",
        "16",
        "--gpus",
        "32",
        "--seq-len",
        "8192",
        "--gpu",
        "H100-SXM",
    ]
    args += ["--against", "gpus", "--per-stage"]
    code, out, _ = _run(monkeypatch, capsys, *args, "--json")
    assert code in (0, None)
    d = json.loads(out)
    assert (d["status"], d["against"], d["per_stage"]) == ("optimal", "gpus", True)
    second, first = d["points"]  # fastest first
    assert (first["num_gpus"], first["plan"]) == (16, "per-stage")
    assert first["stage_layers"] == [40, 40] and first["recompute_layers"] == [37, 34]
    assert first["gain"] == pytest.approx(1.0257, abs=1e-3)
    assert first["uniform_step_s"] == pytest.approx(first["step_s"] * first["gain"])
    assert (second["num_gpus"], second["plan"]) == (32, "per-stage")
    assert (second["tp"], second["pp"], second["stage_layers"]) == (4, 4, [19, 20, 21, 20])
    assert second["recompute_layers"] == [6, 2, 0, 0]
    assert second["gain"] == pytest.approx(1.0772, abs=1e-3)
    from trainplan.interface.chart_layout import layout_key  # the --png key beside the plot

    assert layout_key(first, True).endswith("per stage: layers 40/40, fully recomputed 37/34")
    assert layout_key(second, True).endswith("layers 19/20/21/20, fully recomputed 6/2/0/0")
    csv = tmp_path / "f.csv"
    code, out, _ = _run(monkeypatch, capsys, *args, "--csv", str(csv))
    assert code in (0, None)
    assert "Pareto frontier, uniform or per stage: step-time against gpus, 2 points" in out
    assert "40/40 / 37/34" in out and "1.026×" in out and "1.077×" in out
    header = csv.read_text().splitlines()[0].split(",")
    assert {"plan", "stage_layers", "recompute_layers", "uniform_step_s", "gain"} <= set(header)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "mixtral-8x7b", "--gpus", "64"], "per_stage: mixtral-8x7b has MoE layers"),
        (
            ["--model", "llama3-8b", "--gpus", "8", "--objective", "tokens-per-gpu"],
            "per_stage: objective tokens-per-gpu — the per-stage search minimises step-time",
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
