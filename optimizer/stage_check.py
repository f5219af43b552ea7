"""What the per-stage search checks its answers by (issue 13): each split it chooses is
re-evaluated with ``evaluate()``, and every tabulated figure must agree with the evaluation
(:func:`check_plan`; a figure that differs raises :class:`optimizer.search.TermMismatch`): the
rows a split stands on (:func:`plan_rows`), the evaluator's own pipeline term
(:func:`pipeline_ns`) and the step as the searches compare it (:func:`step_ns`).
"""

from __future__ import annotations

import math

from trainplan.model.estimate import Estimate, objective_ns
from trainplan.model.interleaved_paths import MOST_PASSES
from trainplan.model.interleaved_paths import critical_path as interleaved_path
from trainplan.model.layout import Layout
from trainplan.model.pipeline_onef import one_chunk
from trainplan.model.pipeline_paths import Path, critical_path
from trainplan.model.pipeline_report import interleaved_order
from trainplan.model.pipeline_uneven import RUN_GROUPS
from trainplan.optimizer.search import TermMismatch
from trainplan.optimizer.stage_rules import start_residue
from trainplan.optimizer.stage_tables import PASS_UNITS, StageOption, StageTables

__all__ = ["step_ns", "plan_rows", "check_plan", "order_path", "walked", "pipeline_ns"]


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


def check_plan(tables: StageTables, est: Estimate, paced_ns: int) -> Path | None:
    """Every stage's tabulated peak and the pipeline term of a per-stage solution agree with
    ``evaluate()``'s ``est`` of its layout (bytes to a byte after rounding up, time to 2 ns and
    the passes' rounding; :func:`plan_rows`): the solver's ``paced_ns`` (T, the closed form over
    the slowest stage) is the rows' own, and the order run over the rows' passes is the
    evaluator's pipeline term (:func:`order_path`, in both directions). Under 1F1B the closed
    form T bounds that step from above too (:mod:`model.pipeline_onef`); interleaved it neither
    equals nor bounds it (:mod:`model.pipeline_uneven`), but the step is never under the
    slowest rank's own m micro-batches, T/(1 + (pp − 1)/(v·m)): checked there too, and alone
    past :func:`walked`. Returns the rows' longest path (:func:`order_path`; None where the
    search walks no order, :func:`walked`).

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
    evaluated, lay = pipeline_ns(est), est.layout
    onef, ordered = one_chunk(lay.schedule, lay.pp), interleaved_order(lay.schedule, lay.pp)
    over = evaluated - paced_ns
    if ordered:  # never under the slowest rank's own m micro-batches, T/(1 + (pp − 1)/(v·m))
        busy = paced_ns / (1 + (lay.pp - 1) / (lay.virtual_stages * est.num_microbatches))
        over = min(evaluated - busy, 0.0)
    if over > 2 or (over < -2 and not onef):
        raise TermMismatch(f"pipeline term: evaluate {evaluated:.0f} ns != table {paced_ns} ns")
    return order_path(tables, est, rows)[1] if walked(lay, est.num_microbatches) else None


def walked(lay: Layout, m: int) -> bool:
    """Whether the per-stage search walks the order of ``lay`` on ``m`` micro-batches for its
    paths (:func:`order_path`): 1F1B's at pp > 1, interleaved's at pp > 1 up to
    :data:`model.interleaved_paths.MOST_PASSES` passes (2·pp·v·m); not at pp 1, where the
    closed form is the step."""
    if one_chunk(lay.schedule, lay.pp):
        return True
    v = lay.virtual_stages
    return interleaved_order(lay.schedule, lay.pp) and 2 * lay.pp * v * m <= MOST_PASSES


def order_path(
    tables: StageTables, est: Estimate, rows: list[StageOption] | None = None
) -> tuple[float, Path]:
    """(the step in :data:`~optimizer.stage_tables.PASS_UNITS`, a longest path) of the order
    ``est``'s layout runs, over its rows' passes (:func:`plan_rows`,
    :meth:`~optimizer.stage_option.StageOption.passes`): the one-chunk order's over the stages
    (:func:`model.pipeline_paths.critical_path`) or, interleaved, Megatron-Core's over the
    chunks (:func:`model.interleaved_paths.critical_path`), checked against ``evaluate()``'s
    pipeline term (:func:`pipeline_ns`) both ways: never above it by more than 2 ns, never
    under it by more than the rows' rounding (under a unit a pass on the path) and 2 ns — save
    interleaved beyond :data:`model.pipeline_uneven.RUN_GROUPS`' last run of groups of pp
    micro-batches, where the evaluator may charge its proven upper bound on the order's step.
    ``rows``: :func:`plan_rows`' (found again when None).

    Raises
    ------
    TermMismatch
        The rows' step outside those bounds.
    """
    lay, m = est.layout, est.num_microbatches
    passes = [row.passes() for row in (plan_rows(tables, est) if rows is None else rows)]
    fw = [x for f, _ in passes for x in f]
    bw = [x for _, b in passes for x in b]
    if interleaved_order(lay.schedule, lay.pp):
        value, path = interleaved_path(lay.pp, lay.virtual_stages, m, fw, bw)
        waived = m > RUN_GROUPS[1] * lay.pp  # the evaluator's figure may be its upper bound
    else:
        value, path = critical_path(lay.pp, m, fw, bw, lay.schedule.value)
        waived = False
    evaluated = pipeline_ns(est)
    over = evaluated * PASS_UNITS - value
    slack = sum(path[0]) + sum(path[1]) + 2 * PASS_UNITS  # a unit a pass, and 2 ns
    if over < -2 * PASS_UNITS or (over > slack and not waived):
        raise TermMismatch(
            f"pipeline: evaluate {evaluated:.0f} ns != the rows' order {value / PASS_UNITS:.0f} ns"
        )
    return value, path


def pipeline_ns(est: Estimate) -> float:
    """The evaluator's own pipeline term of ``est``, ns: the section's passes and bubble,
    ``compute_and_pipeline`` less the exposed pipeline messages
    (:func:`model.terms.step.schedule_span`)."""
    assert est.time_terms is not None
    pp_row = next(r for r in est.traffic if r.traffic.axis == "pp")
    return (est.time_terms.compute_and_pipeline_s - (pp_row.exposed_seconds or 0.0)) * 1e9
