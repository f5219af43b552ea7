"""One base layout's per-stage optimum (:func:`solve_shape`): CP-SAT over the stage tables
(:mod:`optimizer.stage_cpsat` over :mod:`optimizer.stage_tables`) chooses every stage's layer
count and its fully recomputed layers, and each answer is re-evaluated with ``evaluate()``
(:func:`optimizer.stage_check.check_plan`; a tabulated figure that differs raises
:class:`optimizer.search.TermMismatch`). :mod:`optimizer.per_stage` runs it over the uniform
search's top shapes.

The tables' pipeline term is the closed form ``m·t_max·(1 + (pp − 1)/(v·m))``, under 1F1B an
upper bound on the order's step the evaluator charges (:mod:`model.pipeline_onef`, whose bubble
reads every stage, no one stage's row), interleaved neither that step nor a bound on it
(Megatron-Core's order on the chunks, :mod:`model.pipeline_uneven`): CP-SAT first finds the split
best under the closed form, then :func:`optimizer.stage_exact.verify_split` proves it, or a
faster one, best under the order's own step (lower bounds by the order's paths, each split found
evaluated). The rest of the step each key adds is the evaluated step less the evaluator's own
pipeline term.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainplan.model.estimate import Estimate
from trainplan.model.layout import Layout
from trainplan.model.pipeline_report import interleaved_order
from trainplan.optimizer.case import Case
from trainplan.optimizer.solver import STAGE_WORKERS, interrupted
from trainplan.optimizer.stage_bases import plan_layout
from trainplan.optimizer.stage_bounds import NO_SPLIT, pipeline_lower_bound
from trainplan.optimizer.stage_check import check_plan, pipeline_ns, step_ns, walked
from trainplan.optimizer.stage_cpsat import StageModel
from trainplan.optimizer.stage_exact import verify_split
from trainplan.optimizer.stage_tables import (
    OutOfTime,
    StageTables,
    build_stage_tables,
    stage_capacity,
)

__all__ = ["ShapePlan", "step_ns", "check_plan", "pipeline_ns", "solve_rests", "solve_shape"]
# step_ns, check_plan, pipeline_ns: optimizer.stage_check's, named here as before


@dataclass(frozen=True, slots=True)
class ShapePlan:
    """The per-stage optimum of one base layout (shape, ZeRO stage, base recompute mode)."""

    layout: Layout
    """The base layout (1F1B with v = 1 or interleaved with its v, recompute none or selective,
    the default split)."""
    status: str
    """``optimal`` (proven), ``feasible`` (time limit: the best found, within :attr:`gap_ns` of
    every split where a bound was reached), ``infeasible`` (no split fits), ``no-gain``
    (proven: no split that fits is faster than the cap it was given, the best plan so far) or
    ``not-searched`` (an interleaved shape whose L layers have no split into equal chunks of
    v, the only interleaved splits the tables hold: :func:`optimizer.stage_rules.equal_chunks_note`,
    said in :attr:`note`)."""
    estimate: Estimate | None
    """The chosen layout (``stage_layers``, ``recompute_layers``) re-evaluated exactly."""
    objective_ns: int | None
    """Its step time in whole ns (:func:`model.estimate.objective_ns`, summed)."""
    solves: int
    """CP-SAT solves (one more per key (D, E, B, M, C) whose rest was added,
    :data:`optimizer.stage_cpsat.Key`)."""
    tables_seconds: float
    """Seconds building the shape's stage tables (its stages' capacity, the pipeline's bound,
    :func:`optimizer.stage_tables.build_stage_tables`), :func:`time.perf_counter`; the base
    layout's own evaluation before them is not counted."""
    solve_seconds: float
    """CP-SAT's own seconds over the shape's solves (:func:`solve_rests`)."""
    rows: int
    """Table rows (stage options that fit) over all stages."""
    gap_ns: int | None = None
    """The plan's step less a proven lower bound on every split's under the order's own step
    (:func:`optimizer.stage_exact.verify_split`), whole ns: 0 proven to the ns, a ns or a few
    where the last split found closed the proof (the passes' rounding,
    :data:`optimizer.stage_tables.PASS_UNITS`), more where the time limit stopped it; None when
    the time limit stopped the first solves."""
    note: str | None = None
    """Why a ``not-searched`` shape was not searched, in words; None otherwise."""


def solve_rests(
    case: Case,
    layout: Layout,
    tables: StageTables,
    model: StageModel,
    deadline: float | None,
    workers: int,
    cap_ns: int | None = None,
) -> tuple[str, tuple[int, Estimate] | None, int, float, int | None]:
    """(status, (step ns, estimate) of the best plan or None, CP-SAT solves, their seconds, the
    gap :attr:`ShapePlan.gap_ns`) of ``layout``'s per-stage tables: solve; if the rest of the
    step for the optimum's key (:data:`optimizer.stage_cpsat.Key`) is not yet known, evaluate the
    optimum's layout (:func:`check_plan`), add its rest (exact) and solve again; the first
    optimum whose key is known is proven (every other key's rest is at least the lower bound
    used). :func:`optimizer.stage_exact.verify_split` goes on from that optimum (the closed
    form's) to the best under the order's own step, 1F1B or interleaved (``cap_ns``: only
    splits below it). Stops at ``deadline`` (:func:`time.perf_counter` seconds; None: none) or
    when interrupted (:func:`optimizer.solver.interrupt`), ``feasible``.

    Raises
    ------
    TermMismatch
        A tabulated figure that ``evaluate()`` does not reproduce (:func:`check_plan`).
    """
    best: tuple[int, Estimate] | None = None
    hint = None
    status, solves, seconds = "feasible", 0, 0.0
    while True:
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            break
        sol = model.solve(left, workers, hint)
        solves += 1
        if sol is None:
            if best is None:
                late = deadline is not None and time.perf_counter() >= deadline
                status = "feasible" if late or interrupted() else "infeasible"  # Ctrl-C: no proof
            break
        seconds += sol.seconds
        known = sol.key in model.known  # before this solve: then the optimum is proven
        lay = plan_layout(layout, sol.layers, sol.recomputed)
        est = case.evaluate(lay)
        check_plan(tables, est, sol.paced_ns)
        total = step_ns(est)
        # the rest of the step: less the evaluator's own pipeline term, the order's step
        # (1F1B: below the closed form the solver's T is; interleaved: neither; check_plan)
        model.add_rest(sol.key, total - round(pipeline_ns(est)))
        if best is None or (total, est.total_bytes) < (best[0], best[1].total_bytes):
            best = (total, est)
            hint = (sol.layers, sol.recomputed)
        if known:
            status = sol.status
            break
    if best is None or status != "optimal" or not walked(layout, best[1].num_microbatches):
        status, best, gap = _unverified(layout, status, best, model)
        return status, best, solves, seconds, gap
    status, best, more, spent, gap = verify_split(
        case, layout, tables, model, best, cap_ns, deadline, workers
    )
    return status, best, solves + more, seconds + spent, gap


def _unverified(layout: Layout, status: str, best: Any, model: StageModel) -> tuple[Any, ...]:
    """(status, best, gap) of an answer :func:`optimizer.stage_exact.verify_split` does not take
    up: an interleaved optimum past :data:`model.interleaved_paths.MOST_PASSES` ``feasible``
    with its gap to :func:`interleaved_floor` (the closed form ranked it, the evaluator's order
    priced it), any other as it is (pp 1: the closed form is the step), no gap."""
    if best is not None and status == "optimal" and interleaved_order(layout.schedule, layout.pp):
        return "feasible", best, best[0] - interleaved_floor(layout, best[1], model)
    return status, best, None


def interleaved_floor(layout: Layout, est: Estimate, model: StageModel) -> int:
    """A proven lower bound, whole ns, on the step of every split of an interleaved base
    ``layout`` the solver proved its optimum over under the closed form (``model.bound_ns``:
    the least ``T + R``, T the closed form ``m·t_max·(1 + r)``, r = (pp − 1)/(v·m), R the
    rest), where the order is too long to walk (:data:`model.interleaved_paths.MOST_PASSES`):
    the evaluator's pipeline term is Megatron-Core's order run on the chunks
    (:mod:`model.pipeline_uneven`), which the closed form neither equals nor bounds, but never
    below the slowest rank's own ``m·t_max`` = T/(1 + r) (no rank finishes before its m
    micro-batches), so every split's step is at least ``(T + R)/(1 + r)`` ≥ the optimum's
    bound over (1 + r) (R ≥ 0)."""
    m, pp, v = est.num_microbatches, layout.pp, layout.virtual_stages
    return math.floor(Fraction(model.bound_ns) / (1 + Fraction(pp - 1, v * m)))


def solve_shape(
    case: Case,
    layout: Layout,
    headroom: float = 0.0,
    time_limit_s: float | None = None,
    workers: int = STAGE_WORKERS,
    cap_ns: int | None = None,
    max_bytes: int | None = None,
    allocator_retries_ok: bool = False,
) -> ShapePlan:
    """The per-stage optimum of ``layout``'s shape on ``case``: the least step time over every
    stage's layer count and recomputed layers whose stages all fit.

    The tables (:func:`optimizer.stage_tables.build_stage_tables`) are solved by
    :func:`solve_rests`; a shape whose tables leave some stage no option is ``infeasible``.

    ``cap_ns``: only splits faster than this are sought (the best plan so far); none is
    ``no-gain``. ``max_bytes``: every stage's peak at most this many bytes per GPU besides the
    device's capacity (:func:`optimizer.stage_tables.build_stage_tables`, as ``allocator_retries_ok``).

    Raises
    ------
    InputError
        What the per-stage search does not model (:func:`optimizer.stage_rules.check_per_stage`).
    """
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    base = case.evaluate(layout)  # the base layout's own figures: not the tables' time
    t0 = time.perf_counter()
    pp_row = next(r for r in base.traffic if r.traffic.axis == "pp")
    lower = math.floor((pp_row.exposed_seconds or 0.0) * 1e9) - 2
    capacity = stage_capacity(case, layout, headroom, max_bytes)
    bound = pipeline_lower_bound(case, layout, capacity)
    if bound >= NO_SPLIT:
        return ShapePlan(layout, "infeasible", None, None, 0, time.perf_counter() - t0, 0.0, 0)
    if cap_ns is not None and bound + lower >= cap_ns:
        return ShapePlan(layout, "no-gain", None, None, 0, time.perf_counter() - t0, 0.0, 0)
    try:
        tables = build_stage_tables(
            case, layout, headroom, cap_ns, lower, max_bytes, deadline, allocator_retries_ok
        )
    except OutOfTime:  # the time limit: this shape is not searched, nothing is proven
        return ShapePlan(layout, "feasible", None, None, 0, time.perf_counter() - t0, 0.0, 0)
    t_tables = time.perf_counter() - t0
    rows = sum(len(r) for r in tables.options)
    reach = sum(max((o.layers for o in r), default=-1) for r in tables.options)
    if any(not r for r in tables.options) or reach < tables.num_layers:
        # some stage has no option (or the options cannot hold L layers): nothing fits, or
        # nothing beats cap_ns
        none = "infeasible" if cap_ns is None else "no-gain"
        return ShapePlan(layout, none, None, None, 0, t_tables, 0.0, rows)
    model = StageModel(tables, lower)
    found = solve_rests(case, layout, tables, model, deadline, workers, cap_ns)
    status, best, solves, seconds, gap = found
    if best is None:
        return ShapePlan(layout, status, None, None, solves, t_tables, seconds, rows)
    if _no_gain(cap_ns, status, best[0], gap):
        # rows at or above the cap were left out, so this is no proof for the shape: it has
        # nothing faster than the cap (the plan found is not kept)
        return ShapePlan(layout, "no-gain", None, None, solves, t_tables, seconds, rows)
    return ShapePlan(layout, status, best[1], best[0], solves, t_tables, seconds, rows, gap)


def _no_gain(cap_ns: int | None, status: str, step_ns: int, gap_ns: int | None) -> bool:
    """Whether a shape's answer (``step_ns``, proven ``optimal`` or within ``gap_ns`` of a proven
    floor on its every split) shows nothing under ``cap_ns``."""
    floor = step_ns if status == "optimal" else None if gap_ns is None else step_ns - gap_ns
    return cap_ns is not None and floor is not None and floor >= cap_ns
