"""DeepSpeed's gradient accumulation inside each backward pass: the bytes per parameter element
its optimizers move through HBM on the compute stream every micro-batch, beyond the
weight-gradient GEMMs' own output (:func:`accumulate_bytes`), and the seconds they add to a step
(:func:`accumulate_seconds`). The mechanism records carry the bytes
(:attr:`model.mechanism_record.Mechanism.accumulate_bytes`); the step-time term is
:func:`model.terms.dp_time.grad_accumulation_term`.

Per parameter element of the GPU, ``w`` B the parameters' dtype, ``g`` B the gradients'
(deepspeedai/DeepSpeed edaa72212 unless said):

* ``BF16_Optimizer`` (ZeRO-1 with FP32 gradients, :func:`model.deepspeed_mechanisms.
  uses_bf16_optimizer`). Before each backward the pipeline engine calls ``clear_lp_grads()``
  (``deepspeed/runtime/pipe/engine.py`` ``_exec_backward_pass`` l. 863; the engine's own
  ``_backward_prologue`` for pp = 1), which zeroes every BF16 ``.grad``
  (``bf16_optimizer.py`` l. 473-489: ``set_to_none=False``, ``torch._foreach_zero_``: w B
  written); autograd's ``AccumulateGrad`` then adds the new gradient into the zeroed one in
  place (read 2·w, write w); after it ``update_hp_grads(clear_lp_grads=False)`` (l. 884-885)
  runs ``hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))`` for every parameter (l. 371): the
  cast reads w and writes g, the add reads 2·g and writes g. ``w + 4·g`` + ``4·w`` = 26 B at
  (2, 4). After the optimizer step ``zero_grad(set_to_none=True)`` (l. 491-493) frees the BF16
  gradients, so the first backward of a step has nothing to zero or add into: 18 B.
  DeepSpeed 56c522386 (2022-04, PR #1801, "bf16+pipeline parallelism") to b418cf6c1 (2025-03-11)
  set each ``.grad`` to None instead (``clear_lp_grads``, l. 438-441 at 56c522386): 18 B every
  micro-batch (:attr:`model.timing.CostOptions.lp_grads_set_to_none`).
* The ZeRO optimizer (``stage_1_and_2.py``) at ZeRO-1 with gradients in the parameters' dtype:
  its gradient hooks do nothing before the accumulation boundary (``process_gradients`` l.
  1758-1765: no ``grad_accum`` attribute when ``g`` = ``w``, no reduction without
  ``partition_gradients`` or ``overlap_comm``), so autograd accumulates into ``.grad``: 3·w
  from the second backward on; ``zero_grad(set_to_none=True)`` (l. 2017-2032) frees them at the
  step. The same in DeepSpeed 29bee73f0 (2021-10, MT-NLG's): ``_configure_zero_optimizer``
  turns ``contiguous_gradients`` and ``overlap_comm`` off at stage 1, so ``stage2.py`` makes no
  hooks (l. 451-452). With ``g`` ≠ ``w`` (FP32 accumulation under CPU offload) each hook casts
  and adds into ``param.grad_accum`` and frees ``.grad`` (``_fill_param_grad_accum_attribute``,
  l. 1124-1129): ``w + g`` the first time, ``w + 4·g`` after.
* ZeRO-2 (``partition_gradients``): every backward each gradient is copied into the contiguous
  IPG bucket on the compute stream (``reduce_independent_p_g_buckets_and_remove_grads``,
  l. 1229-1233, ``new_grad_tensor.copy_``): 2·w. Not counted: the partition's own accumulation
  (``independent_gradient_partition_epilogue``, about 20 B per element ÷ D).
* ZeRO-3: its IPG copies run on ``reduce_and_partition_stream`` beside the backward
  (``stage3.py`` ``__add_grad_to_ipg_bucket``, l. 1550-1559): nothing on the compute stream.

Not counted: the launches, a few per parameter tensor (3 µs each against milliseconds of
bytes per layer); the boundary's copies into the IPG buckets (once a step).
"""

from __future__ import annotations

from typing import Any

from trainplan.model.roofline import RooflineParams

__all__ = ["ACCUMULATE_SOURCE", "accumulate_bytes", "accumulate_seconds"]

ACCUMULATE_SOURCE = (
    "deepspeedai/DeepSpeed edaa72212 deepspeed/runtime/pipe/engine.py _exec_backward_pass, "
    "bf16_optimizer.py clear_lp_grads / _update_hp_grad / zero_grad, zero/stage_1_and_2.py "
    "process_gradients / reduce_independent_p_g_buckets_and_remove_grads / zero_grad, "
    "zero/stage3.py __add_grad_to_ipg_bucket; microsoft/DeepSpeed 56c522386 bf16_optimizer.py "
    "clear_lp_grads; 29bee73f0 engine.py _configure_zero_optimizer, zero/stage2.py"
)


def accumulate_bytes(
    zero_stage: int, w: int, g: int, bf16_optimizer: bool, lp_grads_set_to_none: bool = False
) -> tuple[int, int]:
    """(first, later): bytes per parameter element DeepSpeed moves through HBM on the compute
    stream in the first backward of a step and in each later one, to accumulate or stage the
    gradients (the module's docstring). ``bf16_optimizer``: ``BF16_Optimizer`` runs
    (:func:`model.deepspeed_mechanisms.uses_bf16_optimizer`); ``lp_grads_set_to_none``: its
    ``clear_lp_grads`` frees the BF16 gradients (DeepSpeed of 2022-04 to 2025-03) rather than
    zeroing them.

    Examples
    --------
    BF16_Optimizer at (2, 4): the cast and the add, 2 + 4 + 2·4 + 4 = 18; zeroing and autograd's
    add into the zeroed gradient, 2 + 3·2 = 8 more after the first backward. The ZeRO optimizer
    at ZeRO-1, BF16 gradients: autograd's add, 3·2 = 6, from the second backward; ZeRO-2: the
    IPG copy, 2·2 = 4, every backward.

    >>> accumulate_bytes(1, 2, 4, True), accumulate_bytes(1, 2, 4, True, True)
    ((18, 26), (18, 18))
    >>> accumulate_bytes(1, 2, 2, False), accumulate_bytes(2, 2, 2, False)
    ((0, 6), (4, 4))
    >>> accumulate_bytes(1, 2, 4, False), accumulate_bytes(3, 2, 2, False)
    ((6, 18), (0, 0))
    """
    if bf16_optimizer:
        update = w + 4 * g  # lp.grad.to(fp32): read w, write g; hp_grad.add_: read 2g, write g
        return update, update + (0 if lp_grads_set_to_none else 4 * w)  # zero w + add 3w
    if zero_stage == 1:
        if g == w:
            return 0, 3 * w  # AccumulateGrad: .grad += new, read 2w, write w
        return w + g, w + 4 * g  # grad_accum = grad.to(g), then grad_accum.add_(grad.to(g))
    if zero_stage == 2:
        return 2 * w, 2 * w  # the IPG bucket copy: read w, write w
    return 0, 0


def accumulate_seconds(
    first: Any,
    later: Any,
    elements: Any,
    backwards: Any,
    hbm_bytes_per_s: float,
    p: RooflineParams,
) -> Any:
    """Seconds a step spends on :func:`accumulate_bytes`'s (``first``, ``later``) bytes of
    ``elements`` parameter elements per GPU: ``backwards`` backward passes lie on the step's
    critical path (``m + pp − 1`` under DeepSpeed's ``TrainSchedule``: the slowest stage's m and
    the p − 1 of the drain, :mod:`model.pipeline`; m at pp = 1), one of them a step's first,
    each moving its bytes through HBM at the part's streaming share
    (:attr:`model.roofline.RooflineParams.streaming_hbm_efficiency`, BabelStream's triad: the
    cast, the add and the copy stream whole tensors as the triad does). Element-wise.

    Examples
    --------
    BLOOM 176B's busiest stage, 3,982,551,552 elements on an A100-80GB (2.039 TB/s at 0.834),
    m 128, pp 12: 139 backwards of 18 B under DeepSpeed of 2022 (lp gradients freed):
    139 · 18 · 3.98e9 / 1.700e12 ≈ 5.86 s.

    >>> p = RooflineParams(gemm_efficiency=0.7, optimizer_hbm_efficiency=0.834)
    >>> round(accumulate_seconds(18, 18, 3_982_551_552, 139, 2.039e12, p), 3)
    5.86
    """
    moved = (backwards * later - (later - first)) * elements
    return moved / (hbm_bytes_per_s * p.streaming_hbm_efficiency)
