"""Idle offload's swap (:func:`idle_swap`, every profile) and what the ``deepspeed`` profile's
stack (OpenRLHF, OpenRLHF/OpenRLHF 3c3be6234, with the DeepSpeed 0.19.5 and transformers 5.15.0
it pins) does with memory where the verl profiles (``megatron``, ``fsdp2``) differ: what idle
offload leaves on the GPU, and the weight sync to a colocated engine.

**Idle offload.** OpenRLHF moves a trainable role's state out between its turns with
``offload_deepspeed_states`` (``openrlhf/utils/deepspeed/deepspeed_utils.py``; called by
``PolicyModelActor`` / ``CriticModelActor`` ``offload_states`` after ``fit`` under
``--ds.enable_sleep``): DeepSpeed ``offload_states`` of ``optim_states``,
``contiguous_grad_buffer``, ``hp_params`` (the FP32 master copy) and ``lp_grads`` — the BF16
parameters (``lp_params``) are left out (commented out there), so they stay on the GPU through
the rollout and the scoring of the other roles. With DeepSpeed above 0.17.5 this runs at ZeRO-1
and -2 too (``DeepSpeedZeroOptimizer.offload_states``, ``deepspeed/runtime/zero/
stage_1_and_2.py``; at ZeRO-1/2 the BF16 parameters are whole on each rank). A frozen role's
offload (``--ref.offload``, ``--reward.offload``) is DeepSpeed's ``offload_param`` in the eval
config (``get_eval_ds_config``), which only ZeRO-3 runs (``DeepSpeedZeRoOffload``,
``deepspeed/runtime/engine.py``; the eval config is stage 0 otherwise): below ZeRO-3 a frozen
role cannot be offloaded (:func:`check_idle`).

**Weight sync on a shared pool.** With every role colocated (``--train.colocate_all``),
``PPOTrainer.broadcast_to_vllm`` (``openrlhf/trainer/ppo_trainer.py``) wakes the sleeping
engine's weights only (``wake_up(tags=["weights"])``; its KV cache comes back before the
next generation) after the actor's ``offload_states``, then the actor
(``ActorPPOTrainer.broadcast_to_vllm``, ``openrlhf/trainer/ray/ppo_actor.py``) sends each
parameter in turn over CUDA IPC (``use_cuda_ipc``: NCCL backend, colocated, not async): inside
``GatheredParameters`` (ZeRO-3) or ``GatherReplacedLayerParams`` (DeepSpeed tensor parallel) the
whole parameter is materialised, and ``_handle_cuda_ipc`` sends ``param.data.clone()``. At that
moment a GPU of the pool holds what every role keeps there, the engine's weights and, for the
largest parameter, its gathered copy and its clone (:func:`sync_transient_bytes`). verl (the
other profiles) has its own transient, counted by :mod:`model.rlhf.verl_sync`.

**Weight sync to an engine on GPUs of its own.** Without ``--train.colocate_all``, or with
``--train.async_enable`` (one-step off-policy), the actor does not use CUDA IPC
(``ActorPPOTrainer.__init__``, ``ppo_actor.py``: ``use_cuda_ipc = nccl and colocate_all and not
async_enable``): DeepSpeed rank 0 opens a model-update NCCL group with every engine GPU
(``_init_vllm_sync_group``, world size engines × tp + 1) and broadcasts each parameter; each
engine GPU receives it into ``torch.empty(shape)`` of the whole BF16 parameter
(``WorkerWrap.update_weight``, ``vllm_worker_wrap.py``), loads it and frees it. vLLM's sleep is
off there (``train_ppo_ray.py``: forced off without ``colocate_all``, asserted off under
``async_enable``), so the buffer comes on top of the awake engine's budget
(:func:`engine_receive_bytes`).

**The sleeping engine's host copy.** OpenRLHF sleeps its engines at vLLM's level 1
(``LLMRayActor.sleep(level=1)``, ``vllm_engine.py``; ``batch_vllm_engine_call(engines,
"sleep")`` after ``create_vllm_engines`` and after each generation, ``samples_generator.py``),
only with every role colocated (above). vLLM's level 1 offloads the allocations tagged
``weights`` (``Worker.sleep``: ``offload_tags = ("weights",) if level == 1``) and
``CuMemAllocator.sleep`` (``vllm/device_allocator/cumem.py``) backs each up in a pinned host
tensor (``cpu_backup_tensor``, ``pin_memory=is_pin_memory_available()``) until ``wake_up``
copies it back: the engine's BF16 weights ÷ tp per GPU sit in host memory while it sleeps, in
the scoring and training phases (:func:`sleep_host`; verl sleeps at level 2, which discards
them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import Framework
from trainplan.model.hardware import DeviceSpec
from trainplan.model.params import largest_parameter_bytes
from trainplan.model.rlhf.roles import IDLE_SOURCE as _MOVED_SOURCE
from trainplan.model.rlhf.roles import RoleCost, Term
from trainplan.model.rlhf.spec import RLHFSpec, Role, RoleSpec
from trainplan.model.specs import Architecture
from trainplan.model.terms.comm_memory import communicator_bytes

__all__ = [
    "IDLE_SOURCE",
    "SYNC_SOURCE",
    "SYNC_TERM",
    "RECEIVE_SOURCE",
    "actor_sync_bytes",
    "actor_update_group",
    "UPDATE_GROUP_TERM",
    "check_idle",
    "split_refusal",
    "check_split_count",
    "engine_receive_bytes",
    "receive_source",
    "VERL_RECEIVE_SOURCE",
    "idle_swap",
    "scoring_state_bytes",
    "sleep_host",
    "engine_sleep_host_bytes",
    "SLEEP_HOST_SOURCE",
    "SCORING_SWAP_SOURCE",
    "sync_transient_bytes",
]

IDLE_SOURCE = (
    "OpenRLHF offload_deepspeed_states (deepspeed_utils.py, 3c3be6234): optim_states, "
    "contiguous_grad_buffer, hp_params, lp_grads to the host; lp_params (the BF16 weights) stay"
)
SYNC_TERM = "weight sync: largest parameter gathered + IPC clone"
"""The actor's term for :func:`sync_transient_bytes`."""
SYNC_SOURCE = (
    "OpenRLHF PPOTrainer.broadcast_to_vllm (wake_up weights) and ActorPPOTrainer."
    "broadcast_to_vllm: GatheredParameters / GatherReplacedLayerParams, then "
    "_handle_cuda_ipc param.data.clone() (3c3be6234)"
)


def check_idle(framework: Framework, zero_stage: int, trainable: bool, role: str) -> None:
    """Refuse idle offload the ``deepspeed`` profile's stack cannot run: a frozen role below
    ZeRO-3 (module docstring). Other profiles and trainable roles pass.

    Raises
    ------
    LayoutError
        A frozen role offloaded when idle under ``deepspeed`` below ZeRO-3.

    Examples
    --------
    >>> check_idle(Framework.DEEPSPEED, 3, False, "reference")
    >>> try:
    ...     check_idle(Framework.DEEPSPEED, 1, False, "reference")
    ... except LayoutError as e:
    ...     print(e)
    offload: reference=idle — OpenRLHF offloads a frozen role with DeepSpeed's offload_param, which only ZeRO-3 runs (ZeRO-1)
    """
    if framework is Framework.DEEPSPEED and not trainable and zero_stage != 3:
        raise LayoutError(
            f"offload: {role}=idle — OpenRLHF offloads a frozen role with DeepSpeed's "
            f"offload_param, which only ZeRO-3 runs (ZeRO-{zero_stage})"
        )


def check_split_count(spec: RLHFSpec, role: Role, dp: int) -> None:
    """Refuse an actor (``role``; other roles pass) at data-parallel size ``dp`` above the
    step's rollouts under OpenRLHF's
    scoring split: ``RemoteExperienceMaker.split_rollout_samples`` (``experience_maker.py``,
    3c3be6234) cuts them into at least ``effective_actor_num`` (the actor's GPUs ÷ ring ÷ tp, its
    dp) micro-batches, and ``get_seqlen_balanced_partitions`` (``openrlhf/utils/
    seqlen_balancing.py``) asserts ``len(seqlen_list) >= k_partitions``: with fewer rollouts
    than dp the step stops there. Only where the split applies (:meth:`~model.rlhf.spec.
    RLHFSpec.split_tokens`: ``deepspeed`` with first-fit packing, OpenRLHF's
    ``--train.dynamic_batch_enable``).

    Raises
    ------
    LayoutError
        ``dp`` above the step's rollouts, in one line naming both and the rule.

    Examples
    --------
    >>> from trainplan.scenarios.catalogue import get_model
    >>> spec = RLHFSpec(algorithm="grpo", policy=get_model("qwen2.5-7b").model, reward="rule",
    ...                 prompts=4, samples_per_prompt=4, prompt_tokens=1024,
    ...                 completion_tokens=4096, framework="deepspeed")
    >>> check_split_count(spec, Role.ACTOR, 16), check_split_count(spec, Role.REFERENCE, 32)
    (None, None)
    >>> try:
    ...     check_split_count(spec, Role.ACTOR, 32)
    ... except LayoutError as e:
    ...     print(e)  # doctest: +ELLIPSIS
    actor dp: 32 — above the step's 16 rollouts: OpenRLHF splits them into at least the actor's dp micro-batches ...
    """
    if role is Role.ACTOR and spec.split_tokens(dp) and dp > spec.sequences:
        raise LayoutError(
            f"actor dp: {dp:,} — above the step's {spec.sequences:,} rollouts: OpenRLHF splits "
            "them into at least the actor's dp micro-batches (split_rollout_samples) and "
            "get_seqlen_balanced_partitions asserts at least one rollout each; use fewer GPUs "
            "for the actor, or more prompts or samples_per_prompt"
        )


def split_refusal(costs: Sequence[RoleCost]) -> str | None:
    """Why a placement cannot be counted under OpenRLHF's scoring split, or None where it can.
    ``split_rollout_samples`` cuts the step's rollouts once, at the actor's dp, for every scoring
    role (:func:`model.rlhf.packing.split_peak_tokens`); each role's scoring bytes are sized at
    :attr:`~model.rlhf.roles.RoleCost.split_tokens`, its own dp's figure, so a scoring role whose
    figure is not the actor's (a pool of another size, where the rounding differs) is refused.
    Nothing is refused under verl's profiles (no split figure) or without an actor.

    >>> from trainplan.model.rlhf.roles import RoleOption
    >>> from trainplan.model.rlhf.spec import Role
    >>> def cost(role, gpus, tokens):
    ...     return RoleCost(RoleOption(role, gpus, gpus), *[Fraction(0)] * 4, 0.0, 0.0, 0.0,
    ...                     Fraction(0), (), phases=("scoring",), split_tokens=tokens)
    >>> split_refusal([cost(Role.ACTOR, 64, 20480), cost(Role.REFERENCE, 64, 20480)]) is None
    True
    >>> print(split_refusal([cost(Role.ACTOR, 64, 20480), cost(Role.REFERENCE, 32, 15360)]))
    ... # doctest: +ELLIPSIS
    placement: ... actor's dp 64 ..., 20,480 tokens ...; reference at dp 32 would be counted at 15,360: ...
    """
    actor = next((c for c in costs if c.option.role == "actor"), None)
    if actor is None or not actor.split_tokens:
        return None
    for c in costs:
        if "scoring" in c.phases and c.split_tokens and c.split_tokens != actor.split_tokens:
            return (
                f"placement: OpenRLHF splits the step's rollouts for every scoring role at the "
                f"actor's dp {actor.option.dp} (split_rollout_samples), {actor.split_tokens:,} "
                f"tokens per scoring micro-batch; {c.option.role} at dp {c.option.dp} would be "
                f"counted at {c.split_tokens:,}: put it on a pool where the two agree (the "
                "actor's size)"
            )
    return None


SCORING_SWAP_SOURCE = (
    "verl b178a3cd5 megatron_workers.py compute_log_prob / compute_ref_log_prob: "
    "load_megatron_model_to_gpu(load_grad=False), no optimizer (update_actor loads both); "
    "CriticWorker.compute_values: load_grad=True (gradient buffers allocated and zeroed, not "
    "copied); fsdp_workers.py compute_log_prob / compute_values: load_fsdp_model_to_gpu only, "
    "gradients freed by update_policy's final zero_grad(); OpenRLHF PPOTrainer.ppo_train "
    "_run_sleep: reload_states only around fit (3c3be6234); NeMo-RL MegatronPolicyWorker."
    "prepare_for_lp_inference: move_model(cuda, move_grads=False), gradients and optimizer on the "
    "CPU (megatron_policy_worker.py, NVIDIA-NeMo/RL 87618908)"
)


def scoring_state_bytes(
    framework: Framework, role: Role, weights: Fraction, gradients: Fraction
) -> Fraction:
    """What of a role's state (``weights`` and ``gradients`` bytes on its busiest stage) is on
    the GPU for its scoring turn when it is offloaded while idle (:data:`SCORING_SWAP_SOURCE`):
    the weights — verl's Megatron actor and reference load the parameters without gradients,
    its FSDP workers the parameter shards (gradients freed after each update), OpenRLHF keeps
    the BF16 weights on the GPU and reloads the rest only for ``fit``, NeMo-RL's Megatron policy
    moves the parameters without gradients for its log-probs — and, for verl's
    Megatron critic (``compute_values`` loads with ``load_grad=True``), the gradient buffers
    too. The optimizer state never comes back for scoring.

    >>> scoring_state_bytes(Framework.MEGATRON, Role.ACTOR, Fraction(17), Fraction(35))
    Fraction(17, 1)
    >>> scoring_state_bytes(Framework.MEGATRON, Role.CRITIC, Fraction(17), Fraction(35))
    Fraction(52, 1)
    """
    if framework is Framework.MEGATRON and role is Role.CRITIC:
        return weights + gradients
    return weights


def idle_swap(
    spec: RLHFSpec,
    rs: RoleSpec,
    device: DeviceSpec,
    held: tuple[Fraction, Fraction, Fraction, Fraction],
) -> tuple[Fraction, Fraction, tuple[float, float], list[Term]]:
    """Idle offload of a role whose busiest stage holds ``held`` = (state, kept, weights,
    gradients) bytes, ``kept`` of them staying on the GPU (the BF16 weights under
    ``deepspeed``, module docstring; 0 otherwise), where the profile's stack can run it
    (:func:`check_idle`): the bytes that go to the host (all but ``kept``), come back in for
    its training turn and go out after; the bytes its scoring turn brings back
    (:func:`scoring_state_bytes` less ``kept``); the seconds of the scoring and the training
    round trips over the host link (the scoring one moves the weights only); and the terms.

    Raises
    ------
    LayoutError
        :func:`check_idle`'s refusal.
    """
    check_idle(spec.framework, spec.zero_stage or 1, rs.trainable, str(rs.role))
    assert device.host_link_bytes_per_s
    state, kept, weights, gradients = held
    moved = state - kept
    link = Fraction(device.host_link_bytes_per_s)
    scoring = scoring_state_bytes(spec.framework, rs.role, weights, gradients) - kept
    seconds = (float(2 * (weights - kept) / link), float(2 * moved / link))
    terms = [Term("state to host when idle", "host", moved, "bytes", _MOVED_SOURCE)]
    if kept:
        terms.append(
            Term("BF16 weights kept on the GPU when idle", "held", kept, "bytes", IDLE_SOURCE)
        )
    if "scoring" in rs.phases and scoring:
        what = "weights" if scoring == weights - kept else "weights + gradient buffers"
        for name, value, unit in (
            (f"{what} back for scoring", scoring, "bytes"),
            ("weights in and back out", seconds[0], "s"),
        ):
            terms.append(Term(name, "scoring", value, unit, SCORING_SWAP_SOURCE))
    if "training" in rs.phases:
        terms.append(Term("state in and back out", "training", seconds[1], "s", _MOVED_SOURCE))
    return moved, scoring, seconds, terms


def sync_transient_bytes(arch: Architecture, zero_stage: int, tp: int) -> Fraction:
    """Bytes the actor adds on each GPU while it sends its weights to an engine on its pool
    (module docstring): the largest parameter's ``param.data.clone()`` for CUDA IPC, and its
    gathered whole copy where the parameter is sharded (ZeRO-3, or tensor parallel ``tp`` > 1);
    at ZeRO-1/2 without tensor parallelism ``param.data`` is already whole.

    Examples
    --------
    Llama 3 70B at ZeRO-1, tp 2: gathered + clone, 2 × 2,101,346,304 B.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> sync_transient_bytes(get_model("llama3-70b").model.arch, 1, 2)
    Fraction(4202692608, 1)
    """
    largest = largest_parameter_bytes(arch)
    gathered = largest if zero_stage == 3 or tp > 1 else 0
    return Fraction(largest + gathered)


def actor_sync_bytes(spec: RLHFSpec, rs: RoleSpec, tp: int) -> Fraction:
    """:attr:`~model.rlhf.roles.RoleCost.sync_bytes` of a training or scoring role at tensor
    parallel ``tp``: the actor's :func:`sync_transient_bytes` under ``deepspeed``; 0 for the
    other roles and profiles."""
    if spec.framework is not Framework.DEEPSPEED or rs.role is not Role.ACTOR:
        return Fraction(0)
    assert rs.model.arch is not None
    return sync_transient_bytes(rs.model.arch, spec.zero_stage or 1, tp)


RECEIVE_SOURCE = (
    "OpenRLHF WorkerWrap.update_weight (vllm_worker_wrap.py): torch.empty(shape) of the whole "
    "BF16 parameter, NCCL broadcast from DeepSpeed rank 0; ActorPPOTrainer._init_vllm_sync_group "
    "(ppo_actor.py), the model-update group (3c3be6234)"
)
VERL_RECEIVE_SOURCE = (
    "verl b178a3cd5 verl/experimental/one_step_off_policy/{megatron,fsdp}_workers.py "
    "DetachSync.sync_rollout_weights: torch.empty(shape) of each whole HF parameter, "
    "collective.broadcast(group_name='actor_rollout'), load_weights, engine awake; "
    "ray_trainer.py OneStepOffRayTrainer: create_collective_group(actor_wg.workers + "
    "rollout_wg.workers, backend nccl)"
)


def receive_source(framework: Framework) -> str:
    """The source of :func:`engine_receive_bytes` under ``framework``: OpenRLHF's NCCL path
    (``deepspeed``) or verl's one-step off-policy recipe (``megatron``, ``fsdp2``)."""
    return RECEIVE_SOURCE if framework is Framework.DEEPSPEED else VERL_RECEIVE_SOURCE


def engine_receive_bytes(spec: RLHFSpec, rs: RoleSpec) -> tuple[Fraction, Fraction]:
    """What an engine on a pool without the actor adds on each GPU, bytes: ``(receive buffer,
    model-update communicator)`` — the largest parameter whole in BF16
    (:func:`largest_parameter_bytes`: the engine receives the HF tensor unsharded and narrows it
    in ``load_weights``) and one NCCL ring (``communicator_bytes``, the project's 12 MiB per
    channel). Under ``deepspeed`` OpenRLHF's NCCL path (module docstring); under ``megatron``
    and ``fsdp2`` verl's one-step off-policy recipe (:data:`VERL_RECEIVE_SOURCE`), whose rollout
    workers receive each parameter into ``torch.empty(shape)`` while the engine is awake, over
    the ``actor_rollout`` group of every actor and rollout GPU. (verl's colocated hybrid engine
    reads the weights before its KV cache wakes: :mod:`model.rlhf.verl_sync`; this term is
    counted only on a pool without the actor, :func:`model.rlhf.split.receiving_engine`.)

    Examples
    --------
    Qwen2.5 72B: its embedding 152,064 × 8,192 × 2 B = 2,491,416,576 B, and a 24-channel ring,
    288 MiB.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> largest_parameter_bytes(get_model("qwen2.5-72b").model.arch), communicator_bytes(True, 0, 0)
    (2491416576, 301989888)
    """
    assert rs.model.arch is not None
    return (
        Fraction(largest_parameter_bytes(rs.model.arch)),
        Fraction(communicator_bytes(True, 0, 0)),
    )


UPDATE_GROUP_TERM = "model-update communicator (pool without the engine)"
"""The actor's side of the model-update group (:func:`actor_update_group`)."""


def actor_update_group(spec: RLHFSpec, rs: RoleSpec, cost: RoleCost) -> RoleCost:
    """The actor's ``cost`` with the sending side of :func:`engine_receive_bytes`' group: one NCCL
    ring (``communicator_bytes``) held in every phase of a pool without the engine — verl's
    ``actor_rollout`` group on every actor GPU, OpenRLHF's model-update group on DeepSpeed rank
    0, the pool's busiest GPU (``_init_vllm_sync_group`` runs where
    ``torch.distributed.get_rank() == 0``) — as :attr:`~model.rlhf.roles.RoleCost.
    send_resident_bytes` and a ``send`` term (:func:`model.rlhf.split.update_group`); ``cost``
    unchanged for the other roles.

    >>> from trainplan.model.rlhf.roles import RoleOption
    >>> from trainplan.scenarios.catalogue import get_model
    >>> spec = RLHFSpec(algorithm="grpo", policy=get_model("qwen2.5-7b").model, reward="rule",
    ...                 prompts=4, samples_per_prompt=4, prompt_tokens=1024,
    ...                 completion_tokens=4096)
    >>> z = Fraction(0)
    >>> cost = RoleCost(RoleOption(Role.ACTOR, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, ())
    >>> actor_update_group(spec, spec.role(Role.ACTOR), cost).send_resident_bytes
    Fraction(301989888, 1)
    """
    if rs.role is not Role.ACTOR:
        return cost
    group = Fraction(communicator_bytes(True, 0, 0))
    src = receive_source(spec.framework)
    term = Term(UPDATE_GROUP_TERM, "held", group, "bytes", src, "send")
    return replace(cost, terms=(*cost.terms, term), send_resident_bytes=group)


SLEEP_HOST_SOURCE = (
    "OpenRLHF 3c3be6234 LLMRayActor.sleep(level=1) (vllm_engine.py), every role colocated; vLLM "
    "Worker.sleep level 1 offload_tags ('weights',), CuMemAllocator.sleep (device_allocator/"
    "cumem.py): each weights allocation backed up in a pinned cpu_backup_tensor until wake_up"
)


def engine_sleep_host_bytes(framework: Framework, weights: Fraction) -> Fraction:
    """The engine's host copy while it sleeps, per GPU (module docstring): its BF16 weights ÷ tp
    ``weights`` under ``deepspeed`` (OpenRLHF, level 1), none under verl's profiles (level 2).

    >>> engine_sleep_host_bytes(Framework.DEEPSPEED, Fraction(7)), engine_sleep_host_bytes(
    ...     Framework.FSDP2, Fraction(7))
    (Fraction(7, 1), Fraction(0, 1))
    """
    return weights if framework is Framework.DEEPSPEED else Fraction(0)


def sleep_host(members: Sequence[RoleCost], bytes_of: Any = None) -> Any:
    """The host bytes per GPU a pool holds for its sleeping engine beyond its roles'
    (:attr:`~model.rlhf.roles.RoleCost.host_bytes`): the engine's
    :attr:`~model.rlhf.roles.RoleCost.sleep_host_bytes` where the pool holds the actor too (an
    engine apart from the actor never sleeps: module docstring), else 0. Added to the roles'
    host bytes for the whole step, as theirs are (conservative: the copy exists in the scoring
    and training phases only). ``bytes_of`` reads an engine's bytes (the search's integers:
    rounded up).

    >>> from trainplan.model.rlhf.roles import RoleOption
    >>> z = Fraction(0)
    >>> engine = RoleCost(RoleOption(Role.ROLLOUT, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, (),
    ...                   sleep_host_bytes=Fraction(17_640_000_000))
    >>> actor = RoleCost(RoleOption(Role.ACTOR, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, ())
    >>> sleep_host([engine, actor]), sleep_host([engine])
    (Fraction(17640000000, 1), 0)
    """
    if Role.ACTOR not in {c.option.role for c in members}:
        return 0
    read = bytes_of or (lambda c: c.sleep_host_bytes)
    return sum(read(c) for c in members if c.option.role is Role.ROLLOUT)
