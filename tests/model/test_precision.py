"""Precision recipes (issue 11 item 1): FP8 as Transformer Engine runs it, optimizer-state
dtypes, the gradient dtype. Every figure is derived by hand below; sources in
:mod:`trainplan.model.precision`."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.model.activations import ActivationContext, layer_activations
from trainplan.model.errors import LayoutError
from trainplan.model.precision import linear_speedup, optimizer_state_bytes
from trainplan.model.timing import stage_peak_seconds
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

LLAMA3_8B = {"model": "llama3-8b", "dp": 8, "seq_len": 8192, "global_batch_size": 64}
LINEAR_PER_LAYER = 218_103_808
"""Llama 3 8B (h 4,096, 32 heads, 8 KV heads of 128, FFN 14,336, SwiGLU): q and o 2·h² =
33,554,432; k and v 2·h·1,024 = 8,388,608; MLP 3·h·14,336 = 176,160,768; = 218,103,808 linear
weights per layer (the two RMSNorms, 8,192, are not linear)."""


def test_optimizer_state_dtypes():
    """Adam: FP32 master 4 + two moments. FP32 moments 4 + 4 + 4 = 12 (ZeRO §3.1); BF16 moments
    with FP32 master 4 + 2 + 2 = 8 (DeepSeek-V3 §3.3.3); BF16 moments, no master 2 + 2 = 4."""
    assert optimizer_state_bytes("fp32", True) == 12
    assert optimizer_state_bytes("bf16", True) == 8
    assert optimizer_state_bytes("bf16", False) == 4
    # Llama 3 8B, megatron ZeRO-1 on dp 8: optimizer state 8 B/param ÷ 8 = 1 B/param
    est = Case.of(
        **{**LLAMA3_8B, "optimizer_bytes": optimizer_state_bytes("bf16", True)}
    ).evaluate()
    assert est.training.optimizer_bytes == 8
    dense = est.stages[0].dense_params
    assert est.stages[0].state.optimizer_bytes == dense * 8 / 8


def test_gradient_dtype_replaces_fp32_gradients():
    """--gradient-dtype bf16 under megatron: 2 B gradients instead of FP32 main_grad's 4."""
    fp32 = Case.of(**LLAMA3_8B).evaluate().stages[0]
    bf16 = Case.of(**{**LLAMA3_8B, "gradient_bytes": 2}).evaluate().stages[0]
    assert fp32.state.gradients_bytes == 4 * fp32.dense_params
    assert bf16.state.gradients_bytes == 2 * bf16.dense_params


def test_fp8_weight_cache_is_two_bytes_per_linear_weight():
    """FP8 weight + FP8 transpose, 1 + 1 B per linear weight element, for the step: Llama 3 8B
    on one stage, tp 1: 32 × 218,103,808 × 2 = 13,958,643,712 B; tp 2 halves it (no Llama
    linear weight is replicated over tp)."""
    fp8 = Case.of(**{**LLAMA3_8B, "precision": "fp8"}).evaluate().stages[0].state
    assert fp8.weight_cache_bytes == 32 * LINEAR_PER_LAYER * 2 == 13_958_643_712
    tp2 = Case.of(**{**LLAMA3_8B, "precision": "fp8", "tp": 2, "dp": 4}).evaluate()
    assert tp2.stages[0].state.weight_cache_bytes == 6_979_321_856
    bf16 = Case.of(**LLAMA3_8B).evaluate().stages[0].state
    assert bf16.weight_cache_bytes == 0
    # counted at the forward/backward peak and in the optimizer step (persistent buffers)
    assert fp8.backward_bytes - bf16.backward_bytes == 13_958_643_712
    assert fp8.optimizer_step_bytes - bf16.optimizer_step_bytes == 13_958_643_712


def test_blackwell_keeps_no_fp8_transpose_under_per_tensor_scaling():
    """Transformer Engine 2.9 on Blackwell (``is_non_tn_fp8_gemm_supported``): a per-tensor
    FP8 weight keeps its row-wise data only, which serves dgrad too: 1 B per linear weight
    (32 × 218,103,808 = 6,979,321,856 B for Llama 3 8B on one stage); with FP8 primary weights
    the parameter is that data, so nothing is cached and the linear weights are 1 B. MXFP8
    keeps both copies and their E8M0 scales on Blackwell too: 2 + 2/32 B."""
    base = {**LLAMA3_8B, "device": "B200", "precision": "fp8", "fp8_recipe": "tensorwise"}
    cs = Case.of(**base).evaluate().stages[0]
    assert cs.state.weight_cache_bytes == 32 * LINEAR_PER_LAYER == 6_979_321_856
    primary = Case.of(**{**base, "fp8_param_gather": True}).evaluate().stages[0]
    assert primary.state.weight_cache_bytes == 0
    assert primary.state.weights_bytes == 2 * primary.dense_params - 32 * LINEAR_PER_LAYER
    mx = Case.of(**{**base, "fp8_recipe": "mxfp8"}).evaluate().stages[0].state
    assert mx.weight_cache_bytes == 32 * LINEAR_PER_LAYER * Fraction(66, 32)
    hopper = Case.of(**{**base, "device": "H100-SXM"}).evaluate().stages[0].state
    assert hopper.weight_cache_bytes == 2 * 32 * LINEAR_PER_LAYER


def test_blackwell_default_recipe_stays_delayed_under_deepspeed_and_textbook():
    """No ``fp8_recipe`` on B200 under ``deepspeed`` and ``textbook``: delayed scaling, not
    Transformer Engine's own Blackwell default (``get_default_fp8_recipe``: MXFP8BlockScaling
    from v2.0 at compute capability 10.x), which only an ``fp8_autocast`` without a recipe
    reads; Megatron-DeepSpeed f4157bea ``ParallelTransformer.__init__`` passes ``DelayedScaling``
    at every tp and DeepSpeed edaa72212 calls no Transformer Engine
    (:func:`model.precision.fp8_recipe_of`). Llama 3 8B on 8 B200 at tp 1, one stage: delayed
    keeps the row-wise FP8 weight only on Blackwell, 1 B × 32 × 218,103,808 = 6,979,321,856 B;
    MXFP8 (textbook) keeps both copies and an E8M0 scale per 32 elements each, (2 + 2/32) ×
    6,979,321,856 = 14,394,851,328 B. Under deepspeed MXFP8 is refused even at tp 1
    (:func:`model.precision.check_framework_fp8_recipe`; before: evaluated at 3.511 s, a recipe
    that stack cannot run); the default reads B300's published delayed rows, 3.309 s a step,
    3.317 s with DeepSpeed ZeRO-1's own optimizer-step passes (model.step_passes: 60 B more an
    element stepped with BF16 gradients, over 8,030,261,248 / 8 elements at B200's 8 TB/s × 0.9,
    8.4 ms)."""
    base = {**LLAMA3_8B, "device": "B200", "precision": "fp8"}
    for framework in ("deepspeed", "textbook"):
        fw = {**base, "framework": framework}
        default = Case.of(**fw).evaluate()
        delayed = Case.of(**{**fw, "fp8_recipe": "delayed"}).evaluate()
        assert default.stages[0].state == delayed.stages[0].state
        assert default.step_s == delayed.step_s
        assert default.stages[0].state.weight_cache_bytes == 6_979_321_856
    mx = Case.of(**{**base, "framework": "textbook", "fp8_recipe": "mxfp8"}).evaluate()
    assert mx.stages[0].state.weight_cache_bytes == 14_394_851_328
    # the textbook's GEMMs read the flat FP8 rate, any recipe
    assert mx.step_s == default.step_s
    ds = {**base, "framework": "deepspeed"}
    assert Case.of(**ds).evaluate().step_s == pytest.approx(3.3087 + 0.0084, abs=5e-4)
    with pytest.raises(LayoutError, match=r"^fp8_recipe: mxfp8 with `framework` deepspeed"):
        Case.of(**{**ds, "fp8_recipe": "mxfp8"}).evaluate()


def test_fp8_under_zero3_caches_every_layer():
    """Transformer Engine keeps each linear's FP8 weight copy (row + column, 2 B) in the module's
    ``_fp8_workspaces`` whenever the caller passes ``is_first_microbatch`` (TE ``module/
    linear.py`` ``Linear.forward``; only torch FSDP2 skips it), and Megatron-Core's ``TELinear``
    (also under the Megatron-FSDP wrapper, a ``MegatronModule``) and Megatron-DeepSpeed's TE
    layer pass it. A ZeRO-3 release frees the gathered BF16 weight, not that copy: all 32 layers
    of Llama 3 8B are cached, 32 × 2 × 218,103,808 = 13,958,643,712 B, the same as with the
    weights whole; nothing more is gathered. FSDP2 (torchao's ``Float8Linear`` casts inside each
    GEMM) caches none."""
    for framework in ("deepspeed", "megatron"):
        base = {**LLAMA3_8B, "framework": framework, "zero_stage": 3}
        fp8 = Case.of(**{**base, "precision": "fp8"}).evaluate().stages[0].state
        bf16 = Case.of(**base).evaluate().stages[0].state
        assert fp8.weight_cache_bytes == 32 * 2 * LINEAR_PER_LAYER == 13_958_643_712
        assert fp8.gathered_bytes == bf16.gathered_bytes
    fsdp = {**LLAMA3_8B, "framework": "fsdp2", "zero_stage": 3}
    fsdp_fp8 = Case.of(**{**fsdp, "precision": "fp8"}).evaluate().stages[0].state
    assert fsdp_fp8.weight_cache_bytes == 0
    assert fsdp_fp8.gathered_bytes == Case.of(**fsdp).evaluate().stages[0].state.gathered_bytes


def test_megatron_fsdp_fp8_params_cache_only_the_gathered_transposes():
    """With FP8 primary weights the row-wise FP8 weight is the parameter and the cached
    column-wise copy (1 B) lives on it; Megatron-FSDP's release hook
    (``megatron_fsdp.py`` ``release_params_fp8_transpose_cache``, ``keep_fp8_transpose_cache``
    off by default) discards it with the unit: no persistent cache, the transposes of the
    gathered units only."""
    base = {**LLAMA3_8B, "framework": "megatron", "zero_stage": 3, "precision": "fp8"}
    primary = Case.of(**{**base, "fp8_param_gather": True}).evaluate().stages[0].state
    assert primary.weight_cache_bytes == 0


def test_fp8_saves_linear_inputs_in_one_byte():
    """One Llama 3 8B layer, tp 1, s 8,192, b 1, FlashAttention, Korthikanti's count. Per token
    (S = 8,192), bytes in BF16: attention norm input 2h, QKV input 2h, Q 2h, K and V 2 × 2·1,024,
    output-projection input 2h, MLP norm input 2h, FC1 input 2h, SwiGLU input 2 × 2f, down input
    2f = 12h + 4,096 + 6f = 49,152 + 4,096 + 86,016 = 139,264. FP8 saves the QKV, output, FC1
    inputs (h each) and the down input (f) at 1 B: 139,264 − 3 × 4,096 − 14,336 = 112,640; the
    attention kernel keeps its BF16 output besides the projection's FP8 copy (Transformer
    Engine ``FusedAttnFunc`` saves ``out_f16``): + 2h = 120,832, except under selective
    recomputation, which recomputes the attention core and with it that output (112,640)."""
    arch = get_model("llama3-8b").model.arch
    kw = dict(seq_len=8192, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False)
    bf16 = layer_activations(arch, 0, ActivationContext(**kw, flash_attention=True))
    fp8 = layer_activations(
        arch, 0, ActivationContext(**kw, flash_attention=True, fp8_linear_inputs=True)
    )
    assert bf16.full_bytes == 139_264 * 8192
    assert fp8.full_bytes == 120_832 * 8192
    assert fp8.selective_bytes == 112_640 * 8192 == bf16.selective_bytes - 26_624 * 8192
    assert "FC1 input (FP8)" in dict(fp8.terms)
    assert (
        dict(fp8.terms)["attention output (BF16, kept by the attention kernel)"] == 2 * 4096 * 8192
    )
    # the layer input a full recomputation keeps stays BF16
    assert fp8.checkpoint_bytes == bf16.checkpoint_bytes == 2 * 4096 * 8192


def test_fp8_linear_gemms_at_the_fp8_peak():
    """H100 SXM: FP8 1,978.9 TFLOPS over BF16 989.4 × 0.75 = 1.50005: the layers' linear GEMMs
    take 1/1.50005 of their BF16 time; the attention core and the output layer keep theirs.
    Hand terms (forward of a dense layer without its attention core 90, output layer 40, the
    stage's two attention cores 2 × 10 = 20; no recomputation; the last stage): BF16
    3·(2·90 + 40) + 3·20 = 720 at efficiency 0.5 = 1,440; FP8: core 3·20 = 60, output
    3·40 = 120, linear 720 − 60 − 120 = 540 → (120 + 540/1.50005)/0.5 + 60/0.5."""
    h100 = get_accelerator("H100-SXM")
    speed = linear_speedup("fp8", h100)
    assert speed == pytest.approx(1978.9 / 989.4 * 0.75)
    terms = (90, 0, 40, 0, 0)
    assert stage_peak_seconds(terms, 2, 0, True, 20, 3, 0.5, None) == 1440
    fp8 = stage_peak_seconds(terms, 2, 0, True, 20, 3, 0.5, None, speed)
    assert fp8 == pytest.approx((120 + 540 / speed) / 0.5 + 60 / 0.5)


# NeMo 24.12 performance summary (docs.nvidia.com/nemo-framework/user-guide/24.12/
# nemotoolkit/performance/performance_summary.html), FP8 pre-training on DGX-H100: the layouts.
NEMO_FP8_LAYOUTS = [
    dict(model="llama3-70b", tp=4, pp=4, cp=2, dp=2, schedule="interleaved", virtual_stages=5,
         global_batch_size=128, seq_len=8192),
    dict(model="llama3-8b", cp=2, dp=4, global_batch_size=128, seq_len=8192),
    dict(model="llama2-70b", tp=4, pp=4, dp=4, schedule="interleaved", virtual_stages=20,
         global_batch_size=128, seq_len=4096),
    dict(model="gpt3-175b", tp=4, pp=8, dp=4, schedule="interleaved", virtual_stages=6,
         global_batch_size=256, seq_len=2048),
]  # fmt: skip


@pytest.mark.parametrize("layout", NEMO_FP8_LAYOUTS, ids=[r["model"] for r in NEMO_FP8_LAYOUTS])
def test_fp8_end_to_end_speedup_is_the_published_range(layout):
    """FP8 on the Transformer block's linear layers "typically achiev[es] a speedup of
    1.2–1.5X" (Megatron-Bridge Performance Tuning Guide, Low Precision Training §1): on NeMo's
    own FP8 layouts the predicted step-time ratio is at least 1.2 and at most the linear GEMMs'
    own speed-up under the default delayed scaling (Transformer Engine's H200 NVL profile:
    10.653/6.188 = 1.72 forward), which nothing else in the step exceeds."""
    bf16 = Case.of(**{**layout, "device": "H100-SXM"}).evaluate()
    fp8 = Case.of(**{**layout, "device": "H100-SXM", "precision": "fp8"}).evaluate()
    assert 1.2 <= bf16.step_s / fp8.step_s <= 10.653 / 6.188


def test_fp8_memory_goes_down_for_activations_and_up_for_the_cache():
    """The trade an engineer weighs: Llama 3 70B (NeMo's FP8 layout) — activations shrink by
    the FP8-saved inputs, the model state gains the weight cache."""
    layout = {**NEMO_FP8_LAYOUTS[0], "device": "H100-SXM"}
    bf16 = Case.of(**layout).evaluate().peak
    fp8 = Case.of(**{**layout, "precision": "fp8"}).evaluate().peak
    assert fp8.activations.layers_bytes < bf16.activations.layers_bytes
    assert fp8.state.weight_cache_bytes > 0
    ratio = fp8.activations.per_microbatch_bytes / bf16.activations.per_microbatch_bytes
    assert Fraction(1, 2) < ratio < 1
