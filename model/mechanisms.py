"""The mechanisms of the framework profiles (:mod:`model.frameworks`, whose docstring says what
each ZeRO stage is in each framework): :func:`mechanism`, the one record memory
(:mod:`model.memory`) and traffic (:mod:`model.comm`) both read, a
:class:`~model.mechanism_record.Mechanism` (a stage's buffers and collectives per parameter).

Megatron-FSDP's gradient buffers hold no other gradient copy (Megatron-LM d98e8a64dd,
``param_and_grad_buffer.py``): the unsharded bucket is ``param.main_grad`` itself
(``main_grad_getter`` → ``fetch_bucket(dtype=grad_comm_dtype)``, ``None`` → the main-gradient
dtype), which TE's fused weight-gradient accumulation writes (``gradient_accumulation_fusion``,
on by default, TE ≥ 2.10 under Megatron-FSDP: ``mcore_fsdp_adapter.py``); ``_grad_acc`` copies
an unfused ``.grad`` into it and deletes it; ``GradReducePipeline._bucket_group_gradient_reduce``
reduce-scatters the bucket into its own shard slice and adds that into the sharded main gradient
(``local_grad += reduced_grad``: no buffer); ``update_main_grads`` casts the shard to the FP32
main weights' dtype for the step (:func:`_megatron_fsdp`'s ``4/D``). A
``--megatron-fsdp-grad-comm-dtype`` narrower than the main gradients makes the buckets narrower
than ``g``: counted at ``g``, the larger.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trainplan.model.deepspeed_mechanisms import DEEPSPEED_SOURCE, deepspeed_of
from trainplan.model.frameworks import (
    DistributedOptimizer,
    Framework,
    check_framework,
    gradient_bytes_for,
)
from trainplan.model.fsdp2_copies import FSDP1_COPIES_SOURCE, fsdp2_copy_bytes
from trainplan.model.fsdp2_pipeline import TORCHTITAN_RESHARD_SOURCE, reshard_policy
from trainplan.model.mechanism_record import Mechanism

__all__ = ["Mechanism", "mechanism"]


_SOURCES = {
    Framework.MEGATRON: "Megatron-LM docs/user-guide/features/dist_optimizer.md (bf16 params, "
    "fp32 grads: 18 B/param, 6 + 12/d distributed); megatron/training/arguments.py (bf16 → "
    "fp32 gradient accumulation and reduction)",
    Framework.DEEPSPEED: DEEPSPEED_SOURCE,
    Framework.FSDP2: "PyTorch FSDP2 fully_shard, MixedPrecisionPolicy(param_dtype=bf16, "
    "reduce_dtype=fp32) as torchtitan sets it; Llama 3 (arXiv 2407.21783) §3.3.1, §3.3.4",
    Framework.TEXTBOOK: "Rajbhandari et al. 2019 (ZeRO, arXiv 1910.02054) §3.1, §7: 16 B/param "
    "and one DP exchange per step (steady state, the textbook accounting; ZeRO-2 reduce-scatters "
    "its 1/D gradients every micro-batch, §5.2; ZeRO-3 also gathers the weights for every "
    "micro-batch's forward and backward, §7.2.2)",
}


def mechanism(
    framework: Framework | str,
    zero_stage: int,
    weight_bytes: int = 2,
    gradient_bytes: int | None = None,
    optimizer_bytes: int = 12,
    pipelined: bool = False,
    distributed_optimizer: DistributedOptimizer | str = DistributedOptimizer.MCORE,
    double_buffer: bool = False,
    overlap_comm: bool = False,
    cpu_offload: bool = False,
    multi_rank_allreduce: bool = True,
    sp_comm: int | None = None,
    lp_grads_set_to_none: bool = False,
    flat_parameters: bool = False,
) -> Mechanism:
    """The mechanism of ``zero_stage`` in ``framework`` for the given byte counts.

    ``weight_bytes`` / ``gradient_bytes`` / ``optimizer_bytes`` are the training recipe's
    (:class:`model.specs.TrainingSpec`; mixed-precision Adam: 2, 2, 12 where the 12 are the FP32
    master and two moments). ``gradient_bytes`` is the accumulation and reduction dtype where
    the framework lets the user choose it (textbook; DeepSpeed's ``grad_accum_dtype``);
    Megatron-Core accumulates and reduces FP32 ``main_grad`` with bf16 parameters, FSDP2 as
    torchtitan sets it reduces in FP32 into FP32 shards. ``pipelined`` (pp > 1)
    changes ``fsdp2`` only: PyTorch's pipeline schedules run FSDP2 without gradient
    synchronisation until the last micro-batch (:func:`_fsdp2_pipelined`).
    ``distributed_optimizer`` and ``double_buffer`` choose Megatron-Core's (:func:`_megatron_of`)
    and ``overlap_comm``, ``cpu_offload``, ``multi_rank_allreduce``, ``sp_comm`` (Ulysses' dtype,
    :func:`~model.deepspeed_mechanisms.sp_comm_bytes`), ``lp_grads_set_to_none`` DeepSpeed's;
    ``flat_parameters`` ``fsdp2``'s: FSDP1's copies around its collectives (:func:`_as_fsdp1`).

    Raises
    ------
    LayoutError
        A stage the profile does not model (:func:`check_framework`).

    Examples
    --------
    Megatron-LM's table, bf16 parameters and fp32 gradients: 18, and 6 + 12/d:
    >>> m0, m1 = mechanism("megatron", 0), mechanism("megatron", 1)
    >>> m0.weights_full + m0.grads_full + m0.optimizer_full, m1.weights_full + m1.grads_full, m1.optimizer_sharded
    (18, 6, 12)
    """
    fw = Framework(framework)
    check_framework(fw, zero_stage, 1)
    g = gradient_bytes_for(fw, gradient_bytes)
    if fw is Framework.TEXTBOOK:
        return _textbook(zero_stage, weight_bytes, g, optimizer_bytes)
    if fw is Framework.MEGATRON:
        return _megatron_of(
            zero_stage, weight_bytes, g, optimizer_bytes, distributed_optimizer, double_buffer
        )
    if fw is Framework.DEEPSPEED:
        return deepspeed_of(
            zero_stage, weight_bytes, g, optimizer_bytes, overlap_comm, cpu_offload,
            multi_rank_allreduce, sp_comm, lp_grads_set_to_none,
        )  # fmt: skip
    args = (zero_stage, weight_bytes, g, optimizer_bytes)
    mech = _fsdp2_pipelined(*args, _SOURCES[fw]) if pipelined else _fsdp2(*args)
    return _as_fsdp1(mech) if flat_parameters else mech


def _megatron_of(
    zero_stage: int, w: int, g: int, o: int, distributed_optimizer: Any, double_buffer: bool
) -> Mechanism:
    """Megatron-Core's mechanism at ``zero_stage``: ``distributed_optimizer``
    ``distributed_fused_adam`` is Apex's at ZeRO-1 (:func:`_apex_distributed_fused_adam`; the
    layout's rules refuse it elsewhere, :func:`model.frameworks.check_distributed_optimizer`);
    ZeRO-3 is Megatron-FSDP, with two-unit pools under ``double_buffer``; else the distributed
    optimizer."""
    apex = DistributedOptimizer(distributed_optimizer) is DistributedOptimizer.APEX
    if apex and zero_stage == 1:
        return _apex_distributed_fused_adam(w, g, o)
    if zero_stage == 3:
        return _megatron_fsdp(w, g, o, double_buffer)
    return _megatron(zero_stage, w, g, o)


def _textbook(zero_stage: int, w: int, g: int, o: int) -> Mechanism:
    """The ZeRO paper's steady state (:data:`Framework.TEXTBOOK`).

    ZeRO-2 holds each gradient at 1/D (Rajbhandari et al. 2020, SC20, §5.2 "P_g": each rank
    keeps only its partition's gradients, reduced bucket by bucket as the backward makes them)
    for 2Ψ of traffic a step (§7.2.1: a reduce-scatter of the gradients and an all-gather of
    the parameters), counted there for one backward a step. With m micro-batches the gradients
    can stay at 1/D only if every backward reduce-scatters them, as DeepSpeed's ZeRO-2 does
    (38327e07 ``stage_1_and_2.py``: each gradient's hook calls
    ``reduce_ready_partitions_and_remove_grads``, which buckets it for ``reduce_ipg_grads`` →
    ``average_tensor`` whenever ``self.partition_gradients``, ZeRO-2, not only at the
    accumulation boundary as ZeRO-1): the
    reduction runs per micro-batch (m·Ψ of gradients a step), the all-gather once a step.
    Holding the gradients whole instead is ZeRO-1. The same at m = 1.

    ZeRO-3 holds the weights at 1/D too (§5.3 "P_os+g+p"), so every micro-batch gathers each
    layer's weights for its forward and again for its backward, and reduce-scatters the
    gradients its backward made (§7.2.2: 3Ψ a step, two all-gathers and one reduce-scatter, at
    one micro-batch a step; DeepSpeed 38327e07 ``deepspeed/runtime/zero/
    partitioned_param_coordinator.py`` ``PartitionedParameterCoordinator.fetch_sub_module`` gathers
    each sub-module before its forward and its backward, and ``stage3.py``
    ``DeepSpeedZeroOptimizer_Stage3.reduce_independent_p_g_buckets_and_remove_grads`` reduce-
    scatters from every backward's hooks, micro-batch after micro-batch): all three per
    micro-batch, ``3m·(D − 1)/D·2·P`` a step with bf16 weights and gradients, the paper's 1.5× at
    m = 1.

    >>> z2, z3 = _textbook(2, 2, 2, 12), _textbook(3, 2, 2, 12)
    >>> z2.grads_sharded, z2.reduce_per_microbatch, z2.traffic_terms(), z3.traffic_terms()
    (2, True, (2, 2), (0, 6))
    """
    fw, src = Framework.TEXTBOOK, _SOURCES[Framework.TEXTBOOK]

    def textbook(name: str, **held: Any) -> Mechanism:
        return Mechanism(fw, zero_stage, name, reduce_bytes=g, weight_bytes=w, source=src, **held)

    if zero_stage == 0:
        return textbook(
            "data parallel (all-reduce)",
            weights_full=w, weights_sharded=0, grads_full=g, grads_sharded=0,
            optimizer_full=o, optimizer_sharded=0, all_reduce=True,
        )  # fmt: skip
    if zero_stage == 1:
        return textbook(
            "ZeRO-1 (steady state)", weights_full=w, weights_sharded=0, grads_full=g,
            grads_sharded=0, optimizer_full=0, optimizer_sharded=o, gathers_per_step=1,
        )  # fmt: skip
    if zero_stage == 2:
        return textbook(
            "ZeRO-2 (gradients reduce-scattered every micro-batch)",
            weights_full=w, weights_sharded=0, grads_full=0, grads_sharded=g,
            optimizer_full=0, optimizer_sharded=o, reduce_per_microbatch=True, gathers_per_step=1,
        )  # fmt: skip
    return textbook(
        "ZeRO-3 (per micro-batch: two gathers, one reduce-scatter)",
        weights_full=0, weights_sharded=w, grads_full=0, grads_sharded=g,
        optimizer_full=0, optimizer_sharded=o, gathered_units=2,
        gathers_per_step=0, gathers_per_microbatch=2, reduce_per_microbatch=True,
    )  # fmt: skip


def _megatron(zero_stage: int, w: int, g: int, o: int) -> Mechanism:
    """Megatron-Core's DDP (ZeRO-0) and distributed optimizer (ZeRO-1)."""
    fw, src = Framework.MEGATRON, _SOURCES[Framework.MEGATRON]
    # main_grad in g bytes (FP32 by default with bf16); a 16-bit main_grad is copied to FP32
    # for the step: Megatron's table, fp16 params and grads: 20, and 4 + 16/d distributed
    copy = 4 if g < 4 else 0
    if zero_stage == 0:
        return Mechanism(
            fw, 0, f"Megatron-Core DDP ({_dtype(g)} main_grad all-reduce)",
            weights_full=w, weights_sharded=0, grads_full=g, grads_sharded=0,
            optimizer_full=o, optimizer_sharded=0, step_full=copy, reduce_bytes=g,
            all_reduce=True, weight_bytes=w, source=src,
        )  # fmt: skip
    return Mechanism(
        fw, 1, "Megatron-Core distributed optimizer",
        weights_full=w, weights_sharded=0, grads_full=g, grads_sharded=0,
        optimizer_full=0, optimizer_sharded=o, step_sharded=copy, reduce_bytes=g,
        gathers_per_step=1, weight_bytes=w, source=src,
    )  # fmt: skip


MEGATRON_FSDP_SOURCE = (
    "Megatron-LM megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py "
    "(ParamAndGradBuffer: sharded model_weight_buffer, main_weight_buffer and main_grad_buffer "
    "under optim_grads_params; FixedPoolAllocator 'fsdp_params' and 'fsdp_grads' of "
    "UB_BUFFER_NUM = 2 units under fsdp_double_buffer), distributed_data_parallel_config.py "
    "(megatron_fsdp_main_params_dtype fp32, megatron_fsdp_main_grads_dtype None = the "
    "parameters' dtype), mcore_fsdp_adapter.py"
)


MEGATRON_FSDP_PREFETCH_ELEMENTS = 500_000_000
"""Megatron-FSDP's default all-gather prefetch, elements: half of the 1e9-element floor of
``suggested_communication_unit_size`` (``megatron_fsdp.py`` ``MegatronFSDP.__init__``: "Cap to
1B elements", ``self.suggested_AG_prefetch_size = suggested_communication_unit_size // 2``)."""

MEGATRON_FSDP_QUEUE_ELEMENTS = 1_000_000_000
"""The floor of Megatron-FSDP's reduce-scatter queue capacity, elements: ``suggested_RS_queue_
capacity = suggested_communication_unit_size = max(1e9, 2 × the mean unit's elements)``
(``megatron_fsdp.py`` ``MegatronFSDP.__init__``, Megatron-LM 92c8482e6d and d98e8a64dd)."""

MEGATRON_FSDP_QUEUE_SOURCE = (
    "Megatron-LM megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py "
    "GradReducePipeline.reduce_gradients, wait_for_previous_grad_reduce, "
    "_bucket_group_gradient_reduce (free_up_grad_bucket), _enforce_double_buffer_limit; "
    "megatron_fsdp.py _grad_acc (get_main_grad), MegatronFSDP.__init__ "
    "(suggested_RS_queue_capacity); at 92c8482e6d (NeMo 25.11) and d98e8a64dd (2026-08-22)"
)


def _megatron_fsdp(w: int, g: int, o: int, double_buffer: bool = False) -> Mechanism:
    """Megatron-FSDP with ``data_parallel_sharding_strategy = optim_grads_params`` (ZeRO-3),
    as ``--use-megatron-fsdp`` runs it under Megatron-Core (:data:`MEGATRON_FSDP_SOURCE`).

    * Held as a ``1/D`` shard: the model weights (``model_weight_buffer``, ``w`` bytes), the
      FP32 main weights (``main_weight_buffer``, the master; ``o`` counts it with the two Adam
      moments, so ``o − 4`` more), the main gradients (``main_grad_buffer``, ``g`` bytes: the
      recipe's; Megatron-FSDP's default is the parameters' dtype).
    * Gathered weights, per FSDP unit (one transformer layer): the all-gather of a unit
      prefetches the following ones (``AllGatherPipeline.all_gather_params``,
      ``param_and_grad_buffer.py``) until the prefetched buckets hold
      ``suggested_AG_prefetch_size`` elements, half of ``suggested_communication_unit_size``,
      which defaults to ``max(1e9, 2 × the mean unit's elements)`` (``MegatronFSDP.__init__``,
      ``megatron_fsdp.py``): 5e8 elements, or one unit where a unit holds more. Held at once:
      the unit computed and ``max(1, ⌈5e8 / unit⌉)`` prefetched ones (``prefetch_elements``,
      :meth:`Mechanism.units_held`): 2 for a Llama 3 70B layer (856 M elements), 4 for a
      Llama 3 8B one (218 M).
    * Unsharded gradient buckets in backward (:data:`MEGATRON_FSDP_QUEUE_SOURCE`): a unit's
      bucket is allocated when its first gradient arrives (``_grad_acc`` → ``get_main_grad``)
      and freed only when popped from the reduce-scatter queue; before queuing a finished
      unit, ``wait_for_previous_grad_reduce`` pops only while the queued buckets exceed
      ``suggested_RS_queue_capacity = max(1e9, 2 × mean unit)`` elements, the buckets at their
      padded size (:mod:`model.megatron_fsdp_buckets`). So several units' buckets are alive at
      once (:meth:`Mechanism.reduce_queue_elements`: three for padded units of 5e8 elements or
      more, four where the padding adds nothing), in the main-gradient dtype (``g`` bytes). The
      parameters outside the layers: buckets of ``bucket_size`` elements (``max(4e7,
      1e6·dp·cp)`` under ``--overlap-grad-reduce``, which the launch line writes), the output
      layer's first, one shared with the embedding held throughout (:func:`model.
      megatron_fsdp_buckets.non_unit_buckets`).
    * ``double_buffer`` (``fsdp_double_buffer``, forced by ``nccl_ub``): both come from
      persistent pools of two units (``FixedPoolAllocator(size=UB_BUFFER_NUM = 2)`` for
      ``fsdp_params`` and ``fsdp_grads``, buffers of ``get_global_memory_buffer()``, never
      freed); ``need_skip_prefetch`` stops the prefetch and ``_enforce_double_buffer_limit``
      drains the queue at two units; the embedding's and output layer's buckets come from the
      fallback allocator beside them (:meth:`Mechanism.reduce_queue_elements`). The pools stay
      allocated through the optimizer step (:meth:`Mechanism.pool_bytes`).
    * The modules outside every FSDP unit (the embedding, the output layer, the final norm)
      have no release hook (``megatron_fsdp.py`` ``_register_fsdp_hooks``: ``_post_forward``
      and ``_post_backward_release_module`` only on ``fsdp_unit_modules``, TransformerLayer /
      MoETransformerLayer / MambaLayer in ``mcore_fsdp_adapter.py``; ``_root_pre_backward``
      marks only unit buckets releasable): once gathered they stay whole beside the units
      (``non_units_gathered``).
    * Traffic: every micro-batch gathers each unit for forward and again for backward and
      reduce-scatters its gradients (the gradients are sharded, so they are reduced as they
      are made).
    * The optimizer step: a 16-bit main gradient is counted as copied to FP32 for the step
      (``4/D``), as the distributed optimizer does (an upper bound where the optimizer reads
      the 16-bit shard directly); no other gradient copy (the module docstring).
    """
    pools = " (fsdp_double_buffer)" if double_buffer else ""
    return Mechanism(
        Framework.MEGATRON, 3, f"Megatron-FSDP optim_grads_params ({_dtype(g)} main grads){pools}",
        weights_full=0, weights_sharded=w + 4, grads_full=0, grads_sharded=g,
        optimizer_full=0, optimizer_sharded=o - 4, step_sharded=4 if g < 4 else 0,
        gathered_units=2, prefetch_elements=0 if double_buffer else MEGATRON_FSDP_PREFETCH_ELEMENTS,
        unit_grad_bytes=2 * g, reduce_bytes=g, reduce_per_microbatch=True,
        gathers_per_microbatch=2, non_units_gathered=True, weight_bytes=w,
        reduce_queue_elements_floor=MEGATRON_FSDP_QUEUE_ELEMENTS, double_buffer=double_buffer,
        source=MEGATRON_FSDP_SOURCE,
    )  # fmt: skip


APEX_SOURCE = (
    "Apex apex/contrib/optimizers/distributed_fused_adam.py at 810ffae3 (NeMo 24.07's "
    "APEX_TAG): DistributedFusedAdam._init_grad_buffer, _start_bucket_grad_sync, "
    "_local_step_with_param_remainders; NeMo r2.0.0rc1 nemo/core/optim/distributed_adam.py "
    "(MegatronDistributedFusedAdam.init_params_bucket, zero_grad) and "
    "megatron_base_model.py setup_optimization (store_param_remainders)"
)


def _apex_distributed_fused_adam(w: int, g: int, o: int) -> Mechanism:
    """Apex's ``DistributedFusedAdam`` as NeMo runs it (``optim.name:
    distributed_fused_adam``, ``contiguous_grad_buffer: True``; :data:`APEX_SOURCE`):

    * gradients: ``_init_grad_buffer`` allocates one whole buffer per dtype group in
      ``grad_sync_dtype`` (``g``; Apex's default is the optimizer dtype, FP32, and NeMo's
      launcher scripts set ``bf16``), into which ``zero_grad`` points every ``main_grad``
      (TE's fused wgrad accumulates there);
    * its reduce-scatter is not in place: ``_start_bucket_grad_sync`` writes each bucket's
      shard into a new ``sync_grads_shard`` (``g``/D), kept as ``grads_shard`` until the
      next ``zero_grad``; the step reads it as it is (``multi_tensor_fused_adam_with_param_
      remainders`` takes 16-bit gradients), so no FP32 copy;
    * optimizer state: with BF16 parameters and an FP32 optimizer NeMo sets
      ``store_params=False, store_param_remainders=True`` (``setup_optimization``): the FP32
      master is the BF16 weight plus a 16-bit remainder shard, 2 B instead of 4 — ``o`` 12
      becomes 10; with an optimizer dtype equal to the model's (``optim.dtype: bf16``) NeMo
      keeps no master at all (``store_params=False``), ``optimizer_dtype = bf16`` with
      ``master_weights = false`` here (4 B);
    * the embeddings' gradients are FP32 whatever ``grad_sync_dtype`` is
      (``MegatronGPTModel.configure_optimizers`` marks them ``_with_fp32_optimizer``, its
      ``with_fp32_embedding_grads`` default True; ``init_params_bucket`` gives them
      ``grad_sync_dtype=torch.float32``): :attr:`Mechanism.embedding_grad_bytes` 4;
    * the weights: BF16 views into the contiguous parameter buffer (``init_param_buffer``),
      all-gathered in ``param_sync_dtype`` (BF16) after the step, as Megatron-Core's.

    Examples
    --------
    BF16 gradients, FP32 optimizer: 2 + 2 whole, 10 ÷ D, and 2 ÷ D more at the step.

    >>> m = mechanism("megatron", 1, gradient_bytes=2, distributed_optimizer="distributed_fused_adam")
    >>> (m.weights_full + m.grads_full, m.optimizer_sharded, m.step_sharded)
    (4, 10, 2)
    >>> m.traffic_terms() == mechanism("megatron", 1, gradient_bytes=2).traffic_terms()
    True
    """
    master_remainder = 2 if o == 12 and w == 2 else 0  # the FP32 master's upper half is w
    return Mechanism(
        Framework.MEGATRON, 1,
        f"Apex DistributedFusedAdam (NeMo distributed_fused_adam, {_dtype(g)} grad_sync_dtype)",
        weights_full=w, weights_sharded=0, grads_full=g, grads_sharded=0,
        optimizer_full=0, optimizer_sharded=o - master_remainder, step_sharded=g,
        embedding_grad_bytes=4, reduce_bytes=g, gathers_per_step=1, weight_bytes=w,
        source=APEX_SOURCE,
    )  # fmt: skip


def _fsdp2(zero_stage: int, w: int, g: int, o: int) -> Mechanism:
    """FSDP2 ``fully_shard`` without a pipeline schedule: the FP32 sharded parameter is the
    master copy; gradients sharded in FP32; a unit's bf16 gradients are cast to the reduce dtype
    (FP32 by default) before its reduce-scatter.

    ZeRO-3 gathers each unit for forward and again for backward. ZeRO-2 is
    ``reshard_after_forward=False`` alone: ``FSDPParamGroup.reshard_after_backward`` defaults to
    ``True`` and ``post_backward`` then calls ``reshard()`` after every backward
    (``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py`` at 002a76fb), and torchtitan
    never turns it off outside its chunked loss's lm_head (``apply_fsdp`` at 9dec370 and
    820504e, ``apply_fsdp_to_decoder`` at b5bcd76c; ``ChunkedLossWrapper`` resets it): each
    micro-batch's forward gathers the weights again, one bf16 all-gather per micro-batch.

    >>> z2 = _fsdp2(2, 2, 4, 12)
    >>> z2.gathers_per_step, z2.gathers_per_microbatch, z2.traffic_terms()
    (0, 1, (0, 6))
    """
    master = 4
    reshard = zero_stage == 3
    name = (
        "FSDP2 fully_shard(reshard_after_forward=True)"
        if reshard
        else "FSDP2 fully_shard(reshard_after_forward=False), reshard_after_backward=True "
        "(FSDP2's default)"
    )
    mech = Mechanism(
        Framework.FSDP2, zero_stage, f"{name}, reduce_dtype={_dtype(g)}",
        weights_full=0 if reshard else w, weights_sharded=master, grads_full=0,
        grads_sharded=4, optimizer_full=0, optimizer_sharded=o - master,
        gathered_units=2 if reshard else 0, unit_grad_bytes=w + (g if g != w else 0),
        reduce_bytes=g, reduce_per_microbatch=True, gathers_per_step=0,
        gathers_per_microbatch=2 if reshard else 1, weight_bytes=w, source=_SOURCES[Framework.FSDP2],
    )  # fmt: skip
    return _with_copies(mech)


def _fsdp2_pipelined(zero_stage: int, w: int, g: int, o: int, src: str) -> Mechanism:
    """FSDP2 under a PyTorch pipeline schedule (pp > 1, as torchtitan runs it).

    ``_PipelineStageBase.backward_maybe_with_nosync`` (``torch/distributed/pipelining/
    stage.py``) calls ``set_requires_gradient_sync(False)`` and
    ``set_reshard_after_backward(False)`` before every micro-batch's backward and runs the FSDP
    post-backward (the reduce-scatter) by hand after the last one. Until then each parameter's
    unsharded gradient is accumulated: ``FSDPParam.to_accumulated_grad_if_needed``
    (``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``) upcasts it to ``reduce_dtype`` into
    ``unsharded_accumulated_grad`` (FP32 as torchtitan sets it), so the stage's gradients are
    whole on the GPU in ``g`` bytes, and the unsharded parameters stay gathered after backward
    (both ZeRO stages: whole bf16 weights at the backward's end). The FP32 sharded gradient
    exists from that one reduce-scatter to the optimizer step (``step_sharded``); the gradients
    cross the wire once per step.

    The all-gathers (:mod:`model.fsdp2_pipeline`, from the same code): ZeRO-2 (torchtitan's
    ``fsdp_reshard_after_forward`` ``"default"``, which is ``"never"`` under pp) gathers each
    unit in the step's first forward and never frees it before the reduction: once a step.
    ZeRO-3 (``"always"``) frees each unit after every forward; the first forward, each forward
    after a forward and each backward after a forward gather it again: m + 1 all-gathers a step,
    whatever the schedule (``regathers_after_forward``; the first forward's once a step, the
    m others per micro-batch), not the 2m of a step without a pipeline. Both run their
    once-a-step gather in the step's first forward (``step_gathers_in_forward``). The
    multi-stage schedules' runtime adds re-gathers at four chunks a rank or more and waits for
    the first chunk whole (``torch_pipelining``: :func:`model.fsdp2_pipeline.runtime_regathers`,
    :func:`model.fsdp2_pipeline.upfront_gather`).

    >>> z3, z2 = _fsdp2_pipelined(3, 2, 4, 12, ""), _fsdp2_pipelined(2, 2, 4, 12, "")
    >>> z3.gathers_per_step, z3.gathers_per_microbatch, z3.traffic_terms()
    (1, 1, (6, 2))
    >>> z2.gathers_per_step, z2.gathers_per_microbatch, z2.traffic_terms()
    (1, 0, (6, 0))
    """
    name = "reshard_after_forward=True" if zero_stage == 3 else "reshard_after_forward=False"
    policy = reshard_policy(zero_stage, 2)
    gathers = "m + 1 all-gathers a step" if zero_stage == 3 else "one all-gather a step"
    mech = Mechanism(
        Framework.FSDP2, zero_stage,
        f"FSDP2 fully_shard({name}), torchtitan {policy}, under a pipeline schedule: "
        f"{gathers}, gradient sync after the last micro-batch, unsharded gradients "
        f"accumulated in {_dtype(g)}",
        weights_full=w, weights_sharded=4, grads_full=g, grads_sharded=0,
        optimizer_full=0, optimizer_sharded=o - 4, step_sharded=4, unit_grad_bytes=w,
        reduce_bytes=g, gathers_per_step=1, gathers_per_microbatch=1 if zero_stage == 3 else 0,
        regathers_after_forward=zero_stage == 3, step_gathers_in_forward=True,
        torch_pipelining=True, weight_bytes=w,
        source=f"{src}; {TORCHTITAN_RESHARD_SOURCE}",
    )  # fmt: skip
    return _with_copies(mech)


def _with_copies(mech: Mechanism, flat_parameters: bool = False) -> Mechanism:
    """An FSDP2 mechanism with its copies around the collectives on the compute stream
    (:func:`model.fsdp2_copies.fsdp2_copy_bytes` of its gathers and reductions, FSDP1's with
    ``flat_parameters``) as its per-backward HBM bytes.

    >>> m = _with_copies(_fsdp2(3, 2, 4, 12))
    >>> m.accumulate_first_bytes, m.accumulate_bytes
    (14, 14)
    """
    first, later = fsdp2_copy_bytes(
        mech.weight_bytes, mech.reduce_bytes, mech.gathers_per_step,
        mech.gathers_per_microbatch, mech.reduce_per_microbatch, flat_parameters,
    )  # fmt: skip
    return replace(mech, accumulate_first_bytes=first, accumulate_bytes=later)


def _as_fsdp1(mech: Mechanism) -> Mechanism:
    """``mech`` (an ``fsdp2`` one) as FSDP1 runs it, ``FullyShardedDataParallel`` with one
    flat parameter a unit (:attr:`model.specs.TrainingSpec.flat_parameters`): FSDP1's copies
    around its collectives (:func:`model.fsdp2_copies.fsdp2_copy_bytes`: no all-gather
    copy-out, the flat gradient concatenated by autograd, the cast to ``reduce_dtype`` on the
    post-backward stream); its gathers, reductions and bytes held are FSDP2's (ZeRO-3
    ``FULL_SHARD``, ZeRO-2 ``SHARD_GRAD_OP``, which frees the parameters after every synchronised
    backward as FSDP2's ``reshard_after_backward`` does: PyTorch 2.1.0 ``_runtime_utils.py``
    ``_should_free_in_backward``).

    >>> m = _as_fsdp1(_fsdp2(3, 2, 4, 12))
    >>> m.name.split(" with")[0], m.accumulate_first_bytes, m.accumulate_bytes
    ('FSDP1 FullyShardedDataParallel(sharding_strategy=FULL_SHARD)', 4, 4)
    """
    strategy = "FULL_SHARD" if mech.zero_stage == 3 else "SHARD_GRAD_OP"
    name = (
        f"FSDP1 FullyShardedDataParallel(sharding_strategy={strategy}) with flat parameters, "
        f"reduce_dtype={_dtype(mech.reduce_bytes)}, its state and collectives counted as {mech.name}"
    )
    flat = replace(mech, name=name, source=f"{mech.source}; {FSDP1_COPIES_SOURCE}")
    return _with_copies(flat, flat_parameters=True)


def _dtype(nbytes: int) -> str:
    """fp32 / bf16 for 4 / 2 bytes per element."""
    return {2: "bf16", 4: "fp32"}.get(nbytes, f"{nbytes}-byte")
