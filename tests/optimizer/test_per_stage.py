"""The per-stage search (issue 13): CP-SAT's per-stage optimum equals an exhaustive oracle that
calls ``evaluate()`` on every (layers per stage, recomputed layers per stage) of small models;
the plan is never slower than the best uniform layout; the CLI prints it with its flags.

The oracle shares nothing with the solver but the evaluator: it walks every composition of L
into pp stage counts and every recomputed count 0 … n on every stage, evaluates each layout
exactly, keeps those whose every stage fits, and takes the least step time in whole ns
(:func:`model.estimate.objective_ns`).
"""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.archs import llama_like
from trainplan.model.errors import InputError, LayoutError
from trainplan.model.estimate import objective_ns
from trainplan.model.model_spec import ModelSpec
from trainplan.optimizer.case import Case
from trainplan.optimizer.per_stage import per_stage_search, solve_shape
from trainplan.optimizer.problem import Constraints, Job, Problem
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.stage_tables import OutOfTime, build_stage_tables


def tiny_case(num_layers: int, pp: int, base: str = "none", b: int = 1, v: int = 1, gb: int = 8):
    """A 256-wide Llama-like model whose activations (s 8192) outweigh its weights, so memory
    decides how much is recomputed; interleaved with v model chunks per stage when v > 1."""
    extra = {"schedule": "interleaved", "virtual_stages": v} if v > 1 else {}
    arch = llama_like(num_layers, 256, 4, 688, 1024)
    return Case.of(
        **{
            "model": ModelSpec(name="tiny", source="test", arch=arch),
            "pp": pp,
            "seq_len": 8192,
            "global_batch_size": gb,
            "micro_batch_size": b,
            "recompute": base,
            "device": "H100-SXM",
            **extra,
        }
    )


def tight_headroom(case, share: float = 0.5) -> float:
    """The headroom that leaves a capacity ``share`` of the way from the default split's peak
    under full recomputation to its peak without: the uniform layout must recompute."""
    none = case.evaluate(case.layout.with_(recompute="none"))
    full = case.evaluate(case.layout.with_(recompute="full"))
    cap = full.total_bytes + share * (none.total_bytes - full.total_bytes)
    return 1 - float(cap) / none.capacity_bytes


def compositions(total: int, parts: int):
    """Every way of writing ``total`` as ``parts`` ordered counts ≥ 0."""
    for cuts in itertools.combinations(range(total + parts - 1), parts - 1):
        prev, out = -1, []
        for c in (*cuts, total + parts - 1):
            out.append(c - prev - 1)
            prev = c
        yield tuple(out)


def oracle(case, headroom: float):
    """(least step ns, layers, recomputed) over every per-stage layout of ``case.layout``'s shape
    that fits the device less ``headroom`` (:func:`oracle_at`)."""
    lay = case.layout
    capacity = int(case.device.usable_bytes(lay.framework.physical) * (1 - headroom))
    return oracle_at(case, lay, capacity)


def oracle_at(case, lay, capacity: int):
    """(least step ns, layers, recomputed) over every per-stage layout of ``lay``'s shape whose
    every stage needs at most ``capacity`` bytes, by evaluate(): every composition of L into pp
    stage counts that are multiples of v (equal chunks: optimizer.stage_view.StageView.counts),
    each stage's n spread over its v chunks as n/v, and every per-chunk count 0 … n/v that is legal (evaluate() refuses counts
    above 0 over a selective base under megatron: :mod:`model.recompute_counts`); None when none
    fits."""
    v = lay.virtual_stages
    best = None
    for sizes in compositions(case.model.arch.num_layers, lay.pp):
        if any(n % v for n in sizes):
            continue
        chunks = [0] * (lay.pp * v)
        for i, n in enumerate(sizes):
            for c in range(v):
                chunks[i + c * lay.pp] = n // v + (c >= v - n % v)
        for counts in itertools.product(*(range(-(-n // v) + 1) for n in sizes)):
            try:
                est = case.evaluate(lay.with_(stage_layers=tuple(chunks), recompute_layers=counts))
            except LayoutError:
                continue
            if all(s.total_bytes <= capacity for s in est.stages):
                value = sum(objective_ns(est.time_terms))
                if best is None or value < best[0]:
                    best = (value, sizes, counts)
    return best


ORACLE_CASES = [  # the oracle enumerates every split: 2 to 6 minutes for each exhaustive case
    (6, 2, "none", 0.5),
    (5, 3, "none", 0.5),
    (8, 3, "none", 0.3),
    (6, 2, "selective", 0.5),
    pytest.param(10, 4, "none", 0.5, marks=pytest.mark.exhaustive),
    pytest.param(12, 4, "none", 0.3, marks=pytest.mark.exhaustive),
    pytest.param(16, 2, "selective", 0.4, marks=pytest.mark.slow),
    pytest.param(16, 3, "none", 0.6, marks=pytest.mark.exhaustive),
]


INTERLEAVED_CASES = [  # stage counts multiples of v: L a multiple of v
    (6, 2, 2, "none", 0.5, 8),
    (8, 2, 2, "none", 0.4, 8),
    (9, 2, 3, "selective", 0.5, 8),
    (10, 3, 2, "none", 0.5, 6),
    pytest.param(12, 3, 2, "none", 0.3, 6, marks=pytest.mark.exhaustive),  # about a minute alone
    pytest.param(12, 2, 3, "none", 0.6, 8, marks=pytest.mark.slow),
]


def _solved_and_oracle(case, share: float, status: str = "optimal"):
    """CP-SAT's answer for ``case``'s shape and the exhaustive oracle's at the headroom ``share``
    of the way between full recomputation's peak and none's: infeasible both, or ``status``
    with an estimate (asserted here)."""
    headroom = tight_headroom(case, share)
    want = oracle(case, headroom)
    got = solve_shape(case, case.layout, headroom)
    if want is None:
        assert got.status == "infeasible"
    else:
        assert got.status == status
        assert got.estimate is not None
    return got, want


@pytest.mark.parametrize(("num_layers", "pp", "base", "share"), ORACLE_CASES)
def test_cp_sat_equals_the_exhaustive_oracle(num_layers, pp, base, share):
    got, want = _solved_and_oracle(tiny_case(num_layers, pp, base), share)
    if want is None:
        return
    # whole ns: the solver's T + R and the evaluation may round apart by a nanosecond or two
    assert abs(got.objective_ns - want[0]) <= 2
    assert got.objective_ns == sum(objective_ns(got.estimate.time_terms))


@pytest.mark.parametrize(("num_layers", "pp", "v", "base", "share", "gb"), INTERLEAVED_CASES)
def test_cp_sat_equals_the_exhaustive_oracle_interleaved(num_layers, pp, v, base, share, gb):
    """Interleaved shapes keep their schedule. The evaluator prices them by Megatron-Core's order
    on the chunks as timed (model.pipeline_uneven), which the closed form CP-SAT first ranks
    by neither equals nor bounds; the search then minimises the order's own step over the
    chunks' passes (optimizer.stage_exact, model.interleaved_paths) and proves its answer: the
    oracle's best, evaluate() over every composition and count, to the ns. 10 layers on 3
    stages: the closed form's best, 2, 4, 4 layers recomputing 1, 1, 1 a chunk, evaluates to
    16,095,214 ns, the order's, 4, 4, 2 recomputing 2, 1, 0, to 15,747,401 ns (the oracle's)."""
    case = tiny_case(num_layers, pp, base, v=v, gb=gb)
    got, want = _solved_and_oracle(case, share)
    if want is None:
        return
    assert got.estimate.layout.virtual_stages == v
    assert got.gap_ns <= 2  # proven, to the rounding of ns
    assert abs(got.objective_ns - want[0]) <= 2
    assert got.objective_ns == sum(objective_ns(got.estimate.time_terms))


def test_oracle_case_by_hand():
    """6 layers on 2 stages, halfway between full recomputation's peak and none's: the oracle and
    CP-SAT both put 3 + 3 layers and recompute 2 of stage 0's (it holds 2 micro-batches in
    flight; stage 1 holds 1 and needs none)."""
    case = tiny_case(6, 2)
    headroom = tight_headroom(case, 0.5)
    want = oracle(case, headroom)
    got = solve_shape(case, case.layout, headroom)
    assert want is not None and (want[1], want[2]) == ((3, 3), (2, 0))
    assert got.estimate is not None
    assert got.estimate.layout.stage_layers == (3, 3)
    assert got.estimate.layout.recompute_layers == (2, 0)


def test_selective_base_takes_no_counts_under_megatron():
    """Megatron-Core refuses recompute_num_layers with selective granularity
    (``TransformerConfig.__post_init__``; :mod:`model.recompute_counts`): on a selective base
    the tables' rows recompute nothing and the plan is selective on every layer with a split;
    the same shape over recompute none recomputes 2 layers of stage 0
    (:func:`test_oracle_case_by_hand`)."""
    case = tiny_case(6, 2, "selective")
    headroom = tight_headroom(case, 0.5)
    tables = build_stage_tables(case, case.layout, headroom)
    assert {o.recomputed for rows in tables.options for o in rows} == {0}
    got = solve_shape(case, case.layout, headroom)
    if got.estimate is not None:
        assert set(got.estimate.layout.recompute_layers) == {0}
    none = tiny_case(6, 2)
    rows = build_stage_tables(none, none.layout, tight_headroom(none, 0.5)).options
    assert max(o.recomputed for r in rows for o in r) > 0


def test_fsdp2_plans_choose_the_split_alone():
    """torchtitan recomputes no count of a stage's layers (every block alike since 114151ad4;
    before it, every N-th block of the model part: one N, never the first k of each stage), so
    under fsdp2 the tables offer 0 recomputed layers on every stage, where the same base under
    megatron recomputes layers of stage 0 (the test above: recompute none, 6 layers on pp 2)."""
    case = tiny_case(6, 2)
    fsdp2 = case.layout.with_(framework="fsdp2", zero_stage=2)
    rows = build_stage_tables(case, fsdp2, tight_headroom(case, 0.5)).options
    assert {o.recomputed for r in rows for o in r} == {0}
    got = solve_shape(case, fsdp2, tight_headroom(case, 0.5))
    if got.estimate is not None:
        assert set(got.estimate.layout.recompute_layers or (0,)) == {0}


def test_time_limit_returns_what_it_has_not_a_proof():
    """A limit already spent by the tables leaves no solve: status feasible (not proven), no
    plan; without a limit the same base is proven."""
    case = tiny_case(6, 2)
    headroom = tight_headroom(case)
    spent = solve_shape(case, case.layout, headroom, time_limit_s=1e-9)
    assert (spent.status, spent.estimate, spent.solves) == ("feasible", None, 0)
    assert spent.rows == 0  # the tables stopped at their first layer count, not after them
    assert solve_shape(case, case.layout, headroom).status == "optimal"
    with pytest.raises(OutOfTime):
        build_stage_tables(case, case.layout, headroom, deadline=time.perf_counter())


def test_tables_rows_are_the_evaluators_figures():
    """Each table row's peak bytes is stage_memory's for a layout that has it (the re-evaluation
    in solve_shape checks the chosen rows; here every row of a small case)."""
    case = tiny_case(5, 3)
    headroom = tight_headroom(case)
    tables = build_stage_tables(case, case.layout, headroom)
    for stage, rows in enumerate(tables.options):
        for row in rows:
            sizes = [0, 0, 0]
            sizes[stage] = row.layers
            sizes[(stage + 1) % 3] += 5 - row.layers
            counts = [0, 0, 0]
            counts[stage] = row.recomputed
            est = case.evaluate(
                case.layout.with_(stage_layers=tuple(sizes), recompute_layers=tuple(counts))
            )
            assert -(-est.stages[stage].total_bytes // 1) == row.peak_bytes
            assert row.peak_bytes <= tables.capacity


def _problem(model: str, gpus: str, seq: int, headroom: float = 0.0):
    """``gpus`` H100-SXM GPUs training ``model`` at s ``seq``, B 32, b at most 2."""
    n = int(gpus)
    case = Case.of(model, "H100-SXM", seq_len=seq, global_batch_size=32)
    space = SearchSpace(num_gpus=n, max_micro_batch_size=2)
    return Problem(
        jobs=(Job(case, n, f"{model} on {n} × H100-SXM, B 32"),),
        space=space,
        constraints=Constraints(headroom=headroom),
    )


@settings(max_examples=6, deadline=None)
@given(gpus=st.sampled_from(["4", "8"]), headroom=st.sampled_from([0.0, 0.2, 0.4]))
def test_per_stage_plan_is_never_slower_than_the_best_uniform(gpus, headroom):
    """Whatever the cluster and headroom, the per-stage answer is at most the uniform answer's
    step time, and every stage of it fits."""
    problem = _problem("llama3-8b", gpus, 8192, headroom)
    try:
        result = per_stage_search(problem, top_shapes=3)
    except Exception as err:  # no uniform layout fits: nothing to compare
        assert "no layout" in str(err)
        return
    assert result.plan_ns <= result.uniform_ns
    assert result.gain >= 1
    capacity = int(result.plan.capacity_bytes * (1 - headroom))
    assert all(s.total_bytes <= capacity for s in result.plan.stages)
    assert result.plan_ns == sum(objective_ns(result.plan.time_terms))


def test_per_stage_refuses_what_it_does_not_model():
    # Gemma 3's 5:1 local and global layers are placed (tests/optimizer/test_per_stage_spans.py),
    # but not over v 2 model chunks 31 layers apart: a rank's two chunks would hold unequal spans
    with pytest.raises(InputError, match="per_stage: gemma3-27b's layers repeat a period of 6"):
        case = Case.of(
            **{"model": "gemma3-27b", "pp": 2, "global_batch_size": 8,
               "schedule": "interleaved", "virtual_stages": 2}
        )  # fmt: skip
        solve_shape(case, case.layout)
    case = tiny_case(4, 2)
    with pytest.raises(
        InputError,
        match="per_stage: schedule gpipe: the per-stage search takes 1F1B or interleaved",
    ):
        solve_shape(case, case.layout.with_(schedule="gpipe", framework="fsdp2", zero_stage=2))
    # Megatron-DeepSpeed's pipeline: one activation_checkpoint_interval, layers placed by
    # partition_method type:transformer (model.deepspeed_layers.deepspeed_pipe_refusal)
    with pytest.raises(
        InputError, match="per_stage: framework deepspeed with pp 2 recomputes every layer or none"
    ):
        solve_shape(case, case.layout.with_(framework="deepspeed", zero_stage=1))


# --- what users see ---------------------------------------------------------------------------


def test_a_cap_the_optimum_does_not_beat_is_no_gain():
    """With a cap at (or 1 ns under) the shape's own optimum, the rows at or above it are left
    out, so the shape has no plan faster than the cap: ``no-gain``, not ``optimal`` (not
    ``optimal`` with a plan that does not beat its cap); 1 ns above, the optimum."""
    case = tiny_case(6, 2)
    headroom = tight_headroom(case, 0.5)
    best = oracle(case, headroom)
    assert best is not None
    for cap, status in ((best[0], "no-gain"), (best[0] - 1, "no-gain"), (best[0] + 1, "optimal")):
        got = solve_shape(case, case.layout, headroom, cap_ns=cap)
        assert got.status == status
        assert got.objective_ns == (best[0] if status == "optimal" else None)
