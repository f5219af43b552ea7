"""Why a layout search has no answer, in the user's words: the constraint families in CP-SAT's
infeasible core (:func:`explain`), no legal candidate (:func:`nothing_legal`), or a time limit that
stopped CP-SAT before its first answer (:func:`no_answer`)."""

from __future__ import annotations

import numpy as np

from trainplan.model.errors import InfeasibleError
from trainplan.optimizer.cpsat import LayoutModel
from trainplan.optimizer.problem import Problem, fit_rule
from trainplan.optimizer.rules import mfu_table
from trainplan.optimizer.tables import CostTables

__all__ = ["explain", "no_answer", "nothing_legal"]


def _nothing_fits(tables: CostTables, retried: np.ndarray) -> list[str]:
    """The memory lines where no candidate fits: the least any needs, or where some fit by the
    allocated peak alone (``retried`` [S, Z, R]) the search's memory rule."""
    top = np.iinfo(np.int64).max
    peak = np.where(tables.legal, tables.peak_ceil, top)
    s, z, r = np.unravel_index(int(np.argmin(peak)), peak.shape)
    sh, cap = tables.shapes[s], int(tables.capacity[s])
    which = (
        f"dp {sh.dp}, tp {sh.tp}, pp {sh.pp}, cp {sh.cp}, ep {sh.ep}, "
        f"b {sh.micro_batch_size}, {sh.schedule}, {sh.framework} ZeRO-{tables.zero_stages[z]}, "
        f"recompute {tables.recomputes[r]}"
    )
    if retried.any():
        return [
            f"memory: no layout's reserved bytes fit {cap / 1e9:,.2f} GB per GPU; "
            f"{int(retried.sum()):,} fit by the allocated peak alone (the least "
            f"{peak[s, z, r] / 1e9:,.2f} GB: {which}) and would run with allocator retries",
            fit_rule(False),
        ]
    return [
        f"memory: no layout fits {cap / 1e9:,.2f} GB per GPU; the least any candidate needs is "
        f"{peak[s, z, r] / 1e9:,.2f} GB ({which}); try more GPUs, a larger accelerator, a shorter "
        "sequence or higher tp/pp/cp"
    ]


def explain(problem: Problem, tables: CostTables, lm: LayoutModel) -> list[str]:
    """One line per constraint family in CP-SAT's infeasible core, the user's own constraints
    (min_mfu, nvlink) first — so the message names the constraint the user set — and memory last;
    memory says "no layout fits" only when that is so. With one family or none, the core is that
    family (or empty, read as it): :meth:`LayoutModel.explain`'s one-worker solve is skipped."""
    one = len(lm.families) <= 1
    blocking = list(lm.families) if one else (lm.explain() or list(lm.families))
    blocking = sorted(blocking, key=lambda family: family == "memory")
    fits = tables.fits
    # legal candidates whose allocated peak fits but whose reserved bytes do not (job_rows._fits)
    retried = tables.legal & (tables.peak_ceil <= tables.capacity[:, None, None]) & ~fits
    retried &= not tables.allocator_retries_ok
    out = []
    for family in blocking:
        if family == "memory" and not fits.any():
            out += _nothing_fits(tables, retried)
        elif family == "memory":
            others = " and ".join(f for f in blocking if f != "memory")
            out.append(
                f"memory: {int(fits.sum()):,} of {fits.size:,} candidates fit in "
                f"{int(tables.capacity.max()) / 1e9:,.2f} GB per GPU, but none of them meets {others}"
            )
            if retried.any():
                out.append(fit_rule(False))
        elif family == "min_mfu":
            mfu = mfu_table(tables)
            best, where = (
                (np.where(fits, mfu, 0).max(), "that fits")
                if fits.any()
                else (
                    mfu.max(),
                    "(none fits)",
                )
            )
            out.append(
                f"min_mfu: the best MFU of any layout {where} is {best:.1%}, below the "
                f"min_mfu of {problem.constraints.min_mfu:.1%} asked for; lower --min-mfu"
            )
        elif family == "nvlink":
            out.append(
                "nvlink: no layout with tp·cp within one NVLink domain fits the other constraints"
            )
    if len(blocking) > 1:
        out.append(
            "together: " + " + ".join(blocking) + " leave no layout (each alone may allow one)"
        )
    return out


def nothing_legal(problem: Problem) -> InfeasibleError:
    """The refusal when no candidate of any job is legal (:attr:`CostTables.legal`): with
    offload, the usual cause is the host's share beyond its memory (``pk.host_fits``)."""
    offload = any(job.case.training.offload.active for job in problem.jobs)
    why = (
        "with offload, every candidate's host share exceeds the host memory or breaks a framework "
        "rule; offload less, use more GPUs, or see `trainplan evaluate` of one layout for which"
        if offload
        else "every candidate breaks a framework rule; `trainplan evaluate` of one layout names it"
    )
    return InfeasibleError(f"search: no layout is legal: {why}", [why])


def no_answer(
    kind: str, problem: Problem, tables: CostTables, lm: LayoutModel, status: str
) -> InfeasibleError:
    """Why a ``kind`` (search, frontier) has no first answer: CP-SAT stopped at the time limit
    before finding one (``status`` unknown: exit 1 with the way out, not a claim that nothing
    fits), or the constraints that leave none (:func:`explain`); tables a time limit cut short
    (:meth:`CostTables.cut`; cut only once they hold an allowed candidate, so CP-SAT's time ran
    out) prove nothing either: exit 1 with the way out too."""
    if status == "unknown" or not tables.complete:
        stopped = f"CP-SAT stopped without an answer ({lm.model.validate() or 'time limit'})"
        cut = f"; {tables.cut()}" if not tables.complete else ""
        return InfeasibleError(
            f"{kind}: {stopped}{cut}; give a longer --time-limit",
            ["solver: no answer within the limits"],
            status="unknown",
        )
    explanation = explain(problem, tables, lm)
    return InfeasibleError(
        f"{kind}: no layout satisfies the constraints. " + explanation[0], explanation
    )
