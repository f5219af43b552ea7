"""Exhaustive search over the same space: the CP-SAT search's oracle.

Two oracles: :func:`best_from_tables` scans the cost tables (numpy, every candidate), and
:func:`best_by_evaluate` calls ``evaluate()`` on every full layout — slow, used by the tests on
small scenarios to prove the tables and the solver right.
"""

from __future__ import annotations

import numpy as np

from model.errors import LayoutError
from optimizer.inputs import Case
from optimizer.space import Shape
from optimizer.tables import CostTables

__all__ = ["best_from_tables", "best_by_evaluate", "Candidate"]

Candidate = tuple[int, int, int]
"""(shape index, zero index, recompute index)."""


def _tie(s: int, z: int, r: int, zero_rank: list[int], rec_rank: list[int]) -> tuple[int, int, int]:
    return (s, rec_rank[r], zero_rank[z])


def best_from_tables(
    tables: CostTables, zero_rank: list[int], rec_rank: list[int]
) -> tuple[Candidate, int] | None:
    """The fitting candidate with the least step time, ties broken as the solver does."""
    S, Z, R = len(tables.shapes), len(tables.zero_stages), len(tables.recomputes)
    t = (
        np.array(tables.t1_ns, dtype=np.int64)[:, None, :]
        + np.array(tables.t2_ns, dtype=np.int64)[:, :, None]
    )
    fits = np.array(
        [[[tables.fits(s, z, r) for r in range(R)] for z in range(Z)] for s in range(S)], dtype=bool
    )
    if not fits.any():
        return None
    best = int(t[fits].min())
    ties = [(s, z, r) for s, z, r in zip(*np.nonzero(fits & (t == best)), strict=True)]
    s, z, r = min(
        ((int(s), int(z), int(r)) for s, z, r in ties), key=lambda c: _tie(*c, zero_rank, rec_rank)
    )
    return (s, z, r), best


def best_by_evaluate(
    case: Case,
    shapes: list[Shape],
    zero_stages: tuple[int, ...],
    recomputes: tuple,
    zero_rank: list[int],
    rec_rank: list[int],
) -> tuple[Candidate, int] | None:
    """Evaluate every layout with ``evaluate()``; the fitting one with the least step time."""
    from model.estimate import objective_ns

    found: list[tuple[int, tuple[int, int, int], Candidate]] = []
    for s, shape in enumerate(shapes):
        for z, zero in enumerate(zero_stages):
            for r, rec in enumerate(recomputes):
                try:
                    est = case.evaluate(shape.layout(zero, rec))
                except LayoutError:
                    continue
                if not est.fits or est.time_terms is None:
                    continue
                found.append(
                    (
                        sum(objective_ns(est.time_terms)),
                        _tie(s, z, r, zero_rank, rec_rank),
                        (s, z, r),
                    )
                )
    if not found:
        return None
    obj, _, cand = min(found)
    return cand, obj
