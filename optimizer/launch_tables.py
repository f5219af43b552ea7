"""The pipeline term's table under both launch orders, and the solver's objective from the tables.

The pipeline term (:func:`model.terms.step.pipeline_term`: compute, bubble and the exposed
tp/cp/ep/pp collectives) reads the recompute mode as its modifier; it reads the ZeRO stage only
through :func:`model.launch_order.launch_order_kept` — Megatron-FSDP (``megatron`` at ZeRO-3)
before Blackwell runs without ``CUDA_DEVICE_MAX_CONNECTIONS=1``, so its async tp overlap and the
cp ring's sends are not credited. So the term is tabulated once with the launch order kept
(``t1_ns``) and, where some candidate does not keep it, once more with it not kept
(``t1_unordered_ns``), and :attr:`optimizer.tables.CostTables.unordered` ``[S, Z]`` says which
of the two each (shape, ZeRO stage) reads — exactly as ``evaluate()`` reads the term at the
layout's own ZeRO stage (:func:`optimizer.search.check_against_evaluate`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from trainplan.model.launch_order import launch_order_kept
from trainplan.model.terms import term
from trainplan.model.terms.fields import Context
from trainplan.optimizer.columns import ShapeColumns, tabulate
from trainplan.optimizer.problem import Problem, objective_factor

if TYPE_CHECKING:
    from trainplan.optimizer.tables import CostTables

__all__ = ["pipeline_tables", "objective_grid", "objective_divisor", "with_launch_order"]

UNORDERED_ZERO = 3
"""The ZeRO stage the unordered table is tabulated at: Megatron-FSDP's
(:func:`model.launch_order.launch_order_kept`)."""


def pipeline_tables(
    c: Context, table: ShapeColumns, zs: tuple[int, ...], rs: tuple[Any, ...], skip: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t1 [N, R] with the launch order kept, t1 [N, R] without it, unordered [N, Z]) in
    seconds, for the shapes of ``table`` at the ZeRO stages ``zs`` and recompute modes ``rs``
    (``skip``: :func:`optimizer.tabulate`'s, the modes under which no ZeRO stage is legal).
    Where no candidate loses the order the second table is the first (not tabulated again)."""
    every = np.arange(table.n)
    part, ep = c.gpu.part, c.training.moe_run.ep_overlap
    unordered = np.zeros((table.n, len(zs)), dtype=bool)
    for i, z in enumerate(zs):
        kept = table.view(every, {"zero_stage": z}).lookup(
            launch_order_kept, (part, ep), "framework", "zero_stage"
        )
        unordered[:, i] = ~np.broadcast_to(np.asarray(kept, dtype=bool).reshape(-1), (table.n,))
    modifiers = {"recompute": tuple(rs)}
    pipeline = term("pipeline_time")
    ordered_z = next((z for z in zs if z != UNORDERED_ZERO), 0)
    (t1,) = tabulate(
        pipeline, c, table, modifiers, lambda t: (t.total_s,), 1, skip, {"zero_stage": ordered_z}
    )
    if not unordered.any():
        return t1, t1, unordered
    (t1u,) = tabulate(
        pipeline, c, table, modifiers, lambda t: (t.total_s,), 1, skip,
        {"zero_stage": UNORDERED_ZERO},
    )  # fmt: skip
    return t1, t1u, unordered


def with_launch_order(t1: np.ndarray, t1u: np.ndarray, unordered: np.ndarray) -> np.ndarray:
    """[S, Z, R] the pipeline term each candidate reads: ``t1u`` [S, R] where ``unordered``
    [S, Z], else ``t1`` [S, R]."""
    return np.where(unordered[:, :, None], t1u[:, None, :], t1[:, None, :])


def _scaled(values: np.ndarray, f: list[Fraction]) -> np.ndarray:
    return np.array(
        [[round(Fraction(int(v)) * f[s]) for v in row] for s, row in enumerate(values)],
        dtype=np.int64,
    )


def objective_grid(problem: Problem, tables: CostTables) -> np.ndarray:
    """[S, Z, R] integer objective: each candidate's time terms (its pipeline term at its
    launch order, :func:`with_launch_order`, plus its dp term) times each job's factor
    (:func:`optimizer.problem.objective_factor`), divided by the smallest power of ten that
    keeps CP-SAT's sums within 64-bit integers (the resolution is stated by
    :func:`optimizer.tables.objective_unit`)."""
    factors = [objective_factor(problem, job) for job in problem.jobs]
    scale = Fraction(1, objective_divisor(problem, tables))
    o1, o1u, o2 = tables.t1_ns, tables.t1_unordered_ns, tables.t2_ns
    if not (all(f == 1 for f in factors) and scale == 1):
        f = [factors[j] * scale for j in tables.job_of]
        o1, o1u, o2 = _scaled(o1, f), _scaled(o1u, f), _scaled(o2, f)
    return with_launch_order(o1, o1u, tables.unordered) + o2[:, :, None]


def objective_divisor(problem: Problem, tables: CostTables) -> int:
    """10^k so that the largest objective sum, times the number of terms, stays below 2^60."""
    if not tables.shapes:
        return 1
    factors = [objective_factor(problem, job) for job in problem.jobs]
    biggest = max(float(factors[j]) for j in set(tables.job_of.tolist()))
    t1 = max(tables.t1_ns.max(), tables.t1_unordered_ns.max())
    top = float(t1 + tables.t2_ns.max()) * biggest
    terms = tables.t1_ns.size + tables.t2_ns.size
    divisor = 1
    while top / divisor * terms >= 2**60:
        divisor *= 10
    return divisor
