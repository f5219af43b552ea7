"""FSDP2's copies around its data-parallel collectives on the compute stream, and FSDP1's
(flat parameters, last below): the bytes per unsharded parameter element that ``fully_shard``
(or ``FullyShardedDataParallel``) moves through HBM in each backward pass (and the forward
before it) beyond the collectives themselves, and beyond the weight-gradient GEMMs' own output
(:func:`fsdp2_copy_bytes`). The mechanism records carry them
(:attr:`model.mechanism_record.Mechanism.accumulate_first_bytes` and
:attr:`~model.mechanism_record.Mechanism.accumulate_bytes`, as DeepSpeed's accumulation,
:mod:`model.deepspeed_accumulate`); the step-time term is
:func:`model.terms.dp_time.grad_accumulation_term`.

Per unsharded element of a unit (a transformer block: its parameters on this GPU after tensor
and expert parallelism, before FSDP's sharding), ``w`` B the parameters' dtype
(``MixedPrecisionPolicy.param_dtype``), ``g`` B the reduce dtype (``reduce_dtype``; FP32 as
torchtitan sets it). Read from the code, pytorch/pytorch
``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py`` at 002a76fb and
``_fsdp_collectives.py`` and ``_fsdp_param.py`` at 010ae4a8:

* **All-gather copy-out** — every all-gather. ``FSDPParamGroup.wait_for_unshard`` (called by
  ``pre_forward`` and ``pre_backward`` on the current stream, the computation's) runs
  ``foreach_all_gather_copy_out``: ``torch.ops.fsdp.split_with_sizes_copy`` copies the flat
  all-gather output into each parameter's own unsharded tensor, ``2·w`` (read w, write w).
* **All-gather copy-in** — every all-gather (pytorch/pytorch 8fc2039d ``_fsdp_collectives.py``
  ``foreach_all_gather``): ``_get_param_all_gather_inputs`` casts the FP32 shards to
  ``param_dtype`` into one new flat buffer (``torch.empty`` of the shard's elements, then
  ``torch._foreach_copy_``: read 4, write ``w``) and ``all_gather_copy_in`` copies it into the
  rank's slot of the all-gather output (``_foreach_copy_``: read ``w``, write ``w``):
  ``4 + 3·w`` B a *shard* element (:func:`copy_in_bytes`; 10 with BF16 parameters, ``2·w``
  without a cast), ``(4 + 3·w)/D`` an unsharded one. On which stream depends on who asks
  (002a76fb ``_fsdp_param_group.py`` ``FSDPCommContext.get_all_gather_streams``): FSDP's own
  hooks (``async_op`` False, ``FORWARD`` or ``PRE_BACKWARD``) run it on
  ``all_gather_copy_in_stream``, beside the previous unit's all-gather (which moves ``2·(D −
  1)/D`` B an element over a link several times slower than HBM): not counted; an explicit
  ``unshard(async_op=True)`` — PyTorch's multi-stage pipeline runtime's ``UNSHARD``
  (:func:`model.fsdp2_pipeline.runtime_unshards`) — runs it on the current stream, the
  computation's: counted, charged with the step's once-a-step gathers to its first
  micro-batch (:func:`model.terms.dp_time.grad_accumulation_term`). The flat buffer, ``w`` B a
  shard element, lives from its allocation, before the output's, to the end of
  ``foreach_all_gather``: from FSDP's hooks in the copy-in stream's pool beside the two
  all-gather outputs, which counts it (:func:`model.terms.peak.stream_pool_term`,
  ``(2 + 1/D)`` outputs); from the runtime's ``UNSHARD`` in the compute stream's, freed before
  the copy-out that holds one output beside its parameters
  (:func:`model.terms.runtime_unshard.runtime_unshard_term`).
* **Reduce-scatter copy-in** — every reduce-scatter. ``FSDPParamGroup.post_backward`` calls
  ``foreach_reduce`` on the current stream, whose ``foreach_reduce_scatter_copy_in``
  (``torch._chunk_cat`` into the ``reduce_dtype`` reduce-scatter input, the widening cast done
  by the same kernel) reads the unsharded gradients and writes the input: ``w + g`` for the
  autograd gradients (``2·g`` for gradients already accumulated in ``g``); the collective
  waits for it ("Only after the copy-in finishes can we free the gradients").
* **Accumulation without synchronisation** (a pipeline schedule: ``set_requires_gradient_sync
  (False)`` before every micro-batch's backward, :func:`model.mechanisms.mechanism` with
  ``pipelined``). ``post_backward`` with ``reduce_grads`` false calls
  ``FSDPParam.to_accumulated_grad_if_needed`` after the first backward, which upcasts the
  gradient into ``unsharded_accumulated_grad`` (``unsharded_grad.to(self.reduce_dtype)``:
  ``w + g``), and ``accumulate_unsharded_grad_if_needed`` after each later one
  (``unsharded_accumulated_grad += unsharded_param.grad``: read ``g`` and ``w``, write ``g``).
  With ``g = w`` no upcast: autograd's ``AccumulateGrad`` adds the new gradient into ``.grad``
  in place (read ``2·w``, write ``w``) from the second backward on.

Counts per micro-batch: without a pipeline schedule ZeRO-3 (``reshard_after_forward=True``)
gathers twice (forward, backward) and ZeRO-2 once (``reshard_after_backward`` True frees the
weights after every backward), and both reduce-scatter once
(:func:`model.mechanisms.mechanism`: ``gathers_per_microbatch``, ``reduce_per_microbatch``);
under a pipeline schedule the mechanism's once-a-step gather, its per-micro-batch re-gathers
(ZeRO-3) and one reduce-scatter of the accumulated FP32 gradients a step.

**The multi-stage runtime's re-gathers** (``ScheduleInterleaved1F1B`` at four chunks a rank or
more, :func:`model.fsdp2_pipeline.runtime_regathers`: the ``UNSHARD`` of a chunk its
``RESHARD`` freed). PyTorch 2.13.0 (cf30153c4c) ``torch/distributed/pipelining/schedules.py``
``_PipelineScheduleRuntime._step_microbatches``: ``UNSHARD`` calls ``unshard(async_op=True)`` on
each of the stage's FSDP units and keeps the handles; before the chunk's next pass
``_assert_unsharded`` calls each handle's ``wait`` (``torch/distributed/fsdp/_fully_shard/
_fully_shard.py`` ``_UnshardHandleImpl.wait`` → ``FSDPParamGroup.wait_for_unshard``), which
runs ``foreach_all_gather_copy_out`` on the compute stream like every other gather: ``2·w`` an
element each (:func:`regather_copy_bytes`). They are a step's gathers beyond the mechanism's
and are charged, as its once-a-step gather is, to the step's first micro-batch
(:func:`model.terms.dp_time.grad_accumulation_term`).

**FP8 all-gathers** (torchao's ``WeightWithDynamicFloat8CastTensor``, torchtitan's
``enable_fsdp_float8_all_gather``; pytorch/ao 36027d82d ``torchao/float8/fsdp_utils.py``,
torchtitan 6348d93d1^ ``torchtitan/components/quantization/float8.py``). ``fsdp_pre_all_gather``
casts the local FP32 shard to FP8 (``hp_tensor_to_float8_dynamic`` with ``reduce_amax=True``, an
amax all-reduce every gather, or ``hp_tensor_and_scale_to_float8`` with the scale that
``precompute_float8_dynamic_scale_for_fsdp`` computes once a step after the optimizer step:
``torch._foreach_norm(ord=inf)`` of the local shards and one all-reduce) and returns the
``uint8`` data. FSDP2 calls it in ``_get_param_all_gather_inputs``, part of the copy-in above
(on ``all_gather_copy_in_stream`` from FSDP's hooks, on the compute stream from the pipeline
runtime's ``UNSHARD``), over the shard only (÷ D): the copy-in writes 1 B where it wrote
``w`` (:func:`copy_in_bytes` of 1); the precompute reads each shard once a step (4 B ÷ D),
charged with the optimizer step. ``foreach_all_gather`` views
every input as ``uint8`` when one is, and the copy-out splits the ``uint8`` output into each
parameter's all-gather output: 2 B an FP8 element (read 1, write 1), ``2·w`` the others';
``fsdp_post_all_gather`` wraps that output as the ``Float8TrainingTensor`` (no copy). So the
copy-out moves twice what the collective gathers an element. The plan's ``fsdp2`` collectives
gather at ``w`` under FP8 unless :attr:`model.specs.TrainingSpec.fp8_param_gather` (the one
FP8-gather key, here torchtitan's ``enable_fsdp_float8_all_gather``, off by default;
:func:`model.fp8_gathers.fp8_param_gathers`) is set; then every gather of a converted weight,
the runtime's re-gathers included, copies out 2 B an element instead of ``2·w``
(:func:`fp8_copy_saving`, taken off by :func:`model.terms.dp_time.grad_accumulation_term`).
FSDP1 has no such hook (``fsdp_pre_all_gather`` is FSDP2's extension): the key is refused with
``flat_parameters``.

Not counted: the launches (one copy kernel per unit and collective against milliseconds of
bytes), the post-reduce accumulation into the sharded FP32 gradient (÷ D).

**FSDP1** (``torch.distributed.fsdp.FullyShardedDataParallel``, one ``FlatParameter`` a unit;
``flat_parameters``, :attr:`model.specs.TrainingSpec.flat_parameters`) makes other copies. Read
from PyTorch 2.1.0 (7bcf7da3a268b435777fe87c7794c382f444e86d, the v2.1.0 wheel's
``torch.version.git_version``), ``torch/distributed/fsdp/flat_param.py`` and
``_runtime_utils.py`` (the same in 2.13's ``_flat_param.py``):

* **No all-gather copy-out.** ``FlatParamHandle.unshard`` all-gathers
  (``_all_gather_flat_param``: ``dist.all_gather_into_tensor``, on the unshard stream) straight
  into the padded unsharded flat parameter (``_alloc_padded_unsharded_flat_param``), and
  ``_use_unsharded_flat_param`` / ``_use_unsharded_views`` make the module's parameters views of
  it (``torch.split(flat_param, _numels)`` and ``.view(shape)``): nothing is copied. The cast of
  the FP32 shard to ``param_dtype`` (``pre_unshard``, ``_use_low_precision_shard``) runs on the
  pre-unshard stream over the shard only (÷ D).
* **The flat gradient's concatenation** — every backward. The parameters are autograd views
  of the flat parameter (``SplitWithSizesBackward0``), so their gradients reach
  ``flat_param.grad`` through ``split_with_sizes``'s backward, one ``aten::cat`` of every
  view's gradient on the compute stream: ``2·w`` (read w, write w); ``AccumulateGrad`` then
  takes the result without a copy (``prepare_gradient_for_backward`` and ``_reduce_grad`` leave
  ``.grad`` None). The post-backward hook, registered on that ``AccumulateGrad``, runs after it.
* **No reduce-scatter copy-in on the compute stream.** ``_post_backward_hook`` makes the
  post-backward stream wait for the compute stream and then, on the post-backward stream, casts
  the flat gradient to ``reduce_dtype`` (``flat_param.grad.to(handle._reduce_dtype)``, ``w + g``
  where ``g ≠ w``) and pads it where the unit's element count is not a multiple of the shard
  degree (``_get_reduce_scatter_tensors``: ``F.pad``, which this plan does not count). Those
  copies run beside the next unit's backward, as the collective does, and are not counted here.
* **Accumulation without synchronisation** (``no_sync``): ``.grad`` keeps the unsharded flat
  gradient in ``param_dtype`` and ``AccumulateGrad`` adds each later backward's into it in
  place (read ``2·w``, write ``w``). The ``fsdp2`` profile refuses ``flat_parameters`` with
  pp > 1 (:func:`model.key_rules.check_flat_parameters`): PyTorch's pipeline schedules run
  FSDP2, so this count is the function's alone.

So FSDP1 moves ``2·w`` an unsharded element a micro-batch on the compute stream, whatever the
ZeRO stage (FULL_SHARD or SHARD_GRAD_OP) and ``reduce_dtype``: 4 B with BF16 parameters,
against FSDP2's 14 (ZeRO-3) or 10 (ZeRO-2) with FP32 reduction.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FSDP1_COPIES_SOURCE",
    "FSDP2_COPIES_SOURCE",
    "fsdp2_copy_bytes",
    "fp8_copy_saving",
    "regather_copy_bytes",
    "copy_in_bytes",
    "COPY_IN_SOURCE",
    "SHARD_BYTES",
]

FSDP2_COPIES_SOURCE = (
    "pytorch/pytorch 002a76fb torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py "
    "wait_for_unshard / post_backward; 010ae4a8 _fsdp_collectives.py "
    "foreach_all_gather_copy_out (split_with_sizes_copy) / foreach_reduce "
    "(foreach_reduce_scatter_copy_in, _chunk_cat); _fsdp_param.py "
    "to_accumulated_grad_if_needed / accumulate_unsharded_grad_if_needed"
)

FSDP1_COPIES_SOURCE = (
    "pytorch/pytorch 7bcf7da3a (v2.1.0) torch/distributed/fsdp/flat_param.py "
    "FlatParamHandle.unshard (all_gather_into_tensor into the padded flat parameter) / "
    "_use_unsharded_views (parameters are split views: split_with_sizes backward concatenates "
    "their gradients on the compute stream); _runtime_utils.py _post_backward_hook (the cast to "
    "reduce_dtype and the reduce-scatter on the post-backward stream)"
)


COPY_IN_SOURCE = (
    "pytorch/pytorch 8fc2039d torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py "
    "foreach_all_gather / _get_param_all_gather_inputs (use_foreach_copy: the cast into "
    "flat_foreach_copy_input) / all_gather_copy_in_cuda (_foreach_copy_ into the output's slot); "
    "002a76fb _fsdp_param_group.py FSDPCommContext.get_all_gather_streams, FSDPParamGroup.unshard"
)

SHARD_BYTES = 4
"""Bytes per element of FSDP2's sharded parameters as torchtitan keeps them: FP32, the working
dtype (``MixedPrecisionPolicy.param_dtype``, BF16 by default) reached by the all-gather's
copy-in cast (torchtitan ``apply_fsdp``: ``MixedPrecisionPolicy(param_dtype=...,
reduce_dtype=...)`` over FP32 model parameters)."""


def copy_in_bytes(w: int, shard_bytes: int = SHARD_BYTES) -> int:
    """HBM bytes per *shard* element of FSDP2's all-gather copy-in (the module docstring): the
    cast of the ``shard_bytes`` sharded parameter into a flat ``w``-byte buffer (read
    ``shard_bytes``, write ``w``) and its copy into the all-gather output (read ``w``, write
    ``w``), ``shard_bytes + 3·w``; ``2·w`` where no cast is needed (``w == shard_bytes``:
    ``FSDPParam.init_dtype_attrs`` drops a ``param_dtype`` equal to the parameter's, and the
    shard is handed to the copy as it is). ``w`` = 1 for a torchao FP8 weight, whose
    ``fsdp_pre_all_gather`` writes the FP8 shard (counted as one fused read-4-write-1 pass; its
    eager ``tensor * scale`` and saturating clamp write FP32 intermediates not counted here;
    their memory: :func:`model.terms.peak.stream_pool_term`) that the copy then moves. Source:
    :data:`COPY_IN_SOURCE`.

    >>> copy_in_bytes(2), copy_in_bytes(4), copy_in_bytes(1)
    (10, 8, 7)
    """
    return 2 * w if w == shard_bytes else shard_bytes + 3 * w


def regather_copy_bytes(w: int, gathers: Any) -> Any:
    """Bytes per unsharded parameter element that ``gathers`` all-gathers' copy-outs move
    through HBM on the compute stream (``foreach_all_gather_copy_out``'s
    ``split_with_sizes_copy``: read ``w``, write ``w``, each): ``2·w·gathers``. ``w`` B the
    gathered dtype, ``gathers`` a count (element-wise over arrays, a Fraction for the runtime's
    re-gathers of :func:`model.fsdp2_pipeline.runtime_regathers`).

    >>> from fractions import Fraction
    >>> regather_copy_bytes(2, 3), regather_copy_bytes(2, Fraction(7, 4))
    (12, Fraction(7, 1))
    """
    return 2 * w * gathers


def fp8_copy_saving(w: int, fp8_bytes: int, gathers: Any) -> Any:
    """Bytes per FP8-gathered weight element that ``gathers`` all-gathers' copy-outs no longer
    move under torchao's FP8 all-gather (the module docstring, "FP8 all-gathers"): the
    ``split_with_sizes_copy`` reads and writes ``fp8_bytes`` (1 B, ``uint8``) instead of ``w``,
    ``regather_copy_bytes(w, gathers) − regather_copy_bytes(fp8_bytes, gathers)``.

    >>> fp8_copy_saving(2, 1, 2), fp8_copy_saving(2, 1, 3)
    (4, 6)
    """
    return regather_copy_bytes(w, gathers) - regather_copy_bytes(fp8_bytes, gathers)


def fsdp2_copy_bytes(
    w: int,
    g: int,
    gathers_per_step: int,
    gathers_per_microbatch: int,
    reduce_per_microbatch: bool,
    flat_parameters: bool = False,
) -> tuple[int, int]:
    """(first, later): bytes per unsharded parameter element FSDP2 moves through HBM on the
    compute stream for the micro-batch whose backward is a step's first, and for each later one
    (the module docstring): ``2·w`` per all-gather (the step's once-a-step gathers charged to the
    first), then either a reduce-scatter copy-in per micro-batch (``w + g``,
    ``reduce_per_microbatch``) or, under a pipeline schedule, the accumulation in ``g`` (first
    ``w + g``, later ``w + 2·g``; ``0`` and ``3·w`` where ``g = w``) and one copy-in of the
    accumulated gradients a step (``2·g``, charged to the first).

    ``flat_parameters`` (FSDP1, the module docstring's last part): no copy-out, no copy-in on
    the compute stream; the flat gradient's concatenation, ``2·w``, every backward, and where
    the gradients accumulate unsynchronised (not ``reduce_per_microbatch``) each later backward
    adds into ``.grad`` in ``w`` (``3·w`` more). The gather counts do not matter there.

    Examples
    --------
    ZeRO-3 without a pipeline, bf16 weights and FP32 reduction: two copy-outs of 4 B and the
    copy-in of 6 B, every micro-batch; ZeRO-2: one copy-out.

    >>> fsdp2_copy_bytes(2, 4, 0, 2, True), fsdp2_copy_bytes(2, 4, 0, 1, True)
    ((14, 14), (10, 10))

    Under a pipeline schedule, ZeRO-3 (a gather a step and one a micro-batch): the first
    micro-batch 4 + 4 + 6 (the upcast) + 8 (the reduce-scatter's copy-in), each later one
    4 + 10; ZeRO-2 (a gather a step): 4 + 6 + 8, then 10.

    >>> fsdp2_copy_bytes(2, 4, 1, 1, False), fsdp2_copy_bytes(2, 4, 1, 0, False)
    ((22, 14), (18, 10))
    >>> fsdp2_copy_bytes(2, 2, 1, 0, False)
    (8, 6)

    FSDP1 with BF16 parameters: the concatenation of 2 + 2 B, ZeRO-3 or ZeRO-2, FP32 or BF16
    reduction alike; unsynchronised, 4 + 6 from the second backward.

    >>> fsdp2_copy_bytes(2, 4, 0, 2, True, True), fsdp2_copy_bytes(2, 2, 0, 1, True, True)
    ((4, 4), (4, 4))
    >>> fsdp2_copy_bytes(2, 4, 1, 0, False, True)
    (4, 10)
    """
    if flat_parameters:
        concat = 2 * w
        return concat, concat if reduce_per_microbatch else concat + 3 * w
    later = regather_copy_bytes(w, gathers_per_microbatch)
    first = later + regather_copy_bytes(w, gathers_per_step)
    if reduce_per_microbatch:
        return first + w + g, later + w + g
    upcast, add = (w + g, w + 2 * g) if g != w else (0, 3 * w)
    return first + upcast + 2 * g, later + add
