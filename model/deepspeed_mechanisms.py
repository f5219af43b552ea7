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

Under Ulysses (cp > 1, :func:`sp_comm_bytes`; :data:`SP_COMM_SOURCE`), the communication dtype
is ``seq_parallel_communication_data_type`` (FP32 by default):

* ZeRO-1/2: ``allreduce_bucket`` sets ``communication_data_type = torch.float32`` whenever
  ``self.sequence_parallel_size > 1``, whatever the config says, casts the flattened bucket
  (``tensor.to``, 4 B an element beside it) and all-reduces that: 4 B on the wire
  (:func:`_ipg_bytes`); the IPG bucket stays in the parameters' dtype (``setup_buckets``).
* ZeRO-3: each IPG bucket's buffer is allocated in its key's dtype (``stage3.py`` ``__init__``,
  ``torch.empty(self.reduce_bucket_size, dtype=dtype)``; ``ipg_buckets`` keyed by the
  communication dtype, ``get_param_comm_dtype``), the gradients copied into it and
  reduce-scattered from it: ``sp_comm`` B an element in the persistent bucket and on the wire;
  the partitions are cast back to the accumulation dtype (``__avg_scatter_grads``), ``g``; the
  side stream's copies: :func:`model.terms.reduce_pool.flush_requests`.
* ``BF16_Optimizer``: :func:`_deepspeed_bf16_optimizer`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trainplan.model.deepspeed_accumulate import accumulate_bytes
from trainplan.model.frameworks import (
    DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
    DEEPSPEED_SUB_GROUP_ELEMENTS,
    Framework,
)
from trainplan.model.mechanism_record import Mechanism

__all__ = ["DEEPSPEED_SOURCE", "deepspeed_of", "sp_comm_bytes", "uses_bf16_optimizer"]

DEEPSPEED_SOURCE = (
    "DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py and stage3.py "
    "(estimate_zero2_model_states_mem_needs, PR #5099; reduce_bucket_size, "
    "stage3_prefetch_bucket_size, sub_group_size, use_multi_rank_bucket_allreduce defaults in "
    "zero/config.py)"
)


SP_COMM_SOURCE = (
    "DeepSpeed edaa72212 deepspeed/runtime/engine.py _configure_distributed_model "
    "(sequence_parallel_size > 1: communication_data_type = seq_parallel_communication_data_type, "
    "default fp32 in runtime/constants.py); zero/stage_1_and_2.py allreduce_bucket (FP32 when "
    "sequence_parallel_size > 1); zero/stage3.py IPG buffers in the communication dtype, "
    "__avg_scatter_grads"
)


def sp_comm_bytes(training: Any, cp: Any) -> int | None:
    """Bytes of DeepSpeed's ``communication_data_type`` under Ulysses sequence parallelism: with
    cp > 1 (``deepspeed`` runs Ulysses only) ``engine._configure_distributed_model`` sets it to
    the config's ``seq_parallel_communication_data_type`` (:data:`SP_COMM_SOURCE`; DeepSpeed's
    default ``fp32``, :attr:`model.specs.TrainingSpec.seq_parallel_communication_data_type`);
    None where cp = 1 (the engine's own, the parameters' dtype). ``cp`` a scalar (a control
    field of the terms that build the mechanism).

    >>> from trainplan.model.specs import TrainingSpec
    >>> t = TrainingSpec(seq_len=8, global_batch_size=8)
    >>> sp_comm_bytes(t, 1), sp_comm_bytes(t, 2)
    (None, 4)
    >>> u2, u3 = (_deepspeed(z, 2, 2, 12, False, sp_comm=4) for z in (2, 3))
    >>> u2.bucket_bytes, u2.reduce_bytes, u3.bucket_bytes, u3.reduce_bytes, u3.grads_sharded
    (4000000000, 4, 2000000000, 4, 2)
    >>> _deepspeed(2, 2, 2, 12, False, sp_comm=2).reduce_bytes  # allreduce_bucket forces FP32
    4
    """
    if int(cp) <= 1:
        return None
    return 4 if training.seq_parallel_communication_data_type == "fp32" else 2


def deepspeed_of(
    zero_stage: int,
    w: int,
    g: int,
    o: int,
    overlap_comm: bool,
    cpu_offload: bool,
    multi_rank_allreduce: bool = True,
    sp_comm: int | None = None,
    lp_grads_set_to_none: bool = False,
) -> Mechanism:
    """DeepSpeed's mechanism at ``zero_stage``: ``BF16_Optimizer`` for BF16 weights with FP32
    gradients at ZeRO-1 unless ``cpu_offload`` (:func:`uses_bf16_optimizer`;
    :func:`_deepspeed_bf16_optimizer`), else the ZeRO optimizer, with a second IPG
    bucket under ``overlap_comm`` (ZeRO-1/2) and, ``multi_rank_allreduce`` off, ZeRO-1/2's
    per-rank reduce instead of the all-reduce (:func:`_deepspeed`). ``sp_comm``: the
    communication dtype's bytes under Ulysses (:func:`sp_comm_bytes`; None without). Each
    with the bytes its backward passes move to accumulate the gradients
    (:func:`model.deepspeed_accumulate.accumulate_bytes`; ``lp_grads_set_to_none``:
    ``BF16_Optimizer`` as DeepSpeed ran it from 2022-04 to 2025-03).

    >>> m = deepspeed_of(1, 2, 4, 12, False, False)
    >>> m.accumulate_first_bytes, m.accumulate_bytes
    (18, 26)
    """
    bf16 = uses_bf16_optimizer(zero_stage, w, g, cpu_offload)
    if bf16:
        mech = _deepspeed_bf16_optimizer(w, g, o, sp_comm)
    else:
        mech = _deepspeed(zero_stage, w, g, o, overlap_comm, multi_rank_allreduce, sp_comm)
    first, later = accumulate_bytes(zero_stage, w, g, bf16, lp_grads_set_to_none)
    return replace(mech, accumulate_first_bytes=first, accumulate_bytes=later)


def uses_bf16_optimizer(zero_stage: int, w: int, g: int, cpu_offload: bool) -> bool:
    """Whether DeepSpeed runs ``BF16_Optimizer``: BF16 weights with FP32 gradients at ZeRO-1
    without CPU offload (:func:`_deepspeed_bf16_optimizer`); the optimizer offloaded keeps
    DeepSpeed's ZeRO optimizer.

    >>> uses_bf16_optimizer(1, 2, 4, False), uses_bf16_optimizer(1, 2, 2, False)
    (True, False)
    """
    return zero_stage == 1 and (w, g) == (2, 4) and not cpu_offload


def _deepspeed(
    zero_stage: int,
    w: int,
    g: int,
    o: int,
    overlap_comm: bool,
    multi_rank: bool = True,
    sp_comm: int | None = None,
) -> Mechanism:
    """DeepSpeed ZeRO stages 1, 2 and 3; ``overlap_comm`` (ZeRO-1/2): two IPG buckets;
    ``sp_comm``: Ulysses' communication dtype (the module's docstring).

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
    slices into a new tensor either way, a second bucket-sized transient beside the IPG bucket(s).

    >>> [_deepspeed(2, 2, 2, 12, x).bucket_bytes for x in (False, True)]
    [2000000000, 3000000000]
    >>> [_deepspeed(z, 2, g, 12, False).step_sharded for z, g in ((1, 2), (2, 2), (2, 4), (3, 2))]
    [6, 6, 4, 6]
    >>> m, old = _deepspeed(2, 2, 2, 12, False), _deepspeed(2, 2, 2, 12, False, multi_rank=False)
    >>> m.traffic_terms(), old.traffic_terms(), old.per_rank_reduce
    ((2, 4), (2, 2), True)
    """
    # under Ulysses ZeRO-1/2's allreduce_bucket reduces in FP32 whatever the config says
    comm = g if sp_comm is None else sp_comm if zero_stage == 3 else 4
    fw, (sp, src) = Framework.DEEPSPEED, _ulysses_name(sp_comm, comm, DEEPSPEED_SOURCE)
    # stage_1_and_2.py step (no offload): averaged_gradients[i] is get_flat_partition(...,
    # return_tensor_list=True)'s list of views, so flatten makes a new g-byte partition and
    # .to(fp32) its cast beside it (the copy itself when g is 4): g + 4 B a parameter ÷ D
    step = g + (4 if g != 4 else 0)
    if zero_stage in (1, 2):
        return Mechanism(
            fw, zero_stage, f"DeepSpeed ZeRO stage {zero_stage}" + _reduce_name(multi_rank) + sp,
            weights_full=w, weights_sharded=0, grads_full=g if zero_stage == 1 else 0,
            grads_sharded=0 if zero_stage == 1 else g, optimizer_full=0, optimizer_sharded=o,
            step_sharded=step, host_accumulation_bytes=w, offload_staging_bytes=w,
            bucket_bytes=_ipg_bytes(zero_stage, w, overlap_comm, sp_comm is not None),
            reduce_bytes=comm, all_reduce=multi_rank,
            per_rank_reduce=not multi_rank, reduce_per_microbatch=zero_stage == 2,
            gathers_per_step=1, weight_bytes=w, source=src,
        )  # fmt: skip
    return Mechanism(
        fw, 3, "DeepSpeed ZeRO stage 3" + sp,
        weights_full=0, weights_sharded=w, grads_full=0, grads_sharded=g,
        optimizer_full=0, optimizer_sharded=o, step_sharded=step,
        step_cap_elements=DEEPSPEED_SUB_GROUP_ELEMENTS, gathered_units=2,
        bucket_bytes=DEEPSPEED_REDUCE_BUCKET_ELEMENTS * comm, bucket_persists=True,
        reduce_bytes=comm, reduce_per_microbatch=True, gathers_per_microbatch=2, weight_bytes=w,
        source=src,
    )  # fmt: skip


def _ipg_bytes(zero_stage: int, w: int, overlap_comm: bool, ulysses: bool = False) -> int:
    """Bytes ZeRO-1/2's gradient buckets hold in backward: the IPG bucket(s) of
    ``reduce_bucket_size`` elements in the parameters' dtype (``w`` B) and ``allreduce_bucket``'s
    flattened copy where the reduction runs inside the backward, with under Ulysses
    (``ulysses``) its FP32 cast beside it (DeepSpeed edaa7221 ``stage_1_and_2.py``).

    >>> _ipg_bytes(2, 2, False), _ipg_bytes(2, 2, False, True), _ipg_bytes(1, 2, False, True)
    (2000000000, 4000000000, 1000000000)
    """
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
    in_backward = zero_stage == 2 or overlap_comm
    ipg += DEEPSPEED_REDUCE_BUCKET_ELEMENTS * w if in_backward else 0
    # under Ulysses allreduce_bucket sets communication_data_type = torch.float32 ("if
    # pg_correctness_test or self.sequence_parallel_size > 1") and casts the flattened copy,
    # tensor_to_allreduce = tensor.to(torch.float32), alive beside it through the all-reduce
    # and the copy back (tensor.copy_(tensor_to_allreduce))
    ipg += DEEPSPEED_REDUCE_BUCKET_ELEMENTS * 4 if ulysses and in_backward and w != 4 else 0
    return ipg


def _ulysses_name(sp_comm: int | None, comm: int, source: str) -> tuple[str, str]:
    """(the mechanism's name suffix, its source) under Ulysses (``sp_comm``, reducing in
    ``comm`` B); ("", ``source``) without."""
    if sp_comm is None:
        return "", source
    return f", Ulysses: {'fp32' if comm == 4 else 'bf16'} reduction", f"{source}; {SP_COMM_SOURCE}"


def _reduce_name(multi_rank: bool) -> str:
    """The mechanism's name suffix for ZeRO-1/2's older per-rank reduce; empty for the
    all-reduce (the default)."""
    return "" if multi_rank else " (per-rank reduce, use_multi_rank_bucket_allreduce false)"


def _deepspeed_bf16_optimizer(w: int, g: int, o: int, sp_comm: int | None = None) -> Mechanism:
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

    Under Ulysses (``sp_comm``, :func:`sp_comm_bytes`) ``communication_data_type`` is the
    config's ``seq_parallel_communication_data_type``: FP32 by default, the buffer's own dtype,
    so ``allreduce_bucket`` all-reduces the FP32 buffer itself (no cast, ``step_full`` 0) and 4 B
    a parameter cross the wire; with ``bf16`` as without Ulysses.

    >>> m = _deepspeed_bf16_optimizer(2, 4, 12)
    >>> (m.weights_full, m.grads_full, m.optimizer_sharded, m.step_full, m.step_sharded)
    (2, 6, 12, 2, 0)
    >>> m.all_reduce, m.reduce_bytes, m.traffic_terms()
    (True, 2, (6, 0))
    >>> u = _deepspeed_bf16_optimizer(2, 4, 12, sp_comm=4)
    >>> u.step_full, u.reduce_bytes, u.traffic_terms()
    (0, 4, (10, 0))
    """
    comm = w if sp_comm is None else sp_comm
    sp, src = _ulysses_name(sp_comm, comm, DEEPSPEED_SOURCE)
    return Mechanism(
        Framework.DEEPSPEED, 1, f"DeepSpeed ZeRO stage 1 (BF16_Optimizer, FP32 gradients{sp})",
        weights_full=w, weights_sharded=0, grads_full=w + g, grads_sharded=0,
        optimizer_full=0, optimizer_sharded=o, reduce_bytes=comm, all_reduce=True,
        gathers_per_step=1, weight_bytes=w, step_full=comm if comm != g else 0, source=src,
    )  # fmt: skip
