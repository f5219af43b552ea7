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
:func:`model.estimate.objective_ns`). T is the closed form, under 1F1B an upper bound on the
order's step the evaluator charges (:mod:`model.pipeline_onef`), interleaved neither that step
nor a bound on it (:mod:`model.pipeline_uneven`); :meth:`StageModel.exact_step` then turns the
objective to ``P + R``: per stage each model chunk's forward ``F_{s,c}`` and backward
``B_{s,c}`` of one micro-batch (the stage's own at v = 1;
:meth:`optimizer.stage_option.StageOption.passes`, a second table constraint over the same
rows, in :data:`~optimizer.stage_tables.PASS_UNITS` per ns, as P),
``P ≥ Σ a·F + c·B`` for each path of the order added (and each ``F_{s,c}`` and ``B_{s,c}``
above the lower convex hull of its rows' (n, F) and (n, B), :func:`lower_hull`: valid for
every row, it gives the linear relaxation what the table constraints hide)
(:mod:`model.pipeline_paths`, :mod:`model.interleaved_paths`: each a lower bound of the step
for every split), and
:meth:`StageModel.cutoff` keeps only splits below the best step found
(:mod:`optimizer.stage_exact` adds each split's own longest path until none is left). The only
ortools import of the per-stage search.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from trainplan.model.interleaved_paths import interleaved_paths
from trainplan.model.pipeline_paths import Path, onef_paths, path_seconds
from trainplan.model.pipeline_report import interleaved_order
from trainplan.optimizer.solver import solve
from trainplan.optimizer.stage_option import PASS_UNITS, StageOption
from trainplan.optimizer.stage_tables import StageTables

__all__ = ["StageSolution", "StageModel", "lower_hull"]

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
    """T + R as the model sees it (R a lower bound when the key's rest is not known yet)."""
    paced_ns: int
    """T, the pipeline term."""
    key: Key
    seconds: float
    passes: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    """Under :meth:`StageModel.exact_step`, (forwards, backwards) of one micro-batch of every
    model chunk, rank i's chunk c at ``i·v + c`` (v = 1: each stage's; its rows'
    :meth:`~optimizer.stage_option.StageOption.passes`, in
    :data:`~optimizer.stage_tables.PASS_UNITS` per ns); empty before."""
    bound_ns: int = 0
    """CP-SAT's proven lower bound on the objective, whole ns rounded down (the objective
    itself when ``optimal``)."""


def lower_hull(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The lower convex hull of (x, y) points, x rising (Andrew's monotone chain): every point
    lies on or above each segment's line, so ``y ≥`` the line through a segment's two ends holds
    for every point (:meth:`StageModel.exact_step` adds one per segment: a stage's passes grow
    with its layers, which the table constraints alone do not tell CP-SAT's linear relaxation).

    >>> lower_hull([(0, 5), (1, 1), (2, 3), (3, 2), (4, 6), (1, 4)])
    [(0, 5), (1, 1), (3, 2), (4, 6)]
    """
    out: list[tuple[int, int]] = []
    for p in sorted(set(points)):
        while (
            len(out) >= 2
            and (
                (out[-1][0] - out[-2][0]) * (p[1] - out[-2][1])
                - (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0])
            )
            <= 0
        ):
            out.pop()
        if out and out[-1][0] == p[0]:  # a higher point at the same x: the lower one stays
            continue
        out.append(p)
    return out


class StageModel:
    """The CP-SAT model over one base layout's :class:`StageTables`."""

    def __init__(self, tables: StageTables, rest_lower_ns: int) -> None:
        m = self.model = cp_model.CpModel()
        self.tables = tables
        L = tables.num_layers
        self.n: list[cp_model.IntVar] = []
        self.r: list[cp_model.IntVar | None] = []
        self.k: list[cp_model.IntVar] = []
        columns: tuple[list[cp_model.IntVar], ...] = tuple([] for _ in range(6))
        paced, bare, dense, experts, held, moe = columns
        rows_all = [o for rows in tables.options for o in rows]
        big_t = max((o.paced_ns for o in rows_all), default=0)
        big_c = max((o.bare_ns for o in rows_all), default=0)
        big_d = max((o.params_key for o in rows_all), default=0)
        big_e = max((o.expert_key for o in rows_all), default=0)
        big_h = max((o.held[0] for o in rows_all), default=0)  # L, or L + the MTP blocks
        for s, rows in enumerate(tables.options):
            bigs = (big_t, big_c, big_d, big_e, big_h, big_h)
            for out, var in zip(columns, self._stage(s, rows, bigs), strict=True):
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
        self.status = "unknown"
        """The last solve's status (:attr:`optimizer.solver.Solved.status`)."""
        self.bound_ns = 0
        """The last solve's proven lower bound on the objective, whole ns."""
        self.passes: tuple[list[cp_model.IntVar], list[cp_model.IntVar]] | None = None
        self.paths: set[Path] = set()
        self.p: cp_model.IntVar | None = None
        self.scale = 1
        """Objective units per ns: 1, :data:`~optimizer.stage_tables.PASS_UNITS` after
        :meth:`exact_step`."""

    def _stage(
        self, s: int, rows: Sequence[StageOption], bigs: tuple[int, ...]
    ) -> tuple[cp_model.IntVar, ...]:
        """Stage ``s``'s variables n, k (kept in :attr:`n`, :attr:`k`, its start residue in
        :attr:`r`) and (paced, bare, dense, experts, held, moe), tied to its ``rows`` by a table
        constraint (per start residue where the layers repeat a period); ``bigs`` the six's
        upper bounds."""
        m, tables, L = self.model, self.tables, self.tables.num_layers
        n, k = m.new_int_var(0, L, f"n{s}"), m.new_int_var(0, L, f"k{s}")
        names = ("paced", "bare", "dense", "experts", "held", "moe")
        out = tuple(
            m.new_int_var(0, big, f"{name}{s}") for name, big in zip(names, bigs, strict=True)
        )
        table = [
            (o.layers, o.recomputed, o.paced_ns, o.bare_ns, o.params_key, o.expert_key, *o.held)
            for o in rows
        ]
        r = None
        if tables.period == 1:
            m.add_allowed_assignments([n, k, *out], table)
        else:  # the stage's rows per (start within the period, n)
            r = m.new_int_var(0, tables.period - 1, f"r{s}")
            m.add_allowed_assignments(
                [r, n, k, *out], [(o.residue, *row) for o, row in zip(rows, table, strict=True)]
            )
            if s:  # r = ((layers before − d) / v) mod P; the first stage's rows say 0
                v = tables.layout.virtual_stages  # counts are multiples of v (d = 0)
                before = m.new_int_var(0, L, f"before{s}")
                m.add(v * before == sum(self.n) - tables.prefix)
                m.add_modulo_equality(r, before, tables.period)
        self.n.append(n)
        self.r.append(r)
        self.k.append(k)
        return out

    def exact_step(self, m: int, schedule: str) -> None:
        """From now on minimise ``P + R`` (the module docstring): per stage each model chunk's
        ``F``, ``B`` from its rows (:meth:`~optimizer.stage_option.StageOption.passes`: the
        stage itself at v = 1), ``P`` at least every path added, starting with the order's
        family on ``m`` micro-batches: :func:`model.pipeline_paths.onef_paths` under
        ``schedule`` (1F1B, GPipe) or, interleaved, :func:`model.interleaved_paths.
        interleaved_paths` over the chunks."""
        model, tables = self.model, self.tables
        fw: list[cp_model.IntVar] = []
        bw: list[cp_model.IntVar] = []
        for s, rows in enumerate(tables.options):
            f, b = self._chunk_vars(s, rows)
            fw += f
            bw += b
        self.passes = (fw, bw)
        top = m * sum(
            max((sum(o.passes()[0]) + sum(o.passes()[1]) for o in rows), default=0)
            for rows in tables.options
        )  # every pass at most once on a path
        self.p = model.new_int_var(0, max(0, top), "P")
        self.scale, self.bound_ns = PASS_UNITS, 0  # the closed form's bound holds no more
        model.minimize(self.p + PASS_UNITS * self.rest)
        lay = tables.layout
        if interleaved_order(lay.schedule, lay.pp):
            family = interleaved_paths(lay.pp, lay.virtual_stages, m)
        else:
            family = onef_paths(len(tables.options), m, schedule)
        for path in family:
            self.add_path(path)

    def _chunk_vars(
        self, s: int, rows: Sequence[StageOption]
    ) -> tuple[list[cp_model.IntVar], list[cp_model.IntVar]]:
        """Stage ``s``'s chunks' forward and backward variables, tied to its ``rows``' passes
        by a table constraint beside its n and k (and start residue), each above the lower
        convex hull of its rows' (n, pass) (:func:`lower_hull`)."""
        model, lay = self.model, self.tables.layout
        chunks = lay.virtual_stages if interleaved_order(lay.schedule, lay.pp) else 1
        out: list[list[cp_model.IntVar]] = [[], []]
        for j, name in ((0, "F"), (1, "B")):
            for c in range(chunks):
                top = max((o.passes()[j][c] for o in rows), default=0)
                out[j].append(model.new_int_var(0, max(0, top), f"{name}{s}_{c}"))
        table = [(o.layers, o.recomputed, *o.passes()[0], *o.passes()[1]) for o in rows]
        r = self.r[s]
        if r is None:
            model.add_allowed_assignments([self.n[s], self.k[s], *out[0], *out[1]], table)
        else:
            model.add_allowed_assignments(
                [r, self.n[s], self.k[s], *out[0], *out[1]],
                [(o.residue, *row) for o, row in zip(rows, table, strict=True)],
            )
        for j in (0, 1):
            for c, var in enumerate(out[j]):
                points = [(o.layers, o.passes()[j][c]) for o in rows]
                for (x1, y1), (x2, y2) in itertools.pairwise(lower_hull(points)):
                    model.add((x2 - x1) * var >= (y2 - y1) * (self.n[s] - x1) + (x2 - x1) * y1)
        return out[0], out[1]

    def add_path(self, path: Path) -> bool:
        """``P ≥`` ``path``'s length over the stages' ``F_s``, ``B_s`` (a lower bound of the
        order's step for every split, :mod:`model.pipeline_paths`); False when it was already
        added (nothing new)."""
        assert self.passes is not None and self.p is not None, "exact_step first"
        if path in self.paths:
            return False
        self.paths.add(path)
        fw, bw = self.passes
        self.model.add(self.p >= path_seconds(path, fw, bw))
        return True

    def cutoff(self, ns: int) -> None:
        """Only splits whose ``P + R`` is below ``ns`` from now on (the best step found: a split
        whose lower bound reaches it cannot beat it)."""
        assert self.p is not None, "exact_step first"
        self.model.add(self.p + PASS_UNITS * self.rest <= PASS_UNITS * ns - 1)

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
        self.status = solved.status
        solver = solved.solver
        bound = solver.best_objective_bound
        if solved.status != "infeasible" and math.isfinite(bound):
            self.bound_ns = math.floor(bound / self.scale)
        if not solved.found:
            return None
        d, e, b, most_moe, c = (
            int(solver.value(v)) for v in (self.d, self.e, self.b, self.moe, self.c)
        )
        key = (d, e, b, most_moe, c)
        passes: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
        if self.passes is not None:
            fw, bw = self.passes
            passes = (tuple(int(solver.value(v)) for v in fw),
                      tuple(int(solver.value(v)) for v in bw))  # fmt: skip
        return StageSolution(
            solved.status,
            tuple(int(solver.value(v)) for v in self.n),
            tuple(int(solver.value(v)) for v in self.k),
            int(round(solver.objective_value / self.scale)),
            int(solver.value(self.t)),
            key,
            solved.seconds,
            passes,
            self.bound_ns,
        )
