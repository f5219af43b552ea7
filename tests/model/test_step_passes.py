"""The optimizer step's HBM passes per framework (:mod:`trainplan.model.step_passes`,
:func:`trainplan.model.terms.optimizer_time.whole_buffer_zeroing_bytes`), through ``evaluate()``:
Llama 3 8B on 8 H100 SXM (dp 8), whose optimizer step streams at BabelStream's triad, 2.97 TB/s.
P is the stage's parameters on one GPU; each rank steps its shard, P/8, under every framework
here. The byte counts per element are derived by hand in each test from the frameworks' code."""

from __future__ import annotations

import pytest

from trainplan.optimizer.case import Case

TRIAD = 2.97e12
"""H100 SXM's optimizer-step rate, bytes per second (BabelStream's triad, as in test_offload)."""


def _step(**options):
    result = Case.of("llama3-8b", "H100-SXM", dp=8, **options).evaluate()
    P = float(result.stages[0].dense_params)
    return result.time_terms.optimizer_s, P


def test_megatron_distributed_optimizer_reads_the_master_again_and_scales_every_gradient():
    """Megatron-Core's distributed optimizer, FP32 main_grad (Megatron-LM d98e8a64dd): the fused
    Adam reads the FP32 gradient, master and moments (16) and writes master and moments (12);
    ``_copy_main_params_to_model_params`` then reads the FP32 master (4) to write the BF16 weight
    (2); the norm reads the gradient (4, ``multi_tensor_l2norm``) and, the norm a tensor under
    Transformer Engine, ``clip_grad_by_total_norm_fp32`` scales every gradient (4 + 4): 50 B an
    owned element, was 38. The whole FP32 buffer is zeroed (``zero_grad_buffer``): 4 B × P."""
    seconds, P = _step(framework="megatron", zero_stage=1)
    owned = P / 8
    assert 16 + 12 + 4 + 2 + 4 + 8 == 46
    assert seconds == pytest.approx((46 * owned + 4 * P) / TRIAD, rel=1e-9)


@pytest.mark.parametrize(("scaling", "per_element"), [("every_step", 54), ("above_limit", 46)])
def test_megatron_2021_clip_scales_only_above_the_limit(scaling, per_element):
    """Megatron ZeRO-0 with BF16 gradients, as Megatron-LM of 2021–2022 runs it
    (``megatron/optimizer/optimizer.py`` ``Float16OptimizerWithFloat16Params.step`` at
    0fa7175f09): every rank steps all P. Per element: ``_copy_model_grads_to_main_grads``'
    ``main_grad.float()`` reads 2 and writes 4 (6); Apex ``FusedAdam`` reads the FP32 gradient,
    master and moments (16) and writes master and moments (12); ``_copy_main_params_to_model_params``
    reads the master (4) and writes the BF16 weight (2); the norm reads the gradient (4,
    ``multi_tensor_l2norm``); ``zero_grad_buffer`` zeroes the BF16 ``main_grad`` buffer (2).
    ``every_step`` (today's Megatron-Core, 3d87bfc1b7 and later: ``clip_coeff.clamp_max_(1.0)``
    and ``multi_tensor_scale_tensor``) adds the scaling's read and write, 4 + 4; ``above_limit``
    (``clip_grad_norm_fp32`` at 0fa7175f09: ``total_norm.item()``, scaled only ``if clip_coeff <
    1.0``) none, the norm under the clip: 54 and 46 B an element."""
    seconds, P = _step(
        framework="megatron", zero_stage=0, gradient_bytes=2, grad_clip_scaling=scaling
    )
    clip = 8 if scaling == "every_step" else 0
    assert 6 + 16 + 12 + 4 + 2 + 4 + 2 + clip == per_element
    assert seconds == pytest.approx(per_element * P / TRIAD, rel=1e-9)


def test_megatron_2021_fp16_unscales_every_step():
    """Megatron-LM Table 1's recipe, FP16 with a constant loss scale (``examples/sc21/CONFIG.sh``
    at 6985e58938: ``--fp16 --loss-scale 8192``), ZeRO-0, 16-bit gradients: the 46 B of the
    above-limit clip (:func:`test_megatron_2021_clip_scales_only_above_the_limit`) and
    ``_unscale_main_grads_and_check_for_nan`` (0fa7175f09:
    ``torch._amp_foreach_non_finite_check_and_unscale_`` reads and writes each FP32 main gradient
    in place, 4 + 4) every step: 54 B an element, what every-step scaling without a loss scale
    charges too."""
    seconds, P = _step(
        framework="megatron",
        zero_stage=0,
        gradient_bytes=2,
        grad_clip_scaling="above_limit",
        loss_scaling=True,
    )
    assert 46 + 4 + 4 == 54
    assert seconds == pytest.approx(54 * P / TRIAD, rel=1e-9)


def test_fsdp2_writes_no_bf16_copy_and_scales_every_gradient():
    """torchtitan with FSDP2 (ZeRO-3): fused AdamW on the FP32 sharded parameter (28 B: reads
    p, g, m, v; writes p, m, v), no BF16 copy; ``clip_grad_norm_`` reads the gradients for the
    norm (4) and ``clip_grads_with_norm_`` multiplies them by the clamped coefficient (8);
    ``zero_grad(set_to_none=False)`` zeroes them (4): 44 B, was 38."""
    seconds, P = _step(framework="fsdp2", zero_stage=3)
    assert 28 + 4 + 8 + 4 == 44
    assert seconds == pytest.approx(44 * (P / 8) / TRIAD, rel=1e-9)


@pytest.mark.parametrize(("zero", "per_element"), [(1, 98), (2, 98), (3, 70)])
def test_deepspeed_zero_optimizer_step_passes(zero, per_element):
    """DeepSpeed's ZeRO optimizer, BF16 gradients (DeepSpeed edaa7221), per owned element:

    * ZeRO-1/2 overflow check (``check_grad_overflow`` True under bf16; ``_has_inf_or_nan``):
      ``.float()`` 2 + 4, ``isnan`` 4 + 1, ``isinf`` 4 + 1, ``logical_or`` 2 + 1, ``.float()``
      1 + 4, ``.max()`` 4: 28 (not at ZeRO-3, which checks only under fp16);
    * the norm, ``g.double()`` then its norm: 2 + 8 + 8 = 18;
    * ``flatten`` of the partition 2 + 2, ``.to(fp32)`` 2 + 4: 10;
    * ``unscale_and_clip_grads``' ``mul_``: 8; Adam 28; the BF16 partition copied from the FP32
      master: 4 + 2; ``zero_grad(set_to_none=True)``: 0.
    """
    seconds, P = _step(framework="deepspeed", zero_stage=zero)
    check = 28 if zero < 3 else 0
    assert check + 18 + 10 + 8 + 28 + 6 == per_element
    assert seconds == pytest.approx(per_element * (P / 8) / TRIAD, rel=1e-9)


def test_deepspeed_bf16_optimizer_zeroes_and_reads_its_whole_buffer():
    """DeepSpeed's ``BF16_Optimizer`` (ZeRO-1, FP32 gradients): Adam over the partition's view of
    the FP32 buffer (28) and ``update_lp_params``' copy (4 + 2) per owned element; over the whole
    FP32 buffer the norm's read (4) and two zeroings, ``clear_hp_grads`` in ``step`` and again in
    ``zero_grad`` (8); the clip scales only above the limit (not counted)."""
    seconds, P = _step(framework="deepspeed", zero_stage=1, gradient_bytes=4)
    assert seconds == pytest.approx((34 * (P / 8) + 12 * P) / TRIAD, rel=1e-9)


def test_apex_zeroes_the_fp32_embedding_gradients_at_four_bytes():
    """Apex ``DistributedFusedAdam`` as NeMo runs it, BF16 gradients: the kernel reads and
    writes the BF16 weight (2 + 2), the master's 16-bit remainder and the moments (2 × 10), and
    reads the BF16 gradient shard (2); the norm reads it too (2); the clip is folded into the
    kernel's scale: 28 B an owned element. ``zero_grad`` zeroes every buffer whole, BF16 (2 B ×
    P) but the embeddings' FP32 buffer (``grad_sync_dtype`` float32) at 2 B more: Llama 3 8B's
    untied word embedding, 128,256 × 4,096 = 525,336,576 elements on the one stage."""
    seconds, P = _step(
        framework="megatron",
        zero_stage=1,
        distributed_optimizer="distributed_fused_adam",
        gradient_bytes=2,
    )
    embedding = 128_256 * 4_096
    assert embedding == 525_336_576
    assert 4 + 20 + 2 + 2 == 28
    expected = 28 * (P / 8) + 2 * P + 2 * embedding
    assert seconds == pytest.approx(expected / TRIAD, rel=1e-9)
