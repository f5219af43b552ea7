"""The CP-SAT model (the only ortools import): pick one candidate — a shape (of one job), a
ZeRO stage and a recompute mode — that keeps every pipeline stage within memory and meets the
constraints; minimise the objective.

Encoding (variables → constraints → objective → solve → read, as the CP-SAT samples):

* ``x[c]`` one Boolean per candidate c = (s, z, r) the tables allow — legal, fitting, meeting
  every constraint family (memory; minimum MFU; tp·cp within NVLink) — exactly one true. Each
  family is decided exactly by the tables (:func:`optimizer.rules.allowed`), so candidates
  that break one are not variables at all: the model holds only what may be chosen.
* When no candidate is allowed, the model instead holds every legal candidate, and each family
  has a literal ``a_f`` with ``a_f ⇒ Σ x[c] = 0`` over the candidates that break it; CP-SAT's
  assumptions then name the families that together leave nothing
  (:meth:`LayoutModel.explain`).
* The objective and every other quantity are linear sums over the one-hot ``x``: objective
  ``Σ (O1[s][r] + O2[s][z])·x[c]``, peak memory (the frontier's second axis) ``Σ peak[c]·x[c]``,
  GPU count or price ``Σ value[s]·x[c]``; an integer ``index = Σ c·x[c]`` reads the choice.
* Ties: a later pass fixes the optimum and minimises the tie-break rank (the least peak memory,
  then shape order, recompute and ZeRO preference: :func:`optimizer.rules.tie_keys`), so the
  answer is unique and equals the exhaustive oracle's.
* Top-k: each answer found is excluded (``x[c] = 0``); frontiers bound the second axis with
  removable literals. Both work on a copy (:meth:`LayoutModel.copy`), so a prepared model
  gives the same answers however often it is searched.

The earlier encoding (one Boolean per shape, ZeRO stage and recompute mode, their products, and
a clause per forbidden candidate) gave the same answers but spent seconds in the solver on tens
of thousands of clauses; with the tables deciding every rule exactly, a candidate's Boolean is
the whole choice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from trainplan.optimizer.rules import tie_keys
from trainplan.optimizer.solver import (
    INTERRUPTED_LIMIT_S,
    clear_interrupt,
    interrupt,
    interrupted,
    run_solver,
    solve,
)
from trainplan.optimizer.tables import CostTables

__all__ = [
    "LayoutModel",
    "SolveResult",
    "Candidate",
    "interrupt",
    "interrupted",
    "clear_interrupt",
    "run_solver",
    "INTERRUPTED_LIMIT_S",
]

Candidate = tuple[int, int, int]
"""(shape index, zero index, recompute index)."""


@dataclass(frozen=True, slots=True)
class SolveResult:
    status: str
    """``optimal``, ``feasible`` (stopped by the time limit; not proven), ``infeasible``, ``unknown``."""
    choice: Candidate | None
    value: int | None
    seconds: float


class LayoutModel:
    """One CP-SAT model over the tables' candidates; bounds and objectives are added by the
    search."""

    def __init__(
        self,
        tables: CostTables,
        objective: np.ndarray,
        allowed: np.ndarray,
        families: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """``objective[s, z, r]``: the integer objective of each candidate; ``allowed[s, z, r]``:
        the candidates that may be chosen; ``families``: name → [S, Z, R] mask of the legal
        candidates each constraint family forbids (used only when nothing is allowed, to
        explain why)."""
        self.tables = tables
        explaining = not allowed.any()
        mask = tables.legal if explaining else allowed
        self.candidates = np.argwhere(mask)
        """[C, 3] (s, z, r) of each variable."""
        C = len(self.candidates)
        m = self.model = cp_model.CpModel()
        self.x = [m.new_bool_var(f"c{c}") for c in range(C)]
        if C:
            m.add_exactly_one(self.x)
        self.index = m.new_int_var(0, max(C - 1, 0), "index")
        m.add(self.index == cp_model.LinearExpr.weighted_sum(self.x, list(range(C))))
        values = objective[tuple(self.candidates.T)] if C else np.zeros(0, dtype=np.int64)
        self._objective_values = values.astype(np.int64)
        self._excluded = np.zeros(C, dtype=bool)
        lo, hi = (int(values.min()), int(values.max())) if C else (0, 0)
        self.objective = m.new_int_var(lo, hi, "objective")
        m.add(self.objective == self.weighted(values))
        self.families: dict[str, cp_model.IntVar] = {}
        if explaining:
            for name, forbidden in (families or {}).items():
                lit = self.families[name] = m.new_bool_var(f"family_{name}")
                hit = [self.x[c] for c in np.nonzero(forbidden[tuple(self.candidates.T)])[0]]
                if hit:
                    m.add(sum(hit) == 0).only_enforce_if(lit)
        self._memory: cp_model.IntVar | None = None
        self._ties: np.ndarray | None = None

    def copy(self) -> LayoutModel:
        """A model to search on without touching this one: the CP-SAT model cloned
        (``CpModel.clone``: its variables keep their indices, so :attr:`x`, :attr:`index`,
        :attr:`objective` and the family literals read the copy as they read the original) with
        every constraint added so far, and the excluded candidates. What the copy adds —
        :meth:`exclude`, :meth:`forbid_above`, :meth:`bound`, :meth:`retire`, hints — stays in
        the copy, so a prepared model answers each search and frontier alike.
        :meth:`memory`'s variable is shared once made (made on the copy, it lives there); the
        tie keys are computed once, on the original."""
        twin = object.__new__(LayoutModel)
        for name in ("tables", "candidates", "x", "index", "objective", "families"):
            setattr(twin, name, getattr(self, name))
        twin._objective_values = self._objective_values
        twin._ties = self._tie_keys()  # computed once, on the original
        twin._memory = self._memory
        twin._excluded = self._excluded.copy()
        twin.model = self.model.clone()
        return twin

    # ---------------------------------------------------------------- expressions
    def weighted(self, values: np.ndarray | Sequence[int]) -> cp_model.LinearExpr:
        """Σ values[c]·x[c] over the candidates."""
        return cp_model.LinearExpr.weighted_sum(self.x, [int(v) for v in values])

    def per_candidate(self, table: np.ndarray) -> np.ndarray:
        """An [S, Z, R] table's value at each candidate."""
        return table[tuple(self.candidates.T)]

    def exclude(self, choice: Candidate) -> None:
        """No-good: never this candidate again (top-k)."""
        hit = np.nonzero((self.candidates == np.array(choice)).all(axis=1))[0]
        for c in hit:
            self.model.add(self.x[int(c)] == 0)
            self._excluded[c] = True

    def memory(self) -> cp_model.IntVar:
        """M = the chosen candidate's peak bytes on its busiest stage (rounded up)."""
        if self._memory is None:
            t = self.tables
            peak = self.per_candidate(t.peak_ceil)
            self._memory = self.model.new_int_var(
                0, int(peak.max()) if len(peak) else 0, "peak_bytes"
            )
            self.model.add(self._memory == self.weighted(peak))
        return self._memory

    def linear(self, per_shape: Sequence[int] | np.ndarray) -> cp_model.LinearExpr:
        """Σ per_shape[s]·x[c] (GPU count, cluster price, parameter count…)."""
        values = np.asarray(per_shape, dtype=np.int64)
        return self.weighted(values[self.candidates[:, 0]] if len(self.candidates) else [])

    def _tie_keys(self) -> np.ndarray:
        """[C] each candidate's tie-break key (:func:`optimizer.rules.tie_keys`), computed once."""
        if self._ties is None:
            self._ties = tie_keys(self.tables, self.candidates)
        return self._ties

    def tie_rank(self) -> cp_model.LinearExpr:
        """Lexicographic (peak memory, shape order, recompute rank, ZeRO rank) as one integer
        (:func:`optimizer.rules.tie_keys`)."""
        return self.weighted(self._tie_keys())

    def first_at(self, value: int) -> Candidate:
        """The candidate of least tie key among those whose objective is ``value`` and that are
        still allowed (not excluded): the tie-break pass when only the objective binds, read off
        the candidates instead of a second solve."""
        at = (self._objective_values == value) & ~self._excluded
        c = int(np.flatnonzero(at)[np.argmin(self._tie_keys()[at])])
        return tuple(int(v) for v in self.candidates[c])  # type: ignore[return-value]

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
        """Optimise ``expr`` with the ``active`` bounds enforced (as assumptions); read the
        chosen candidate."""
        if not len(self.candidates):  # no legal candidate at all: nothing to choose from
            return SolveResult("infeasible", None, None, 0.0)
        m = self.model
        m.clear_objective()
        (m.maximize if maximize else m.minimize)(expr)
        m.clear_assumptions()
        m.add_assumptions(list(self.families.values()) + list(active))
        solved = solve(m, time_limit_s=time_limit_s or None, workers=workers, progress=progress)
        solver = solved.solver
        if not solved.found:
            return SolveResult(solved.status, None, None, solved.seconds)
        c = int(solver.value(self.index))
        s, z, r = (int(v) for v in self.candidates[c])
        choice = (s, z, r)
        m.clear_hints()
        m.add_hint(self.x[c], True)
        # the objective's exact integer, read from the solution: solver.objective_value is a
        # double, which rounds values above 2^53 (time to train in the objective's unit can
        # pass 10^16) to a value no candidate has
        return SolveResult(solved.status, choice, int(solver.value(expr)), solved.seconds)

    def least_second(
        self, second, res: SolveResult, time_limit_s: float | None, workers: int
    ) -> tuple[Candidate, int | None, float, bool]:
        """A frontier point at ``res`` (the least objective under the frontier's bounds so far):
        the least ``second`` (its axis) at that objective, then the least :meth:`tie_rank`.
        Returns the point's candidate, its ``second`` value (None when the time limit or
        Ctrl-C, :func:`optimizer.solver.interrupt`, stopped that solve before an answer:
        ``res``'s own candidate is the point then), the two solves' seconds, and whether both
        were proven optimal."""
        assert res.choice is not None and res.value is not None
        best = self.bound(self.objective, res.value)
        res2 = self.solve(second, active=[best], time_limit_s=time_limit_s, workers=workers)
        point, seconds, sure, least = res.choice, res2.seconds, False, None
        if res2.value is not None:
            least = self.bound(second, res2.value)
            tie = self.solve(
                self.tie_rank(), active=[best, least], time_limit_s=time_limit_s, workers=workers
            )
            point, seconds = tie.choice or res.choice, seconds + tie.seconds
            sure = res.status == res2.status == tie.status == "optimal"
        for lit in (best, least):
            if lit is not None:
                self.retire(lit)
        return point, res2.value, seconds, sure

    def forbid_above(self, values: np.ndarray, value: int) -> None:
        """Permanently rule out every candidate whose ``values[c]`` (one per variable) exceeds
        ``value``: a bound on Σ values·x that, with exactly one candidate chosen, is a set of
        fixed variables (presolve removes them) instead of a linear constraint over all of
        them. For bounds that only tighten (the frontier's ε)."""
        for c in np.flatnonzero(np.asarray(values) > value):
            if not self._excluded[c]:
                self.model.add(self.x[int(c)] == 0)
                self._excluded[c] = True

    def retire(self, lit: cp_model.IntVar) -> None:
        """Never enforce a :meth:`bound` literal again (presolve then drops its constraint)."""
        self.model.add(lit == 0)

    def bound(self, expr, value: int, *, upper: bool = True) -> cp_model.IntVar:
        """A literal that, when passed in ``active`` to :meth:`solve`, keeps ``expr ≤ value``
        (or ≥). Bounds are removable this way."""
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
        solved = solve(m, workers=1)
        if solved.status != "infeasible":
            return []
        core = set(solved.solver.sufficient_assumptions_for_infeasibility())
        return [name for name, lit in self.families.items() if lit.index in core]
