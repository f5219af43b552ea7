"""The per-stage CP-SAT model (issue 13): per pipeline stage an integer layer count and a count
of fully recomputed layers, chosen from :mod:`optimizer.stage_tables`' rows.

Variables → constraints → objective (the CP-SAT primer's order):

* per stage ``n_s`` (layers), ``k_s`` (recomputed), ``paced_s``, ``bare_s``, ``params_s``: one
  table constraint (``AddAllowedAssignments``) over the stage's rows — only options that fit
  are rows, so memory per stage within capacity is the table itself;
* ``Σ n_s = L``;
* for a model whose attention spans repeat a period P after d leading layers
  (:func:`optimizer.stage_rules.layer_pattern`), per stage after the first its start within the
  period, ``r_s = ((n_0 + … + n_{s−1} − d)/v) mod P`` (``AddModuloEquality``; v model chunks
  a stage, whose counts are multiples of v, d = 0 then), in the stage's table
  beside its n: a stage's rows are per (r, n) (:attr:`optimizer.stage_tables.StageOption.residue`),
  so every stage is costed at the layers the split gives it. Models of alike layers (P = 1)
  carry no such variable;
* ``T = max paced_s`` (``AddMaxEquality``): the slowest stage paces the pipeline, bubble
  included (:func:`model.estimate.time_terms`);
* the rest of the step (pipeline messages, exposed dp, optimizer step, offload) reads the split
  only through the busiest stage's dense and routed-expert parameters apart, ``(D, E)``
  (:func:`model.terms.stage_params.busiest_params`: the stage with the most of both together,
  the first of equals, :func:`model.terms.stage_params.busiest_stage`; dense parameters shard
  over dp, the experts' over edp), the most layers and the most MoE layers on a stage,
  ``B = max held_s`` and ``M = max moe_s`` (:func:`model.terms.traffic.most_layers`, maxima
  taken apart), and ``C = max bare_s`` (:func:`model.terms.roofline.slowest_microbatch`). The
  busiest stage is a Boolean per stage, ``z_s`` (exactly one): ``z_s ⇒ d_s + e_s = max_j
  (d_j + e_j)`` and ``d_j + e_j < max`` for every j < s, and ``z_s ⇒ D = d_s, E = e_s``. Where
  MoE and dense layers alternate (Llama 4 Maverick) stages of one count hold different kinds,
  so the most dense parameters alone no longer give the busiest stage's. ``R ≥ rest(key)`` for
  each key ``(D, E, B, M, C)`` whose rest is known (:meth:`StageModel.add_rest`, from
  ``evaluate()`` of a layout that has it), and ``R ≥`` a lower bound for the others.
  :func:`optimizer.stage_solve.solve_shape` adds keys until the optimum's own is known: then
  the optimum is proven.

Objective: ``T + R`` in whole nanoseconds (the evaluator's two objective terms,
:func:`model.estimate.objective_ns`). The only ortools import of the per-stage search.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from trainplan.optimizer.solver import solve
from trainplan.optimizer.stage_tables import StageTables

__all__ = ["StageSolution", "StageModel"]

Key = tuple[int, int, int, int, int]
"""(D, E, B, M, C): the busiest stage's dense and routed-expert parameters per GPU × lcm(tp, etp·ep)
(:attr:`optimizer.stage_tables.StageOption.params_key`, :attr:`~optimizer.stage_tables.
StageOption.expert_key`), the most layers and the most MoE layers on a stage, the longest
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
        self.n: list[cp_model.IntVar] = []
        self.k: list[cp_model.IntVar] = []
        columns: tuple[list[cp_model.IntVar], ...] = tuple([] for _ in range(6))
        paced, bare, dense, experts, held, moe = columns
        rows_all = [o for rows in tables.options for o in rows]
        big_t = max((o.paced_ns for o in rows_all), default=0)
        big_c = max((o.bare_ns for o in rows_all), default=0)
        big_d = max((o.params_key for o in rows_all), default=0)
        big_e = max((o.expert_key for o in rows_all), default=0)
        big_h = max((o.held[0] for o in rows_all), default=0)  # L, or L + the MTP blocks
        period = tables.period
        for s, rows in enumerate(tables.options):
            n = m.new_int_var(0, L, f"n{s}")
            k = m.new_int_var(0, L, f"k{s}")
            p = m.new_int_var(0, big_t, f"paced{s}")
            b = m.new_int_var(0, big_c, f"bare{s}")
            d = m.new_int_var(0, big_d, f"dense{s}")
            e = m.new_int_var(0, big_e, f"experts{s}")
            h = m.new_int_var(0, big_h, f"held{s}")
            g = m.new_int_var(0, big_h, f"moe{s}")
            table = [
                (o.layers, o.recomputed, o.paced_ns, o.bare_ns, o.params_key, o.expert_key, *o.held)
                for o in rows
            ]
            if period == 1:
                m.add_allowed_assignments([n, k, p, b, d, e, h, g], table)
            else:  # the stage's rows per (start within the period, n)
                r = m.new_int_var(0, period - 1, f"r{s}")
                m.add_allowed_assignments(
                    [r, n, k, p, b, d, e, h, g],
                    [(o.residue, *row) for o, row in zip(rows, table, strict=True)],
                )
                if s:  # r = ((layers before − d) / v) mod P; the first stage's rows say 0
                    v = tables.layout.virtual_stages  # counts are multiples of v (d = 0)
                    before = m.new_int_var(0, L, f"before{s}")
                    m.add(v * before == sum(self.n) - tables.prefix)
                    m.add_modulo_equality(r, before, period)
            self.n.append(n)
            self.k.append(k)
            for out, var in ((paced, p), (bare, b), (dense, d), (experts, e), (held, h), (moe, g)):
                out.append(var)
        m.add(sum(self.n) == L)
        self.t = m.new_int_var(0, big_t, "T")
        m.add_max_equality(self.t, paced)
        self.d, self.e = self._busiest(dense, experts, big_d, big_e)
        self.b = m.new_int_var(0, big_h, "B")
        m.add_max_equality(self.b, held)
        self.moe = m.new_int_var(0, big_h, "M")
        m.add_max_equality(self.moe, moe)
        self.c = m.new_int_var(0, big_c, "C")
        m.add_max_equality(self.c, bare)
        self.rest = m.new_int_var(max(0, rest_lower_ns), 10**15, "R")
        m.minimize(self.t + self.rest)
        self.known: dict[Key, int] = {}

    def _busiest(
        self, dense: list[cp_model.IntVar], experts: list[cp_model.IntVar], big_d: int, big_e: int
    ) -> tuple[cp_model.IntVar, cp_model.IntVar]:
        """(D, E): the dense and routed-expert parameters (scaled) of the stage with the most of
        both together, the first of equals, as :func:`model.terms.stage_params.busiest_stage`
        picks it: ``z_s ⇒ d_s + e_s = most``, ``z_s ⇒ d_j + e_j ≤ most − 1`` for j < s."""
        m = self.model
        totals = []
        for s, (d, e) in enumerate(zip(dense, experts, strict=True)):
            total = m.new_int_var(0, big_d + big_e, f"total{s}")
            m.add(total == d + e)
            totals.append(total)
        most = m.new_int_var(0, big_d + big_e, "most")
        m.add_max_equality(most, totals)
        big_dv, big_ev = m.new_int_var(0, big_d, "D"), m.new_int_var(0, big_e, "E")
        z = [m.new_bool_var(f"busiest{s}") for s in range(len(totals))]
        m.add_exactly_one(z)
        for s, total in enumerate(totals):
            m.add(total == most).only_enforce_if(z[s])
            for j in range(s):
                m.add(totals[j] < most).only_enforce_if(z[s])
            m.add(big_dv == dense[s]).only_enforce_if(z[s])
            m.add(big_ev == experts[s]).only_enforce_if(z[s])
        return big_dv, big_ev

    def add_rest(self, key: Key, rest_ns: int) -> None:
        """``R ≥ rest_ns`` whenever (D, E, B, M, C) = ``key``: its rest, from ``evaluate()``."""
        if key in self.known:
            return
        self.known[key] = rest_ns
        m = self.model
        lits = []
        for var, value in zip((self.d, self.e, self.b, self.moe, self.c), key, strict=True):
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
        d, e, b, most_moe, c = (
            int(solver.value(v)) for v in (self.d, self.e, self.b, self.moe, self.c)
        )
        key = (d, e, b, most_moe, c)
        return StageSolution(
            solved.status,
            tuple(int(solver.value(v)) for v in self.n),
            tuple(int(solver.value(v)) for v in self.k),
            int(round(solver.objective_value)),
            int(solver.value(self.t)),
            key,
            solved.seconds,
        )
