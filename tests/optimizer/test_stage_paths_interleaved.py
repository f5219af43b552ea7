"""The per-stage tables' chunk passes run through Megatron-Core's interleaved order give the
step evaluate() charges (model.terms.pipeline_span.classic_span): for random splits of small
interleaved models, each split's longest path over its rows' passes
(optimizer.stage_check.order_path, model.interleaved_paths.critical_path) is evaluate()'s
pipeline term to the rows' rounding — a unit of 1/1024 ns a pass on the path, rounded down, and
2 ns — and no path of the family the search starts from exceeds it. So the solver's figure for a
split, once its path is added, is the evaluator's step, and every path it holds is under every
split's."""

from __future__ import annotations

from functools import cache

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.optimizer.test_per_stage import tight_headroom, tiny_case
from tests.optimizer.test_per_stage_spans import span_case
from trainplan.model.interleaved_paths import interleaved_paths
from trainplan.model.pipeline_paths import path_seconds
from trainplan.optimizer.case import Case
from trainplan.optimizer.stage_bases import plan_layout
from trainplan.optimizer.stage_check import order_path, pipeline_ns, plan_rows
from trainplan.optimizer.stage_tables import PASS_UNITS, build_stage_tables


@cache
def _tables(which: int):
    """(case, tables): 12 layers of the tiny model on 3 stages, v 2, 6 micro-batches, memory
    halfway between full recomputation's peak and none's (rows recompute); or 12 layers of
    local and global attention in turn on 2 stages, v 2, 8 micro-batches, the whole device."""
    if which == 0:
        case = tiny_case(12, 3, v=2, gb=6)
        headroom = tight_headroom(case, 0.5)
    else:
        spans = span_case(12, 2, ("local", "global"), 128).model
        case = Case.of(model=spans, pp=2, seq_len=8192, global_batch_size=8,
                       device="H100-SXM", schedule="interleaved", virtual_stages=2)  # fmt: skip
        headroom = 0.0
    return case, build_stage_tables(case, case.layout, headroom)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([0, 1]), st.data())
def test_the_rows_order_is_the_evaluators_step(which, data):
    case, tables = _tables(which)
    lay, v = case.layout, case.layout.virtual_stages
    cuts = sorted(data.draw(st.lists(st.integers(0, 12 // v), min_size=lay.pp - 1,
                                     max_size=lay.pp - 1)))  # fmt: skip
    layers = tuple(v * (b - a) for a, b in zip([0, *cuts], [*cuts, 12 // v], strict=True))
    rows = {(s, o.layers): o for s, r in enumerate(tables.options) for o in r}
    assume(all((s, n) in rows for s, n in enumerate(layers)))
    counts = tuple(rows[(s, n)].recomputed for s, n in enumerate(layers))
    est = case.evaluate(plan_layout(lay, layers, counts))
    assert [o.layers for o in plan_rows(tables, est)] == list(layers)
    value, path = order_path(tables, est)  # raises TermMismatch beyond the bounds below
    evaluated = pipeline_ns(est) * PASS_UNITS
    assert -2 * PASS_UNITS <= evaluated - value <= sum(path[0]) + sum(path[1]) + 2 * PASS_UNITS
    passes = [o.passes() for o in plan_rows(tables, est)]
    fw, bw = [x for f, _ in passes for x in f], [x for _, b in passes for x in b]
    assert path_seconds(path, fw, bw) == value
    m = est.num_microbatches
    assert max(path_seconds(p, fw, bw) for p in interleaved_paths(lay.pp, v, m)) <= value
