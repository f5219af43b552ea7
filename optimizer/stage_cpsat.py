"""The per-stage CP-SAT model (issue 13): per pipeline stage an integer layer count and a count
of fully recomputed layers, chosen from :mod:`optimizer.stage_tables`' rows.

Variables → constraints → objective (the CP-SAT primer's order):

* per stage ``n_s`` (layers), ``k_s`` (recomputed), ``paced_s``, ``bare_s``, ``params_s``: one
  table constraint (``AddAllowedAssignments``) over the stage's rows — only options that fit
  are rows, so memory per stage within capacity is the table itself;
* ``Σ n_s = L``;
* ``T = max paced_s`` (``AddMaxEquality``): the slowest stage paces the pipeline, bubble
  included (:func:`model.estimate.time_terms`);
* the rest of the step (pipeline messages, exposed dp, optimizer step, offload) reads the split
  only through ``A = max params_s``, ``B = max n_s`` and ``C = max bare_s``
  (:func:`model.terms.roofline.slowest_microbatch`): ``R ≥ rest(A, B, C)`` for each triple whose rest
  is known (:meth:`StageModel.add_rest`, from ``evaluate()`` of a layout that has it), and
  ``R ≥`` a lower bound for the others. :func:`optimizer.stage_solve.solve_shape` adds triples
  until the optimum's own is known: then the optimum is proven.

Objective: ``T + R`` in whole nanoseconds (the evaluator's two objective terms,
:func:`model.estimate.objective_ns`). The only ortools import of the per-stage search.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from trainplan.optimizer.solver import solve
from trainplan.optimizer.stage_tables import StageTables

__all__ = ["StageSolution", "StageModel"]

Key = tuple[int, int, int]
"""(A, B, C): the busiest stage's dense parameters × tp, the most layers on a stage, the longest
micro-batch without recomputation in ns."""


@dataclass(frozen=True, slots=True)
class StageSolution:
    """What one solve chose."""

    status: str
    """``optimal`` or ``feasible`` (time limit; best found)."""
    layers: tuple[int, ...]
    recomputed: tuple[int, ...]
    objective_ns: int
    """T + R as the model sees it (R a lower bound when the triple's rest is not known yet)."""
    paced_ns: int
    """T, the pipeline term."""
    key: Key
    seconds: float


class StageModel:
    """The CP-SAT model over one base layout's :class:`StageTables`."""

    def __init__(self, tables: StageTables, rest_lower_ns: int) -> None:
        m = self.model = cp_model.CpModel()
        self.tables = tables
        L = tables.num_layers
        self.n, self.k, paced, bare, params = [], [], [], [], []
        big_t = max((o.paced_ns for rows in tables.options for o in rows), default=0)
        big_c = max((o.bare_ns for rows in tables.options for o in rows), default=0)
        big_a = max((o.params_key for rows in tables.options for o in rows), default=0)
        for s, rows in enumerate(tables.options):
            n = m.new_int_var(0, L, f"n{s}")
            k = m.new_int_var(0, L, f"k{s}")
            p = m.new_int_var(0, big_t, f"paced{s}")
            b = m.new_int_var(0, big_c, f"bare{s}")
            a = m.new_int_var(0, big_a, f"params{s}")
            m.add_allowed_assignments(
                [n, k, p, b, a],
                [(o.layers, o.recomputed, o.paced_ns, o.bare_ns, o.params_key) for o in rows],
            )
            self.n.append(n)
            self.k.append(k)
            paced.append(p)
            bare.append(b)
            params.append(a)
        m.add(sum(self.n) == L)
        self.t = m.new_int_var(0, big_t, "T")
        m.add_max_equality(self.t, paced)
        self.a = m.new_int_var(0, big_a, "A")
        m.add_max_equality(self.a, params)
        self.b = m.new_int_var(0, L, "B")
        m.add_max_equality(self.b, self.n)
        self.c = m.new_int_var(0, big_c, "C")
        m.add_max_equality(self.c, bare)
        self.rest = m.new_int_var(max(0, rest_lower_ns), 10**15, "R")
        m.minimize(self.t + self.rest)
        self.known: dict[Key, int] = {}

    def add_rest(self, key: Key, rest_ns: int) -> None:
        """``R ≥ rest_ns`` whenever (A, B, C) = ``key``: the triple's rest, from ``evaluate()``."""
        if key in self.known:
            return
        self.known[key] = rest_ns
        m = self.model
        lits = []
        for var, value in zip((self.a, self.b, self.c), key, strict=True):
            lit = m.new_bool_var(f"eq{value}")
            m.add(var == value).only_enforce_if(lit)
            m.add(var != value).only_enforce_if(lit.Not())
            lits.append(lit)
        m.add(self.rest >= rest_ns).only_enforce_if(lits)

    def solve(
        self,
        time_limit_s: float | None = None,
        workers: int = 2,
        hint: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
    ) -> StageSolution | None:
        """The least T + R, or None when no split fits (or the time ran out with none found)."""
        m = self.model
        m.clear_hints()
        if hint is not None:
            for var, value in zip(self.n + self.k, hint[0] + hint[1], strict=True):
                m.add_hint(var, value)
        limit = None if time_limit_s is None else max(0.01, time_limit_s)
        solved = solve(m, time_limit_s=limit, workers=workers)
        if not solved.found:
            return None
        solver = solved.solver
        key = (int(solver.value(self.a)), int(solver.value(self.b)), int(solver.value(self.c)))
        return StageSolution(
            solved.status,
            tuple(int(solver.value(v)) for v in self.n),
            tuple(int(solver.value(v)) for v in self.k),
            int(round(solver.objective_value)),
            int(solver.value(self.t)),
            key,
            solved.seconds,
        )
