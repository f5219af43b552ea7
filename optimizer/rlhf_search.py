"""The RLHF placement and parallelism search (issue 12): tables → CP-SAT → the best placement,
the best colocated and the best split one beside it (why it colocates or splits), each answer
re-evaluated by :func:`model.rlhf_step.compose`; and the exhaustive oracle the tests hold the
solver to.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from trainplan.model.errors import InfeasibleError
from trainplan.model.rlhf_roles import RoleCost, RoleOption
from trainplan.model.rlhf_spec import PHASES, Role
from trainplan.model.rlhf_step import StepPlan, compose
from trainplan.optimizer.rlhf_cpsat import NS, PlacementChoice, PlacementModel, int_costs
from trainplan.optimizer.rlhf_tables import RLHFProblem, RLHFTables, build_tables

__all__ = [
    "Placement",
    "PlacementResult",
    "search_placement",
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
    """The placement re-composed by the cost model (:func:`model.rlhf_step.compose`)."""
    objective_ns: int
    """The solver's step time, integer ns (per-role seconds rounded to ns, then the rules)."""

    @property
    def colocated(self) -> bool:
        return self.plan.colocated


@dataclass(frozen=True, slots=True)
class PlacementResult:
    status: str
    """``optimal`` (proven within the model), ``feasible`` (time limit) or ``infeasible``."""
    best: Placement | None
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
    """Role options that fit a GPU on their own (the model's Booleans, per pool slot)."""
    tried: int
    """Role options costed."""
    explanation: list[str] = field(default_factory=list)


def _renumber(slots: tuple[int, ...]) -> tuple[int, ...]:
    """Pools numbered 0, 1, … in order of first use."""
    seen: dict[int, int] = {}
    return tuple(seen.setdefault(s, len(seen)) for s in slots)


def placement_plan(
    problem: RLHFProblem, costs: tuple[RoleCost, ...], slots: tuple[int, ...]
) -> StepPlan:
    """:func:`model.rlhf_step.compose` of a placement on the problem's cluster."""
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
    or its pools need more GPUs than the cluster has)."""
    cap = problem.device.usable_bytes(True)
    host_cap = problem.spec.host_memory_bytes // problem.node
    pools: dict[int, list[tuple]] = {}
    for c, q in zip(costs, slots, strict=True):
        pools.setdefault(q, []).append((c.option.gpus, int_costs(c)))
    if sum(members[0][0] for members in pools.values()) > problem.gpus:
        return None
    busy = []
    for members in pools.values():
        if len({g for g, _ in members}) != 1:
            return None
        held = sum(i[0] for _, i in members)
        for k in range(3):
            if held + max(i[1][k] + i[4][k] for _, i in members) > cap:
                return None
        if sum(i[2] for _, i in members) > host_cap:
            return None
        busy.append([sum(i[3][k] for _, i in members) for k in range(3)])
    phase = [max(row[k] for row in busy) for k in range(3)]
    if problem.spec.off_policy == 0:
        return sum(phase)
    return max(max(sum(row) for row in busy), phase[1] + phase[2])


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


def _reason(best: Placement, coloc: Placement | None, split: Placement | None) -> str:
    def pct(a: Placement, b: Placement) -> str:
        return f"{(a.plan.step_s / b.plan.step_s - 1) * 100:+.0f}%"

    if best.colocated:
        if split is None:
            return "colocates: no placement with the rollout engine on GPUs of its own fits"
        r = split.pool_of[0]
        return (
            f"colocates: every GPU works in every phase; the best split (rollout on "
            f"{split.plan.pools[r].gpus} GPUs) takes {split.plan.step_s:.1f} s per step "
            f"({pct(split, best)}): a pool of its own idles while the others work"
            + (" (synchronous step)" if best.plan.off_policy == 0 else "")
        )
    if coloc is None:
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
        f"splits: {how}; the best colocated placement takes {coloc.plan.step_s:.1f} s per step "
        f"({pct(coloc, best)})"
    )


def search_placement(
    problem: RLHFProblem, time_limit_s: float | None = None, workers: int = 2
) -> PlacementResult:
    """The fastest placement that fits, proven optimal within the model (unless a time limit
    stops the proof), with the best colocated and split placements for the explanation.

    Raises
    ------
    InfeasibleError
        No placement fits; the explanation names the roles that fit no pool on their own.
    """
    tables = build_tables(problem)
    t0 = time.perf_counter()
    found = PlacementModel(tables).solve(time_limit_s, workers)
    if found is None:
        raise InfeasibleError("rlhf-plan: no placement fits", _explain(tables))
    best = _placement(problem, found)
    coloc_c = PlacementModel(tables, colocate=True).solve(time_limit_s, workers)
    split_c = PlacementModel(tables, colocate=False).solve(time_limit_s, workers)
    solve_s = time.perf_counter() - t0
    coloc = _placement(problem, coloc_c) if coloc_c else None
    split = _placement(problem, split_c) if split_c else None
    statuses = {c.status for c in (found, coloc_c, split_c) if c is not None}
    status = "optimal" if statuses == {"optimal"} else "feasible"
    for p in (best, coloc, split):
        if p is not None and not p.plan.fits:  # pragma: no cover - a rounding bug
            raise AssertionError("rlhf-plan: the solver's placement does not fit when recomposed")
    return PlacementResult(
        status,
        best,
        coloc,
        split,
        _reason(best, coloc, split),
        tables.seconds,
        solve_s,
        tables.num_options,
        tables.tried,
    )


def _explain(tables: RLHFTables) -> list[str]:
    cap = tables.problem.device.usable_bytes(True)
    out = []
    for role in tables.roles:
        if not any(tables.options[role].values()):
            out.append(
                f"{role}: no pool size and parallelism fits a GPU's {cap / 1e9:.2f} GB on its own"
            )
    if not out:
        out.append(
            "memory: every role fits on its own, but no sharing of the "
            f"{tables.problem.gpus} GPUs fits them together"
        )
    return out


def seconds_of(plan: StepPlan) -> dict[str, float]:
    """Phase seconds of a plan by name."""
    return dict(zip(PHASES, plan.phase_s, strict=True)) | {
        "step": plan.step_s,
        "ns": plan.step_s * NS,
    }
