"""The RLHF placement and parallelism search (issue 12): tables → CP-SAT → the best placement,
the best colocated and the best split one beside it (why it colocates or splits), each answer
re-evaluated by :func:`model.rlhf.step.compose`; and the exhaustive oracle the tests hold the
solver to.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from trainplan.model.durations import step_text
from trainplan.model.errors import InfeasibleError
from trainplan.model.rlhf.off_policy import off_policy_seconds
from trainplan.model.rlhf.openrlhf import sleep_host, split_refusal
from trainplan.model.rlhf.roles import RoleCost, RoleOption
from trainplan.model.rlhf.spec import PHASES, Role
from trainplan.model.rlhf.split import awake_apart, pool_refusal, receiving_engine, update_group
from trainplan.model.rlhf.step import (
    StepPlan,
    compose,
    pool_resident,
    process_bytes,
    sync_peak,
)
from trainplan.optimizer.rlhf.cpsat import NS, PlacementChoice, PlacementModel, int_costs
from trainplan.optimizer.rlhf.explain import explain
from trainplan.optimizer.rlhf.table_ints import placement_sync_ns
from trainplan.optimizer.rlhf.tables import (
    RLHFProblem,
    RLHFTables,
    build_tables,
    dominant,
    receive_int,
    resident_int,
)

__all__ = [
    "Placement",
    "PlacementResult",
    "search_placement",
    "placement_result",
    "enumerate_placement",
    "objective_ns",
    "placement_plan",
]


@dataclass(frozen=True, slots=True)
class Placement:
    """One placement: per role (spec order) its option, its pool, and the step it makes."""

    options: tuple[RoleOption, ...]
    """Each role's option, in the roles' order."""
    pool_of: tuple[int, ...]
    """Each role's pool (numbered in order of first use)."""
    plan: StepPlan
    """The placement re-composed by the cost model (:func:`model.rlhf.step.compose`)."""
    objective_ns: int
    """The solver's step time, integer ns (per-role seconds rounded to ns, then the rules)."""

    @property
    def colocated(self) -> bool:
        return self.plan.colocated


@dataclass(frozen=True, slots=True)
class PlacementResult:
    status: str
    """``optimal`` (proven within the model), ``feasible`` (a time limit stopped the search: the
    best found) or ``unknown`` (a time limit stopped it before any placement was found: not
    proven infeasible). Proven infeasibility is an InfeasibleError."""
    best: Placement | None
    """The fastest placement found (None only when ``unknown``)."""
    colocated: Placement | None
    """The best placement with every role on all GPUs (None: none fits)."""
    split: Placement | None
    """The best with the rollout engine on GPUs of its own (None: none fits)."""
    reason: str
    """Why it colocates or splits, with the alternative's step time."""
    tables_seconds: float
    """Seconds spent costing the options."""
    solve_seconds: float
    """Seconds of the three CP-SAT solves (best, colocated, split)."""
    options: int
    """Role options that fit a GPU on their own and no other option of their role and pool size
    dominates (the model's Booleans, per pool slot)."""
    tried: int
    """Role options costed."""
    explanation: list[str] = field(default_factory=list)
    complete: bool = True
    """Every option of every pool size was costed (False: the time limit stopped the tables)."""
    time_limit_s: float | None = None
    """The limit the search ran under (None: none)."""
    variant_status: dict[str, str] = field(default_factory=dict)
    """The colocated and the split solves' statuses (``optimal``, ``feasible``, ``infeasible``:
    none fits, ``unknown``: none found in time, ``beyond``: none within
    :data:`ALTERNATIVES_WITHIN` times the incumbent)."""
    skipped: int = 0
    """Options not costed: they could not come within the bound."""
    unproven: str = ""
    """Why the status is ``feasible`` though no time limit stopped the search: empty, or that
    CP-SAT called the unrestricted solve optimal while a restricted one (colocated or split, a
    subset of its placements over the same tables) found a faster placement — the solver's proof
    is wrong, the faster placement is the answer (:func:`placement_result`; the presolve fault
    :data:`optimizer.solver.PRESOLVE_INCLUSION_WORK_LIMIT` avoids)."""


def _renumber(slots: tuple[int, ...]) -> tuple[int, ...]:
    """Pools numbered 0, 1, … in order of first use."""
    seen: dict[int, int] = {}
    return tuple(seen.setdefault(s, len(seen)) for s in slots)


def placement_plan(
    problem: RLHFProblem, costs: tuple[RoleCost, ...], slots: tuple[int, ...]
) -> StepPlan:
    """:func:`model.rlhf.step.compose` of a placement on the problem's cluster."""
    return compose(
        costs,
        _renumber(slots),
        problem.device.usable_bytes(True),
        problem.spec.host_memory_bytes,
        problem.node,
        problem.spec.off_policy,
    )


def _placement(problem: RLHFProblem, choice: PlacementChoice) -> Placement:
    costs = tuple(c for _, c in choice.chosen)
    plan = placement_plan(problem, costs, choice.slots)
    return Placement(
        tuple(o for o, _ in choice.chosen), _renumber(choice.slots), plan, choice.objective_ns
    )


def objective_ns(
    problem: RLHFProblem, costs: tuple[RoleCost, ...], slots: tuple[int, ...]
) -> int | None:
    """The solver's objective for a placement, from the same integers (None: it does not fit,
    its pools need more GPUs than the cluster has, a pool's roles cannot share it,
    :func:`model.rlhf.split.pool_refusal`, or a scoring role is off the actor's scoring
    micro-batch, :func:`model.rlhf.openrlhf.split_refusal`)."""
    if split_refusal(costs):
        return None
    cap = problem.device.usable_bytes(True)
    host_cap = problem.spec.host_memory_bytes // problem.node
    pools: dict[int, list[tuple]] = {}
    by_pool: dict[int, list[RoleCost]] = {}
    for c, q in zip(costs, slots, strict=True):
        pools.setdefault(q, []).append((c.option.gpus, int_costs(c)))
        by_pool.setdefault(q, []).append(c)
    if sum(members[0][0] for members in pools.values()) > problem.gpus:
        return None
    busy = []
    step, openrlhf = [c.option.role for c in costs], awake_apart(costs)
    for q, members in pools.items():
        if len({g for g, _ in members}) != 1:
            return None
        resident = pool_resident(by_pool[q], resident_int)
        roles = {c.option.role for c in by_pool[q]}
        if resident is None or pool_refusal(roles, step, problem.spec.off_policy, openrlhf):
            return None
        receiver = receiving_engine(by_pool[q])
        resident += math.ceil(update_group(by_pool[q], step))
        held = resident + process_bytes(by_pool[q]) + sum(i[0] for _, i in members)
        if receiver is not None and held + receive_int(receiver) > cap:
            return None
        for k in range(3):
            if held + max(i[1][k] + i[4][k] for _, i in members) > cap:
                return None
        if sync_peak(by_pool[q], held) and held + sum(i[6] for _, i in members) > cap:
            return None
        asleep = sleep_host(by_pool[q], lambda c: math.ceil(c.sleep_host_bytes))
        if sum(i[2] for _, i in members) + asleep > host_cap:
            return None
        row = [sum(i[3][k] for _, i in members) for k in range(3)]
        row[0] += placement_sync_ns(by_pool[q], costs)  # the sync by placement
        busy.append(row)
    phase = [max(row[k] for row in busy) for k in range(3)]
    if problem.spec.off_policy == 0:
        return sum(phase)
    sync = max(placement_sync_ns(members, costs) for members in by_pool.values())
    return int(off_policy_seconds(busy, sync))  # integer ns in, out


def enumerate_placement(
    tables: RLHFTables, colocate: bool | None = None
) -> tuple[int, tuple] | None:
    """The exhaustive oracle: every partition of the roles into pools, every size of each pool,
    every option of each role — the least :func:`objective_ns` (None when nothing fits). Slow:
    for the tests' small clusters."""
    problem, roles = tables.problem, tables.roles
    best: tuple[int, tuple] | None = None
    for slots in _partitions(len(roles)):
        if colocate and max(slots) > 0:
            continue
        ra, ac = roles.index(Role.ROLLOUT), roles.index(Role.ACTOR)
        if colocate is False and slots[ra] == slots[ac]:
            continue
        pools = max(slots) + 1
        for sizes in itertools.product(tables.sizes, repeat=pools):
            if sum(sizes) > problem.gpus:
                continue
            per_role = [tables.options[roles[i]][sizes[slots[i]]] for i in range(len(roles))]
            for combo in itertools.product(*per_role):
                value = objective_ns(problem, tuple(c for _, c in combo), slots)
                if value is not None and (best is None or value < best[0]):
                    best = (value, (slots, combo))
    return best


def _partitions(n: int):
    """Slot numberings of n roles where each role's slot is at most one above the largest
    before it (every set partition once)."""

    def rec(prefix: list[int]):
        if len(prefix) == n:
            yield tuple(prefix)
            return
        top = max(prefix, default=-1)
        for s in range(top + 2):
            yield from rec(prefix + [s])

    yield from rec([])


def _reason(
    best: Placement,
    coloc: Placement | None,
    split: Placement | None,
    statuses: dict[bool | None, str],
    tables: RLHFTables,
) -> str:
    def pct(a: Placement, b: Placement) -> str:
        return f"{(a.plan.step_s / b.plan.step_s - 1) * 100:+.0f}%"

    def none(colocate: bool) -> str:
        st = statuses[colocate]
        if st == "infeasible":
            return "fits"
        if st == "beyond":
            bound = (tables.bound_ns or 0) / NS
            return f"takes under {step_text(bound)} per step ({ALTERNATIVES_WITHIN}× the best colocated)"
        return "was found within the time limit (not ruled out)"

    if best.colocated:
        if split is None:
            return (
                f"colocates: no placement with the rollout engine on GPUs of its own {none(False)}"
            )
        r = split.pool_of[0]
        return (
            f"colocates: every GPU works in every phase; the best split (rollout on "
            f"{split.plan.pools[r].gpus:,} GPUs) takes {step_text(split.plan.step_s)} per step "
            f"({pct(split, best)}): a pool of its own idles while the others work"
            + (" (synchronous step)" if best.plan.off_policy == 0 else "")
        )
    if coloc is None:
        if statuses[True] != "infeasible":
            return f"splits: no colocated placement {none(True)}"
        return (
            "splits: no colocated placement fits (the engine's memory fraction beside the "
            "training roles' state exceeds a GPU)"
        )
    how = (
        "the rollout of the next step runs beside scoring and training (one-step off-policy)"
        if best.plan.off_policy
        else "each role gets a pool and parallelism that suit it"
    )
    return (
        f"splits: {how}; the best colocated placement takes {step_text(coloc.plan.step_s)} per step "
        f"({pct(coloc, best)})"
    )


TABLES_SHARE = 0.6
"""Of a time limit, the share table building may take before the solves start on what it has
(the largest pools come first, so a colocated answer is among them)."""

ALTERNATIVES_WITHIN = 2
"""The best colocated and split placements are shown exactly when they take at most this many
times the best colocated placement on all GPUs (the incumbent, solved first): options whose
own seconds must exceed that are not costed (:func:`optimizer.rlhf.tables.build_tables`), which
bounds the work on large clusters; an alternative beyond it is said to be beyond it."""


def search_placement(
    problem: RLHFProblem,
    time_limit_s: float | None = None,
    workers: int = 2,
    progress: Callable[[str, int, int], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> PlacementResult:
    """The fastest placement that fits, proven optimal within the model, with the best colocated
    and split placements for the explanation. ``time_limit_s`` bounds the whole search, table
    building included: out of time, the status is ``feasible`` with the best found, or
    ``unknown`` with nothing found — never ``infeasible``. ``progress(stage, done, total)``:
    ``tables`` per (pool size, role), then ``solve`` per CP-SAT solve.

    The colocated placement on all GPUs is solved as soon as the largest pool is costed; its
    step × :data:`ALTERNATIVES_WITHIN` bounds the rest (module :mod:`optimizer.rlhf.tables`).

    Raises
    ------
    InfeasibleError
        No placement fits (proven: every option tabulated, CP-SAT infeasible); the explanation
        names the roles that fit no pool on their own.
    """
    clock = clock or time.perf_counter
    start = clock()
    deadline = None if time_limit_s is None else start + time_limit_s

    def left(share: float) -> float | None:
        return None if deadline is None else (deadline - clock()) * share

    def incumbent(first: RLHFTables) -> int | None:
        budget = left(0.5)
        if budget is not None and budget <= 0:
            return None
        found = PlacementModel(first, colocate=True).solve(budget, workers)
        return None if found is None else ALTERNATIVES_WITHIN * found.objective_ns

    on_tables = (lambda done, total: progress("tables", done, total)) if progress else None
    tables_by = None if time_limit_s is None else start + TABLES_SHARE * time_limit_s
    tables = build_tables(problem, clock, tables_by, on_tables, incumbent)
    pruned = dominant(tables)
    t0 = clock()
    answers, statuses = _solve_three(pruned, left, workers, progress)
    solve_s = clock() - t0
    return placement_result(problem, tables, pruned, answers, statuses, solve_s, time_limit_s)


def placement_result(
    problem: RLHFProblem,
    tables: RLHFTables,
    pruned: RLHFTables,
    answers: dict[bool | None, PlacementChoice | None],
    statuses: dict[bool | None, str],
    solve_s: float,
    time_limit_s: float | None,
) -> PlacementResult:
    """The :class:`PlacementResult` of the three solves (:func:`_solve_three`'s ``answers`` and
    ``statuses``, keys None: the best, True: colocated, False: split) on the ``pruned`` tables:
    each answer recomposed exactly (:func:`_placement`), those beyond
    :data:`ALTERNATIVES_WITHIN` dropped; ``optimal`` only when the first solve was proven and no
    variant beat it (one that does beats a proof: :attr:`PlacementResult.unproven` says so).

    Raises
    ------
    InfeasibleError
        No placement fits (proven): the explanation names the roles that fit no pool alone.
    """
    raw, statuses = statuses, _qualified(statuses, answers, tables)
    if statuses[None] == "infeasible":
        raise InfeasibleError("rlhf-plan: no placement fits", explain(tables))
    found = {k: _placement(problem, c) for k, c in answers.items() if c is not None}
    found = {k: p for k, p in found.items() if statuses[k] != "beyond"}
    for p in found.values():
        if not p.plan.fits:  # pragma: no cover - a rounding bug
            raise AssertionError("rlhf-plan: the solver's placement does not fit when recomposed")
    best = min(found.values(), key=lambda p: p.objective_ns, default=None)
    status = statuses[None] if None in found else ("feasible" if best else "unknown")
    unproven = ""
    if None in found and best is not None and best.objective_ns < found[None].objective_ns:
        status = "feasible"  # a variant beat the first solve: that one was not the optimum
        if raw[None] == "optimal":  # ... though CP-SAT said so: its proof is wrong
            kind = "colocated" if found.get(True) is best else "split"
            unproven = (
                f"CP-SAT called the unrestricted solve optimal at "
                f"{found[None].objective_ns / NS:,.3f} s, yet the {kind} solve, a restriction of "
                f"it, found {best.objective_ns / NS:,.3f} s: the solver's proof is wrong; the "
                "faster placement is shown, not proven optimal"
            )
    return PlacementResult(
        status,
        best,
        found.get(True),
        found.get(False),
        _reason(best, found.get(True), found.get(False), statuses, tables)
        if best
        else _unknown(tables),
        tables.seconds,
        solve_s,
        pruned.num_options,
        tables.tried,
        complete=tables.complete,
        time_limit_s=time_limit_s,
        variant_status={"colocated": statuses[True], "split": statuses[False]},
        skipped=tables.skipped,
        unproven=unproven,
    )


def _solve_three(
    tables: RLHFTables,
    left: Callable[[float], float | None],
    workers: int,
    progress: Callable[[str, int, int], None] | None,
) -> tuple[dict[bool | None, PlacementChoice | None], dict[bool | None, str]]:
    """The best, the best colocated and the best split placement (keys None, True, False) and
    each solve's status; ``left(share)``: that share of the time left (None: no limit) — 60 %
    for the first, half the rest for the second, the rest for the third."""
    answers: dict[bool | None, PlacementChoice | None] = {}
    statuses: dict[bool | None, str] = {}
    for k, colocate in enumerate((None, True, False)):
        if progress:
            progress("solve", k, 3)
        share = (0.6, 0.5, 1.0)[k]
        answers[colocate], statuses[colocate] = None, "unknown"
        if k and statuses[None] == "infeasible":  # nothing fits: nor do its kinds
            statuses[colocate] = "infeasible"
            continue
        budget = left(share)
        if budget is not None and budget <= 0:
            continue
        model = PlacementModel(tables, colocate=colocate)
        budget = left(share)  # less what building the model took
        if budget is None or budget > 0:
            answers[colocate], statuses[colocate] = model.solve(budget, workers), model.status
    if progress:
        progress("solve", 3, 3)
    return answers, statuses


def _qualified(
    statuses: dict[bool | None, str],
    answers: dict[bool | None, PlacementChoice | None],
    tables: RLHFTables,
) -> dict[bool | None, str]:
    """The solves' statuses as they hold for every placement, not only the tabulated ones:
    tables cut short by the time limit prove nothing infeasible nor optimal; under an
    incumbent's bound, "none" means none within the bound, and an answer above it is not proven
    the best of its kind (``beyond``)."""
    out = dict(statuses)
    for k, st in statuses.items():
        if not tables.complete:
            out[k] = {"infeasible": "unknown", "optimal": "feasible"}.get(st, st)
        elif tables.bound_ns is not None:
            choice = answers[k]
            if st == "infeasible" and k is not None:
                out[k] = "beyond"
            elif choice is not None and choice.objective_ns > tables.bound_ns:
                out[k] = "beyond"
    return out


def _unknown(tables: RLHFTables) -> str:
    """Why nothing was found: the time limit, and how far the tables got."""
    reached = [n for n in tables.sizes if any(tables.options[r][n] for r in tables.roles)]
    how = (
        "every option was costed"
        if tables.complete
        else f"{tables.tried:,} option(s) costed, pools of {min(reached, default=0):,} GPUs and "
        "more reached"
        if reached
        else f"{tables.tried:,} option(s) costed, no pool size completed"
    )
    return f"the time limit ran out before any placement was found ({how}): not proven infeasible"


def seconds_of(plan: StepPlan) -> dict[str, float]:
    """Phase seconds of a plan by name."""
    return dict(zip(PHASES, plan.phase_s, strict=True)) | {
        "step": plan.step_s,
        "ns": plan.step_s * NS,
    }
