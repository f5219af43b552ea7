"""The CP-SAT model (the only ortools import): choose one shape, one ZeRO stage and one recompute
mode; keep every pipeline stage's memory within capacity; minimise step time; then break ties.

Encoding (variables → constraints → objective → solve → read, as the CP-SAT samples):

* ``x[s]`` one Boolean per legal shape, ``zb[z]`` per ZeRO stage, ``rb[r]`` per recompute mode;
  exactly one of each.
* Memory: by default, for each shape the (ZeRO, recompute) pairs whose busiest stage overflows
  are forbidden with a clause ``¬x[s] ∨ ¬zb[z] ∨ ¬rb[r]`` (the fit itself is decided exactly by
  the tables). With ``linear_memory`` the same rule is written as capacity rows: for each shape
  and each non-dominated pipeline stage i, enforced by ``x[s]``,
  ``Σ_z zb[z]·state[s][z][i] + Σ_r rb[r]·act[s][r][i] ≤ capacity`` — linear and exact (each row is
  scaled by the common denominator of its rational byte counts). Both give the same answers; the
  clauses solve faster (the rows' huge coefficients weaken propagation).
* Objective: ``Σ T1[s][r]·y[s][r] + Σ T2[s][z]·w[s][z]`` where ``y[s][r] = x[s] ∧ rb[r]`` and
  ``w[s][z] = x[s] ∧ zb[z]`` are linearised exactly by one-hot row and column sums (tighter than
  element constraints over ``R·s + r``, which were 10× slower here).
* Second pass: fix ``t1 + t2`` to the optimum and minimise the tie-break rank
  (shape order, then recompute, then ZeRO preference) so the answer is unique and equals the
  exhaustive oracle's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ortools.sat.python import cp_model

from optimizer.tables import CostTables

__all__ = ["SolveResult", "solve"]

_INT64 = 2**62


@dataclass(frozen=True, slots=True)
class SolveResult:
    """What CP-SAT returned."""

    status: str
    """``optimal``, ``feasible`` (time limit hit; not proven) or ``infeasible``."""
    choice: tuple[int, int, int] | None
    """(shape index, zero index, recompute index) of the answer."""
    objective_ns: int | None
    solve_seconds: float


def _scaled_row(
    state: tuple[Fraction, ...], act: tuple[Fraction, ...], cap: int
) -> tuple[list[int], list[int], int]:
    den = math.lcm(*(v.denominator for v in state + act))
    if max(max(state), max(act), Fraction(cap)) * den >= _INT64:  # too large to scale exactly
        return [math.ceil(v) for v in state], [math.ceil(v) for v in act], cap
    return [int(v * den) for v in state], [int(v * den) for v in act], cap * den


def _stage_rows(tables: CostTables, s: int) -> list[int]:
    """Stages of shape s whose memory row is not dominated by another stage's."""
    n = len(tables.state[s][0])
    vec = [
        tuple(tables.state[s][z][i] for z in range(len(tables.zero_stages)))
        + tuple(tables.act[s][r][i] for r in range(len(tables.recomputes)))
        for i in range(n)
    ]
    keep = []
    for i in range(n):
        dominated = any(
            j != i
            and all(a >= b for a, b in zip(vec[j], vec[i], strict=True))
            and (vec[j] != vec[i] or j < i)
            for j in range(n)
        )
        if not dominated:
            keep.append(i)
    return keep


def _build(
    tables: CostTables, linear_memory: bool = False
) -> tuple[cp_model.CpModel, list, list, list, cp_model.IntVar]:
    model = cp_model.CpModel()
    S, Z, R = len(tables.shapes), len(tables.zero_stages), len(tables.recomputes)
    x = [model.new_bool_var(f"shape{s}") for s in range(S)]
    zb = [model.new_bool_var(f"zero{z}") for z in range(Z)]
    rb = [model.new_bool_var(f"recompute{r}") for r in range(R)]
    for group in (x, zb, rb):
        model.add_exactly_one(group)
    for s in range(S):
        if linear_memory:
            for i in _stage_rows(tables, s):
                st, ac, cap = _scaled_row(
                    tuple(tables.state[s][z][i] for z in range(Z)),
                    tuple(tables.act[s][r][i] for r in range(R)),
                    tables.capacity_bytes,
                )
                model.add(
                    sum(c * b for c, b in zip(st, zb, strict=True))
                    + sum(c * b for c, b in zip(ac, rb, strict=True))
                    <= cap
                ).only_enforce_if(x[s])
            continue
        fitting = [(z, r) for z in range(Z) for r in range(R) if tables.fits(s, z, r)]
        if not fitting:
            model.add(x[s] == 0)
            continue
        for z in range(Z):
            for r in range(R):
                if (z, r) not in fitting:
                    model.add_bool_or([x[s].Not(), zb[z].Not(), rb[r].Not()])
    # y[s][r] = x[s] ∧ rb[r] and w[s][z] = x[s] ∧ zb[z], linearised exactly (one-hot rows and
    # columns), so each objective term is a linear sum with a tight LP relaxation.
    y = [[model.new_bool_var(f"y{s}_{r}") for r in range(R)] for s in range(S)]
    w = [[model.new_bool_var(f"w{s}_{z}") for z in range(Z)] for s in range(S)]
    for s in range(S):
        model.add(sum(y[s]) == x[s])
        model.add(sum(w[s]) == x[s])
    for r in range(R):
        model.add(sum(y[s][r] for s in range(S)) == rb[r])
    for z in range(Z):
        model.add(sum(w[s][z] for s in range(S)) == zb[z])
    flat1 = [v for row in tables.t1_ns for v in row]
    flat2 = [v for row in tables.t2_ns for v in row]
    total = model.new_int_var(min(flat1) + min(flat2), max(flat1) + max(flat2), "step_ns")
    model.add(
        total
        == sum(tables.t1_ns[s][r] * y[s][r] for s in range(S) for r in range(R))
        + sum(tables.t2_ns[s][z] * w[s][z] for s in range(S) for z in range(Z))
    )
    return model, x, zb, rb, total


def _solver(time_limit_s: float | None, workers: int) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = 0
    if time_limit_s:
        solver.parameters.max_time_in_seconds = time_limit_s
    return solver


def solve(
    tables: CostTables,
    tie_rank_zero: list[int],
    tie_rank_recompute: list[int],
    time_limit_s: float | None = None,
    workers: int = 2,
    linear_memory: bool = False,
) -> SolveResult:
    """Minimise step time over the tables, then the tie-break rank among equal step times.

    ``tie_rank_zero[z]`` and ``tie_rank_recompute[r]`` rank the modifiers (0 = preferred); shapes
    are ranked by their order in ``tables.shapes``.
    """
    model, x, zb, rb, total = _build(tables, linear_memory)
    model.minimize(total)
    solver = _solver(time_limit_s, workers)
    status = solver.solve(model)
    seconds = solver.wall_time
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        name = "infeasible" if status == cp_model.INFEASIBLE else "unknown"
        return SolveResult(name, None, None, seconds)
    best = int(solver.value(total))
    proven = status == cp_model.OPTIMAL
    model.add(total <= best)
    Z, R = len(zb), len(rb)
    model.minimize(
        sum(s * Z * R * x[s] for s in range(len(x)))
        + sum(tie_rank_recompute[r] * Z * rb[r] for r in range(R))
        + sum(tie_rank_zero[z] * zb[z] for z in range(Z))
    )
    for group in (x, zb, rb):
        for var in group:
            model.add_hint(var, solver.boolean_value(var))
    solver2 = _solver(time_limit_s, workers)
    status2 = solver2.solve(model)
    seconds += solver2.wall_time
    sol = solver2 if status2 in (cp_model.OPTIMAL, cp_model.FEASIBLE) else solver
    proven = proven and status2 == cp_model.OPTIMAL
    pick = lambda group: next(i for i, v in enumerate(group) if sol.boolean_value(v))  # noqa: E731
    return SolveResult(
        "optimal" if proven else "feasible",
        (pick(x), pick(zb), pick(rb)),
        int(sol.value(total)),
        seconds,
    )
