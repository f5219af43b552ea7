"""The RLHF placement search's tables: every role's cost for every pool size and parallelism it
may take, from the cost model itself (:func:`model.rlhf.costs.role_cost`).

A *problem* is an :class:`~model.rlhf.spec.RLHFSpec`, an accelerator and a GPU count. Pool
sizes (:func:`pool_sizes`) are the powers of two below one NVLink domain that divide it, and whole
domains (nodes): every count up to 8 nodes, the powers of two and the halves … eighths of the
cluster, and what those of an eighth or more leave of it (so two pools can fill it) — 8, 16, …
64 on 64 H100; 19 sizes on 4,096, 35 on 1,000,000: a few times log₂ of the node count, so the
work grows with the input's size (its digits), not with the GPU count. Pools pack onto nodes,
as verl's and NeMo-RL's resource pools do (whole nodes per pool).
On a pool of n GPUs a training or scoring role may take any dp·tp·pp = n with tp a power of two
within the NVLink domain, pp a power of two and dp at most the sequences it scores or trains on
(evaluate's placement refuses a rank with none; ``evaluate()``'s legality rules decide the rest:
heads, KV heads and s divisible by tp; the framework's rules) and an offload mode (``none``;
``optimizer`` for a trainable role on an accelerator with host-link and host-memory bandwidths,
refused like any illegal layout where the framework cannot run CPU Adam alone —
:func:`model.offload.check_offload`; ``idle``); the rollout engine any power-of-two tp within
the domain that the KV heads allow and each of the memory fractions. An option that does not
fit a GPU (or its share of the host memory) on its own is left out.

Tables are built largest pool first (the colocated options come first), each option timed
against an optional deadline: a time limit stops the building and leaves the tables marked
incomplete (``complete``), never a wrong verdict. :func:`dominant` then drops every option
another option of the same role and pool size beats or ties in every integer the CP-SAT model
reads (memory per phase, host bytes, seconds per phase): any placement using the dropped one
stays feasible and no slower with the other, so the optimum within the model is unchanged
(the exhaustive-oracle tests compare the pruned search with enumeration of the full tables).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache

from trainplan.model.errors import InputError, LayoutError
from trainplan.model.estimate import Estimate, evaluate
from trainplan.model.hardware import ClusterLinks, DeviceSpec
from trainplan.model.layout import Layout
from trainplan.model.model_spec import ModelSpec
from trainplan.model.rlhf.costs import role_cost
from trainplan.model.rlhf.dp_batch import dp_refusal
from trainplan.model.rlhf.network import seconds_floor
from trainplan.model.rlhf.roles import (
    Evaluator,
    RoleCost,
    RoleOption,
    training_pp_limit,
    training_tp_limit,
)
from trainplan.model.rlhf.spec import RLHFSpec, Role
from trainplan.model.rollout import kv_heads_per_gpu
from trainplan.model.specs import TrainingSpec
from trainplan.model.timing import CostOptions, attention_efficiency_for, kernel_efficiency_for
from trainplan.optimizer.case import links_for
from trainplan.optimizer.rlhf.table_ints import (
    NS,
    dominant,
    int_costs,
    receive_int,
    resident_int,
    sync_ns,
)

__all__ = [
    "RLHFProblem",
    "RLHFTables",
    "SEARCH_FRACTIONS",
    "make_evaluator",
    "pool_sizes",
    "build_tables",
    "TableBuild",
    "dominant",
    "cost_of",
    "SMALL_POOLS_NODES",
    "int_costs",
    "receive_int",
    "resident_int",
    "sync_ns",
    "NS",
    "rollout_options",
]

SEARCH_FRACTIONS: tuple[Fraction, ...] = tuple(Fraction(k, 10) for k in range(3, 10))
"""Engine memory fractions the search tries when none is given: 0.3 … 0.9 (verl's 0.5 and
vLLM's 0.9 among them)."""


@dataclass(frozen=True, slots=True)
class RLHFProblem:
    """A placement search: the workload, the cluster, and what may vary."""

    spec: RLHFSpec
    """The workload."""
    device: DeviceSpec
    """The accelerator (its HBM, peak, links, HBM bandwidth and host link)."""
    gpus: int
    """GPUs of the cluster."""
    links: ClusterLinks
    """Its two link tiers."""
    fractions: tuple[Fraction, ...] = ()
    """Engine fractions to try; empty: the spec's, else :data:`SEARCH_FRACTIONS`."""
    offload: bool = True
    """Whether roles may offload (optimizer state to CPU Adam, or their state when idle)."""
    max_tp: int | None = None
    """The largest tp (default: the NVLink domain)."""

    @property
    def node(self) -> int:
        """GPUs per NVLink domain (a node), at most the cluster."""
        return min(self.links.nvlink_domain, self.gpus)

    @property
    def engine_fractions(self) -> tuple[Fraction, ...]:
        if self.fractions:
            return self.fractions
        if self.spec.engine_memory_fraction is not None:
            return (self.spec.engine_memory_fraction,)
        return SEARCH_FRACTIONS


def make_evaluator(device: DeviceSpec, links: ClusterLinks) -> Evaluator:
    """``evaluate()`` of a layout on ``device`` with the axes placed on ``links`` (two tiers) and
    the calibrated defaults the planner uses (kernel and attention efficiency by accelerator and
    hidden size; causal attention halved with FlashAttention), cached per (model, training,
    layout)."""

    @cache
    def run(model: ModelSpec, training: TrainingSpec, layout: Layout) -> Estimate:
        h = model.arch.hidden_size if model.arch else None
        options = CostOptions(
            kernel_efficiency=kernel_efficiency_for(device.part, h),
            attention_efficiency=attention_efficiency_for(device.part),
            causal_attention_flops=training.flash_attention,
        )
        return evaluate(model, training, layout, device, links_for(layout, links), options)

    return run


SMALL_POOLS_NODES = 8
"""Every whole-node pool size up to this many nodes is tried (HybridFlow enumerates every
allocation on its clusters of up to 16 nodes; verl's examples split a few nodes)."""


def pool_sizes(gpus: int, node: int) -> tuple[int, ...]:
    """Pool sizes, ascending: the powers of two below ``node`` that divide it, and k whole nodes
    for every k up to :data:`SMALL_POOLS_NODES`, every power of two k, every whole half, third …
    eighth of the cluster's nodes, and the cluster's nodes less each of those last two kinds that
    is at least an eighth of them (so that two pools can fill the cluster in those shares) —
    O(log(gpus)) sizes.

    Examples
    --------
    >>> pool_sizes(64, 8)
    (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    >>> pool_sizes(4, 4)
    (1, 2, 4)
    >>> len(pool_sizes(4096, 8)), pool_sizes(4096, 8)[-6:]
    (19, (512, 1024, 2048, 3072, 3584, 4096))
    >>> len(pool_sizes(1_000_000, 8))
    35
    """
    small = {
        p for p in (2**k for k in range(int(math.log2(node)) + 1)) if p < node and not node % p
    }
    nodes = gpus // node
    parts = {2**k for k in range(nodes.bit_length())}  # powers of two, and the cluster's
    parts |= {nodes // d for d in range(2, SMALL_POOLS_NODES + 1) if nodes % d == 0}  # halves …
    counts = set(range(1, min(nodes, SMALL_POOLS_NODES) + 1)) | parts | {nodes}
    counts |= {nodes - k for k in parts if SMALL_POOLS_NODES * k >= nodes and k < nodes}
    return tuple(sorted(small | {k * node for k in counts if k >= 1}))


def _powers(limit: int, n: int) -> list[int]:
    return [
        p for p in (2**k for k in range(int(math.log2(max(1, n))) + 1)) if p <= limit and n % p == 0
    ]


def _training_options(
    problem: RLHFProblem, role: Role, n: int, trainable: bool
) -> list[RoleOption]:
    out = []
    dev, modes = problem.device, ["none"]
    if problem.offload and dev.host_link_bytes_per_s:
        # CPU Adam also streams through host memory (model.offload): offered where its
        # bandwidth is known; a framework that cannot run it is refused by evaluate()
        cpu_adam = trainable and dev.host_memory_bytes_per_s is not None
        modes += ["optimizer", "idle"] if cpu_adam else ["idle"]
    spec = problem.spec  # no dp above the pass's sequences (model.rlhf.dp_batch)
    for tp in _powers(training_tp_limit(spec.framework, problem.max_tp or problem.node), n):
        for pp in _powers(training_pp_limit(spec.framework, n // tp), n // tp):
            for off in () if dp_refusal(spec, trainable, n // (tp * pp)) else modes:
                out.append(RoleOption(role, n, n // (tp * pp), tp, pp, off))
    return out


def rollout_options(problem: RLHFProblem, n: int) -> list[RoleOption]:
    """The engine's options on ``n`` GPUs: tp, pp 1 and fraction, as the module docstring says."""
    arch = problem.spec.policy.arch
    assert arch is not None
    out = []
    for tp in _powers(problem.max_tp or problem.node, n):
        try:
            kv_heads_per_gpu(arch, tp)
        except LayoutError:
            continue
        for f in problem.engine_fractions:
            out.append(RoleOption(Role.ROLLOUT, n, n // tp, tp, 1, "none", f))
    return out


@dataclass(frozen=True, slots=True)
class RLHFTables:
    """Each role's options and their costs, by pool size: ``options[role][size]`` is a list of
    (option, cost) that fit a GPU on their own."""

    problem: RLHFProblem
    """What was tabulated."""
    sizes: tuple[int, ...]
    """Pool sizes (:func:`pool_sizes`)."""
    options: dict[Role, dict[int, list[tuple[RoleOption, RoleCost]]]] = field(default_factory=dict)
    seconds: float = 0.0
    """Seconds spent building the tables."""
    tried: int = 0
    """Options costed (legal and not)."""
    complete: bool = True
    """False when a deadline stopped the building: sizes not reached have no options."""
    bound_ns: int | None = None
    """The incumbent's bound, when one was given: options whose seconds must exceed it were
    skipped (``skipped``) or dropped."""
    skipped: int = 0
    """Options not costed: their floor was above ``bound_ns``."""

    @property
    def roles(self) -> tuple[Role, ...]:
        return tuple(r.role for r in self.problem.spec.roles)

    @property
    def num_options(self) -> int:
        return sum(len(v) for by_size in self.options.values() for v in by_size.values())


def cost_of(
    problem: RLHFProblem,
    option: RoleOption,
    evaluator: Evaluator | None = None,
    over_budget: bool = False,
) -> RoleCost:
    """One option's cost (:func:`model.rlhf.costs.role_cost`, with its ``over_budget``) on the
    problem's cluster, its links timing the weight sync."""
    ev = evaluator or make_evaluator(problem.device, problem.links)
    return role_cost(
        problem.spec,
        option,
        problem.device,
        ev,
        problem.links,
        problem.gpus,
        over_budget,
    )


Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after each (pool size, role) of the tables."""

Incumbent = Callable[["RLHFTables"], int | None]
"""Given the tables of the largest pool alone, a bound in integer nanoseconds (None: none): no
option whose own seconds must exceed it is kept (:func:`build_tables`)."""


def build_tables(
    problem: RLHFProblem,
    clock: Callable[[], float] | None = None,
    deadline: float | None = None,
    progress: Progress | None = None,
    incumbent: Incumbent | None = None,
) -> RLHFTables:
    """Cost every option of every role on every pool size, largest pool first; keep those that
    fit on their own. ``deadline`` (a ``clock()`` time) stops the building between two options:
    the tables are then ``complete = False``.

    ``incumbent``: called once the largest pool is costed; from then on an option whose seconds
    over its phases must exceed the bound it returns is neither costed nor kept — its floor
    (:func:`model.rlhf.network.seconds_floor`, from the same role, tp, pp and offload on the
    largest pool) above the bound, or its costed seconds. Every placement has a step at least
    each of its roles' seconds, so no placement under the bound is lost.

    Raises
    ------
    InputError
        Fewer GPUs than one, or a cluster the accelerator's links do not describe.
    """
    import time

    clock = clock or time.perf_counter
    t0 = clock()
    if problem.gpus < 1:
        raise InputError(f"gpus: {problem.gpus} must be at least 1")
    sizes = pool_sizes(problem.gpus, problem.node)
    build = TableBuild(problem, {rs.role: {n: [] for n in sizes} for rs in problem.spec.roles})
    done, total = 0, len(sizes) * len(problem.spec.roles)
    for n in reversed(sizes):
        if incumbent is not None and n < sizes[-1] and build.bound is None:
            seconds = clock() - t0
            build.bound = (
                incumbent(RLHFTables(problem, sizes, build.out, seconds, build.tried)) or -1
            )
        for rs in problem.spec.roles:
            if not build.cost_pool(rs.role, rs.trainable, n, deadline, clock):
                return build.tables(sizes, clock() - t0, complete=False)
            done += 1
            if progress is not None:
                progress(done, total)
    return build.tables(sizes, clock() - t0, complete=True)


class TableBuild:
    """The state of :func:`build_tables` as it costs each (pool size, role): the options kept,
    each (role, tp, pp, offload)'s cost on the largest pool (for the floors), the incumbent's
    bound in integer ns (None before it is asked, −1 when it gave none) and the counts."""

    def __init__(
        self, problem: RLHFProblem, out: dict[Role, dict[int, list[tuple[RoleOption, RoleCost]]]]
    ) -> None:
        self.problem = problem
        self.out = out
        self.first: dict[tuple, RoleCost] = {}
        self.bound: int | None = None
        self.tried = self.skipped = 0
        self.evaluator = make_evaluator(problem.device, problem.links)
        self.cap = problem.device.usable_bytes(True)
        self.host_cap = Fraction(problem.spec.host_memory_bytes, problem.node)

    @property
    def kept_bound(self) -> int | None:
        """The incumbent's bound when it gave one."""
        return self.bound if self.bound and self.bound > 0 else None

    def cost_pool(
        self,
        role: Role,
        trainable: bool,
        n: int,
        deadline: float | None,
        clock: Callable[[], float],
    ) -> bool:
        """Cost ``role``'s options on a pool of ``n`` GPUs and keep those that fit alone
        (:func:`_fits_alone`), skipping those whose floor on the largest pool is over the bound
        (:func:`_over`); False when ``deadline`` (a ``clock()`` time) passed first."""
        problem, bound = self.problem, self.kept_bound
        if role is Role.ROLLOUT:
            opts = rollout_options(problem, n)
        else:
            opts = _training_options(problem, role, n, trainable)
        for opt in opts:
            if deadline is not None and clock() >= deadline:
                return False
            key = (opt.role, opt.tp, opt.pp, opt.offload)
            if bound and key in self.first and _over(problem, self.first[key], opt, bound):
                self.skipped += 1
                continue
            self.tried += 1
            try:
                cost = cost_of(problem, opt, self.evaluator)
            except LayoutError:
                continue
            self.first.setdefault(key, cost)
            if _fits_alone(cost, self.cap, self.host_cap):
                self.out[role][n].append((opt, cost))
        return True

    def tables(self, sizes: tuple[int, ...], seconds: float, complete: bool) -> RLHFTables:
        """The tables built so far; complete ones keep only what is within the bound
        (:func:`_within`)."""
        bound = self.kept_bound
        out = _within(self.out, bound) if complete and bound else self.out
        return RLHFTables(
            self.problem, sizes, out, seconds, self.tried, complete, bound, self.skipped
        )


def _fits_alone(cost: RoleCost, cap: int, host_cap: Fraction) -> bool:
    """The option alone on a GPU: its held, swapped and largest phase bytes within ``cap``, its
    host bytes within the host's share."""
    phase = max(cost.swap_in(p) + cost.phase_bytes(p) for p in ("rollout", "scoring", "training"))
    alone = cost.held_bytes + cost.resident_bytes + phase
    return alone <= cap and cost.host_bytes <= host_cap


def _within(out: dict, bound_ns: int) -> dict:
    """The options whose own seconds (in the model's integers) are within ``bound_ns``."""
    return {
        role: {n: [(o, c) for o, c in opts if _own_ns(c) <= bound_ns] for n, opts in by.items()}
        for role, by in out.items()
    }


def _own_ns(cost: RoleCost) -> int:
    """The role's own seconds over its phases, in the CP-SAT model's integers."""
    return sum(int_costs(cost)[3])


FLOOR_MARGIN = 1e-6
"""Relative slack on a floor compared with a bound (float rounding of the per-micro-batch
seconds; the bound is in whole nanoseconds)."""


def _over(problem: RLHFProblem, costed: RoleCost, opt: RoleOption, bound_ns: int) -> bool:
    """Whether ``opt``'s seconds must exceed ``bound_ns``: the floor from ``costed`` (same role,
    tp, pp and offload on another pool) scaled to ``opt``'s dp."""
    floor = seconds_floor(problem.spec, costed, opt.dp)
    return floor * (1 - FLOOR_MARGIN) * NS_PER_S > bound_ns + 3


NS_PER_S = NS
