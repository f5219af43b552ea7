"""The RLHF placement search's tables: every role's cost for every pool size and parallelism it
may take, from the cost model itself (:func:`model.rlhf_roles.role_cost`).

A *problem* is an :class:`~model.rlhf_spec.RLHFSpec`, an accelerator and a GPU count. Pool
sizes are the powers of two below one NVLink domain that divide it and the multiples of the
domain up to the cluster (whole nodes: 8, 16, … 64 on 64 H100), so pools pack onto nodes.
On a pool of n GPUs a training or scoring role may take any dp·tp·pp = n with tp a power of two
within the NVLink domain and pp a power of two (``evaluate()``'s legality rules decide the rest:
heads, KV heads and s divisible by tp; the framework's rules) and an offload mode (``none``;
``optimizer`` for a trainable role on an accelerator with host-link and host-memory bandwidths,
refused like any illegal layout where the framework cannot run CPU Adam alone —
:func:`model.offload.check_offload`; ``idle``); the rollout engine any power-of-two tp within
the domain that the KV heads allow and each of the memory fractions. An option that does not
fit a GPU (or its share of the host memory) on its own is left out.
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
from trainplan.model.rlhf_roles import Evaluator, RoleCost, RoleOption, role_cost
from trainplan.model.rlhf_spec import (
    DEFAULT_FRACTION_COLOCATED,
    DEFAULT_FRACTION_SPLIT,
    RLHFSpec,
    Role,
)
from trainplan.model.rollout import kv_heads_per_gpu
from trainplan.model.specs import TrainingSpec
from trainplan.model.timing import CostOptions, attention_efficiency_for, kernel_efficiency_for
from trainplan.optimizer.case import links_for

__all__ = [
    "RLHFProblem",
    "RLHFTables",
    "SEARCH_FRACTIONS",
    "make_evaluator",
    "sync_bandwidth",
    "pool_sizes",
    "build_tables",
    "cost_of",
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
            kernel_efficiency=kernel_efficiency_for(device.name, h),
            attention_efficiency=attention_efficiency_for(device.name),
            causal_attention_flops=training.flash_attention,
        )
        return evaluate(model, training, layout, device, links_for(layout, links), options)

    return run


def sync_bandwidth(links: ClusterLinks, gpus: int) -> float:
    """Bandwidth the updated weights reach the engine at: NVLink when the whole cluster is one
    NVLink domain, else the scale-out NIC (the training ranks holding a shard are spread over
    nodes, colocated or not)."""
    return links.nvlink_bytes_per_s if gpus <= links.nvlink_domain else links.scaleout_bytes_per_s


def pool_sizes(gpus: int, node: int) -> tuple[int, ...]:
    """Pool sizes: powers of two below ``node`` that divide it, and multiples of ``node`` up to
    ``gpus``.

    Examples
    --------
    >>> pool_sizes(64, 8)
    (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    >>> pool_sizes(4, 4)
    (1, 2, 4)
    """
    small = [
        p for p in (2**k for k in range(int(math.log2(node)) + 1)) if p < node and node % p == 0
    ]
    return tuple(small + list(range(node, gpus + 1, node)))


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
    for tp in _powers(problem.max_tp or problem.node, n):
        for pp in _powers(n // tp, n // tp):
            for off in modes:
                out.append(RoleOption(role, n, n // (tp * pp), tp, pp, off))
    return out


def _rollout_options(problem: RLHFProblem, n: int) -> list[RoleOption]:
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

    @property
    def roles(self) -> tuple[Role, ...]:
        return tuple(r.role for r in self.problem.spec.roles)

    @property
    def num_options(self) -> int:
        return sum(len(v) for by_size in self.options.values() for v in by_size.values())


def cost_of(
    problem: RLHFProblem, option: RoleOption, evaluator: Evaluator | None = None
) -> RoleCost:
    """One option's cost (:func:`model.rlhf_roles.role_cost`) on the problem's cluster."""
    ev = evaluator or make_evaluator(problem.device, problem.links)
    return role_cost(
        problem.spec, option, problem.device, ev, sync_bandwidth(problem.links, problem.gpus)
    )


def build_tables(problem: RLHFProblem, clock: Callable[[], float] | None = None) -> RLHFTables:
    """Cost every option of every role on every pool size; keep those that fit on their own.

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
    ev = make_evaluator(problem.device, problem.links)
    cap = problem.device.usable_bytes(True)
    host_cap = Fraction(problem.spec.host_memory_bytes, problem.node)
    out: dict[Role, dict[int, list[tuple[RoleOption, RoleCost]]]] = {}
    tried = 0
    for rs in problem.spec.roles:
        by_size: dict[int, list[tuple[RoleOption, RoleCost]]] = {}
        for n in sizes:
            opts = (
                _rollout_options(problem, n)
                if rs.role is Role.ROLLOUT
                else _training_options(problem, rs.role, n, rs.trainable)
            )
            kept = []
            for opt in opts:
                tried += 1
                try:
                    cost = cost_of(problem, opt, ev)
                except LayoutError:
                    continue
                alone = (
                    cost.held_bytes
                    + cost.swap_bytes
                    + max(cost.phase_bytes(p) for p in ("rollout", "scoring", "training"))
                )
                if alone <= cap and cost.host_bytes <= host_cap:
                    kept.append((opt, cost))
            by_size[n] = kept
        out[rs.role] = by_size
    return RLHFTables(problem, sizes, out, clock() - t0, tried)


def default_fraction(colocated: bool) -> Fraction:
    """verl's 0.5 when the engine shares GPUs with training roles, vLLM's 0.9 alone."""
    return DEFAULT_FRACTION_COLOCATED if colocated else DEFAULT_FRACTION_SPLIT
