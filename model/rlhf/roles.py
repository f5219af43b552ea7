"""Each RLHF role's bytes and seconds for one choice of GPUs and parallelism (issue 12).

A :class:`RoleOption` places a role on a pool of ``gpus`` GPUs with its degrees (training and
scoring roles dp·tp·pp = gpus; the rollout engine tp, and dp = gpus/tp replicas) and, for a
trainable role, optimizer offload. :func:`model.rlhf.costs.role_cost` returns what it keeps on each GPU of its
pool through the whole step (``held_bytes``), what it adds while it works in each phase, its
seconds per phase and its host bytes — from the cost model itself:

* trainable roles (actor, critic): ``evaluate()`` of the update's layout under the spec's
  framework profile (model state at the framework's mechanism, activations with the spec's
  recomputation, step time) plus the update's logits terms (:mod:`model.rlhf.logits`, by
  framework and pass) on the last pipeline stage; their scoring forward is ``evaluate()`` of the same degrees
  without recomputation, a third of a micro-batch's three passes (backward = 2 × forward),
  holding one layer's no-grad working set (:mod:`model.rlhf.forward_set`; on the last stage the
  larger of it and the logits where the role returns log-probs);
* frozen roles (reference, reward): BF16 weights held as the framework shards them (whole
  without ZeRO-3; ÷ dp with ZeRO-3 / FSDP full sharding, plus its two gathered layers while
  working), the scoring forward as above;
* the rollout engine: :mod:`model.rollout` (its memory fraction of every GPU of its pool while
  it generates, nothing outside the rollout phase — vLLM's sleep mode / verl's
  ``free_cache_engine`` release the weights and the KV cache; the weights are re-sent by the
  actor each step). What sleep keeps: its tp group's communicators, held in every phase
  (:func:`model.rlhf.engine.engine_communicator_bytes`), and its CUDA graph pool, an assumed
  allowance (:data:`model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES`).

A training or scoring role also holds, in every phase and whatever its offload, its NCCL
communicators and the framework's persistent buffers (``RoleCost.resident_bytes``), counted by
the pool once per set of shared process groups (:func:`model.rlhf.step.pool_resident`). Every
process on a GPU beyond the one the runtime reserve holds adds its CUDA context and cuBLAS
workspace in every phase (``RoleCost.process``, :func:`model.rlhf.step.process_bytes`): the
engine's worker is a process of its own, and the training and scoring roles share one (verl,
the ``megatron`` and ``fsdp2`` profiles) or run one each (OpenRLHF, ``deepspeed``).

Offload (``RoleOption.offload``), two mechanisms people use:

* ``optimizer`` — CPU Adam, as :mod:`model.offload` runs it (``evaluate()`` of the update's
  layout with ``TrainingSpec(offload=Offload(optimizer=1))``; Megatron-Core
  ``--optimizer-cpu-offload``, DeepSpeed ``offload_optimizer``, ZeRO-Offload, Ren et al. 2021,
  arXiv 2101.06840): the optimizer state and its step leave the GPU; the host holds the state and
  an FP32 gradient buffer (12 + 4 B per element of the GPU's optimizer shard under mixed-precision
  Adam); each update adds the host-link transfers (gradients down, once or per micro-batch as the
  framework reduces, weights up; ``host_link_gbps``) and the CPU Adam step at the host memory
  bandwidth (``host_memory_gbps``), all exposed. Trainable roles only, under a framework that
  offloads the optimizer alone (not FSDP2, whose ``CPUOffloadPolicy`` moves the parameters too;
  not ``textbook``): :func:`model.offload.check_offload`.
* ``idle`` — the role's whole state goes to host memory while it does not work and comes back
  for its phases: NeMo-RL's Megatron policy moves "as much as possible" (parameters, gradient
  buffers, optimizer) to the CPU before generation (``offload_after_refit``) and keeps the
  reference's weights on the CPU, swapped in for its log-probs (``use_reference_model``); verl's
  ``param_offload`` / ``optimizer_offload``. It holds nothing on the GPU outside its phases
  (``swap_bytes`` instead of ``held_bytes``): its state comes in for its turn in each phase it
  works in and goes back out after, over the host link — the whole state for the update, its
  weights for scoring (:func:`model.rlhf.openrlhf.scoring_state_bytes`). Under ``deepspeed`` (OpenRLHF) a
  trainable role's BF16 weights stay on the GPU (``held_bytes``) and a frozen role offloads only
  at ZeRO-3 (:mod:`model.rlhf.openrlhf`).

The per-role figures are those of the role's busiest pipeline stage in each phase; ``held`` is
the largest stage's state, so ``held + phase bytes`` is the role's true peak.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction

from trainplan.model.errors import InputError, LayoutError
from trainplan.model.estimate import Estimate
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Layout
from trainplan.model.mechanisms import Mechanism, mechanism
from trainplan.model.model_spec import ModelSpec
from trainplan.model.rlhf.spec import Role
from trainplan.model.specs import TrainingSpec

__all__ = [
    "RoleOption",
    "Term",
    "RoleCost",
    "Evaluator",
    "OFFLOAD_SOURCE",
    "IDLE_SOURCE",
    "OFFLOAD_MODES",
    "resident_of",
    "resident_terms",
    "training_tp_limit",
    "training_pp_limit",
    "check_training_tp",
    "VERL_FSDP_SOURCE",
    "rlhf_mechanism",
]

OFFLOAD_MODES = ("none", "optimizer", "idle")
"""``RoleOption.offload`` values (module docstring)."""

Evaluator = Callable[[ModelSpec, TrainingSpec, Layout], Estimate]
"""``evaluate()`` of one layout with the cluster's links (the caller places the axes on the
cluster: :func:`optimizer.case.links_for`)."""

OFFLOAD_SOURCE = (
    "model.offload (Megatron-Core --optimizer-cpu-offload; DeepSpeed offload_optimizer, "
    "ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840): optimizer state + FP32 gradient buffer in "
    "host memory; gradients down and weights up over the host link, CPU Adam at the host memory "
    "bandwidth, each update"
)
IDLE_SOURCE = (
    "NeMo-RL MegatronPolicyWorker.offload_after_refit (parameters, gradient buffers and optimizer "
    "to the CPU before generation) and use_reference_model (reference weights kept on the CPU); "
    "verl param_offload / optimizer_offload: out and back over the host link each step"
)


@dataclass(frozen=True, slots=True)
class RoleOption:
    """Where a role runs and how: a pool of ``gpus`` GPUs and its degrees there."""

    role: Role
    """The role placed."""
    gpus: int
    """GPUs of the role's pool (it uses all of them)."""
    dp: int = 1
    tp: int = 1
    pp: int = 1
    """Training and scoring roles: dp·tp·pp = gpus. The rollout engine: tp per replica, dp
    replicas (dp·tp = gpus), pp 1."""
    offload: str = "none"
    """``none``, ``optimizer`` (trainable roles: CPU Adam) or ``idle`` (the role's state in host
    memory outside its phases); module docstring."""
    fraction: Fraction | None = None
    """The rollout engine's memory fraction (vLLM ``gpu_memory_utilization``)."""

    def __post_init__(self) -> None:
        if self.offload not in OFFLOAD_MODES:
            raise InputError(f"offload: {self.offload!r} is not one of {', '.join(OFFLOAD_MODES)}")
        if self.dp * self.tp * self.pp != self.gpus:
            raise LayoutError(
                f"{self.role}: dp {self.dp} × tp {self.tp} × pp {self.pp} ≠ its pool's "
                f"{self.gpus} GPUs"
            )

    @property
    def label(self) -> str:
        """``dp 8 × tp 2 × pp 1`` (``tp 2 × dp 32, fraction 0.5`` for the engine; ``, offload``)."""
        if self.role is Role.ROLLOUT:
            frac = f", fraction {float(self.fraction):g}" if self.fraction is not None else ""
            return f"tp {self.tp} × dp {self.dp}{frac}"
        off = {"none": "", "optimizer": ", optimizer offload", "idle": ", offloaded when idle"}
        return f"dp {self.dp} × tp {self.tp} × pp {self.pp}{off[self.offload]}"


@dataclass(frozen=True, slots=True)
class Term:
    """One named figure of a role, with its unit and its source (what the report prints)."""

    name: str
    """What the figure is, as printed."""
    phase: str
    """``held`` (every phase), ``rollout``, ``scoring``, ``training``, ``host``."""
    value: Fraction | float | int
    """The figure, in ``unit``."""
    unit: str
    """``bytes``, ``s``, ``sequences`` or ``tokens``."""
    source: str
    sync_path: str = ""
    """Of a weight-sync memory term, the path it belongs to, of which a pool counts one
    (:func:`model.rlhf.split.counted_terms`): ``ipc``, the actor's side of the sync to an engine
    on its pool (:func:`model.rlhf.step.sync_peak`); ``nccl``, an engine's receive on a pool
    without the actor (:func:`model.rlhf.split.receive_peak`); ``send``, the actor's side of that
    group on a pool without the engine (:func:`model.rlhf.split.update_group`). "" for every other
    term."""


@dataclass(frozen=True, slots=True)
class RoleCost:
    """What one role costs on each GPU of its pool; bytes exact, seconds float."""

    option: RoleOption
    """Where and how the role runs."""
    held_bytes: Fraction
    """Kept on the GPU through the whole step (model state, frozen weights)."""
    rollout_bytes: Fraction
    scoring_bytes: Fraction
    training_bytes: Fraction
    """Added while it works in each phase (the engine's budget; activations, logits, gathered
    layers, the optimizer step's buffers) — at most one role's at a time on a pool."""
    rollout_s: float
    scoring_s: float
    training_s: float
    """Its seconds of work in each phase (0 where it does not work)."""
    host_bytes: Fraction
    """Host memory per GPU of the pool, bytes: the offloaded optimizer state and its FP32
    gradient buffer (``optimizer``: ``Estimate.host_bytes``), or the state parked there
    (``idle``)."""
    terms: tuple[Term, ...]
    """Every figure behind the above, with its source."""
    concurrent: int = 0
    """The engine: sequences a replica decodes at once."""
    bf16_weight_bytes: Fraction = Fraction(0)
    """Its BF16 weights held whole on the GPU (the engine's copy; a trainable role's working
    weights when its framework keeps them whole): what a shared engine copy can reuse."""
    swap_bytes: Fraction = Fraction(0)
    """Offloaded when idle: its state, on the GPU only during its own turn in the phases it works
    in (then ``held_bytes`` is 0, or under ``deepspeed`` the BF16 weights OpenRLHF leaves on the
    GPU). Brought back whole for its training turn; for its scoring turn only
    ``scoring_swap_bytes``."""
    phases: tuple[str, ...] = ()
    """The phases it works in."""
    microbatch_s: tuple[float, float] = (0.0, 0.0)
    """A training or scoring role: the seconds of one micro-batch on its slowest pipeline stage,
    of the scoring forward (:func:`model.rlhf.role_time.forward_microbatch_s`) and of the
    update's compute (``TimeTerms.compute_s`` ÷ m); they read tp, pp, the micro-batch and
    recomputation, not dp — what :func:`model.rlhf.network.seconds_floor` scales to another dp."""
    budget_bytes: Fraction | None = None
    """The engine's memory budget per GPU (fraction × the device's bytes; None for the other
    roles). ``rollout_bytes`` above it: the budget cannot hold the engine's weights and one
    full-length sequence — the engine cannot start (:func:`model.rlhf.costs.role_cost` with ``over_budget``)."""

    resident_bytes: Fraction = Fraction(0)
    """A training or scoring role's bytes held in every phase of the step on every GPU of its
    pool, whether it works or not, and never moved by idle offload: its NCCL communicators and
    the framework's persistent buffers (:func:`model.terms.peak.held_in_both_phases` of its
    busiest stage for them: NCCL's buffers live outside the caching allocator for the whole run,
    and the output layer's ``"mpu"`` buffer and Transformer Engine's workspaces are allocated
    once); for the rollout engine, its tp group's communicators and its CUDA graph pool, which
    vLLM's sleep keeps (:func:`model.rlhf.engine.engine_communicator_bytes`,
    :data:`model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES`). Not in ``held_bytes``, ``swap_bytes`` or the phase bytes: the pool
    counts it once for roles that share their process groups (:attr:`groups`,
    :func:`model.rlhf.step.pool_resident`)."""
    budget_resident_bytes: Fraction = Fraction(0)
    """The part of ``resident_bytes`` the engine makes inside its budget (vLLM sizes the KV cache
    after it exists), so ``rollout_bytes`` is the budget less it: the rollout phase counts it
    once. 0 for the other roles."""
    groups: str = ""
    """Whose process groups (and persistent buffers) the role uses: ``""`` its own, counted on
    their own; a name (``megatron-core``: Megatron-Core's ``parallel_state``) groups shared by
    every role of the pool with the same name, which must then run the same tp and pp
    (:func:`model.rlhf.step.pool_resident`)."""
    process: str = ""
    """Which process runs the role on each GPU of its pool: ``""`` one of its own (OpenRLHF's
    Ray actor per role; the rollout engine's worker); a name (``verl-worker``) one process shared
    by every role of the pool with the same name (verl's fused ``WorkerDict``). Each process
    holds its own CUDA context and cuBLAS workspace: :func:`model.rlhf.step.process_bytes`."""
    sync_bytes: Fraction = Fraction(0)
    """What the role adds on each GPU of a pool holding both the engine and the actor while the
    actor sends it the updated weights: the engine its woken weights; the actor, under
    ``deepspeed``, its largest parameter's gathered copy and clone (OpenRLHF's CUDA IPC sync,
    :mod:`model.rlhf.openrlhf`), under ``megatron`` and ``fsdp2`` verl's buckets, its largest
    parameter made whole and, offloaded while idle, its parameters back (:mod:`model.rlhf.
    verl_sync`); 0 for the other roles. :func:`model.rlhf.step.sync_peak`."""
    receive_bytes: Fraction = Fraction(0)
    """The engine on a pool without the actor (OpenRLHF's NCCL sync, verl's one-step off-policy
    recipe): the whole BF16 parameter it receives beside its awake budget, the largest one
    (:func:`model.rlhf.openrlhf.engine_receive_bytes`); 0 otherwise. The same for every engine
    option of a problem. :func:`model.rlhf.split.receive_peak`."""
    receive_resident_bytes: Fraction = Fraction(0)
    """With ``receive_bytes``: the model-update communicator it holds in every phase of such a
    pool (:func:`model.rlhf.split.update_group`)."""
    send_resident_bytes: Fraction = Fraction(0)
    """The actor: the same group's communicator, held in every phase of a pool without the
    engine (:func:`model.rlhf.openrlhf.actor_update_group`, :func:`model.rlhf.split.
    update_group`); 0 for the other roles."""
    awake_apart: bool = False
    """The engine under ``deepspeed``: OpenRLHF never sleeps it apart from the actor, even in a
    synchronous step (:func:`model.rlhf.split.awake_apart`)."""
    split_tokens: int = 0
    """Under OpenRLHF (``deepspeed``), the scoring micro-batch's tokens at this role's dp
    (:meth:`model.rlhf.spec.RLHFSpec.split_tokens`), which its scoring bytes are sized at. OpenRLHF
    splits the rollouts once, at the actor's dp, for every scoring role, so a placement is counted
    only where each scoring role's figure is the actor's
    (:func:`model.rlhf.openrlhf.split_refusal`);
    0 under verl's profiles, where each role packs its own ranks' rollouts."""
    scoring_swap_bytes: Fraction | None = None
    """Offloaded when idle: the part of ``swap_bytes`` its scoring turn brings back, its weights
    only (:func:`model.rlhf.openrlhf.scoring_state_bytes`); None: all of ``swap_bytes`` (a frozen
    role, whose state is its weights)."""
    sleep_host_bytes: Fraction = Fraction(0)
    """The engine under ``deepspeed``: its BF16 weights ÷ tp, which vLLM's level-1 sleep keeps in
    pinned host memory, per GPU; counted in the host bytes of a pool holding the actor too
    (:func:`model.rlhf.openrlhf.sleep_host`). 0 otherwise."""

    sync_s: float = 0.0
    """The engine: the broadcast of the updated weights to it on a pool without the actor, in
    seconds (:func:`model.rlhf.sync_time.broadcast_seconds`); not in ``rollout_s``: the step adds
    the placement's sync to the engine's pool (:func:`model.rlhf.sync_time.placement_sync_seconds`),
    and one-step off-policy to the trainer's chain too (:mod:`model.rlhf.off_policy`). 0 for the
    other roles."""
    sync_gather_s: float = 0.0
    """The actor: seconds its ranks take to make each parameter tensor whole before the sync
    (:func:`model.rlhf.sync_time.gather_seconds`), counted where the engine is on another pool;
    0 for the other roles."""
    sync_shared_s: float = 0.0
    """The actor: the whole weight sync's seconds to an engine on its own pool (the gather and
    the hand-over, :func:`model.rlhf.sync_time.shared_sync_seconds`); 0 for the other roles."""

    @property
    def over_budget(self) -> bool:
        """The engine needs more than its budget (see ``budget_bytes``)."""
        return (
            self.budget_bytes is not None
            and self.rollout_bytes + self.budget_resident_bytes > self.budget_bytes
        )

    def phase_bytes(self, phase: str) -> Fraction:
        """Bytes it adds in ``phase`` (0 where it does not work)."""
        return {
            "rollout": self.rollout_bytes,
            "scoring": self.scoring_bytes,
            "training": self.training_bytes,
        }[phase]

    def swap_in(self, phase: str) -> Fraction:
        """Bytes its idle offload brings back for its turn in ``phase`` (0 where it does not
        work): ``scoring_swap_bytes`` for scoring, ``swap_bytes`` otherwise."""
        if phase not in self.phases:
            return Fraction(0)
        if phase == "scoring" and self.scoring_swap_bytes is not None:
            return self.scoring_swap_bytes
        return self.swap_bytes

    def seconds(self, phase: str) -> float:
        """Its seconds of work in ``phase`` (0 where it does not work)."""
        return {"rollout": self.rollout_s, "scoring": self.scoring_s, "training": self.training_s}[
            phase
        ]


_RESIDENT_SOURCE = (
    "model.terms.comm_memory (NCCL buffers per process group, outside the caching allocator) and "
    "model.terms.persistent_buffers (buffers allocated once): model.terms.peak.held_in_both_phases; "
    "idle offload does not move them ({})"
)

IDLE_OFFLOAD_SOURCES = {
    Framework.MEGATRON: "verl b178a3cd5 verl/utils/megatron_utils.py "
    "offload_megatron_model_to_cpu / offload_megatron_optimizer",
    Framework.FSDP2: "verl b178a3cd5 verl/utils/fsdp_utils.py offload_fsdp_model_to_cpu / "
    "offload_fsdp_optimizer (verl's FSDP workers)",
    Framework.DEEPSPEED: "OpenRLHF 3c3be6234 openrlhf/utils/deepspeed/deepspeed_utils.py "
    "offload_deepspeed_states (--ds.enable_sleep): DeepSpeed's optimizer.offload_states of "
    "optim_states, contiguous_grad_buffer, hp_params, lp_grads",
}
"""Each RLHF stack's idle offload, by the training roles' framework: what moves parameters,
gradients and optimizer state to the host (and nothing else)."""


def resident_of(est: Estimate) -> Fraction:
    """The bytes a role's layout holds in every phase, never offloaded: the most any of its
    stages holds in both phases of a step beside its state and activations
    (:attr:`model.terms.peak.StageMemory.both_phases_bytes`, the one sum
    :func:`model.terms.peak.held_in_both_phases`: NCCL's communicators, outside the caching
    allocator for the whole run, and the framework's persistent buffers, allocated once). Idle
    offload moves parameters, gradients and optimizer state only (each stack's own,
    :data:`IDLE_OFFLOAD_SOURCES`: verl's ``offload_megatron_model_to_cpu`` /
    ``offload_megatron_optimizer`` and ``offload_fsdp_model_to_cpu`` / ``offload_fsdp_optimizer``,
    OpenRLHF's ``offload_deepspeed_states``; NeMo-RL ``offload_after_refit``): these stay."""
    return max(st.both_phases_bytes for st in est.stages)


def resident_terms(resident: Fraction, framework: Framework | str) -> list[Term]:
    """The term of a role's bytes held in every phase (:func:`resident_of`), citing the idle
    offload of ``framework``'s stack (:data:`IDLE_OFFLOAD_SOURCES`); none when 0.

    >>> resident_terms(Fraction(5), "deepspeed")[0].source.endswith(
    ...     "offload_states of optim_states, contiguous_grad_buffer, hp_params, lp_grads)")
    True
    >>> "offload_fsdp_model_to_cpu" in resident_terms(Fraction(5), "fsdp2")[0].source
    True
    """
    if not resident:
        return []
    what = "communicators + persistent buffers (every phase, not offloaded)"
    source = _RESIDENT_SOURCE.format(IDLE_OFFLOAD_SOURCES[Framework(framework)])
    return [Term(what, "held", resident, "bytes", source)]


VERL_FSDP_SOURCE = (
    "verl b178a3cd5 verl/workers/fsdp_workers.py _build_model_optimizer: actor.strategy fsdp, "
    "the default (trainer/config/_generated_ppo_trainer.yaml), is FSDP1 FullyShardedDataParallel "
    "(flat parameters, use_orig_params False, FULL_SHARD, MixedPrecision(param bf16, reduce "
    "fp32), transformer layers wrapped, the embedding, final norm and output layer in the root "
    "unit); strategy fsdp2 is fully_shard (verl/utils/fsdp_utils.py apply_fsdp2). Both counted "
    "with FSDP2's mechanism: sharded FP32 master and moments, BF16 gathers, FP32 reduce-scatter "
    "per micro-batch; FSDP1's copies around them in the update (model.fsdp2_copies, "
    "flat_parameters) and its root unit gathered through backward added (model.rlhf.verl_fsdp1)"
)
"""The source the ``fsdp2`` profile's state terms cite under RLHF (verl's FSDP workers)."""


def rlhf_mechanism(framework: Framework | str, zero_stage: int) -> Mechanism:
    """The framework profile's mechanism (:func:`model.mechanisms.mechanism`) as the RLHF stack
    runs it: under ``fsdp2`` verl's FSDP workers, whose default is FSDP1, so its state terms
    cite :data:`VERL_FSDP_SOURCE` (the bytes are FSDP2's).

    >>> rlhf_mechanism("fsdp2", 3).source.startswith("verl b178a3cd5")
    True
    >>> rlhf_mechanism("megatron", 1).source == mechanism("megatron", 1).source
    True
    """
    mech = mechanism(framework, zero_stage)
    if Framework(framework) is Framework.FSDP2:
        return replace(mech, source=VERL_FSDP_SOURCE)
    return mech


_NO_TP = {
    Framework.FSDP2: "verl's FSDP workers have no tensor parallelism: their device mesh is FSDP "
    "(× DDP) and Ulysses sequence parallelism only (verl/workers/fsdp_workers.py "
    "create_device_mesh, ulysses_device_mesh)",
    Framework.DEEPSPEED: "OpenRLHF's tensor parallelism is DeepSpeed AutoTP with one "
    "ds.tensor_parallel_size for every model, its token cap multiplied by tp and every tp rank "
    "holding the whole micro-batch and its logits (openrlhf/utils/deepspeed/deepspeed.py, "
    "get_minimum_num_micro_batch_size; OpenRLHF 3c3be6234), which this plan does not count",
}
"""RLHF profiles whose training and scoring roles are planned without tensor parallelism, and
why."""

_NO_PP = {
    Framework.FSDP2: "verl's FSDP workers have no pipeline stages (verl/workers/fsdp_workers.py "
    "create_device_mesh: FSDP × DDP and Ulysses only)",
    Framework.DEEPSPEED: "OpenRLHF has no pipeline parallelism: its device mesh is data × ring "
    "attention × tensor parallel (openrlhf/utils/deepspeed/deepspeed.py setup_distributed; "
    "OpenRLHF 3c3be6234)",
}
"""RLHF profiles whose training and scoring roles run without pipeline stages, and why."""

_USE = {"tp": "tensor", "pp": "pipeline"}


def training_tp_limit(framework: Framework | str, limit: int) -> int:
    """The largest tp a training or scoring role may take under ``framework``'s RLHF stack:
    1 under fsdp2 and deepspeed (:data:`_NO_TP`), else ``limit``.

    >>> training_tp_limit("fsdp2", 8), training_tp_limit("deepspeed", 8), training_tp_limit("megatron", 8)
    (1, 1, 8)
    """
    return 1 if Framework(framework) in _NO_TP else limit


def training_pp_limit(framework: Framework | str, limit: int) -> int:
    """The largest pp a training or scoring role may take under ``framework``'s RLHF stack:
    1 under fsdp2 and deepspeed (:data:`_NO_PP`), else ``limit``.

    >>> training_pp_limit("deepspeed", 8), training_pp_limit("megatron", 8)
    (1, 8)
    """
    return 1 if Framework(framework) in _NO_PP else limit


def check_training_tp(
    framework: Framework | str, tp: int, name: str = "train_tp", pp: int = 1
) -> None:
    """Refuse tp > 1 or pp > 1 for a training or scoring role where the stack has none
    (``name`` names the tp; the pp is named with ``tp`` replaced by ``pp``).

    Raises
    ------
    LayoutError
        tp above :func:`training_tp_limit` or pp above :func:`training_pp_limit`, in one line
        naming the parameter, value and rule.
    """
    fw = Framework(framework)
    for axis, value, table in (("tp", tp, _NO_TP), ("pp", pp, _NO_PP)):
        if value > 1 and fw in table:
            raise LayoutError(
                f"{name.replace('tp', axis)}: {value} — under {fw} {table[fw]}; use 1 "
                f"(or `framework` megatron for {_USE[axis]} parallelism)"
            )
