"""The per-stage answer under the one-chunk order's own step (1F1B, :mod:`model.pipeline_onef`),
proven by bound and verify (:func:`verify_split`).

The tables' pipeline term T is the closed form ``m·t_max·(1 + (pp − 1)/m)``, an upper bound on
the step the evaluator charges on stages of unequal time, so the split best under it
(:func:`optimizer.stage_solve.solve_rests`) need not be the fastest. The step is the longest
path of the order's graph, and every path's length is linear in the stages' forward and
backward times (:mod:`model.pipeline_paths`). So, starting from that split (its step
evaluated, ``best``):

1. CP-SAT's objective becomes ``P + R`` with ``P`` at least the length of every path known
   (:meth:`optimizer.stage_cpsat.StageModel.exact_step`: the two paths per stage of
   :func:`model.pipeline_paths.onef_paths`, and the best split's own longest path, so its
   ``P`` is its step), and only splits with ``P + R`` below ``best`` are allowed
   (:meth:`~optimizer.stage_cpsat.StageModel.cutoff`);
2. each split it finds is evaluated (``evaluate()``, :func:`optimizer.stage_check.check_plan`):
   its rest (A, B, C) and its own longest path (:func:`model.pipeline_paths.critical_path`
   over its rows' passes) are added, so the model's figure for it becomes its step; a faster
   one becomes ``best`` (and the cutoff);
3. stop when none is left (infeasible: every split's lower bound reaches ``best``, proven), or
   when the split found adds nothing (its key and its path already there: the solver's
   optimum is then within the passes' rounding of ``best``, under a ns at m up to about 500:
   :data:`optimizer.stage_tables.PASS_UNITS`), or at the time limit with the gap ``best`` less
   CP-SAT's bound.

Each step adds a key or a path the model lacked, of finitely many, so the loop ends. Where
the stages take equal time the closed form is the step (:func:`model.pipeline_paths.onef_paths`'
through the last stage equals it) and the first solve proves the first answer.
"""

from __future__ import annotations

import time

from trainplan.model.estimate import Estimate
from trainplan.model.layout import Layout
from trainplan.model.pipeline_paths import Path, critical_path
from trainplan.optimizer.case import Case
from trainplan.optimizer.search import TermMismatch
from trainplan.optimizer.stage_bases import plan_layout
from trainplan.optimizer.stage_check import check_plan, pipeline_ns, plan_rows, step_ns
from trainplan.optimizer.stage_cpsat import StageModel
from trainplan.optimizer.stage_tables import PASS_UNITS, StageOption, StageTables

__all__ = ["Verified", "verify_split", "path_of"]

Verified = tuple[str, tuple[int, Estimate], int, float, int | None]
"""(status ``optimal`` or ``feasible``, (step ns, estimate) of the best split, CP-SAT solves,
their seconds, the gap in whole ns: the best step less the least any split can take, a proven
lower bound; None where the time limit left none)."""


def path_of(rows: list[StageOption], m: int, schedule: str, evaluated_ns: float) -> Path:
    """A longest path of the order over a split's ``rows``' passes
    (:func:`model.pipeline_paths.critical_path`), its length checked against ``evaluate()``'s
    pipeline term ``evaluated_ns`` (:func:`optimizer.stage_check.pipeline_ns`).

    Raises
    ------
    TermMismatch
        The rows' step differs from the evaluator's by more than their rounding (under a unit
        of :data:`~optimizer.stage_tables.PASS_UNITS` a pass) and 2 ns.
    """
    fw, bw = [o.forward for o in rows], [o.backward for o in rows]
    value, path = critical_path(len(rows), m, fw, bw, schedule)
    over = evaluated_ns * PASS_UNITS - value
    if not -2 * PASS_UNITS <= over <= sum(path[0]) + sum(path[1]) + 2 * PASS_UNITS:
        raise TermMismatch(
            f"pipeline: evaluate {evaluated_ns:.0f} ns != the rows' order {value / PASS_UNITS:.0f} ns"
        )
    return path


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
        (:func:`optimizer.stage_check.check_plan`, :func:`path_of`).
    """
    m, schedule = best[1].num_microbatches, layout.schedule.value
    model.exact_step(m, schedule)
    model.add_path(path_of(plan_rows(tables, best[1]), m, schedule, pipeline_ns(best[1])))
    limit = best[0] if cap_ns is None else min(best[0], cap_ns)
    model.cutoff(limit)
    solves, seconds = 0, 0.0

    def gap(bound: int) -> int:  # below every split: the solver's bound, or the cutoff above it
        return max(0, best[0] - min(bound, limit))

    while True:
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:  # no bound under the order's step before a solve
            return "feasible", best, solves, seconds, gap(model.bound_ns) if solves else None
        lay = best[1].layout
        assert lay.stage_layers is not None and lay.recompute_layers is not None
        hint = (tuple(lay.stage_layers), tuple(lay.recompute_layers))
        sol = model.solve(left, workers, hint)
        solves += 1
        if sol is None:
            if model.status == "infeasible":  # every split's lower bound reaches the limit
                return "optimal", best, solves, seconds, gap(limit)
            return "feasible", best, solves, seconds, gap(model.bound_ns)
        seconds += sol.seconds
        est = case.evaluate(plan_layout(layout, sol.layers, sol.recomputed))
        check_plan(tables, est, sol.paced_ns)
        total = step_ns(est)
        known = sol.key in model.known
        model.add_rest(sol.key, total - round(pipeline_ns(est)))
        rows = plan_rows(tables, est)
        new = model.add_path(path_of(rows, m, schedule, pipeline_ns(est)))
        if (total, est.total_bytes) < (best[0], best[1].total_bytes):
            best = (total, est)
        if total < limit:
            limit = total
            model.cutoff(limit)
        if known and not new:  # its figure is its step, to the rounding: the optimum's bound
            return sol.status, best, solves, seconds, gap(sol.bound_ns)
