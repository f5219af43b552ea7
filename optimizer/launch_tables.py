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

from collections.abc import Callable
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

__all__ = [
    "pipeline_tables",
    "needs_unordered",
    "objective_grid",
    "objective_divisor",
    "with_launch_order",
]

UNORDERED_ZERO = 3
"""The ZeRO stage the unordered table is tabulated at: Megatron-FSDP's
(:func:`model.launch_order.launch_order_kept`)."""


def pipeline_tables(
    c: Context, table: ShapeColumns, zs: tuple[int, ...], rs: tuple[Any, ...], legal: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t1 [N, R] with the launch order kept, t1 [N, R] without it, unordered [N, Z]) in
    seconds, for the shapes of ``table`` at the ZeRO stages ``zs`` and recompute modes ``rs``;
    ``legal`` [N, Z, R] bool: the candidates :func:`model.legality.legality` allows. Both tables
    hold 0 under a recompute mode at which no ZeRO stage is legal (not timed).

    The second table is tabulated only for the groups of shapes (those sharing the term's
    control fields: pp, framework, recompute, schedule) in which some legal candidate loses the
    order (:func:`needs_unordered`): Megatron-FSDP's rows where ZeRO 3 is legal (pp 1 only:
    :func:`model.frameworks.check_framework` models it without pipeline parallelism), every
    Megatron row before Blackwell under the expert overlap.
    Every other entry of it, read by no legal candidate, is the first table's (so where no
    candidate loses the order the second table is the first, tabulated once)."""
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
        pipeline, c, table, modifiers, lambda t: (t.total_s,), 1,
        _skip_mode(rs, np.asarray(legal.any(axis=1))), {"zero_stage": ordered_z},
    )  # fmt: skip
    need = needs_unordered(unordered, legal)
    if not need.any():
        return t1, t1, unordered
    (t1u,) = tabulate(
        pipeline, c, table, modifiers, lambda t: (t.total_s,), 1, _skip_mode(rs, need),
        {"zero_stage": UNORDERED_ZERO},
    )  # fmt: skip
    return t1, np.where(need, t1u, t1), unordered


def needs_unordered(unordered: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """[N, R] bool: whether some legal candidate (``legal`` [N, Z, R]) of the shape under the
    recompute mode runs without the launch order (``unordered`` [N, Z]), and so reads the
    second pipeline table (:func:`with_launch_order`)."""
    return np.asarray((unordered[:, :, None] & legal).any(axis=1))


def _skip_mode(
    rs: tuple[Any, ...], mask: np.ndarray
) -> Callable[[dict[str, Any], np.ndarray], bool]:
    """:func:`optimizer.columns.tabulate`'s ``skip``: a group of shapes is left 0 under a
    recompute mode where no row of it is in ``mask`` [N, R]."""
    return lambda scalars, rows: not mask[rows, rs.index(scalars["recompute"])].any()


def with_launch_order(t1: np.ndarray, t1u: np.ndarray, unordered: np.ndarray) -> np.ndarray:
    """[S, Z, R] the pipeline term each candidate reads: ``t1u`` [S, R] where ``unordered``
    [S, Z], else ``t1`` [S, R]."""
    return np.where(unordered[:, :, None], t1u[:, None, :], t1[:, None, :])


def _scaled(values: np.ndarray, f: list[Fraction]) -> np.ndarray:
    """``values`` ([S, ...], whole ns) times each shape's factor ``f[s]``, rounded."""
    rows = values.reshape(len(values), -1)
    scaled = [[round(Fraction(int(v)) * f[s]) for v in row] for s, row in enumerate(rows)]
    return np.array(scaled, dtype=np.int64).reshape(values.shape)


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
    return with_launch_order(o1, o1u, tables.unordered) + o2


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
