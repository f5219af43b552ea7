"""The per-stage search's answer is the fastest split under the order's own step, 1F1B's or
interleaved 1F1B's (optimizer.stage_exact: bound and verify over model.pipeline_paths and
model.interleaved_paths), not under the closed form (m + pp − 1)·t_max or
m·t_max·(1 + (pp − 1)/(v·m)): it equals an exhaustive oracle that evaluates every split with
evaluate() on cases where the two rankings disagree, and `trainplan evaluate` on its
--stage-layers."""

from __future__ import annotations

import pytest

from tests.optimizer.test_per_stage import compositions, oracle, tight_headroom, tiny_case
from trainplan.model.estimate import objective_ns
from trainplan.optimizer.case import Case
from trainplan.optimizer.per_stage import solve_shape
from trainplan.optimizer.stage_check import pipeline_ns
from trainplan.optimizer.stage_tables import stage_capacity, stage_within


def _figures(case, sizes, fit: bool = False):
    """(the step evaluate() charges, the same with the closed form in place of the order's
    pipeline term), whole ns, of ``case``'s layout with ``sizes`` layers a stage and nothing
    recomputed. The closed form: m·t_max·(1 + (pp − 1)/m), ``busy_s`` being m·t_max. With
    ``fit``, None where a stage does not fit the device as the per-stage tables judge it
    (optimizer.stage_tables.stage_within)."""
    lay = case.layout
    est = case.evaluate(lay.with_(stage_layers=sizes, recompute_layers=(0,) * lay.pp))
    if fit and not all(stage_within(s, stage_capacity(case, lay), None, False) for s in est.stages):
        return None
    step = sum(objective_ns(est.time_terms))
    tt, m = est.time_terms, est.num_microbatches
    closed = round(tt.busy_s * (1 + (lay.pp - 1) / m) * 1e9)
    return step, step - round(pipeline_ns(est)) + closed


def _least(case, which: int):
    """(figure, sizes) least over every split of ``case``'s L layers that fits, nothing
    recomputed, by :func:`_figures`' ``which`` (0 the step, 1 the closed form's)."""
    splits = compositions(case.model.arch.num_layers, case.layout.pp)
    found = ((_figures(case, s, fit=True), s) for s in splits)
    return min((f[which], s) for f, s in found if f is not None)


def test_the_two_rankings_disagree_and_the_answer_is_the_steps():
    """6 layers of the tiny model on 3 stages, 3 micro-batches, the device's whole memory (every
    split fits without recomputation, which only adds time). The closed form ranks 2, 2, 2 first
    (5,690,490 ns against 3, 2, 1's 7,182,953: stage 0's 3 layers and the embedding make it the
    slowest, × (m + pp − 1) = 5); the order's step ranks 3, 2, 1 first (5,015,775 ns against
    2, 2, 2's 5,343,853: its warm-up's two forwards cover the round trip through the lighter
    stages after it). The search answers 3, 2, 1, the exhaustive oracle's (every split and every
    recomputed count, by evaluate()).

    Megatron-Core's own optimizer-step passes (model.step_passes.step_pass_bytes: the clip's
    scale +8, the master re-read +4; 38 → 50 B an element) moved each figure by +12 B × the
    busiest stage's elements / (3.35 TB/s × 0.8866): 2, 2, 2 (1,844,480) +7,453 ns,
    5,336,400 → 5,343,853 (closed form 5,683,037 → 5,690,490); 3, 2, 1 (2,635,264) +10,648 ns,
    5,005,127 → 5,015,775 (7,172,305 → 7,182,953). The rankings and the answer are unchanged."""
    case = tiny_case(6, 3, gb=3)
    assert _figures(case, (2, 2, 2)) == (5_343_853, 5_690_490)
    assert _figures(case, (3, 2, 1)) == (5_015_775, 7_182_953)
    assert _least(case, 1) == (5_690_490, (2, 2, 2))
    assert _least(case, 0) == (5_015_775, (3, 2, 1))
    got = solve_shape(case, case.layout)
    want = oracle(case, 0.0)
    assert want is not None and want[0] == 5_015_775 and want[1] == (3, 2, 1)
    assert got.status == "optimal" and got.gap_ns <= 2  # proven, to the rounding of ns
    assert got.estimate is not None
    assert got.objective_ns == want[0] == sum(objective_ns(got.estimate.time_terms))
    assert got.estimate.layout.stage_layers == (3, 2, 1)


@pytest.mark.parametrize(
    ("num_layers", "pp", "gb", "closed", "step"),
    [
        (7, 3, 2, (4_663_384, (2, 3, 2)), (4_497_102, (3, 3, 1))),
        (9, 4, 4, (8_266_236, (2, 3, 3, 1)), (7_830_354, (3, 3, 2, 1))),
        (6, 4, 3, (4_696_968, (1, 2, 2, 1)), (4_421_289, (2, 2, 1, 1))),
        (9, 3, 3, (7_663_567, (3, 3, 3)), (7_171_238, (4, 3, 2))),
    ],
)
def test_cp_sat_equals_the_oracle_where_the_closed_form_ranks_otherwise(
    num_layers, pp, gb, closed, step
):
    """Small cases where the closed form's best split is not the fastest (``closed``: its split
    and that split's step; ``step``: the fastest split and its step, by evaluate() over every
    split, nothing recomputed with the whole device): the search answers the fastest, proven.

    Megatron-Core's own optimizer-step passes (+12 B an element, 38 → 50) moved each step by
    12 B × its busiest stage's elements / (3.35 TB/s × 0.8866), the splits not: 2,373,120
    elements +9,589 ns (L 7 2, 3, 2: 4,653,795 → 4,663,384; L 9 2, 3, 3, 1: 8,256,647 →
    8,266,236); 2,635,264 +10,648 ns (L 7 3, 3, 1: 4,486,454 → 4,497,102; L 9 3, 3, 2, 1:
    7,819,706 → 7,830,354); L 6 pp 4: 1,582,080 +6,392 ns (4,690,576 → 4,696,968), 1,844,224
    +7,452 ns (4,413,837 → 4,421,289); L 9 pp 3: 2,635,520 +10,649 ns (7,652,918 → 7,663,567),
    3,426,304 +13,844 ns (7,157,394 → 7,171,238)."""
    case = tiny_case(num_layers, pp, gb=gb)
    by_closed = _least(case, 1)[1]
    assert (_figures(case, by_closed)[0], by_closed) == closed
    assert _least(case, 0) == step
    got = solve_shape(case, case.layout)
    assert got.status == "optimal" and got.gap_ns <= 2  # proven, to the rounding of ns
    assert got.objective_ns == step[0]


@pytest.mark.parametrize(("num_layers", "pp", "gb", "share"), [(6, 3, 3, 0.5), (7, 3, 2, 0.3)])
def test_cp_sat_equals_the_oracle_under_memory_pressure(num_layers, pp, gb, share):
    """Recomputation too: capacity ``share`` of the way from the default split's peak under full
    recomputation to none's; the exhaustive oracle walks every split and recomputed count."""
    case = tiny_case(num_layers, pp, gb=gb)
    headroom = tight_headroom(case, share)
    want = oracle(case, headroom)
    got = solve_shape(case, case.layout, headroom)
    assert want is not None and got.status == "optimal"
    assert abs(got.objective_ns - want[0]) <= 2


def test_llama3_8b_answer_is_the_orders():
    """Llama 3 8B on 4 H100, tp 1 × pp 4, 8 micro-batches of 4,096 tokens: the closed form ranks
    8, 9, 9, 6 first (1.203225455 s with it, 1.184160963 s evaluated), the order's step
    9, 9, 8, 6 (1.176417731 s evaluated; 1.207820318 s by the closed form), tied with 9, 9, 9, 5
    (the same two figures and the same peak: the first stages pace the order). The per-stage
    answer is one of the tied pair, whichever the solver meets first.

    Megatron-Core's own optimizer-step passes (+12 B an element, 38 → 50) on the busiest
    stage's elements at 3.35 TB/s × 0.8866: 8, 9, 9, 6 +12 B × 2,270,232,576 = +9.172657 ms
    (1.174988306 → 1.184160963 s; closed form 1.194052798 → 1.203225455 s); 9, 9, 8, 6 and
    9, 9, 9, 5 +12 B × 2,488,344,576 = +10.053918 ms (1.166363813 → 1.176417731 s;
    1.197766400 → 1.207820318 s). The rankings and the answer are unchanged."""
    case = Case.of(model="llama3-8b", device="H100-SXM", global_batch_size=8, pp=4, tp=1,
                   seq_len=4096)  # fmt: skip
    assert _figures(case, (8, 9, 9, 6)) == (1_184_160_963, 1_203_225_455)
    assert _figures(case, (9, 9, 8, 6)) == (1_176_417_731, 1_207_820_318)
    got = solve_shape(case, case.layout)
    assert got.status == "optimal" and got.estimate is not None
    lay = got.estimate.layout
    assert _figures(case, (9, 9, 9, 5)) == (1_176_417_731, 1_207_820_318)
    assert lay.stage_layers in ((9, 9, 8, 6), (9, 9, 9, 5))
    assert lay.recompute_layers == (0, 0, 0, 0)
    assert got.objective_ns == 1_176_417_731  # `trainplan evaluate` prints it too: tests/interface


@pytest.mark.exhaustive  # a minute of evaluate() calls: with the oracle cases, not in CI's run
def test_llama3_8b_equals_every_split():
    """The same case against every split of 32 layers on 4 stages that fits without
    recomputation (of 6,545, evaluate() each; recomputation only adds time, and the answer
    recomputes nothing): the least is 9, 9, 8, 6 (the first met of it and the tied 9, 9, 9, 5),
    1.176417731 s (1.166363813 s before Megatron-Core's own optimizer-step passes, +12 B ×
    2,488,344,576 elements / (3.35 TB/s × 0.8866) = +10.053918 ms)."""
    case = Case.of(model="llama3-8b", device="H100-SXM", global_batch_size=8, pp=4, tp=1,
                   seq_len=4096)  # fmt: skip
    assert _least(case, 0) == (1_176_417_731, (9, 9, 8, 6))


def test_interleaved_answer_is_the_orders():
    """Interleaved, v 2: 10 layers of the tiny model on 3 stages, 6 micro-batches, capacity
    halfway between the default split's peak fully recomputed and not. The closed form
    m·t_max·(1 + (pp − 1)/(v·m)) ranks 2, 4, 4 layers (recomputing 1, 1, 1 a chunk) before 4, 4,
    2 (2, 1, 0): 16,735,787 ns against 17,766,739 (its slowest rank's micro-batch 14.034 ms
    against 14.918). Megatron-Core's order on the chunks, the evaluator's step, ranks them the
    other way, 16,109,058 ns against 15,761,245: the first stage's 4 layers and the embedding
    fill the pipeline while the light last stage drains it. The search answers the order's,
    proven (optimizer.stage_exact over model.interleaved_paths; the exhaustive oracle's too,
    tests/optimizer/test_per_stage.py), where it answered the closed form's, feasible, before.

    Megatron-Core's own optimizer-step passes (+12 B an element, 38 → 50) at 3.35 TB/s × 0.8866
    on the busiest stage's elements: 2, 4, 4 +12 B × 3,426,560 = +13,844 ns (16,095,214 →
    16,109,058; closed form 16,721,943 → 16,735,787), 4, 4, 2 +12 B × 3,426,304 = +13,844 ns
    (15,747,401 → 15,761,245; 17,752,895 → 17,766,739). The rankings and the answer are
    unchanged."""
    case = tiny_case(10, 3, v=2, gb=6)
    headroom = tight_headroom(case, 0.5)

    def figures(chunks, counts):  # (step, the same with the closed form), ns
        est = case.evaluate(case.layout.with_(stage_layers=chunks, recompute_layers=counts))
        step, m = sum(objective_ns(est.time_terms)), est.num_microbatches
        closed = round(est.time_terms.busy_s * (1 + 2 / (2 * m)) * 1e9)
        return step, step - round(pipeline_ns(est)) + closed

    # chunk c of stage i at i + c·pp (each stage's n over its 2 chunks)
    assert figures((1, 2, 2, 1, 2, 2), (1, 1, 1)) == (16_109_058, 16_735_787)
    assert figures((2, 2, 1, 2, 2, 1), (2, 1, 0)) == (15_761_245, 17_766_739)
    got = solve_shape(case, case.layout, headroom)
    assert got.status == "optimal" and got.gap_ns <= 2 and got.estimate is not None
    assert got.objective_ns == 15_761_245
    assert got.estimate.layout.stage_layers == (2, 2, 1, 2, 2, 1)
    assert got.estimate.layout.recompute_layers == (2, 1, 0)


def test_an_order_too_long_to_walk_keeps_the_closed_forms_answer(monkeypatch):
    """Past model.interleaved_paths.MOST_PASSES passes (2·pp·v·m; set to 0 here) the search
    does not walk the interleaved order: the same case as above answers the closed form's best,
    2, 4, 4 at 16,109,058 ns, ``feasible`` with its gap to a proven floor
    (optimizer.stage_solve.interleaved_floor: no split under its slowest rank's own m
    micro-batches), which lies under the order's best, 15,761,245 ns (16,095,214 and 15,747,401
    before Megatron-Core's own optimizer-step passes, +13,844 ns each: see above)."""
    monkeypatch.setattr("trainplan.optimizer.stage_check.MOST_PASSES", 0)
    case = tiny_case(10, 3, v=2, gb=6)
    got = solve_shape(case, case.layout, tight_headroom(case, 0.5))
    assert got.status == "feasible" and got.estimate is not None
    assert got.objective_ns == 16_109_058
    assert got.estimate.layout.recompute_layers == (1, 1, 1)
    assert got.objective_ns - got.gap_ns <= 15_761_245


def test_the_tables_seconds_leave_out_the_base_layouts_own_evaluation(monkeypatch):
    """``solve_shape`` evaluates its base layout (its pipeline's exposed p2p, the lower bound
    of the tables) before it builds the stage tables; that evaluation is no part of the tables'
    seconds. On a clock that stands still but for 1,000 s spent in the first ``evaluate()``
    (the base layout's), the shape's tables took 0 s."""
    import types

    from trainplan.optimizer import stage_solve

    case = tiny_case(6, 3, gb=3)
    clock, real = [0.0], Case.evaluate

    def evaluate(self, layout):
        if clock[0] == 0.0:  # the first call: the base layout
            clock[0] = 1000.0
        return real(self, layout)

    monkeypatch.setattr(Case, "evaluate", evaluate)
    monkeypatch.setattr(stage_solve, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    got = solve_shape(case, case.layout)
    assert got.status == "optimal" and got.tables_seconds == 0.0
