"""A placement's RLHF step: roles on pools of GPUs → memory per GPU per phase, step time.

A placement puts each role (:mod:`model.rlhf.spec`) on one of a few disjoint *pools* of GPUs,
using all of its pool (:class:`model.rlhf.roles.RoleOption`). HybridFlow (Sheng et al. 2025,
EuroSys, arXiv 2409.19256, §5–6) and ReaL (Mei et al. 2025, MLSys, arXiv 2406.14088) show the
choice is worth 1.5× to several × in throughput. The rules, written once here and read by the
search's CP-SAT model (:mod:`optimizer.rlhf.cpsat`) and its exhaustive oracle:

* **Memory.** On a pool, in each phase, every role placed there keeps its ``held_bytes``, and
  the roles working in the phase add their phase bytes one at a time (work on one pool
  serialises) — a role offloaded when idle with its state brought back for its turn
  (``swap_bytes`` for training, its weights only for scoring: ``RoleCost.swap_in``):
  ``peak(pool, phase) = Σ held + max over the phase's roles of (swap + phase bytes)``. Every
  phase's peak must fit the GPU's usable bytes (HBM less the runtime reserve, as the framework
  profiles compare); offloaded state, and on the actor's pool OpenRLHF's sleeping engine's host
  copy (:func:`model.rlhf.openrlhf.sleep_host`), must fit the host's share per GPU (host memory
  per node ÷ GPUs per NVLink domain).
* **Bytes held in every phase** (:attr:`model.rlhf.roles.RoleCost.resident_bytes`: each
  training or scoring role's NCCL communicators and persistent buffers, live for the whole run
  and not moved by idle offload) are counted in every phase of the pool, the rollout included,
  beside ``Σ held``: once for the roles that share their process groups (the most any of them
  holds; Megatron-Core's, which verl initialises once per process for every role of a pool, so
  those roles must run the same tp and pp), and each on its own for the others
  (:func:`pool_resident`). The rollout engine's are its tp group's communicators, which vLLM's
  sleep mode keeps (:func:`model.rlhf.engine.engine_communicator_bytes`), and its CUDA graph
  pool, kept too, at an assumed allowance (:data:`model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES`).
* **Processes on a GPU** (:func:`process_bytes`): the runtime reserve of the usable bytes holds
  one process's CUDA context and cuBLAS workspace; every further process on each GPU of a pool
  holds its own, in every phase (:data:`PROCESS_BYTES`). The rollout engine's worker is a
  process of its own: verl's ``vLLMHttpServer`` starts vLLM with its ``mp`` executor and hands
  it the weights over CUDA IPC (``verl/workers/rollout/vllm_rollout``, b178a3cd5), OpenRLHF a
  ``RolloutRayActor`` per engine on the shared placement group (``vllm_engine.py``
  ``create_vllm_engines``) — unless the engine reuses the actor's weights in its process
  (``shared_weights``). The training and scoring roles run in one process (verl) or one each
  (OpenRLHF): :attr:`model.rlhf.roles.RoleCost.process`.
* **Time.** ``W(phase, pool)`` = the seconds of the pool's roles in the phase, added up. A
  synchronous step (``off_policy = 0``) runs the phases one after another, pools in parallel
  within a phase: ``step = Σ_phase max_pool W``. One-step off-policy (``off_policy = 1``: the
  rollout of step k+1 overlaps the scoring and training of step k, as verl's and NeMo-RL's async
  modes and OpenRLHF's ``--async_train`` do) is bounded by each pool's own work and by the chain
  of scoring then training: ``step = max(max_pool Σ_phase W, max_pool W(scoring) + max_pool
  W(training) + sync)`` with the engine's weight sync, which blocks the trainer too
  (:mod:`model.rlhf.off_policy`) — on one shared pool that is the synchronous step again.
* **The weight sync** (OpenRLHF's CUDA IPC sync under ``deepspeed``, :mod:`model.rlhf.openrlhf`;
  verl's IPC buckets under ``megatron`` and ``fsdp2``, :mod:`model.rlhf.verl_sync`): on a pool
  holding both the engine and the actor, a moment of the rollout phase holds ``Σ held`` and each
  role's :attr:`~model.rlhf.roles.RoleCost.sync_bytes` — the engine's woken weights and the
  actor's transient (:func:`sync_peak`); the rollout phase's peak is the larger of it and the
  generation's.
* **A shared engine copy** (``shared_weights``; HybridFlow's 3D-HybridEngine, §5.4: the
  generation shards reuse the training weights' memory): on the pool of both the engine and the
  actor, the rollout phase counts the engine's weights less the actor's whole BF16 weights it
  reuses (``min`` of the two); the weight sync's time is the colocated one all the same (the
  actor's gather, :func:`model.rlhf.sync_time.shared_sync_seconds`: the shared copy is whole only
  after the 3D-HybridEngine's all-gather). Off by default: vLLM-based stacks load their own copy
  (and free it after the rollout).
* **Which roles share a pool** (:func:`model.rlhf.split.pool_refusal`): under ``deepspeed``
  only OpenRLHF's sets — actor and reference, critic and reward, or every role (every role but
  the engine off-policy); a placement with another pool of two or more roles is refused.
* **The engine on a pool without the actor** (:mod:`model.rlhf.split`): one-step off-policy,
  and ``deepspeed`` in any step, keep it awake and alone on its pool (a placement with another
  role there is refused); under ``deepspeed`` its NCCL weight receive adds the model-update
  communicator to every phase and the largest parameter's buffer to the rollout's peak.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainplan.model.errors import InputError
from trainplan.model.frameworks import (
    CUDA_CONTEXT_BYTES,
    TORCH_CUBLAS_WORKSPACE_BYTES,
    Framework,
)
from trainplan.model.rlhf.off_policy import off_policy_seconds
from trainplan.model.rlhf.openrlhf import sleep_host, split_refusal
from trainplan.model.rlhf.roles import RoleCost
from trainplan.model.rlhf.spec import PHASES, Role
from trainplan.model.rlhf.split import (
    awake_apart,
    ipc_sync,
    pool_refusal,
    split_peaks,
    update_group,
)
from trainplan.model.rlhf.sync_time import placement_sync_seconds

__all__ = [
    "FUSED_PROCESS",
    "PROCESS_BYTES",
    "PoolPlan",
    "StepPlan",
    "compose",
    "pool_processes",
    "pool_resident",
    "process_bytes",
    "role_process",
    "step_seconds",
    "sync_peak",
]

PROCESS_BYTES = CUDA_CONTEXT_BYTES + TORCH_CUBLAS_WORKSPACE_BYTES
"""What one more process on a GPU holds beyond its tensors, bytes: its CUDA context
(:data:`model.frameworks.CUDA_CONTEXT_BYTES`, 666,632,192 B) and PyTorch's cuBLAS workspace of
its stream (:data:`model.frameworks.TORCH_CUBLAS_WORKSPACE_BYTES`, 33,554,432 B): 700,186,624 B.
Not per process: the driver's reservation (per GPU) and the fragmentation allowance (the roles
of a pool work one at a time, and OpenRLHF empties each role's cache after its turn when the
roles share GPUs: ``experience_maker.py`` ``_dispatch_forward``, ``ppo_actor.py`` ``fit``).
Transformer Engine's workspace is left out (OpenRLHF's DeepSpeed models and vLLM do not use
it). The engine's context lies outside its memory fraction (vLLM's ``Worker.init_device``
measures the memory it may use after the context and its communicators exist); its cuBLAS
workspace is inside it while it generates, so the rollout phase counts those 33,554,432 B twice
(conservative)."""


FUSED_PROCESS = "verl-worker"
""":attr:`~model.rlhf.roles.RoleCost.process` of every training and scoring role under the
``megatron`` and ``fsdp2`` profiles: verl (volcengine/verl b178a3cd5) runs a resource pool's
roles in one ``WorkerDict`` process per GPU (``create_colocated_worker_cls``, as for
:data:`model.rlhf.network.SHARED_GROUPS`), its Megatron and FSDP workers alike. Under
``deepspeed`` (OpenRLHF, whose training roles are DeepSpeed engines; OpenRLHF/OpenRLHF
3c3be6234) every role runs in its own process: ``train_ppo_ray.py`` ``train`` makes a
``RayActorGroup`` of Ray actors per role (``PolicyModelActor``, ``ReferenceModelActor``,
``CriticModelActor``, ``RewardModelActor``), one per GPU, placed with ``num_gpus_per_actor=0.2``
on one placement group's GPU bundles under ``colocate_all`` (or ``colocate_actor_ref`` /
``colocate_critic_reward``)."""


def role_process(framework: Framework) -> str:
    """:attr:`~model.rlhf.roles.RoleCost.process` of a training or scoring role under
    ``framework``'s profile: :data:`FUSED_PROCESS` (verl) for ``megatron`` and ``fsdp2``, ``""``
    (a process of its own, OpenRLHF) for ``deepspeed``.

    >>> role_process(Framework.DEEPSPEED), role_process(Framework.FSDP2)
    ('', 'verl-worker')
    """
    return "" if framework is Framework.DEEPSPEED else FUSED_PROCESS


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """One pool's roles, memory per phase and work per phase."""

    index: int
    """Its number (0, 1, …)."""
    gpus: int
    """Its GPUs."""
    first_gpu: int
    """Its GPUs are ``first_gpu … first_gpu + gpus − 1`` (pools are laid out in index order)."""
    roles: tuple[str, ...]
    """The roles placed on it."""
    held_bytes: Fraction
    """Σ of its roles' held bytes per GPU, with the bytes they hold in every phase
    (:attr:`resident_bytes`) and its further processes' (:attr:`process_bytes`)."""
    peak_bytes: tuple[Fraction, Fraction, Fraction]
    """Per phase (rollout, scoring, training): Σ held + the largest phase bytes of its roles."""
    busy_s: tuple[float, float, float]
    """Per phase: its roles' seconds, added."""
    host_bytes: Fraction
    """Host bytes per GPU (offloaded state of its roles; a sleeping engine's host copy,
    :func:`model.rlhf.openrlhf.sleep_host`)."""
    resident_bytes: Fraction = Fraction(0)
    """Of :attr:`held_bytes`, its roles' communicators and persistent buffers
    (:func:`pool_resident`)."""
    processes: int = 1
    """Processes on each of its GPUs (:func:`pool_processes`)."""
    process_bytes: int = 0
    """Of :attr:`held_bytes`, the CUDA contexts and cuBLAS workspaces of its processes beyond
    the one the runtime reserve holds (:func:`process_bytes`)."""

    @property
    def peak(self) -> Fraction:
        """The largest of the three phases' peaks."""
        return max(self.peak_bytes)


@dataclass(frozen=True, slots=True)
class StepPlan:
    """A placement evaluated: pools, phase times, the step, and whether it fits."""

    pools: tuple[PoolPlan, ...]
    """The pools, in order."""
    costs: tuple[RoleCost, ...]
    """Every role's cost, in the roles' order."""
    capacity_bytes: int
    """Usable bytes per GPU (HBM less the runtime reserve)."""
    host_capacity_bytes: Fraction
    """Host bytes available per GPU: host memory per node ÷ GPUs per node."""
    off_policy: int
    """0 synchronous, 1 one-step off-policy."""
    phase_s: tuple[float, float, float]
    """max over pools of W(phase)."""
    step_s: float
    """Seconds per step (the module docstring's rules)."""

    @property
    def fits(self) -> bool:
        """Every pool's every phase within the GPU's usable bytes, host memory enough, and the
        engine within its budget."""
        return not self.overflows()

    def overflows(self) -> list[tuple[str, int | None, str, Fraction, Fraction]]:
        """What does not fit, as (what, pool, phase, bytes needed, bytes available) per GPU:
        ``gpu`` for a pool's phase above the usable bytes, ``host`` for its host bytes above
        the host's share (phase ``host``), ``engine`` for an engine above its budget (phase
        ``rollout``, pool None)."""
        out: list[tuple[str, int | None, str, Fraction, Fraction]] = []
        for c in self.costs:
            if c.over_budget:
                assert c.budget_bytes is not None
                need = c.rollout_bytes + c.budget_resident_bytes  # its whole need
                out.append(("engine", None, "rollout", need, c.budget_bytes))
        for p in self.pools:
            for ph, peak in zip(PHASES, p.peak_bytes, strict=True):
                if peak > self.capacity_bytes:
                    out.append(("gpu", p.index, ph, peak, Fraction(self.capacity_bytes)))
            if p.host_bytes > self.host_capacity_bytes:
                out.append(("host", p.index, "host", p.host_bytes, self.host_capacity_bytes))
        return out

    @property
    def colocated(self) -> bool:
        """True when every role shares one pool (all GPUs)."""
        return len(self.pools) == 1


def step_seconds(busy: Sequence[Sequence[float]], off_policy: int, sync_s: float = 0.0) -> float:
    """The step time from each pool's busy seconds per phase (rows: pools; columns: rollout,
    scoring, training) — the module docstring's two rules; off-policy, the trainer's chain
    carries the engine's weight sync ``sync_s`` too (:func:`model.rlhf.off_policy.off_policy_seconds`).

    Examples
    --------
    One shared pool: 60 + 10 + 30 = 100 s either way. Split: rollout 70 s on one pool, scoring
    10 and training 40 on the other — synchronous 120 s, one-step off-policy max(70, 50) = 70 s.

    >>> step_seconds([[60, 10, 30]], 0), step_seconds([[60, 10, 30]], 1)
    (100, 100)
    >>> step_seconds([[70, 0, 0], [0, 10, 40]], 0), step_seconds([[70, 0, 0], [0, 10, 40]], 1)
    (120, 70)
    """
    if off_policy == 0:
        return sum(max(row[k] for row in busy) for k in range(3))
    return off_policy_seconds(busy, sync_s)


def _resident_of(cost: RoleCost) -> Fraction:
    return cost.resident_bytes


def pool_resident(
    members: Sequence[RoleCost], bytes_of: Callable[[RoleCost], Any] = _resident_of
) -> Any:
    """The bytes the roles ``members`` of one pool hold in every phase
    (:attr:`~model.rlhf.roles.RoleCost.resident_bytes`): for each name of shared process groups
    (:attr:`~model.rlhf.roles.RoleCost.groups`) the most any role using them holds — one set of
    groups, one communicator each, one ``"mpu"`` buffer, one Transformer Engine workspace per
    process, sized to the largest request — plus every role with groups of its own. None when
    roles sharing groups run different tp or pp (verl initialises Megatron-Core's groups once per
    process: a pool whose roles need two layouts cannot run; separate pools can). ``bytes_of``
    reads a role's bytes (the search's integers: rounded up).

    Examples
    --------
    Actor and critic on Megatron-Core's groups (1.5 and 1.6 GB), a role with its own (0.4 GB):
    1.6 + 0.4 = 2.0 GB; the critic at another tp: None.

    >>> from trainplan.model.rlhf.roles import RoleOption
    >>> from trainplan.model.rlhf.spec import Role
    >>> def cost(role, tp, res, groups):
    ...     o = RoleOption(role, 8, 8 // tp, tp)
    ...     z = Fraction(0)
    ...     return RoleCost(o, z, z, z, z, 0.0, 0.0, 0.0, z, (), resident_bytes=Fraction(res),
    ...                     groups=groups)
    >>> a, c = cost(Role.ACTOR, 2, 1.5e9, "m"), cost(Role.CRITIC, 2, 1.6e9, "m")
    >>> float(pool_resident([a, c, cost(Role.REWARD, 1, 0.4e9, "")]))
    2000000000.0
    >>> pool_resident([a, cost(Role.CRITIC, 4, 1.6e9, "m")]) is None
    True
    """
    shared: dict[str, list[RoleCost]] = {}
    total = 0
    for c in members:
        if c.groups:
            shared.setdefault(c.groups, []).append(c)
        else:
            total += bytes_of(c)
    for users in shared.values():
        if len({(c.option.tp, c.option.pp) for c in users}) > 1:
            return None
        total += max(bytes_of(c) for c in users)
    return total


def pool_processes(members: Sequence[RoleCost], shared_weights: bool = False) -> int:
    """The processes each GPU of a pool runs for the roles ``members``: one per role with a
    process of its own (:attr:`~model.rlhf.roles.RoleCost.process` ``""``: the engine's worker,
    OpenRLHF's roles) and one per name of a shared process (verl's fused worker). With
    ``shared_weights`` the engine runs in the actor's process when the actor is on the pool.

    Examples
    --------
    PPO on one pool: OpenRLHF (``deepspeed``) runs the engine and the four roles in five
    processes per GPU, verl (``megatron``, ``fsdp2``) the engine and one fused worker, two.

    >>> from trainplan.model.rlhf.roles import RoleOption
    >>> def cost(role, process):
    ...     z = Fraction(0)
    ...     return RoleCost(RoleOption(role, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, (),
    ...                     process=process)
    >>> ppo = (Role.ACTOR, Role.CRITIC, Role.REFERENCE, Role.REWARD)
    >>> engine = RoleCost(RoleOption(Role.ROLLOUT, 8, 8), *[Fraction(0)] * 4, 0.0, 0.0, 0.0,
    ...                   Fraction(0), ())
    >>> pool_processes([engine, *(cost(r, "") for r in ppo)])
    5
    >>> pool_processes([engine, *(cost(r, "verl-worker") for r in ppo)])
    2
    """
    roles = {c.option.role for c in members}
    names: set[str] = set()
    own = 0
    for c in members:
        if shared_weights and c.option.role is Role.ROLLOUT and Role.ACTOR in roles:
            continue
        if c.process:
            names.add(c.process)
        else:
            own += 1
    return own + len(names)


def process_bytes(members: Sequence[RoleCost], shared_weights: bool = False) -> int:
    """Bytes each GPU of a pool holds in every phase for its processes beyond the one the
    runtime reserve counts: (:func:`pool_processes` − 1) × :data:`PROCESS_BYTES`.

    Examples
    --------
    OpenRLHF's colocated PPO, five processes: 4 × 700,186,624 = 2,800,746,496 B; verl's, two:
    700,186,624 B; an engine on a pool of its own: 0.

    >>> from trainplan.model.rlhf.roles import RoleOption
    >>> z = Fraction(0)
    >>> engine = RoleCost(RoleOption(Role.ROLLOUT, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, ())
    >>> process_bytes([engine]), PROCESS_BYTES
    (0, 700186624)
    """
    return max(pool_processes(members, shared_weights) - 1, 0) * PROCESS_BYTES


def sync_peak(members: Sequence[RoleCost], held: Fraction) -> Fraction:
    """A pool's bytes while the actor sends the engine its weights (module docstring): ``held``
    (its roles' held bytes, resident bytes and processes) and every role's
    :attr:`~model.rlhf.roles.RoleCost.sync_bytes`; 0 unless the pool holds both the engine and
    an actor with a sync transient.

    Examples
    --------
    >>> from trainplan.model.rlhf.roles import RoleOption
    >>> z = Fraction(0)
    >>> def cost(role, sync):
    ...     return RoleCost(RoleOption(role, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, (),
    ...                     sync_bytes=Fraction(sync))
    >>> sync_peak([cost(Role.ROLLOUT, 5), cost(Role.ACTOR, 2)], Fraction(10))
    Fraction(17, 1)
    >>> sync_peak([cost(Role.ACTOR, 2)], Fraction(10))
    Fraction(0, 1)
    """
    if not ipc_sync(members):
        return Fraction(0)
    return held + sum((c.sync_bytes for c in members), Fraction(0))


def _pool_size(q: int, members: list[RoleCost]) -> int:
    """Pool ``q``'s GPUs, after :meth:`_pool_plan`'s first check (its Raises)."""
    sizes = {c.option.gpus for c in members}
    if len(sizes) != 1:
        raise InputError(f"placement: the roles of pool {q} disagree on its size: {sizes}")
    return sizes.pop()


def _pool_plan(
    q: int,
    members: list[RoleCost],
    first: int,
    shared: bool,
    off_policy: int,
    costs: list[RoleCost],
) -> PoolPlan:
    """Pool ``q`` of the roles ``members``, its GPUs numbered from ``first``: what its roles hold,
    its peak per phase (each role's swap and phase bytes over the held ones; the rollout's at
    least the weight sync's, :func:`sync_peak`; with ``shared`` the engine reuses the
    actor's BF16 weights and nothing is sent), busy seconds (the rollout's with the weight sync by
    placement among the step's ``costs``, :mod:`model.rlhf.sync_time`, with ``shared`` too: the
    actor still makes each tensor whole before the engine reads it, HybridFlow §5.4's
    all-gather, :func:`model.rlhf.sync_time.gather_seconds`) and host bytes.

    Raises
    ------
    InputError
        Roles of the pool disagreeing on its size, or sharing process groups at different tp
        or pp (:func:`pool_resident`).
    """
    gpus, step = _pool_size(q, members), [c.option.role for c in costs]
    resident = pool_resident(members)
    if resident is None:
        layouts = ", ".join(
            f"{c.option.role} tp {c.option.tp} × pp {c.option.pp}" for c in members if c.groups
        )
        raise InputError(
            f"placement: pool {q} runs its roles in one process per GPU, on one set of "
            f"Megatron-Core groups (verl), so they need one tp × pp: {layouts}; use separate pools"
        )
    processes = pool_processes(members, shared)
    extra = process_bytes(members, shared)
    resident += update_group(members, step)
    held = sum((c.held_bytes for c in members), Fraction(resident) + extra)
    peaks = [held + max(c.swap_in(ph) + c.phase_bytes(ph) for c in members) for ph in PHASES]
    kinds = {str(c.option.role): c for c in members}
    if shared and "rollout" in kinds and "actor" in kinds:
        reuse = min(kinds["rollout"].bf16_weight_bytes, kinds["actor"].bf16_weight_bytes)
        peaks[0] = held + max(
            kinds["rollout"].rollout_bytes - reuse,
            *(c.rollout_bytes for c in members if c is not kinds["rollout"]),
        )
    elif not shared:
        peaks[0] = max(peaks[0], sync_peak(members, held))
    busy = tuple(sum(c.seconds(ph) for c in members) for ph in PHASES)
    # the sync by placement, a shared engine copy too: the actor still makes each tensor whole
    busy = (busy[0] + placement_sync_seconds(members, costs), *busy[1:])
    host = sum((c.host_bytes for c in members), Fraction(sleep_host(members)))
    roles = tuple(str(c.option.role) for c in members)
    three_peaks = split_peaks(members, held, peaks, off_policy)
    three_busy: tuple[float, float, float] = busy  # type: ignore[assignment]
    resident_f = Fraction(resident)
    return PoolPlan(q, gpus, first, roles, held, three_peaks, three_busy, host, resident_f,
                    processes, extra)  # fmt: skip


def compose(
    costs: Sequence[RoleCost],
    pool_of: Sequence[int],
    capacity_bytes: int,
    host_bytes_per_node: int,
    gpus_per_node: int,
    off_policy: int = 0,
    shared_weights: bool = False,
) -> StepPlan:
    """Evaluate a placement: ``costs[i]`` is role i's cost on pool ``pool_of[i]`` (pools
    numbered 0, 1, … without gaps; every role on a pool must have the pool's GPU count).

    Raises
    ------
    InputError
        Pools numbered with gaps, roles of one pool disagreeing on its size, roles that cannot
        share a pool (:func:`model.rlhf.split.pool_refusal`: an off-policy engine beside a role
        other than the actor; under OpenRLHF any set but its three), or a scoring role off the
        actor's scoring micro-batch under OpenRLHF (:func:`model.rlhf.openrlhf.split_refusal`).

    Examples
    --------
    See :func:`step_seconds` for the time rules; the memory rule is tested in
    ``tests/model/test_rlhf.py``.
    """
    if len(costs) != len(pool_of):
        raise InputError("placement: one pool per role")
    if refused := split_refusal(costs):
        raise InputError(refused)
    pools = sorted(set(pool_of))
    if pools != list(range(len(pools))):
        raise InputError(f"placement: pools must be numbered 0 … n − 1, got {pools}")
    out, first = [], 0
    step, openrlhf = [c.option.role for c in costs], awake_apart(costs)
    for q in pools:
        members = [c for c, p in zip(costs, pool_of, strict=True) if p == q]
        if refused := pool_refusal({c.option.role for c in members}, step, off_policy, openrlhf):
            raise InputError(f"placement: pool {q} {refused}")
        out.append(_pool_plan(q, members, first, shared_weights, off_policy, list(costs)))
        first += out[-1].gpus
    busy_rows = [p.busy_s for p in out]
    by_pool = [[c for c, p in zip(costs, pool_of, strict=True) if p == q] for q in pools]
    sync = max(placement_sync_seconds(m, costs) for m in by_pool)
    phase = tuple(max(row[k] for row in busy_rows) for k in range(3))
    return StepPlan(
        tuple(out),
        tuple(costs),
        capacity_bytes,
        Fraction(host_bytes_per_node, gpus_per_node),
        off_policy,
        phase,  # type: ignore[arg-type]
        step_seconds(busy_rows, off_policy, sync),
    )
