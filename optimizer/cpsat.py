"""The CP-SAT model (the only ortools import): pick one shape (of one job), one ZeRO stage and
one recompute mode; keep every pipeline stage within memory; minimise the objective.

Encoding (variables → constraints → objective → solve → read, as the CP-SAT samples):

* ``x[s]`` one Boolean per legal shape (of every job), ``zb[z]`` per ZeRO stage, ``rb[r]`` per
  recompute mode; exactly one of each.
* ``y[s][r] = x[s] ∧ rb[r]`` and ``w[s][z] = x[s] ∧ zb[z]``, linearised exactly by one-hot row
  and column sums, so every objective term is a linear sum with a tight LP relaxation (element
  constraints over ``R·s + r`` were 10× slower).
* Candidates that break a constraint family (memory; minimum MFU; tp·cp within NVLink; a
  frontier's ε bound) are forbidden by clauses ``¬x[s] ∨ ¬zb[z] ∨ ¬rb[r] ∨ ¬a_family``: the
  rule itself is decided exactly by the tables, and the family's literal ``a`` lets CP-SAT explain
  infeasibility with assumptions (:meth:`LayoutModel.explain`).
* Objective ``Σ O1[s][r]·y[s][r] + Σ O2[s][z]·w[s][z]``; the peak memory (for the frontier) is an
  integer M with one row per stage index i: ``M ≥ Σ state[s][z][i]·w[s][z] + Σ act[s][r][i]·y[s][r]``.
* Ties: a later pass fixes the optimum and minimises the tie-break rank (shape order, then
  recompute, then ZeRO preference), so the answer is unique and equals the exhaustive oracle's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from trainplan.optimizer.tables import CostTables

__all__ = ["LayoutModel", "SolveResult", "Candidate"]

Candidate = tuple[int, int, int]
"""(shape index, zero index, recompute index)."""


@dataclass(frozen=True, slots=True)
class SolveResult:
    status: str
    """``optimal``, ``feasible`` (stopped by the time limit; not proven), ``infeasible``, ``unknown``."""
    choice: Candidate | None
    value: int | None
    seconds: float


class _Progress(cp_model.CpSolverSolutionCallback):
    def __init__(self, report: Callable[[int, float], None]) -> None:
        super().__init__()
        self._report, self._count = report, 0

    def on_solution_callback(self) -> None:
        self._count += 1
        self._report(self._count, self.objective_value)


class LayoutModel:
    """One CP-SAT model over the tables; constraints and objectives are added by the search."""

    def __init__(
        self, tables: CostTables, o1: np.ndarray, o2: np.ndarray, keep: np.ndarray | None = None
    ) -> None:
        """``keep[s]`` False fixes shape s out of the model (used when a candidate is known to be
        allowed elsewhere, to drop shapes none of whose candidates is allowed)."""
        self.tables = tables
        S, Z, R = len(tables.shapes), len(tables.zero_stages), len(tables.recomputes)
        self.S, self.Z, self.R = S, Z, R
        self.keep = np.ones(S, dtype=bool) if keep is None else keep
        m = self.model = cp_model.CpModel()
        self.x = [m.new_bool_var(f"shape{s}") for s in range(S)]
        for dropped in np.nonzero(~self.keep)[0]:
            m.add(self.x[int(dropped)] == 0)
        kept = [int(s) for s in np.nonzero(self.keep)[0]]
        self.zb = [m.new_bool_var(f"zero{z}") for z in range(Z)]
        self.rb = [m.new_bool_var(f"recompute{r}") for r in range(R)]
        for group in (self.x, self.zb, self.rb):
            m.add_exactly_one(group)
        self.kept = kept
        self.y = {s: [m.new_bool_var(f"y{s}_{r}") for r in range(R)] for s in kept}
        self.w = {s: [m.new_bool_var(f"w{s}_{z}") for z in range(Z)] for s in kept}
        for s in kept:
            m.add(sum(self.y[s]) == self.x[s])
            m.add(sum(self.w[s]) == self.x[s])
        for r in range(R):
            m.add(sum(self.y[s][r] for s in kept) == self.rb[r])
        for z in range(Z):
            m.add(sum(self.w[s][z] for s in kept) == self.zb[z])
        lo = int(o1[kept].min() + o2[kept].min()) if kept else 0
        hi = int(o1[kept].max() + o2[kept].max()) if kept else 0
        self.objective = m.new_int_var(lo, hi, "objective")
        m.add(
            self.objective
            == sum(int(o1[s, r]) * self.y[s][r] for s in kept for r in range(R))
            + sum(int(o2[s, z]) * self.w[s][z] for s in kept for z in range(Z))
        )
        self.families: dict[str, cp_model.IntVar] = {}
        self._memory: cp_model.IntVar | None = None

    # ---------------------------------------------------------------- constraint families
    def forbid(self, family: str, mask: np.ndarray) -> None:
        """Forbid every candidate where ``mask[s, z, r]`` is True, under the family's literal."""
        lit = self.families.get(family)
        if lit is None:
            lit = self.families[family] = self.model.new_bool_var(f"family_{family}")
        for s, z, r in zip(*np.nonzero(mask & self.keep[:, None, None]), strict=True):
            self.model.add_bool_or([self.x[s].Not(), self.zb[z].Not(), self.rb[r].Not(), lit.Not()])

    def forbid_pairs(self, mask: np.ndarray) -> None:
        """Forbid every (shape, ZeRO stage) where ``mask[s, z]`` is True, unconditionally (a stage
        the shape's framework does not have: not a constraint family to explain)."""
        for s, z in zip(*np.nonzero(mask & self.keep[:, None]), strict=True):
            self.model.add_bool_or([self.x[s].Not(), self.zb[z].Not()])

    def forbid_shapes(self, family: str, shapes: Sequence[int]) -> None:
        """Forbid whole shapes under the family's literal."""
        lit = self.families.get(family)
        if lit is None:
            lit = self.families[family] = self.model.new_bool_var(f"family_{family}")
        for s in shapes:
            if self.keep[s]:
                self.model.add_bool_or([self.x[s].Not(), lit.Not()])

    def exclude(self, choice: Candidate) -> None:
        """No-good: never this candidate again (top-k)."""
        s, z, r = choice
        self.model.add_bool_or([self.x[s].Not(), self.zb[z].Not(), self.rb[r].Not()])

    # ---------------------------------------------------------------- expressions
    def memory(self) -> cp_model.IntVar:
        """M ≥ every stage's rounded-up bytes of the chosen candidate (exact for the ceil'd table)."""
        if self._memory is None:
            t = self.tables
            self._memory = self.model.new_int_var(
                0, int(t.peak_ceil.max()) if self.S else 0, "peak_bytes"
            )
            for i in range(t.state_ceil.shape[2]):
                row: cp_model.LinearExpr | int = sum(
                    int(t.state_ceil[s, z, i]) * self.w[s][z]
                    for s in self.kept
                    for z in range(self.Z)
                    if t.state_ceil[s, z, i]
                )
                row += sum(
                    int(t.act_ceil[s, r, i]) * self.y[s][r]
                    for s in self.kept
                    for r in range(self.R)
                    if t.act_ceil[s, r, i]
                )
                self.model.add(self._memory >= row)
        return self._memory

    def linear(self, per_shape: Sequence[int] | np.ndarray) -> cp_model.LinearExpr | int:
        """Σ per_shape[s]·x[s] (GPU count, cluster price, parameter count…)."""
        return sum(int(per_shape[s]) * self.x[s] for s in self.kept)

    def tie_rank(
        self, zero_rank: Sequence[int], rec_rank: Sequence[int]
    ) -> cp_model.LinearExpr | int:
        """Lexicographic (shape order, recompute rank, ZeRO rank) as one integer."""
        Z, R = self.Z, self.R
        return (
            sum(s * Z * R * self.x[s] for s in self.kept)
            + sum(rec_rank[r] * Z * self.rb[r] for r in range(R))
            + sum(zero_rank[z] * self.zb[z] for z in range(Z))
        )

    # ---------------------------------------------------------------- solving
    def solve(
        self,
        expr,
        *,
        maximize: bool = False,
        active: Sequence[cp_model.IntVar] = (),
        time_limit_s: float | None = None,
        workers: int = 2,
        progress: Callable[[int, float], None] | None = None,
    ) -> SolveResult:
        """Optimise ``expr`` with every family and the ``active`` bounds enforced (as assumptions);
        read the chosen candidate."""
        m = self.model
        m.clear_objective()
        (m.maximize if maximize else m.minimize)(expr)
        m.clear_assumptions()
        m.add_assumptions(list(self.families.values()) + list(active))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = workers
        solver.parameters.random_seed = 0
        if time_limit_s:
            solver.parameters.max_time_in_seconds = time_limit_s
        status = solver.solve(m, _Progress(progress) if progress else None)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            name = "infeasible" if status == cp_model.INFEASIBLE else "unknown"
            return SolveResult(name, None, None, solver.wall_time)
        pick = lambda group: next(i for i, v in enumerate(group) if solver.boolean_value(v))  # noqa: E731
        choice = (pick(self.x), pick(self.zb), pick(self.rb))
        m.clear_hints()
        for group, idx in ((self.x, choice[0]), (self.zb, choice[1]), (self.rb, choice[2])):
            for i, v in enumerate(group):
                m.add_hint(v, i == idx)
        status_name = "optimal" if status == cp_model.OPTIMAL else "feasible"
        return SolveResult(
            status_name, choice, int(round(solver.objective_value)), solver.wall_time
        )

    def bound(self, expr, value: int, *, upper: bool = True) -> cp_model.IntVar:
        """A literal that, when passed in ``active`` to :meth:`solve`, keeps ``expr ≤ value``
        (or ≥). Bounds are removable this way; constraint families stay on always."""
        lit = self.model.new_bool_var("bound")
        self.model.add(expr <= value if upper else expr >= value).only_enforce_if(lit)
        return lit

    def explain(self) -> list[str]:
        """The constraint families that together leave no candidate (CP-SAT assumptions;
        one worker, as the solver requires for a sufficient set)."""
        m = self.model
        m.clear_objective()
        m.clear_assumptions()
        m.add_assumptions(list(self.families.values()))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        status = solver.solve(m)
        if status != cp_model.INFEASIBLE:
            return []
        core = set(solver.sufficient_assumptions_for_infeasibility())
        return [name for name, lit in self.families.items() if lit.index in core]
