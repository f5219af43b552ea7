"""What the per-stage search checks its answers by (issue 13): each split it chooses is
re-evaluated with ``evaluate()``, and every tabulated figure must agree with the evaluation
(:func:`check_plan`; a figure that differs raises :class:`optimizer.search.TermMismatch`): the
rows a split stands on (:func:`plan_rows`), the evaluator's own pipeline term
(:func:`pipeline_ns`) and the step as the searches compare it (:func:`step_ns`).
"""

from __future__ import annotations

import math

from trainplan.model.estimate import Estimate, objective_ns
from trainplan.model.pipeline_onef import one_chunk
from trainplan.model.pipeline_report import interleaved_order
from trainplan.optimizer.search import TermMismatch
from trainplan.optimizer.stage_rules import start_residue
from trainplan.optimizer.stage_tables import StageOption, StageTables

__all__ = ["step_ns", "plan_rows", "check_plan", "pipeline_ns"]


def step_ns(est: Estimate) -> int:
    """An evaluated layout's step time in whole ns, as the searches compare it: the sum of
    :func:`model.estimate.objective_ns`'s two terms."""
    assert est.time_terms is not None
    return sum(objective_ns(est.time_terms))


def plan_rows(tables: StageTables, est: Estimate) -> list[StageOption]:
    """Each stage's row of ``tables`` that ``est``'s layout (a per-stage plan: ``stage_layers``
    and ``recompute_layers`` set) stands on: its start within the period of spans, layers (the
    last stage's multi-token-prediction blocks left out) and recomputed count.

    Raises
    ------
    TermMismatch
        A stage with no such row, or whose row's peak differs from the evaluated one by more
        than a byte after rounding up.
    """
    options = {
        (s, o.residue, o.layers, o.recomputed): o
        for s, rows in enumerate(tables.options)
        for o in rows
    }
    lay = est.layout
    assert lay.stage_layers is not None and lay.recompute_layers is not None
    found = []
    arch = est.model.arch
    mtp = arch.mtp_layers if arch is not None else 0
    start, L, pp = 0, tables.num_layers, lay.pp
    for s, stage in enumerate(est.stages):
        layers = stage.num_layers - (mtp if s == lay.pp - 1 else 0)  # the MTP blocks ride along
        residue = start_residue(
            s, pp, start, layers, L, tables.prefix, tables.period, lay.virtual_stages
        )
        start += layers
        row = options.get((s, residue, layers, lay.recompute_layers[s]))
        if row is None or abs(math.ceil(stage.total_bytes) - row.peak_bytes) > 1:
            raise TermMismatch(f"stage {s}: evaluate {stage.total_bytes} B != table {row}")
        found.append(row)
    return found


def check_plan(tables: StageTables, est: Estimate, paced_ns: int) -> None:
    """Every stage's tabulated peak and the pipeline term of a per-stage solution (``paced_ns``,
    the solver's) agree with ``evaluate()``'s ``est`` of its layout (bytes to a byte after
    rounding up, time to 2 ns; :func:`plan_rows`).

    Raises
    ------
    TermMismatch
        A tabulated figure that differs, or a stage tabulated as fitting that does not.
    """
    rows = plan_rows(tables, est)
    for s, stage in enumerate(est.stages):
        if not tables.within(stage):
            raise TermMismatch(f"stage {s}: tabulated as fitting, evaluates to a misfit")
    paced = [row.paced_ns for row in rows]
    if max(paced) != paced_ns:
        raise TermMismatch(f"pipeline term: table {max(paced)} != solver {paced_ns}")
    evaluated = pipeline_ns(est)
    lay = est.layout
    # under 1F1B the closed form bounds the order's step from above (model.pipeline_onef);
    # interleaved the order's step (model.pipeline_uneven) is neither the closed form nor below
    # it, but never under the slowest rank's m micro-batches, T/(1 + (pp − 1)/(v·m))
    over = evaluated - paced_ns
    if interleaved_order(lay.schedule, lay.pp):
        busy = paced_ns / (1 + (lay.pp - 1) / (lay.virtual_stages * est.num_microbatches))
        over = min(evaluated - busy, 0.0)
    if over > 2 or (over < -2 and not one_chunk(lay.schedule, lay.pp)):
        raise TermMismatch(f"pipeline term: evaluate {evaluated:.0f} ns != table {paced_ns} ns")


def pipeline_ns(est: Estimate) -> float:
    """The evaluator's own pipeline term of ``est``, ns: the section's passes and bubble,
    ``compute_and_pipeline`` less the exposed pipeline messages
    (:func:`model.terms.step.schedule_span`)."""
    assert est.time_terms is not None
    pp_row = next(r for r in est.traffic if r.traffic.axis == "pp")
    return (est.time_terms.compute_and_pipeline_s - (pp_row.exposed_seconds or 0.0)) * 1e9
