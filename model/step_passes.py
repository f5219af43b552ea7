"""The optimizer step's HBM passes as each framework's code runs them, beyond the count every
profile starts from (:func:`model.offload.adam_step_bytes`,
:func:`model.optimizers.optimizer_step_bytes`: the state read and written, the FP32 gradient
read, the 16-bit weight written, one read of the gradient for the norm and one write to zero it,
38 B an element for FP32 Adam with BF16 weights): :func:`step_pass_bytes`, the one rule
:func:`model.terms.optimizer_time.optimizer_seconds_term` adds per element the GPU steps.
The passes over the whole gradient buffer beyond those elements (zeroing it; DeepSpeed
``BF16_Optimizer``'s norm) are :func:`model.terms.optimizer_time.whole_buffer_zeroing_bytes`'.
"""

from __future__ import annotations

from trainplan.model.frameworks import Framework
from trainplan.model.mechanism_record import Mechanism

__all__ = [
    "step_pass_bytes",
    "is_bf16_optimizer",
    "CLIP_SCALE_BYTES",
    "GRAD_CLIP_SCALINGS",
    "UNSCALE_BYTES",
    "DEEPSPEED_OVERFLOW_CHECK_BYTES",
    "clip_scaling_note",
]

CLIP_SCALE_BYTES = 8
"""Bytes per element of the clip's in-place scaling of the FP32 gradient, read and written
(4 + 4), where it runs every step whatever the norm: Megatron-Core d98e8a64dd
(``--clip-grad`` 1.0 by default) ``megatron/core/optimizer/clip_grads.py``
``clip_grad_by_total_norm_fp32`` (with Transformer
Engine, ``get_grad_norm_fp32`` returns the norm as a tensor, so ``clip_coeff.clamp_max_(1.0)``
and ``multi_tensor_scale_tensor`` over every gradient); PyTorch
``torch/nn/utils/clip_grad.py`` ``clip_grads_with_norm_`` (``_foreach_mul_`` by the clamped
coefficient, no branch on it), which torchtitan b5bcd76c ``torchtitan/distributed/utils.py``
``clip_grad_norm_`` calls; DeepSpeed edaa7221 ``unscale_and_clip_grads`` (``mul_(1. /
combined_scale)``, clip or not) in ``stage_1_and_2.py`` and ``stage3.py``."""

GRAD_CLIP_SCALINGS: tuple[str, ...] = ("every_step", "above_limit")
"""When Megatron's gradient clip scales the FP32 gradients, the values of
:attr:`model.timing.CostOptions.grad_clip_scaling` (``clip_every_step`` of
:func:`step_pass_bytes`). ``every_step``, the default: today's Megatron-Core — Megatron-LM
3d87bfc1b7 of 2026-04-03 ("Enable CUDA graph for ADAM optimizer") keeps the norm a tensor where
Transformer Engine gives ``multi_tensor_scale_tensor`` (``get_grad_norm_fp32``:
``total_norm.pow(1.0 / norm_type)``), so ``clip_grad_by_total_norm_fp32`` clamps the coefficient
(``clip_coeff.clamp_max_(1.0)``) and scales every gradient whatever the norm
(:data:`CLIP_SCALE_BYTES`). ``above_limit``: Megatron-LM before it, the code of Narayanan et al.
2021 and Korthikanti et al. 2022 (``megatron/optimizer/clip_grads.py`` ``clip_grad_norm_fp32``
at 0fa7175f09 of 2021-04 and 5d2e13a66b of 2022-04) and Megatron-Core until then (92c8482e6d of
2025-12, ``clip_grad_by_total_norm_fp32``): the norm taken to the host (``total_norm.item()``)
and the gradients scaled only ``if clip_coeff < 1.0``, i.e. on steps whose norm exceeds
``--clip-grad``. The model charges ``above_limit`` as not scaling: the steady state of a run whose
norm is under the clip; a step above it moves 8 B an element more, not counted."""

UNSCALE_BYTES = 8
"""Bytes per element of Megatron's FP16 loss-scale unscaling, read and written in place (4 + 4),
every step where the run trains in FP16 with a loss scale (``--fp16`` with ``--loss-scale`` or
the dynamic scaler: a ``grad_scaler``), :attr:`model.timing.CostOptions.loss_scaling`:
Megatron-LM 0fa7175f09 (2021-04) ``megatron/optimizer/optimizer.py``
``Float16OptimizerWithFloat16Params.step`` → ``_unscale_main_grads_and_check_for_nan``
(``torch._amp_foreach_non_finite_check_and_unscale_`` over the FP32 main gradients, in place),
as ``MixedPrecisionOptimizer.step`` still runs it at d98e8a64dd. BF16 has no grad scaler, none.
Megatron-LM Table 1 ran so: ``examples/sc21/CONFIG.sh`` at 6985e58938 passes ``--fp16
--loss-scale 8192``."""

DEEPSPEED_OVERFLOW_CHECK_BYTES = 22
"""Bytes per FP32 element of DeepSpeed ZeRO-1/2's overflow check, which the BF16 default runs
(DeepSpeed edaa7221 ``precision_config.py`` ``DeepSpeedBF16Config.check_grad_overflow = True``;
``stage_1_and_2.py`` ``step`` → ``has_overflow_partitioned_grads_serial`` →
``_has_inf_or_nan`` per gradient of the partition): ``isnan`` and ``isinf`` each read 4 and
write a 1-byte mask (10), ``logical_or`` reads both and writes one (3), ``.float()`` of it (1 + 4)
and ``.max()`` (4); a 16-bit gradient's own ``.float()`` first adds ``g + 4``."""


def is_bf16_optimizer(mech: Mechanism) -> bool:
    """Whether ``mech`` is DeepSpeed's ``BF16_Optimizer``
    (:func:`model.deepspeed_mechanisms.uses_bf16_optimizer`), the one DeepSpeed mechanism that
    keeps both the 16-bit and the FP32 gradients whole (``grads_full`` = w + 4).

    >>> from trainplan.model.mechanisms import mechanism
    >>> is_bf16_optimizer(mechanism("deepspeed", 1, gradient_bytes=4)), is_bf16_optimizer(mechanism("deepspeed", 1))
    (True, False)
    """
    return (
        mech.framework is Framework.DEEPSPEED
        and mech.zero_stage == 1
        and mech.grads_full == mech.weight_bytes + 4
    )


def clip_scaling_note(
    grad_clip_scaling: str, framework: object, distributed_optimizer: object = None
) -> str | None:
    """The line a report prints where ``grad_clip_scaling`` ``above_limit``
    (:data:`GRAD_CLIP_SCALINGS`) changes the figure: under ``megatron`` with its own optimizer
    (not Apex's ``distributed_fused_adam``, which has no clip pass to drop), the optimizer step is
    charged without the clip's scaling pass, the steady state of a run whose gradient norm stays
    under ``--clip-grad``; a step above it moves :data:`CLIP_SCALE_BYTES` an element more. None
    elsewhere. The key by its name, as the model's messages give it.

    >>> clip_scaling_note("every_step", "megatron") is None
    True
    >>> clip_scaling_note("above_limit", "megatron").split(":")[0]
    'grad_clip_scaling above_limit'
    >>> clip_scaling_note("above_limit", "megatron", "distributed_fused_adam") is None
    True
    """
    apex = str(distributed_optimizer) == "distributed_fused_adam"
    if grad_clip_scaling != "above_limit" or str(framework) != Framework.MEGATRON or apex:
        return None
    return (
        "grad_clip_scaling above_limit: the optimizer step is charged without the clip's "
        "scaling pass, the steady state of a run whose gradient norm stays under --clip-grad; a "
        f"step above it reads and writes the FP32 gradients once more ({CLIP_SCALE_BYTES} B a "
        "parameter its GPU updates), not counted"
    )


def step_pass_bytes(
    mech: Mechanism,
    gradient_bytes: int,
    apex: bool = False,
    fused_copy: bool = False,
    optimizer_bytes: int = 12,
    clip_every_step: bool = True,
    unscale: bool = False,
) -> int:
    """HBM bytes per element the GPU steps that ``mech``'s framework moves in its optimizer step
    beyond :func:`model.offload.adam_step_bytes`' count (negative where it moves fewer), with
    the recipe's ``gradient_bytes`` g (the accumulated gradient's dtype) and ``optimizer_bytes``
    (the count's state, 12 for FP32 Adam) and the mechanism's working-weight bytes w. Exact per
    element; launches not counted. ``megatron``: :func:`_megatron_bytes` (``apex``: Apex's
    ``DistributedFusedAdam``; ``fused_copy``: the precision-aware optimizer;
    ``clip_every_step`` False: Megatron-LM's clip before it scaled every step,
    :attr:`model.timing.CostOptions.grad_clip_scaling` ``above_limit``; ``unscale``: FP16 with a
    loss scale, :data:`UNSCALE_BYTES`, but under ``apex``; both read under ``megatron`` only);
    ``deepspeed``:
    :func:`_deepspeed_bytes`; ``textbook``: 0; ``fsdp2`` (torchtitan b5bcd76c with PyTorch's
    fused AdamW, ``torch.optim.AdamW(fused=True)``: ``torch._fused_adamw_``): the optimizer updates the FP32
    sharded parameter itself and writes no 16-bit copy (the cast runs in the all-gather's
    copy-in), −w; the clip scales every gradient (:data:`CLIP_SCALE_BYTES`); ``zero_grad`` with
    ``set_to_none = disable_cuda_graphs`` (False by default) zeroes them (``trainer.py``
    ``train_step``), as counted: 8 − w.

    Examples
    --------
    >>> from trainplan.model.mechanisms import mechanism
    >>> step_pass_bytes(mechanism("megatron", 1), 4), step_pass_bytes(mechanism("megatron", 1), 4, fused_copy=True)
    (12, 8)
    >>> step_pass_bytes(mechanism("megatron", 1, gradient_bytes=2), 2)
    18
    >>> step_pass_bytes(mechanism("megatron", 0, gradient_bytes=2), 2, clip_every_step=False)
    10
    >>> m0 = mechanism("megatron", 0, gradient_bytes=2)
    >>> step_pass_bytes(m0, 2, clip_every_step=False, unscale=True)
    18
    >>> step_pass_bytes(mechanism("megatron", 1, gradient_bytes=2, distributed_optimizer="distributed_fused_adam"), 2, apex=True)
    -6
    >>> [step_pass_bytes(mechanism("deepspeed", z), 2) for z in (1, 2, 3)]
    [60, 60, 32]
    >>> step_pass_bytes(mechanism("deepspeed", 1, gradient_bytes=4), 4), step_pass_bytes(mechanism("fsdp2", 3), 4)
    (4, 6)
    """
    if mech.framework is Framework.MEGATRON:
        clip = CLIP_SCALE_BYTES if clip_every_step else 0
        clip += UNSCALE_BYTES if unscale and not apex else 0
        return _megatron_bytes(mech, gradient_bytes, apex, fused_copy, optimizer_bytes, clip)
    if mech.framework is Framework.FSDP2:
        return CLIP_SCALE_BYTES - mech.weight_bytes
    if mech.framework is Framework.DEEPSPEED:
        return _deepspeed_bytes(mech, gradient_bytes)
    return 0


def _megatron_bytes(
    mech: Mechanism, g: int, apex: bool, fused_copy: bool, optimizer_bytes: int, clip: int
) -> int:
    """:func:`step_pass_bytes` under ``megatron`` (Megatron-LM d98e8a64dd
    ``megatron/core/optimizer/optimizer.py`` ``MixedPrecisionOptimizer.step``): the clip scales
    every FP32 gradient (``clip``: :data:`CLIP_SCALE_BYTES`, or 0 where it scales only above the
    limit, Megatron-LM before 3d87bfc1b7: :attr:`model.timing.CostOptions.grad_clip_scaling`);
    after the fused Adam has written the FP32
    master, a second pass reads it again (4) to write the 16-bit weight —
    ``distrib_optimizer.py`` ``_copy_main_params_to_model_params``
    (``shard_model_param.data.copy_(shard_main_param)``),
    ``Float16OptimizerWithFloat16Params._copy_main_params_to_model_params``
    (``multi_tensor_scale`` by 1.0) at ZeRO-0, Megatron-FSDP's
    ``copy_main_weights_to_model_weights`` at ZeRO-3 — except, below ZeRO-3, where
    ``fused_copy``: the precision-aware optimizer (``--use-precision-aware-optimizer``, which
    state not in FP32 and optimizer offload require, ``optimizer_config.py``) hands the master
    to Transformer Engine's ``FusedAdam``, whose kernel writes the 16-bit weight itself
    (``fused_adam.py`` ``FusedAdam.step``: ``p_f16_model`` and ``p_main_of_f16_model`` in one
    ``multi_tensor_adam``); without it, below ZeRO-3 a 16-bit ``main_grad`` is cast to FP32
    first (``_copy_model_grads_to_main_grads``: ``.float()``, g + 4; a no-op for FP32). +12 B
    by default (50 B).

    ``apex`` (Apex ``DistributedFusedAdam`` at ZeRO-1, :data:`model.mechanisms.APEX_SOURCE`):
    no copy and no clip pass — ``clip_grad_norm`` folds the coefficient into ``_grad_scale``
    and ``_local_step_with_param_remainders`` reads the 16-bit weight (w) and its state
    (``optimizer_sharded``: the master's 16-bit remainder and the moments, 10 B) and writes
    both; the norm and the kernel read the g-byte gradient shard:
    2 · (``optimizer_sharded`` − ``optimizer_bytes``) + w + 2g − 8, −6 at g 2.

    Megatron-LM of 2021 and 2022 at ZeRO-0 (0fa7175f09 and 5d2e13a66b
    ``megatron/optimizer/optimizer.py`` ``Float16OptimizerWithFloat16Params.step``) runs the
    same passes — ``_copy_model_grads_to_main_grads`` (``main_grad.float()``), Apex's
    ``FusedAdam`` on the FP32 master, ``_copy_main_params_to_model_params`` (a
    ``multi_tensor_scale`` by 1.0) — but for the clip, which scales only above the limit
    (``clip=0``); under FP16 with a loss scale ``_unscale_main_grads_and_check_for_nan`` adds
    :data:`UNSCALE_BYTES` (``clip`` carries both passes over the FP32 gradient)."""
    w, zero = mech.weight_bytes, mech.zero_stage
    if apex:
        return 2 * (mech.optimizer_sharded - optimizer_bytes) + w + 2 * g - 8
    if zero == 3:
        return clip + 4
    cast = g + 4 if g != 4 else 0
    return clip + (0 if fused_copy else 4 + cast)


def _deepspeed_bytes(mech: Mechanism, g: int) -> int:
    """:func:`step_pass_bytes` under ``deepspeed``, the ZeRO optimizer (DeepSpeed edaa7221
    ``stage_1_and_2.py`` ``step``, ``stage3.py`` ``step``): the norm reads each gradient through
    ``.double()`` (``get_grad_norm_direct``: g read, 8 written and read; the count has 4),
    ``flatten`` copies the partition (2g) and ``.to(fp32)`` casts it (g + 4; none for FP32),
    the clip's scaling (:data:`CLIP_SCALE_BYTES`) and the copy of the FP32 master into the
    16-bit partition (its read, 4); the gradients are set to None, not zeroed (−4); ZeRO-1/2
    adds the overflow check (:data:`DEEPSPEED_OVERFLOW_CHECK_BYTES`): +60 B at g 2 (98 B) at
    ZeRO-1/2, +32 at ZeRO-3 (70 B). ``BF16_Optimizer`` (ZeRO-1, FP32 gradients): the copy's read
    (``update_lp_params``), 4; its zeroing and norm run over the whole buffer
    (:func:`model.terms.optimizer_time.whole_buffer_zeroing_bytes`)."""
    if is_bf16_optimizer(mech):
        return 4
    cast = g + 4 if g != 4 else 0
    norm, flatten = g + 8 + 8 - 4, 2 * g
    common = norm + flatten + cast + CLIP_SCALE_BYTES + 4 - 4
    return common + (DEEPSPEED_OVERFLOW_CHECK_BYTES + cast if mech.zero_stage < 3 else 0)
