"""The weight sync of the verl profiles (``megatron``, ``fsdp2``) to a rollout engine on the
actor's pool: what a GPU holds while the actor sends the engine its new weights.

verl's hybrid engine updates a colocated engine only in ``rollout_mode`` (volcengine/verl
b178a3cd5: ``verl/workers/megatron_workers.py`` and ``verl/workers/fsdp_workers.py``
``ActorRolloutRefWorker.rollout_mode``), in this order:

1. with the actor offloaded between its turns (``_is_offload_param``, what ``--offload idle``
   stands for), its parameters come back to the GPU: Megatron ``load_megatron_model_to_gpu(...,
   load_grad=False)`` (the BF16 parameters, no gradients, no optimizer); FSDP
   ``load_fsdp_model_to_gpu``. verl's FSDP1 worker then calls ``state_dict()`` under
   ``SHARDED_STATE_DICT`` (``fsdp_workers.py`` line 662, ``set_state_dict_type``), which returns
   new FP32 shards, not references: torch 2.13 ``_sharded_post_state_dict_hook`` turns each
   parameter into ``_shard_utils._create_chunk_dtensor``, ``tensor.detach().clone()`` then
   ``redistribute`` to ``Shard(0)`` (``Shard._replicate_to_shard``: ``_select_split_tensor(...,
   clone=True)``), about 4·N/dp bytes per GPU (one dim-0 chunk of each parameter), held until
   ``del params, per_tensor_param`` after ``update_weights``. They are counted whatever the
   offload (with idle offload the worker moves the flat parameter back to the host before the
   sync, so the clones are all the FSDP actor holds then);
2. the engine's weights wake (``rollout.resume(tags=["weights"])``), its KV cache not yet;
3. ``rollout.update_weights`` streams the parameters through a CUDA IPC bucket of
   ``checkpoint_engine.update_weights_bucket_megabytes`` = 2,048 MiB
   (``verl/trainer/config/rollout/rollout.yaml``; ``ServerAdapter.update_weights``,
   ``vllm_rollout.py``: ``torch.empty(bucket_size, dtype=torch.uint8)``, whatever the model's
   size), which the engine's process clones tensor by tensor before loading
   (``update_weights_from_ipc``, ``vllm_rollout/utils.py``: "clone the tensor to release CUDA IPC
   memory"): up to a second bucket, the model's weights where they are fewer. Each parameter is
   first made whole. Megatron: verl's defaults (``use_mbridge: true``, ``vanilla_mbridge: true``,
   ``_generated_ppo_megatron_trainer.yaml``) run mbridge's ``Bridge.export_weights``
   (ISEEKYAN/mbridge 04fe4d52 ``mbridge/core/bridge.py``; ``per_tensor_generator`` only without
   a bridge): ``broadcast_from_megatron_pp`` (``mbridge/core/util.py``) sends each parameter from
   its stage, a rank of another stage first allocating its tp shard (``torch.empty``, ``L/tp``
   of the parameter's ``L`` BF16 bytes, pp > 1); at tp > 1 ``all_gather`` into ``tp``
   ``empty_like`` shards (``L``) and ``_weight_merge_across_tp``'s ``torch.cat`` (``L``): ``2·L``
   on the owning stage, ``(2 + 1/tp)·L`` on the others; at tp 1 ``_weight_merge_across_tp``
   returns the one shard, no copy: ``L`` received under pp > 1, nothing else (a GLU FC1's merge
   at tp > 1 concatenates gate and up lists first, 3·L, below the embedding's figure for every
   catalogue dense model: Llama 3 70B 3 × 939.5 MB < 2 × 2,101 MB); FSDP's
   ``param.to(device).full_tensor()`` gathers it in FP32 and ``update_weights`` casts it to BF16
   (three times its BF16 bytes);
4. only then the actor's parameters go back to the host and the KV cache wakes.

So the sync adds, on top of what the pool keeps: the engine's weights (the engine's
``sync_bytes``, :func:`model.rlhf.engine.rollout_cost`), the bucket and its clone, the largest
parameter made whole (:func:`model.params.largest_parameter_bytes`) as above, and the actor's
parameters: FSDP1's state-dict clones, Megatron's BF16 parameters loaded back with idle offload
(:func:`verl_sync_bytes`). :func:`model.rlhf.step.sync_peak` adds them to
the pool's held bytes, the one rule every placement search reads.
"""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.estimate import StageMemory
from trainplan.model.frameworks import Framework
from trainplan.model.params import count_params, largest_parameter_bytes
from trainplan.model.rlhf.openrlhf import SYNC_SOURCE, SYNC_TERM, actor_sync_bytes
from trainplan.model.rlhf.roles import RoleOption, Term
from trainplan.model.rlhf.spec import RLHFSpec, Role, RoleSpec
from trainplan.model.specs import Architecture

__all__ = [
    "SYNC_BUCKET_BYTES",
    "VERL_SYNC_SOURCE",
    "VERL_SYNC_TERM",
    "verl_sync_bytes",
    "actor_verl_sync_bytes",
    "role_sync",
]

SYNC_BUCKET_BYTES = 2048 * 2**20
"""verl's CUDA IPC bucket, ``checkpoint_engine.update_weights_bucket_megabytes`` = 2,048
(``verl/trainer/config/rollout/rollout.yaml``, ``verl/workers/config/rollout.py``)."""

VERL_SYNC_SOURCE = (
    "verl b178a3cd5 ActorRolloutRefWorker.rollout_mode (megatron_workers.py, fsdp_workers.py): "
    "actor parameters back when offloaded (FSDP1: state_dict()'s FP32 shard clones, torch 2.13 "
    "_shard_utils._create_chunk_dtensor), engine weights woken, a 2,048 MiB IPC bucket and the "
    "engine's clone of it, each parameter made whole (Megatron: mbridge 04fe4d52 "
    "Bridge.export_weights, broadcast_from_megatron_pp + tp all-gather + "
    "_weight_merge_across_tp), then the KV cache"
)


def verl_sync_bytes(
    framework: Framework,
    tp: int,
    pp: int,
    offloaded_weights: Fraction,
    largest: int,
    model_bytes: int,
) -> Fraction:
    """Bytes the actor's side of verl's sync adds on each GPU of its pool (module docstring):
    :data:`SYNC_BUCKET_BYTES` and the engine's clone of one bucket's tensors (at most the model's
    ``model_bytes`` BF16 bytes), the largest parameter's ``largest`` BF16 bytes made whole
    (Megatron: twice at tp > 1, with the received shard, 1/tp more, under pp > 1; once at tp 1
    under pp > 1, else 0; FSDP: three times), and ``offloaded_weights``, the actor's parameters
    present only for the sync (Megatron's loaded back when offloaded while idle; FSDP1's
    state-dict clones); 0 for ``deepspeed``, whose sync is OpenRLHF's (:func:`model.rlhf.openrlhf.actor_sync_bytes`).

    Examples
    --------
    Llama 3 70B's actor at tp 4 × pp 2 under ``megatron``, offloaded while idle: two buckets
    (2 × 2,147,483,648 B), its output layer on a stage-0 rank received (2,101,346,304 / 4 =
    525,336,576 B), gathered and concatenated (2 × 2,101,346,304 B) and its BF16 parameters
    back, 2 × 70,553,706,496 / 8 = 17,638,426,624 B: 26,661,423,104 B.

    >>> int(verl_sync_bytes(Framework.MEGATRON, 4, 2, Fraction(17_638_426_624), 2_101_346_304,
    ...                     141_107_412_992))
    26661423104
    """
    if framework is Framework.DEEPSPEED:
        return Fraction(0)
    if framework is Framework.MEGATRON:  # mbridge export_weights (module docstring)
        whole = Fraction(2 if tp > 1 else 0) + (Fraction(1, tp) if pp > 1 else 0)
    else:
        whole = Fraction(3)
    clone = min(SYNC_BUCKET_BYTES, model_bytes)
    return Fraction(SYNC_BUCKET_BYTES + clone) + whole * largest + offloaded_weights


VERL_SYNC_TERM = "weight sync: IPC bucket and clone, largest parameter whole"
"""The actor's term for :func:`actor_verl_sync_bytes` (with the parameters loaded back when the
actor is offloaded while idle)."""


def actor_verl_sync_bytes(
    framework: Framework, opt: RoleOption, stage_params: Fraction, arch: Architecture
) -> Fraction:
    """Bytes per GPU of the actor's pool: :func:`verl_sync_bytes` of the actor at ``opt`` whose
    busiest stage holds ``stage_params`` parameters per GPU, with its parameters present only
    for the sync: under ``megatron`` its BF16 stage (2 B a parameter) loaded back when it is
    offloaded while idle; under ``fsdp2`` (verl's FSDP1) ``state_dict()``'s FP32 shard clones
    (4 B a parameter over dp, whatever the offload: module docstring)."""
    weights = Fraction(0)
    if framework is Framework.FSDP2:
        weights = 4 * stage_params / opt.dp
    elif opt.offload == "idle":
        weights = 2 * stage_params
    largest = largest_parameter_bytes(arch)
    model_bytes = 2 * count_params(arch).total
    return verl_sync_bytes(framework, opt.tp, opt.pp, weights, largest, model_bytes)


def role_sync(
    spec: RLHFSpec, rs: RoleSpec, opt: RoleOption, stages: tuple[StageMemory, ...]
) -> tuple[Fraction, list[Term]]:
    """A training or scoring role's weight-sync bytes per GPU of the engine's pool (a Fraction)
    and its term (an empty list when 0): OpenRLHF's
    under ``deepspeed`` (:func:`model.rlhf.openrlhf.actor_sync_bytes`); verl's for the actor
    otherwise (:func:`actor_verl_sync_bytes`, at the busiest of ``stages``); 0 for other roles."""
    if spec.framework is Framework.DEEPSPEED or rs.role is not Role.ACTOR:
        sync = actor_sync_bytes(spec, rs, opt.tp)
        return sync, [Term(SYNC_TERM, "rollout", sync, "bytes", SYNC_SOURCE, "ipc")] if sync else []
    assert rs.model.arch is not None
    stage = max(st.params for st in stages)
    sync = actor_verl_sync_bytes(spec.framework, opt, stage, rs.model.arch)
    return sync, [Term(VERL_SYNC_TERM, "rollout", sync, "bytes", VERL_SYNC_SOURCE, "ipc")]
