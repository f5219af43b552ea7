"""The RLHF placement search's CP-SAT model: give every role a pool and a parallelism, give every
pool a size, keep every GPU's every phase within memory, minimise the step time — the rules of
:mod:`model.rlhf.step`, linear over the tables of :mod:`optimizer.rlhf.tables`.

Encoding:

* ``x[r, q, n, o]`` — role r takes option o (its degrees, offload, engine fraction) on pool slot
  q of n GPUs; exactly one per role. Role r may use the slots 0 … r only, and slot q is used
  only when slot q − 1 is (a placement's pools can always be numbered in order of first use:
  symmetry breaking without losing any placement).
* ``y[q, n]`` — slot q has n GPUs (at most one n; none: the slot is unused). ``x[r, q, n, ·] ⇒
  y[q, n]``, and a used slot has a role. ``Σ n·y ≤ G``: the pools are disjoint.
* Memory: for every slot, phase and role working in that phase, ``Σ_roles held·x + phase
  bytes of that role·x ≤ usable bytes`` — together, ``Σ held + max phase bytes ≤ capacity``
  (bytes rounded up; a role offloaded when idle adds what its turn brings back, ``RoleCost.
  swap_in``: its state for training, its weights for scoring). Host:
  ``Σ host bytes·x ≤`` the host's share per GPU, and with OpenRLHF's sleeping engine's host copy
  (:func:`model.rlhf.openrlhf.sleep_host`) ``Σ host bytes·x + Σ sleep host bytes·x ≤`` it where
  the engine and the actor share the slot (``C_q ≥ E_q + A_q − 1``, as ``B_q`` below).
* The weight sync (:func:`model.rlhf.step.sync_peak`): for every slot, ``Σ held + Σ sync
  bytes·x ≤ capacity``, enforced by ``B_q``, with ``B_q ≥ E_q + A_q − 1`` where ``E_q`` and
  ``A_q`` are the engine's and the actor's options on the slot (each 0 or 1): it binds only
  where both share the slot. No row where no actor option has sync bytes.
* Bytes held in every phase (:func:`model.rlhf.step.pool_resident`): ``H_q`` = Σ of the
  roles' with process groups of their own, plus per name of shared groups ``S[q, g] ≥ bytes·x``
  for each option of a role using them (the most of them, where the memory rows bind); they
  join ``Σ held`` in every phase's row, and a bare row ``Σ held + H_q ≤ capacity`` holds each
  slot. The roles sharing groups agree on tp × pp: ``x ⇒ L[q, g, (tp, pp)]``, at most one
  ``L`` per slot and name.
* Processes on a GPU (:func:`model.rlhf.step.process_bytes`): ``P[q, name] ≥ x`` for each option
  of a role in a shared process; ``PROCESS_BYTES × (Σ x of the roles with a process of their
  own + Σ P − Σ_n y[q, n])`` joins ``Σ held`` in every row of the slot (a used slot has at least
  one process, so the bracket counts its processes less one).
* Roles that cannot share a pool (:func:`model.rlhf.split.pool_refusal`: a one-step off-policy
  engine beside a role other than the actor; under ``deepspeed`` any set of two or more roles
  but OpenRLHF's three): for every refused set S of roles and every slot, ``Σ_{r ∈ S} on_r −
  Σ_{r ∉ S} on_r ≤ |S| − 1`` (``on_r``: role r's options on the slot, 0 or 1) — the slot does
  not hold exactly S. The model asks the rule about each of the 2^R sets once.
* The engine without the actor (:mod:`model.rlhf.split`): ``Z_q = E_q ∧ ¬A_q`` and ``W_q =
  A_q ∧ ¬E_q`` (three rows each). The model-update communicator ``× Z_q`` (the engine's side)
  and ``× W_q`` (the actor's, :func:`model.rlhf.split.update_group`) joins ``Σ held`` in every
  row of the slot, and ``Σ held + Σ (rollout + receive buffer)·x of the engine ≤ capacity``
  binds where ``Z_q``.
* OpenRLHF's scoring split (``deepspeed``, :func:`model.rlhf.openrlhf.split_refusal`): a
  scoring role's options of scoring micro-batch t (:attr:`~model.rlhf.roles.RoleCost.split_tokens`,
  at its dp) only beside an actor option of the same t: ``Σ x of the role's options of t ≤ Σ x of
  the actor's of t``.
* The weight sync's time by placement (:func:`model.rlhf.sync_time.placement_sync_seconds`):
  ``G_q ≥ 0``, ``G_q ≥ Σ shared·x − S·(1 − E_q)`` over the actor's options on slot q, and
  ``G_q ≥ Σ broadcast·x + Σ gather·x − (D + G)·(A_q + 1 − E_q)`` over the engine's options on
  the slot and every actor option (S, D, G: the largest shared sync, broadcast and gather) —
  the actor's shared sync where both share the slot, the engine's broadcast and the actor's
  gather where the engine is there alone of the two, else nothing; tight at the optimum.
* Time (integer nanoseconds): ``W[p, q] = Σ seconds·x`` (+ ``G_q`` in the rollout phase);
  ``M_p ≥ W[p, q]``. Synchronous: ``τ = M_rollout + M_scoring + M_training``; one-step
  off-policy: ``τ ≥ Σ_p W[p, q]`` for every slot and ``τ ≥ M_scoring + M_training + Σ_q G_q``
  (the weight sync blocks the trainer too, :mod:`model.rlhf.off_policy`). Minimise τ: at the optimum every bound is tight where
  it binds, so τ is the step time.
* Variants for the explanation: ``colocate=True`` keeps every role on slot 0; ``colocate=False``
  keeps the rollout engine off the actor's pool.
* Ties: a second solve fixes τ and minimises the choices' rank, lexicographic by role (slot, pool
  size, option order), so the answer is unique.
* Status: ``optimal`` (proven), ``feasible`` (a time limit stopped the proof; the best found),
  ``infeasible`` (proven: nothing fits) or ``unknown`` (a time limit stopped it before any
  answer: nothing is known).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

from ortools.sat.python import cp_model

from trainplan.model.rlhf.roles import RoleCost, RoleOption
from trainplan.model.rlhf.spec import PHASES, Role
from trainplan.model.rlhf.split import awake_apart, pool_refusal
from trainplan.model.rlhf.step import PROCESS_BYTES
from trainplan.optimizer.rlhf.tables import NS, RLHFTables, int_costs, receive_int, sync_ns
from trainplan.optimizer.solver import solve

__all__ = ["PlacementModel", "PlacementChoice", "int_costs", "NS"]


@dataclass(frozen=True, slots=True)
class PlacementChoice:
    """A solution: per role (spec order) its slot and (option, cost); the objective in ns."""

    slots: tuple[int, ...]
    chosen: tuple[tuple[RoleOption, RoleCost], ...]
    objective_ns: int
    status: str
    """``optimal`` or ``feasible`` (a time limit stopped the proof)."""


class PlacementModel:
    """The CP-SAT model over a problem's tables (see the module docstring)."""

    status: str = "unknown"
    """The last :meth:`solve`'s status (module docstring)."""
    wall_s: float = 0.0
    """The last :meth:`solve`'s seconds."""

    def __init__(self, tables: RLHFTables, colocate: bool | None = None) -> None:
        self.tables = tables
        problem = tables.problem
        roles = tables.roles
        R = len(roles)
        K = 1 if colocate else R
        cap = problem.device.usable_bytes(True)
        host_cap = math.floor(Fraction(problem.spec.host_memory_bytes, problem.node))
        m = self.model = cp_model.CpModel()
        self.vars: list[tuple[int, int, int, int, cp_model.IntVar]] = []
        """(role index, slot, size, option index, Boolean)."""
        self.y = {(q, n): m.new_bool_var(f"y{q}_{n}") for q in range(K) for n in tables.sizes}
        per_role: list[list[cp_model.IntVar]] = [[] for _ in range(R)]
        on = {(q, n): [] for q in range(K) for n in tables.sizes}  # type: dict[tuple[int, int], list]
        self.ranks: list[list[int]] = [[] for _ in range(R)]
        for ri, role in enumerate(roles):
            rank = 0
            for q in range(min(K, ri + 1)):
                for n in tables.sizes:
                    for oi, _ in enumerate(tables.options[role][n]):
                        v = m.new_bool_var(f"x{ri}_{q}_{n}_{oi}")
                        self.vars.append((ri, q, n, oi, v))
                        per_role[ri].append(v)
                        self.ranks[ri].append(rank)
                        rank += 1
                        on[(q, n)].append(v)
                        m.add_implication(v, self.y[(q, n)])
        for ri in range(R):
            m.add_exactly_one(per_role[ri])
        self._split(roles)
        for (q, n), xs in on.items():
            if xs:
                m.add_bool_or(xs).only_enforce_if(self.y[(q, n)])
            else:
                m.add(self.y[(q, n)] == 0)
        for q in range(K):
            m.add_at_most_one(self.y[(q, n)] for n in tables.sizes)
            if q:  # slots in order of first use: q only after q − 1
                m.add(
                    sum(self.y[(q, n)] for n in tables.sizes)
                    <= sum(self.y[(q - 1, n)] for n in tables.sizes)
                )
        m.add(sum(n * self.y[(q, n)] for q in range(K) for n in tables.sizes) <= problem.gpus)
        ints = {
            (ri, n, oi): int_costs(c)
            for ri, role in enumerate(roles)
            for n in tables.sizes
            for oi, (_, c) in enumerate(tables.options[role][n])
        }
        self._constrain(roles, K, cap, host_cap, ints, colocate)

    def _constrain(self, roles, K, cap, host_cap, ints, colocate) -> None:
        m = self.model
        by_slot: dict[int, list[tuple[int, int, int, cp_model.IntVar]]] = {q: [] for q in range(K)}
        for ri, q, n, oi, v in self.vars:
            by_slot[q].append((ri, n, oi, v))
        horizon = sum(
            max((sum(t[3]) for key, t in ints.items() if key[0] == ri), default=0)
            for ri in range(len(roles))
        )
        self.sync_top = self._sync_setup()
        horizon += self.sync_top
        self.phase_max = [m.new_int_var(0, horizon, f"M_{p}") for p in PHASES]
        work: dict[int, list[cp_model.LinearExpr]] = {}
        for q, entries in by_slot.items():
            held = sum(ints[(ri, n, oi)][0] * v for ri, n, oi, v in entries)
            held += self._resident(q, entries, ints, cap)
            held += self._processes(q, entries)
            held += self._split_engine(q, entries, held, cap)
            if entries:
                m.add(held <= cap)
            for k, _ in enumerate(PHASES):
                for ri in {e[0] for e in entries}:
                    mine = [
                        (ints[(r2, n, oi)][1][k] + ints[(r2, n, oi)][4][k], v)
                        for r2, n, oi, v in entries
                        if r2 == ri
                    ]
                    if any(b for b, _ in mine):
                        m.add(held + sum(b * v for b, v in mine) <= cap)
            self._sync(q, entries, ints, held, cap)
            if entries:
                host = sum(ints[(ri, n, oi)][2] * v for ri, n, oi, v in entries)
                m.add(host <= host_cap)
                self._sleep_host(q, entries, host, host_cap)
            work[q] = [
                sum(ints[(ri, n, oi)][3][k] * v for ri, n, oi, v in entries) for k in range(3)
            ]
            sync_q = self._sync_time(q, entries)
            self.sync_terms.append(sync_q)
            work[q][0] += sync_q
            for k in range(3):
                m.add(self.phase_max[k] >= work[q][k])
        self._refused_pools(by_slot)
        if colocate is False:
            ra, ac = roles.index(Role.ROLLOUT), roles.index(Role.ACTOR)
            for entries in by_slot.values():
                pair = [v for ri, _, _, v in entries if ri in (ra, ac)]
                if pair:
                    on_r = sum(v for ri, _, _, v in entries if ri == ra)
                    on_a = sum(v for ri, _, _, v in entries if ri == ac)
                    m.add(on_r + on_a <= 1)
        self.tau = m.new_int_var(0, 3 * horizon, "step_ns")
        M = self.phase_max
        if self.tables.problem.spec.off_policy == 0:
            m.add(self.tau == M[0] + M[1] + M[2])
        else:
            for q in work:
                m.add(self.tau >= sum(work[q]))
            # the engine's weight sync blocks the trainer too (model.rlhf.off_policy)
            m.add(self.tau >= M[1] + M[2] + sum(self.sync_terms))

    def _sync_ints(self, role: Role) -> dict[tuple[int, int], tuple[int, int, int]]:
        """:func:`optimizer.rlhf.table_ints.sync_ns` of each option of ``role``, by (size,
        option index); empty where the step has no such role."""
        by = self.tables.options.get(role, {})
        return {(n, oi): sync_ns(c) for n, opts in by.items() for oi, (_, c) in enumerate(opts)}

    def _sync_setup(self) -> int:
        """Starts the slots' weight-sync terms (:meth:`_sync_time`) and returns the most ns any
        placement's sync can take: the largest shared sync, or the largest broadcast plus the
        largest gather (module docstring)."""
        self.sync_terms: list[cp_model.LinearExpr | int] = []
        engine, actor = self._sync_ints(Role.ROLLOUT), self._sync_ints(Role.ACTOR)
        top_d = max((t[0] for t in engine.values()), default=0)
        top_g = max((t[1] for t in actor.values()), default=0)
        top_s = max((t[2] for t in actor.values()), default=0)
        return max(top_s, top_d + top_g)

    def _sync_time(self, q, entries) -> cp_model.LinearExpr | int:
        """Slot ``q``'s weight-sync ns in the rollout phase (module docstring): ``G_q ≥ Σ
        shared·x`` of the actor's options on the slot ``− S·(1 − E_q)``, and ``G_q ≥ Σ
        broadcast·x`` of the engine's on the slot ``+ Σ gather·x`` of every actor option
        ``− (D + G)·(A_q + 1 − E_q)``, ``G_q ≥ 0``: the shared sync where the engine and the
        actor share the slot, the broadcast and the gather where the engine is there without the
        actor, else 0 (:func:`model.rlhf.sync_time.placement_sync_seconds`)."""
        m, roles = self.model, self.tables.roles
        if Role.ROLLOUT not in roles or not self.sync_top:
            return 0
        ra = roles.index(Role.ROLLOUT)
        ac = roles.index(Role.ACTOR) if Role.ACTOR in roles else -1
        engine, actor = self._sync_ints(Role.ROLLOUT), self._sync_ints(Role.ACTOR)
        on_e = sum(v for ri, _, _, v in entries if ri == ra)
        on_a = sum(v for ri, _, _, v in entries if ri == ac)
        top_d = max((t[0] for t in engine.values()), default=0)
        top_g = max((t[1] for t in actor.values()), default=0)
        top_s = max((t[2] for t in actor.values()), default=0)
        g = m.new_int_var(0, self.sync_top, f"G{q}")
        shared = sum(actor[(n, oi)][2] * v for ri, n, oi, v in entries if ri == ac)
        m.add(g >= shared - top_s * (1 - on_e))
        sent = sum(engine[(n, oi)][0] * v for ri, n, oi, v in entries if ri == ra)
        gathered = sum(actor[(n, oi)][1] * v for ri, _, n, oi, v in self.vars if ri == ac)
        m.add(g >= sent + gathered - (top_d + top_g) * (on_a + 1 - on_e))
        return g

    def _refused_pools(self, by_slot) -> None:
        """No slot holds a set of roles that :func:`model.rlhf.split.pool_refusal` refuses
        (module docstring): for each such set S, ``Σ_{r ∈ S} on_r − Σ_{r ∉ S} on_r ≤ |S| − 1``,
        ``on_r`` the sum of role r's options on the slot."""
        m, roles = self.model, self.tables.roles
        off = self.tables.problem.spec.off_policy
        engines = self.tables.options.get(Role.ROLLOUT, {})
        openrlhf = awake_apart([c for by in engines.values() for _, c in by])
        refused = [
            s
            for k in range(2, len(roles) + 1)
            for s in itertools.combinations(range(len(roles)), k)
            if pool_refusal({roles[i] for i in s}, roles, off, openrlhf)
        ]
        for entries in by_slot.values():
            by_role: dict[int, list[cp_model.IntVar]] = {}
            for ri, _, _, v in entries:
                by_role.setdefault(ri, []).append(v)
            on = {ri: sum(xs) for ri, xs in by_role.items()}
            for s in refused:
                if all(ri in on for ri in s):
                    rest = sum(b for ri, b in on.items() if ri not in s)
                    m.add(sum(on[ri] for ri in s) - rest <= len(s) - 1)

    def _split(self, roles) -> None:
        """OpenRLHF's scoring split: a scoring role's micro-batch is the actor's (module
        docstring)."""
        if Role.ACTOR not in roles:
            return
        ac = roles.index(Role.ACTOR)
        by: dict[tuple[int, int], list[cp_model.IntVar]] = {}
        for ri, _, n, oi, v in self.vars:
            _, cost = self.tables.options[roles[ri]][n][oi]
            if cost.split_tokens and (ri == ac or "scoring" in cost.phases):
                by.setdefault((ri, cost.split_tokens), []).append(v)
        for (ri, tokens), xs in by.items():
            if ri != ac:
                self.model.add(sum(xs) <= sum(by.get((ac, tokens), [])))

    def _sync(self, q, entries, ints, held, cap) -> None:
        """Slot ``q``'s weight-sync row, binding where the engine and the actor share it (module
        docstring)."""
        m, roles = self.model, self.tables.roles
        if Role.ROLLOUT not in roles or Role.ACTOR not in roles:
            return
        ra, ac = roles.index(Role.ROLLOUT), roles.index(Role.ACTOR)
        if not any(ints[(ri, n, oi)][6] for ri, n, oi, _ in entries if ri == ac):
            return
        both = m.new_bool_var(f"B{q}")
        engine = sum(v for ri, _, _, v in entries if ri == ra)
        actor = sum(v for ri, _, _, v in entries if ri == ac)
        m.add(engine + actor - 1 <= both)
        sync = sum(ints[(ri, n, oi)][6] * v for ri, n, oi, v in entries)
        m.add(held + sync <= cap).only_enforce_if(both)

    def _sleep_host(self, q, entries, host, host_cap) -> None:
        """Slot ``q``'s host row with the sleeping engine's copy, binding where the engine and the
        actor share it (module docstring); none where no engine option has one."""
        m, roles = self.model, self.tables.roles
        if Role.ROLLOUT not in roles or Role.ACTOR not in roles:
            return
        ra, ac = roles.index(Role.ROLLOUT), roles.index(Role.ACTOR)
        copies = [
            (math.ceil(self.tables.options[roles[ri]][n][oi][1].sleep_host_bytes), v)
            for ri, n, oi, v in entries
            if ri == ra
        ]
        if not any(b for b, _ in copies):
            return
        both = m.new_bool_var(f"C{q}")
        engine = sum(v for ri, _, _, v in entries if ri == ra)
        actor = sum(v for ri, _, _, v in entries if ri == ac)
        m.add(engine + actor - 1 <= both)
        m.add(host + sum(b * v for b, v in copies) <= host_cap).only_enforce_if(both)

    def _split_engine(self, q, entries, held, cap) -> cp_model.LinearExpr:
        """Slot ``q``'s rules for an engine without the actor (module docstring): ``Z_q``, ``W_q``
        and the model-update group's communicator on either side (returned, for every row of the
        slot) and the receive row."""
        m, roles = self.model, self.tables.roles
        if Role.ROLLOUT not in roles or Role.ACTOR not in roles:
            return 0  # type: ignore[return-value]
        ra, ac = roles.index(Role.ROLLOUT), roles.index(Role.ACTOR)
        engine = [(self.tables.options[Role.ROLLOUT][n][oi][1], v) for ri, n, oi, v in entries
                  if ri == ra]  # fmt: skip
        actor = [(self.tables.options[Role.ACTOR][n][oi][1], v) for ri, n, oi, v in entries
                 if ri == ac]  # fmt: skip
        on_e, on_a = sum(v for _, v in engine), sum(v for _, v in actor)
        total: cp_model.LinearExpr | int = 0
        if any(c.receive_bytes for c, _ in engine):
            z = self._only(f"Z{q}", on_e, on_a)
            total += max(math.ceil(c.receive_resident_bytes) for c, _ in engine) * z
            receive = sum(receive_int(c) * v for c, v in engine)
            m.add(held + total + receive <= cap).only_enforce_if(z)
        if any(c.send_resident_bytes for c, _ in actor):
            w = self._only(f"W{q}", on_a, on_e)  # the actor's side, on a slot without the engine
            total += max(math.ceil(c.send_resident_bytes) for c, _ in actor) * w
        return total  # type: ignore[return-value]

    def _only(self, name, on, off) -> cp_model.IntVar:
        """A 0/1 variable ``on ∧ ¬off`` of two 0/1 sums (three rows)."""
        m = self.model
        b = m.new_bool_var(name)
        m.add(b >= on - off)
        m.add(b <= on)
        m.add(b <= 1 - off)
        return b

    def _resident(self, q, entries, ints, cap) -> cp_model.LinearExpr:
        """Slot ``q``'s bytes held in every phase, and its shared groups' one tp × pp (module
        docstring)."""
        m, roles = self.model, self.tables.roles
        total: cp_model.LinearExpr | int = 0
        shared: dict[str, list] = {}
        for ri, n, oi, v in entries:
            _, cost = self.tables.options[roles[ri]][n][oi]
            if cost.groups:
                shared.setdefault(cost.groups, []).append((cost, ints[(ri, n, oi)][5], v))
            else:
                total += ints[(ri, n, oi)][5] * v
        for g, users in shared.items():
            top = m.new_int_var(0, max(b for _, b, _ in users), f"S{q}_{g}")
            layouts: dict[tuple[int, int], cp_model.IntVar] = {}
            for cost, b, v in users:
                if b:
                    m.add(top >= b * v)
                key = (cost.option.tp, cost.option.pp)
                if key not in layouts:
                    layouts[key] = m.new_bool_var(f"L{q}_{g}_{key[0]}_{key[1]}")
                m.add_implication(v, layouts[key])
            m.add_at_most_one(layouts.values())
            total += top
        return total  # type: ignore[return-value]

    def _processes(self, q, entries) -> cp_model.LinearExpr:
        """Slot ``q``'s bytes for its processes beyond the first (module docstring)."""
        m, roles = self.model, self.tables.roles
        count: cp_model.LinearExpr | int = 0
        shared: dict[str, cp_model.IntVar] = {}
        for ri, n, oi, v in entries:
            _, cost = self.tables.options[roles[ri]][n][oi]
            if not cost.process:
                count += v
                continue
            if cost.process not in shared:
                shared[cost.process] = m.new_bool_var(f"P{q}_{cost.process}")
            m.add_implication(v, shared[cost.process])
        used = sum(self.y[(q, n)] for n in self.tables.sizes)
        return PROCESS_BYTES * (count + sum(shared.values()) - used)  # type: ignore[return-value]

    def _read(self, solver: cp_model.CpSolver, status: str) -> PlacementChoice:
        roles = self.tables.roles
        slots: list[int] = [0] * len(roles)
        chosen: list[tuple[RoleOption, RoleCost]] = [None] * len(roles)  # type: ignore[list-item]
        for ri, q, n, oi, v in self.vars:
            if solver.value(v):
                slots[ri] = q
                chosen[ri] = self.tables.options[roles[ri]][n][oi]
        return PlacementChoice(tuple(slots), tuple(chosen), int(solver.value(self.tau)), status)

    def solve(self, time_limit_s: float | None = None, workers: int = 2) -> PlacementChoice | None:
        """Minimise the step time, then the tie rank, within ``time_limit_s`` seconds in all (the
        tie-break gets what the first solve leaves); None when nothing was found —
        :attr:`status` says whether that is proven (``infeasible``) or not (``unknown``)."""
        m = self.model
        m.minimize(self.tau)
        limit = None if time_limit_s is None else max(time_limit_s, 1e-3)
        done = solve(m, time_limit_s=limit, workers=workers)
        self.wall_s, self.status = done.seconds, done.status
        if not done.found:
            return None
        first = self._read(done.solver, self.status)
        left = None if time_limit_s is None else time_limit_s - done.seconds
        if left is not None and left <= 0:
            return first
        m.add(self.tau == first.objective_ns)
        base = max(len(r) for r in self.ranks) + 1
        n_roles = len(self.ranks)
        per_role = {ri: iter(self.ranks[ri]) for ri in range(n_roles)}
        key = sum(
            next(per_role[ri]) * base ** (n_roles - 1 - ri) * v for ri, _, _, _, v in self.vars
        )
        m.minimize(key)
        m.clear_hints()
        for *_, v in self.vars:
            m.add_hint(v, bool(done.solver.value(v)))
        tie = solve(m, time_limit_s=left, workers=workers)
        self.wall_s += tie.seconds
        if not tie.found:
            return first  # the tie rank unproven within the limit: the first answer stands
        return self._read(tie.solver, self.status)
