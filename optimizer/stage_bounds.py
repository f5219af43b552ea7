"""Lower bounds of the per-stage search (issue 13): the least pipeline term any split of a shape
can reach (:func:`pipeline_lower_bound`), each stage at its fastest and at most the most layers
it can hold fully recomputed (:func:`fit_most`), so :mod:`optimizer.per_stage` skips a shape
that cannot beat the best plan so far before building its tables
(:mod:`optimizer.stage_tables`). Both read the tables' own per-stage figures
(:func:`optimizer.stage_view.stage_context`), wherever a stage can start within the period
of the model's attention spans and FFN kinds (:meth:`optimizer.stage_view.StageView.starts`)."""

from __future__ import annotations

from typing import Any

from trainplan.model.layout import Layout
from trainplan.optimizer.case import Case
from trainplan.optimizer.gallop import most_that_fits
from trainplan.optimizer.stage_rules import most_recomputed
from trainplan.optimizer.stage_view import stage_context

__all__ = ["NO_SPLIT", "pipeline_lower_bound", "fit_most"]

NO_SPLIT = 2**62
""":func:`pipeline_lower_bound` of a shape where no split fits at all (whole ns)."""


def fit_most(sc: Any, layout: Layout, capacity: int) -> list[int] | None:
    """The most layers each stage of the tables' view ``sc``
    (:func:`optimizer.stage_view.stage_context`) can hold fully recomputed within
    ``capacity`` bytes per GPU, the most over the places it can start within the period of
    spans (bisection over n from each start, beginning at the previous stage's count); None
    where the stages cannot hold the model's L layers between them. By the allocated peak
    (:attr:`~model.terms.peak.StageMemory.total_bytes`): never more than the reserved bytes, so
    the counts stay an upper bound (and the time a lower bound) under either fit rule
    (:func:`model.terms.peak.fit_bytes`)."""
    L, pp, v = sc.num_layers, layout.pp, layout.virtual_stages
    most = [L] * pp
    for stage in range(pp):
        found = -1
        for start in sc.starts(stage):

            def fits(n: int, stage: int = stage, start: int = start) -> bool:
                k = most_recomputed(n, v, sc.recomputes)
                return sc.memory(stage, n, k, start).total_bytes <= capacity

            if pp == 1:  # one stage holds all L layers
                if not fits(L):
                    return None
                found = L
                continue
            top = sc.counts(stage, start)[-1]
            guess = most[stage - 1] if stage else L // pp
            found = max(found, most_that_fits(fits, top, guess))
        most[stage] = found
        if found < 0:
            return None
    return most if sum(most) >= L else None


def pipeline_lower_bound(case: Case, layout: Layout, capacity: int | None = None) -> int:
    """A lower bound on the pipeline term ``T`` of any per-stage plan of ``layout``'s shape, in
    whole ns: the least T such that the stages, each at its fastest for n layers (nothing
    recomputed: recomputation only adds time; the fastest start within the period of spans),
    can hold L layers between them with every stage's paced time ≤ T. With ``capacity`` (bytes
    per GPU) a stage takes at most the most layers that fit it fully recomputed
    (:func:`fit_most`), and a shape where these cannot hold L layers gets :data:`NO_SPLIT`.
    The search skips a shape whose bound plus the rest's lower bound cannot beat the best plan
    so far.

    Raises
    ------
    InputError
        :func:`optimizer.stage_rules.check_per_stage`'s rules.
    """
    sc = stage_context(case, layout)
    L, pp = sc.num_layers, layout.pp
    most: list[int] | None = [L] * pp
    if capacity is not None:
        most = fit_most(sc, layout, capacity)
        if most is None:
            return NO_SPLIT
    assert most is not None
    by_role: dict[tuple[bool, bool], list[int]] = {}
    fastest: list[list[int]] = []
    counts = [L] if pp == 1 else list(range(L + 1))
    for stage in range(pp):
        role = (stage == 0, stage == pp - 1)  # a stage's time reads only its ends and layers
        if role not in by_role:
            row = [NO_SPLIT] * len(counts)
            for start in sc.starts(stage):
                allowed = sc.counts(stage, start)
                for i, n in enumerate(counts):
                    if n in allowed:
                        t = sc.paced(stage, n, 0, layout.recompute, start)[2]
                        row[i] = min(row[i], t)
            by_role[role] = row
        fastest.append(by_role[role])
    if pp == 1:
        return fastest[0][0]
    candidates = sorted({t for row in fastest for t in row})

    def holds(t: int) -> bool:  # the most layers each stage can take within t, together ≥ L
        return (
            sum(
                max((n for n, x in enumerate(row[: top + 1]) if x <= t), default=-1)
                for row, top in zip(fastest, most, strict=True)
            )
            >= L
        )

    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(candidates[mid]):
            hi = mid
        else:
            lo = mid + 1
    return candidates[lo]
