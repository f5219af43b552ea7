"""The per-stage answer under the order's own step (1F1B, :mod:`model.pipeline_onef`; interleaved
1F1B, Megatron-Core's order on the model chunks, :mod:`model.pipeline_uneven`), proven by bound
and verify (:func:`verify_split`).

The tables' pipeline term T is the closed form ``m·t_max·(1 + (pp − 1)/(v·m))``: under 1F1B an
upper bound on the step the evaluator charges on stages of unequal time, interleaved neither
that step nor a bound on it, so the split best under it
(:func:`optimizer.stage_solve.solve_rests`) need not be the fastest. The step is the longest
path of the order's graph, and every path's length is linear in the stages' (interleaved: the
model chunks') forward and backward times (:mod:`model.pipeline_paths`,
:mod:`model.interleaved_paths`). So, starting from that split (its step evaluated, ``best``):

1. CP-SAT's objective becomes ``P + R`` with ``P`` at least the length of every path known
   (:meth:`optimizer.stage_cpsat.StageModel.exact_step`: the order's family,
   :func:`model.pipeline_paths.onef_paths`' two paths per stage or
   :func:`model.interleaved_paths.interleaved_paths`' one per rank, and the best split's own
   longest path, so its ``P`` is its step), and only splits with ``P + R`` below ``best`` are
   allowed (:meth:`~optimizer.stage_cpsat.StageModel.cutoff`);
2. each split it finds is evaluated (``evaluate()``, :func:`optimizer.stage_check.check_plan`):
   its rest (A, B, C) and its own longest path (:func:`optimizer.stage_check.order_path` over
   its rows' passes, checked against the evaluator's pipeline term both ways) are added, so the
   model's figure for it becomes its step; a faster one becomes ``best`` (and the cutoff);
3. stop when none is left (infeasible: every split's lower bound reaches ``best``, proven), or
   when the split found adds nothing (its key and its path already there: the solver's
   optimum is then within the passes' rounding of ``best``, a unit a pass on the path: under
   a ns at m up to about 500 under 1F1B, a few ns interleaved, whose paths pass v chunks
   a micro-batch: :data:`optimizer.stage_tables.PASS_UNITS`), or at the time limit with the
   gap ``best`` less CP-SAT's bound.

Each step adds a key or a path the model lacked, of finitely many (the order's graph depends on
pp, v and m only), so the loop ends. Where the stages (chunks) take equal time the closed form
is the step (the family's path through the last stage equals it) and the first solve proves the
first answer. Interleaved orders longer than :data:`model.interleaved_paths.MOST_PASSES` are
not walked (:func:`optimizer.stage_check.walked`; the closed form's answer keeps its floor,
:func:`optimizer.stage_solve.interleaved_floor`). Interleaved beyond
:data:`model.pipeline_uneven.RUN_GROUPS`' last run, where the
evaluator may charge a proven upper bound on the order's step in place of the step, a split
whose bound stays that far under its figure is left ``feasible`` with its gap.
"""

from __future__ import annotations

import time

from trainplan.model.estimate import Estimate
from trainplan.model.layout import Layout
from trainplan.model.pipeline_paths import Path
from trainplan.optimizer.case import Case
from trainplan.optimizer.stage_bases import plan_layout
from trainplan.optimizer.stage_check import check_plan, order_path, pipeline_ns, plan_rows, step_ns
from trainplan.optimizer.stage_cpsat import StageModel
from trainplan.optimizer.stage_tables import PASS_UNITS, StageTables

__all__ = ["Verified", "verify_split"]

Verified = tuple[str, tuple[int, Estimate], int, float, int | None]
"""(status ``optimal`` or ``feasible``, (step ns, estimate) of the best split, CP-SAT solves,
their seconds, the gap in whole ns: the best step less the least any split can take, a proven
lower bound; None where the time limit left none)."""


def verify_split(
    case: Case,
    layout: Layout,
    tables: StageTables,
    model: StageModel,
    best: tuple[int, Estimate],
    cap_ns: int | None,
    deadline: float | None,
    workers: int,
) -> Verified:
    """The fastest split of ``layout``'s shape under the order's own step, from ``best`` (the
    split best under the closed form, evaluated; the module docstring). ``cap_ns``: only splits
    below it matter (the best plan of the shapes before). Stops at ``deadline``
    (:func:`time.perf_counter` seconds; None: none) with the best found, ``feasible``, and the
    gap.

    Raises
    ------
    TermMismatch
        A tabulated figure that ``evaluate()`` does not reproduce
        (:func:`optimizer.stage_check.check_plan`, :func:`optimizer.stage_check.order_path`).
    """
    m, schedule = best[1].num_microbatches, layout.schedule.value
    model.exact_step(m, schedule)
    model.add_path(order_path(tables, best[1])[1])
    limit = best[0] if cap_ns is None else min(best[0], cap_ns)
    model.cutoff(limit)
    solves, seconds = 0, 0.0

    def gap(bound: int) -> int:  # below every split: the solver's bound, or the cutoff above it
        return max(0, best[0] - min(bound, limit))

    while True:
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:  # no bound under the order's step before a solve
            return "feasible", best, solves, seconds, gap(model.bound_ns) if solves else None
        rows = plan_rows(tables, best[1])  # the best split's counts a stage, as a hint
        hint = (tuple(o.layers for o in rows), tuple(o.recomputed for o in rows))
        sol = model.solve(left, workers, hint)
        solves += 1
        if sol is None:
            if model.status == "infeasible":  # every split's lower bound reaches the limit
                return "optimal", best, solves, seconds, gap(limit)
            return "feasible", best, solves, seconds, gap(model.bound_ns)
        seconds += sol.seconds
        est = case.evaluate(plan_layout(layout, sol.layers, sol.recomputed))
        path = check_plan(tables, est, sol.paced_ns)
        assert path is not None  # pp > 1 under either order
        total = step_ns(est)
        known = sol.key in model.known
        model.add_rest(sol.key, total - round(pipeline_ns(est)))
        new = model.add_path(path)
        if (total, est.total_bytes) < (best[0], best[1].total_bytes):
            best = (total, est)
        if total < limit:
            limit = total
            model.cutoff(limit)
        if known and not new:  # its figure is its step, to the rounding: the optimum's bound
            status = _closed(sol.status, gap(sol.bound_ns), path)
            return status, best, solves, seconds, gap(sol.bound_ns)


def _closed(status: str, gap_ns: int, path: Path) -> str:
    """``optimal`` where CP-SAT proved its optimum and the bound meets the best step to the
    passes' rounding (under a unit of :data:`~optimizer.stage_tables.PASS_UNITS` a pass on the
    optimum's ``path``, and 2 ns): wider only where the evaluator charged its upper bound on an
    interleaved order's step (:data:`model.pipeline_uneven.RUN_GROUPS`); else ``feasible``."""
    within = -(-(sum(path[0]) + sum(path[1])) // PASS_UNITS) + 2
    return "optimal" if status == "optimal" and gap_ns <= within else "feasible"
