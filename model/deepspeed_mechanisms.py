"""DeepSpeed's mechanisms (:func:`deepspeed_of`, read through :func:`model.mechanisms.mechanism`):
the ZeRO optimizer of ``deepspeed/runtime/zero/stage_1_and_2.py`` (ZeRO-1/2) and ``stage3.py``
(ZeRO-3), and ``BF16_Optimizer`` (``deepspeed/runtime/bf16_optimizer.py``), at DeepSpeed
edaa7221, as :class:`~model.mechanism_record.Mechanism` records.

ZeRO-1/2's gradient reduction (``deepspeed/runtime/zero/stage_1_and_2.py``):

* When: ZeRO-2 (``partition_gradients``) reduces every micro-batch: the gradient hooks
  (``process_gradients`` → ``reduce_ready_partitions_and_remove_grads``) fill the IPG
  bucket and ``reduce_ipg_grads`` it when full, and ``engine.allreduce_gradients`` runs
  ``overlapping_partition_gradients_reduce_epilogue`` after every backward ("ZeRO stage >=
  2 communicates during non gradient accumulation boundaries as well",
  ``deepspeed/runtime/engine.py``). ZeRO-1 only at the accumulation boundary: the hooks
  reduce only ``if self.partition_gradients or self.is_gradient_accumulation_boundary()``
  (with ``overlap_comm``), else ``engine.allreduce_gradients`` calls ``reduce_gradients``
  at the boundary; the micro-batches before it accumulate whole ``.grad``s, nothing sent.
* What: ``reduce_ipg_grads`` → ``average_tensor`` of the bucket (``reduce_scatter``,
  true by default; with it false ``gradient_reduction_w_predivide`` all-reduces too). There
  every slice of the bucket goes to the key ``("allreduce", process_group)`` when
  ``self.use_multi_rank_bucket_allreduce`` (``zero/config.py``: default True, since
  DeepSpeed PR #4695, 2afa1c7f2 of 2023-11-21, released in v0.12.4), and ``allreduce_and_scatter`` →
  ``allreduce_and_copy_with_multiple_ranks`` → ``allreduce_bucket`` all-reduces the
  flattened bucket (``dist.all_reduce``) and copies back each rank's own slices: 2 · g B a
  gradient element × (D − 1)/D on the ring, twice the reduce-scatter's, with or without
  ``overlap_comm`` (which only picks the stream). With the key false, each destination
  rank's slices are one ``("reduce", dst, …)`` bucket, ``allreduce_no_retain`` →
  ``allreduce_and_copy`` → ``allreduce_bucket(rank=dst)``, a ``dist.reduce`` to the owner:
  D reduces of about S/D each, every rank the root of one, sending (D − 1)/D · S on a ring
  — a reduce-scatter's bytes (:attr:`~model.mechanism_record.Mechanism.per_rank_reduce`).
"""

from __future__ import annotations

from trainplan.model.frameworks import (
    DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
    DEEPSPEED_SUB_GROUP_ELEMENTS,
    Framework,
)
from trainplan.model.mechanism_record import Mechanism

__all__ = ["DEEPSPEED_SOURCE", "deepspeed_of"]

DEEPSPEED_SOURCE = (
    "DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py and stage3.py "
    "(estimate_zero2_model_states_mem_needs, PR #5099; reduce_bucket_size, "
    "stage3_prefetch_bucket_size, sub_group_size, use_multi_rank_bucket_allreduce defaults in "
    "zero/config.py)"
)


def deepspeed_of(
    zero_stage: int,
    w: int,
    g: int,
    o: int,
    overlap_comm: bool,
    cpu_offload: bool,
    multi_rank_allreduce: bool = True,
) -> Mechanism:
    """DeepSpeed's mechanism at ``zero_stage``: ``BF16_Optimizer`` for BF16 weights with FP32
    gradients at ZeRO-1 unless ``cpu_offload`` (the optimizer offloaded keeps DeepSpeed's ZeRO
    optimizer; :func:`_deepspeed_bf16_optimizer`), else the ZeRO optimizer, with a second IPG
    bucket under ``overlap_comm`` (ZeRO-1/2) and, ``multi_rank_allreduce`` off, ZeRO-1/2's
    per-rank reduce instead of the all-reduce (:func:`_deepspeed`)."""
    if zero_stage == 1 and (w, g) == (2, 4) and not cpu_offload:
        return _deepspeed_bf16_optimizer(w, g, o)
    return _deepspeed(zero_stage, w, g, o, overlap_comm, multi_rank_allreduce)


def _deepspeed(
    zero_stage: int, w: int, g: int, o: int, overlap_comm: bool, multi_rank: bool = True
) -> Mechanism:
    """DeepSpeed ZeRO stages 1, 2 and 3; ``overlap_comm`` (ZeRO-1/2): two IPG buckets.

    ZeRO-1/2's step (``stage_1_and_2.py`` ``DeepSpeedZeroOptimizer.step``, l. 2344-2372) holds
    the flat copy of the gradient partition and its FP32 cast together: ``step_sharded`` = g + 4
    (BF16 gradients: 6), g alone when the gradients are FP32 (the cast returns the copy).
    ZeRO-3's step does the same one sub-group at a time (``stage3.py``
    ``_prepare_fp32_grad_for_sub_group``: ``self.flatten(self.averaged_gradients[i]).to(fp32)``,
    the flattened g-byte copy alive while its FP32 cast is made), at most ``sub_group_size``
    elements (``step_cap_elements``).

    ZeRO-1/2's reduction (the module's docstring): an all-reduce of each IPG bucket with
    ``multi_rank`` (``use_multi_rank_bucket_allreduce``, DeepSpeed's default), else one reduce
    per owning rank, counted as a reduce-scatter; ``allreduce_bucket`` flattens the bucket's
    slices into a new tensor either way, a second bucket-sized transient in backward beside the
    IPG bucket(s).

    >>> one, two = (_deepspeed(2, 2, 2, 12, x).bucket_bytes for x in (False, True))
    >>> (one, two)
    (2000000000, 3000000000)
    >>> [_deepspeed(z, 2, g, 12, False).step_sharded for z, g in ((1, 2), (2, 2), (2, 4), (3, 2))]
    [6, 6, 4, 6]
    >>> m, old = _deepspeed(2, 2, 2, 12, False), _deepspeed(2, 2, 2, 12, False, multi_rank=False)
    >>> m.traffic_terms(), old.traffic_terms(), old.per_rank_reduce
    ((2, 4), (2, 2), True)
    """
    fw, src = Framework.DEEPSPEED, DEEPSPEED_SOURCE
    bucket = DEEPSPEED_REDUCE_BUCKET_ELEMENTS * g
    ipg = _ipg_bytes(zero_stage, w, overlap_comm)
    # stage_1_and_2.py step (non-offload branch): averaged_gradients[i] is the plain list of
    # views get_flat_partition(..., return_tensor_list=True) returns (no pre-flattened
    # partition), so flatten / flatten_dense_tensors_aligned concatenates it into a new
    # partition in the gradients' dtype, and .to(fp32) casts that copy beside it before
    # `del flat_grad_partition`: g + 4 B a parameter ÷ D at that moment, the cast being the
    # copy itself (no second tensor) when the gradients are FP32 already
    step = g + (4 if g != 4 else 0)
    if zero_stage in (1, 2):
        return Mechanism(
            fw, zero_stage, f"DeepSpeed ZeRO stage {zero_stage}" + _reduce_name(multi_rank),
            weights_full=w, weights_sharded=0, grads_full=g if zero_stage == 1 else 0,
            grads_sharded=0 if zero_stage == 1 else g, optimizer_full=0, optimizer_sharded=o,
            step_sharded=step, bucket_bytes=ipg, host_accumulation_bytes=w,
            offload_staging_bytes=w, reduce_bytes=g, all_reduce=multi_rank,
            per_rank_reduce=not multi_rank, reduce_per_microbatch=zero_stage == 2,
            gathers_per_step=1, weight_bytes=w, source=src,
        )  # fmt: skip
    return Mechanism(
        fw, 3, "DeepSpeed ZeRO stage 3",
        weights_full=0, weights_sharded=w, grads_full=0, grads_sharded=g,
        optimizer_full=0, optimizer_sharded=o, step_sharded=step,
        step_cap_elements=DEEPSPEED_SUB_GROUP_ELEMENTS, gathered_units=2,
        bucket_bytes=bucket, bucket_persists=True, reduce_bytes=g, reduce_per_microbatch=True,
        gathers_per_microbatch=2, weight_bytes=w, source=src,
    )  # fmt: skip


def _ipg_bytes(zero_stage: int, w: int, overlap_comm: bool) -> int:
    """Bytes ZeRO-1/2's gradient buckets hold in backward: the IPG bucket(s) of
    ``reduce_bucket_size`` elements in the parameters' dtype (``w`` B) and ``allreduce_bucket``'s
    flattened copy where the reduction runs inside the backward (DeepSpeed edaa7221
    ``stage_1_and_2.py``)."""
    # stage_1_and_2.py setup_buckets: the contiguous IPG bucket in the parameters' dtype,
    # allocated by the first gradient hook of a backward under ZeRO-1 as under ZeRO-2
    # (contiguous_gradients defaults to True), released at the backward's end
    # (independent_gradient_partition_epilogue → _release_ipg_buffers, and
    # _clear_param_grad_only drops the .grad views into it, every backward, offload or not)
    ipg = DEEPSPEED_REDUCE_BUCKET_ELEMENTS * w
    # with overlap_comm, setup_buckets appends a second buffer to each IPG bucket ("Use double
    # buffers to avoid data access conflict when overlap_comm is enabled"), the two alternating
    # (ipg_remove_grads / reduce_independent_p_g_buckets_and_remove_grads: bucket.index = 1 - index)
    ipg *= 2 if overlap_comm else 1
    # allreduce_bucket: tensor = self.flatten(bucket), a new tensor of the bucket's slices in
    # its dtype (communication_data_type is the parameters' own by default), reduced and
    # copied back; one at a time (each reduction in turn on one stream). Inside the backward
    # under ZeRO-2 and ZeRO-1 with overlap_comm; ZeRO-1 without it reduces after the backward
    # (engine.allreduce_gradients -> reduce_gradients), the activations freed
    ipg += DEEPSPEED_REDUCE_BUCKET_ELEMENTS * w if zero_stage == 2 or overlap_comm else 0
    return ipg


def _reduce_name(multi_rank: bool) -> str:
    """The mechanism's name suffix for ZeRO-1/2's older per-rank reduce; empty for the
    all-reduce (the default)."""
    return "" if multi_rank else " (per-rank reduce, use_multi_rank_bucket_allreduce false)"


def _deepspeed_bf16_optimizer(w: int, g: int, o: int) -> Mechanism:
    """DeepSpeed's ``BF16_Optimizer``: BF16 weights, FP32 gradient accumulation, ZeRO stage 1.

    DeepSpeed edaa7221 ``deepspeed/runtime/engine.py`` ``_do_optimizer_sanity_check``
    (l. 1994-1996) returns ``BFLOAT16`` for a bf16 model with ``grad_accum_dtype`` fp32 at ZeRO
    stage 1 without CPU offload, so ``BF16_Optimizer`` runs, not ``DeepSpeedZeroOptimizer``.
    ``deepspeed/runtime/bf16_optimizer.py``: ``__init__`` (l. 176) allocates the whole FP32
    gradient buffer (``torch.zeros_like(self.bf16_groups_flat[i], dtype=self.grad_acc_dtype)``,
    4 B a parameter, not partitioned); the FP32 master and the moments are the rank's
    partition. Each parameter's BF16 ``.grad`` stays beside it: ``_update_hp_grad`` (l. 356)
    adds ``lp.grad`` into the FP32 buffer and keeps it (``update_hp_grads(clear_lp_grads=False)``
    in ``deepspeed/runtime/pipe/engine.py`` ``_exec_backward_pass``; ``clear_lp_grads`` zeroes,
    ``torch._foreach_zero_``, l. 473-489), and only ``zero_grad(set_to_none=True)`` after the
    step frees it (``engine._take_model_step``): 2 + 4 = 6 B of gradients a parameter, whole.
    It has no IPG bucket: the gradients are all-reduced at the step's boundary by
    ``engine.buffered_allreduce_fallback`` over ``get_grads_for_reduction`` (the FP32 buffers
    themselves, one flat tensor a parameter group) → ``allreduce_no_retain`` → ``allreduce_bucket``
    (l. 3658-3684), which casts the flattened bucket to ``communication_data_type`` —
    ``torch.bfloat16`` under bf16 unless the config sets it (the property, l. 1405-1416) — before
    the all-reduce: a BF16 copy of the whole FP32 buffer, 2 B a parameter, while the BF16
    ``.grad``s and the FP32 buffer are held (``step_full``; the activations are gone by then). The
    step reads the FP32 gradient partition as a view of that buffer
    (``param_partition.grad = grad_partition`` when it is FP32, ``step``), so nothing more is
    materialised for the step. On the wire, then, an all-reduce of BF16 gradients: at ZeRO stage 1
    ``engine.allreduce_gradients`` calls ``reduce_gradients`` only where the optimizer has one, and
    ``BF16_Optimizer`` has none, so ``buffered_allreduce_fallback`` runs (l. 2907-2913, 3784); after
    the step ``update_lp_params`` all-gathers the updated BF16 partitions (``all_gather_dp_groups``,
    ``bf16_optimizer.py`` l. 454-460): 2 · 2 + 2 B a parameter, times (D − 1)/D.

    >>> m = _deepspeed_bf16_optimizer(2, 4, 12)
    >>> (m.weights_full, m.grads_full, m.optimizer_sharded, m.step_full, m.step_sharded)
    (2, 6, 12, 2, 0)
    >>> m.all_reduce, m.reduce_bytes, m.traffic_terms()
    (True, 2, (6, 0))
    """
    return Mechanism(
        Framework.DEEPSPEED, 1, "DeepSpeed ZeRO stage 1 (BF16_Optimizer, FP32 gradients)",
        weights_full=w, weights_sharded=0, grads_full=w + g, grads_sharded=0,
        optimizer_full=0, optimizer_sharded=o, reduce_bytes=w, all_reduce=True, gathers_per_step=1,
        weight_bytes=w, step_full=w, source=DEEPSPEED_SOURCE,
    )  # fmt: skip
