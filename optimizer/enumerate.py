"""Exhaustive search over the same space: the CP-SAT search's oracle.

:func:`best`, :func:`top` and :func:`pareto` scan every candidate of the cost tables with numpy
under the same rules as the solver (constraints, objective, tie-break); :func:`best_by_evaluate`
calls ``evaluate()`` on every layout — slow, used by the tests on small scenarios to prove the
tables right too.
"""

from __future__ import annotations

import numpy as np

from trainplan.model.errors import LayoutError
from trainplan.model.estimate import objective_ns
from trainplan.model.terms.peak import fit_bytes
from trainplan.optimizer.cpsat import Candidate
from trainplan.optimizer.launch_tables import objective_grid
from trainplan.optimizer.problem import Objective, Problem, model_size
from trainplan.optimizer.rules import allowed, tie_keys
from trainplan.optimizer.tables import CostTables

__all__ = ["allowed", "best", "top", "pareto", "best_by_evaluate"]


def _tie_key(tables: CostTables) -> np.ndarray:
    """[S, Z, R] every candidate's tie-break key (:func:`optimizer.rules.tie_keys`)."""
    shape = tables.fits.shape
    cells = np.indices(shape).reshape(3, -1).T
    return tie_keys(tables, cells).reshape(shape)


def _argbest(
    mask: np.ndarray, objective: np.ndarray, tie: np.ndarray
) -> tuple[Candidate, int] | None:
    if not mask.any():
        return None
    value = objective[mask].min()
    pick = mask & (objective == value)
    s, z, r = np.unravel_index(
        int(np.argmin(np.where(pick, tie, np.iinfo(np.int64).max))), mask.shape
    )
    return (int(s), int(z), int(r)), int(value)


def _objective(problem: Problem, tables: CostTables) -> np.ndarray:
    return objective_grid(problem, tables)


def best(
    problem: Problem, tables: CostTables, exclude: set[Candidate] | None = None
) -> tuple[Candidate, int] | None:
    """The allowed candidate with the least objective (the largest model first for ``params``)."""
    mask = allowed(problem, tables)
    for s, z, r in exclude or ():
        mask[s, z, r] = False
    if problem.objective is Objective.PARAMS and mask.any():
        sizes = np.array([model_size(tables.jobs[j]) for j in tables.job_of])
        size = sizes[:, None, None] * np.ones_like(mask, dtype=np.int64)
        mask &= size == size[mask].max()
    return _argbest(mask, _objective(problem, tables), _tie_key(tables))


def top(problem: Problem, tables: CostTables, k: int) -> list[tuple[Candidate, int]]:
    """The k best distinct candidates, best first."""
    out: list[tuple[Candidate, int]] = []
    seen: set[Candidate] = set()
    while len(out) < k:
        found = best(problem, tables, seen)
        if found is None:
            break
        out.append(found)
        seen.add(found[0])
    return out


def second_axis(against: str, tables: CostTables) -> np.ndarray:
    """[S, Z, R] the frontier's second axis as the solver sees it."""
    shape = tables.fits.shape
    if against == "memory":
        return tables.peak_ceil
    if against == "gpus":
        return np.broadcast_to(tables.num_gpus()[:, None, None], shape)
    cents = np.array([tables.jobs[j].cents_per_hour for j in tables.job_of])
    return np.broadcast_to(cents[:, None, None], shape)


def pareto(
    problem: Problem, tables: CostTables, against: str = "memory", max_points: int = 64
) -> list[tuple[Candidate, int]]:
    """The frontier by the solver's ε-constraint rule, exhaustively."""
    ok, obj, tie = allowed(problem, tables), _objective(problem, tables), _tie_key(tables)
    second = second_axis(against, tables)
    eps = np.iinfo(np.int64).max
    out: list[tuple[Candidate, int]] = []
    while len(out) < max_points:
        mask = ok & (second <= eps)
        if not mask.any():
            break
        t_best = obj[mask].min()
        mask &= obj <= t_best
        m_best = second[mask].min()
        mask &= second <= m_best
        found = _argbest(mask, obj, tie)
        assert found is not None
        out.append(found)
        eps = m_best - 1
    return out


def best_by_evaluate(problem: Problem, tables: CostTables) -> tuple[Candidate, int] | None:
    """Evaluate every layout of a single-job step-time problem with ``evaluate()``: the fitting
    one with the least step time (ties as the solver)."""
    job = problem.jobs[0]
    tie = _tie_key(tables)
    found = []
    for s, shape in enumerate(tables.shapes):
        for z, zero in enumerate(tables.zero_stages):
            for r, rec in enumerate(tables.recomputes):
                try:
                    est = job.case.evaluate(shape.layout(zero, rec))
                except LayoutError:
                    continue
                if est.total_bytes > tables.capacity[s] or est.time_terms is None:
                    continue
                if any(st.total_bytes > tables.capacity[s] for st in est.stages):
                    continue
                if any(
                    fit_bytes(st, tables.allocator_retries_ok) > tables.capacity[s]
                    for st in est.stages
                ):  # the reserved bytes too, unless retries are accepted (job_rows._fits)
                    continue
                found.append((sum(objective_ns(est.time_terms)), int(tie[s, z, r]), (s, z, r)))
    if not found:
        return None
    value, _, choice = min(found)
    return choice, value
