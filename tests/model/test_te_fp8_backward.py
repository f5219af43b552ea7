"""Transformer Engine's FP8 copies in a Megatron-Core layer's backward
(model.te_fp8_backward, model.backward_working), derived by hand from Transformer Engine
d0067d0da: module/linear.py _linear_backward, module/layernorm_linear.py
_LayerNormLinear.backward, module/base.py grad_output_preprocess, distributed.py
_all_gather_fp8 / _start_all_gather_fp8_blockwise / _all_gather_mxfp8,
module/grouped_linear.py _GroupedLinear.backward."""

from dataclasses import replace
from fractions import Fraction

import pytest

from trainplan.model.activations import ActivationContext
from trainplan.model.backward_working import _row_step, backward_working_bytes
from trainplan.model.hardware import DeviceSpec
from trainplan.model.precision import Precision
from trainplan.model.specs import TrainingSpec
from trainplan.model.te_fp8_backward import te_fp8_backward
from trainplan.model.terms.activation_fields import te_fp8_of
from trainplan.scenarios.catalogue import get_model

S, H8, F8 = 8192, 8192, 28672 // 8  # tokens; Llama 3 70B hidden; FFN per rank at tp 8
N = 2 * S * H8 // 8  # the layer's output gradient, BF16, sequence-parallel shard: 16.8 MB
UF = 2 * S * 2 * F8  # the SwiGLU's input gradient [S, 2f/tp], BF16 (FC1's grad_output)
DGRAD = 2 * S * H8  # FC1's dgrad [S, h] BF16 before its reduce-scatter
SWIGLU_IN = 2 * S * 2 * F8  # saved SwiGLU input, BF16, released before FC1's backward


def _ctx(input_bytes: Fraction) -> ActivationContext:
    return ActivationContext(
        seq_len=S, cp=1, micro_batch_size=1, tp=8, sequence_parallel=True,
        flash_attention=True, fp8_gemms=True, fp8_linear_inputs=True,
        fp8_input_bytes=input_bytes,
    )  # fmt: skip


LLAMA = get_model("llama3-70b").model.arch

# FC1 (TELayerNormColumnParallelLinear, tp 8, SP) is the largest step under every recipe:
# n + grad_output BF16 + its FP8 copies (both usages) + ln_out gathered again in FP8
# + dgrad + the reduce-scatter's output (n) - the down projection's FP8 input - SwiGLU input.
CASES = {
    # per-tensor on Hopper: grad_output row-wise + transpose (2 B/el); ln_out gathered
    # row-wise (1 B) and its transpose made at the wgrad (1 B); down input saved at 1 B.
    ("delayed", True): N + UF + 2 * S * 2 * F8 + 2 * S * H8 + DGRAD + N - S * F8 - SWIGLU_IN,
    # per-tensor on Blackwell: no transpose, the row-wise data serves both GEMMs.
    ("delayed", False): N + UF + S * 2 * F8 + S * H8 + DGRAD + N - S * F8 - SWIGLU_IN,
    # MXFP8: two copies with one E8M0 per 32; ln_out gathered column-wise only.
    ("mxfp8", True): N
    + UF
    + Fraction(33, 16) * S * 2 * F8
    + Fraction(33, 32) * S * H8
    + DGRAD
    + N
    - Fraction(33, 32) * S * F8
    - SWIGLU_IN,
    # blockwise: two copies with one FP32 per 128; ln_out's column-wise copy plus the
    # async gather's interleaved column-wise buffer (1 B/el) until the handle is waited on.
    ("blockwise", True): N
    + UF
    + Fraction(33, 16) * S * 2 * F8
    + (Fraction(33, 32) + 1) * S * H8
    + DGRAD
    + N
    - Fraction(33, 32) * S * F8
    - SWIGLU_IN,
}


@pytest.mark.parametrize(("recipe", "transpose"), list(CASES))
def test_llama70b_fc1_step_per_recipe(recipe, transpose):
    in_bytes = Fraction(1) if recipe == "delayed" else Fraction(33, 32)
    te = te_fp8_backward(recipe, transpose)
    got = backward_working_bytes(LLAMA, False, _ctx(in_bytes), "megatron", "cudnn", te_fp8=te)
    assert got == CASES[(recipe, transpose)]


def test_figures_in_megabytes():
    # the hand sums, written out: 390.1 MB delayed on Hopper, 264.2
    # on Blackwell, 327.8 MXFP8, 394.9 blockwise.
    assert [int(CASES[k]) for k in CASES] == [390070272, 264241152, 327811072, 394919936]
    # Without the copies the QKV step is the largest: n + dQ, dK, dV (20.97 MB) + ln_out
    # gathered + dgrad + n, less Q, K, V, the output projection's FP8 input (8.4 MB) and the
    # attention kernel's BF16 output (16.8 MB), the FP8 rows released by their FP8 names.
    qkv = 2 * S * (8192 + 2 * 1024) // 8
    plain = backward_working_bytes(LLAMA, False, _ctx(Fraction(1)), "megatron", "cudnn")
    assert plain == N + qkv + 2 * S * H8 + DGRAD + N - qkv - S * 1024 - N == 276824064


def test_routed_experts_down_step_holds_grad_output_copies():
    # Qwen3-235B-A22B, tp 1, s 4,096: the routed down projection's step (TEGroupedLinear)
    # holds n + [R, h] expert output gradient + [R, f_e] dgrad, and under FP8 the [R, h]
    # gradient quantised for both usages (_split_quantize): R = k.S = 8 x 4,096 rows.
    arch = get_model("qwen3-235b-a22b").model.arch
    s, h, fe, k = 4096, 4096, 1536, 8
    ctx = ActivationContext(
        seq_len=s, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
        flash_attention=True, fp8_gemms=True, fp8_linear_inputs=True,
    )  # fmt: skip
    n, rh, rf = 2 * s * h, 2 * k * s * h, 2 * k * s * fe
    plain = backward_working_bytes(arch, True, ctx, "megatron", "cudnn")
    assert plain == n + rh + rf == 402653184
    hopper = backward_working_bytes(
        arch, True, ctx, "megatron", "cudnn", te_fp8=te_fp8_backward("delayed", True)
    )
    assert hopper == n + rh + rf + 2 * (rh // 2) == 671088640
    mx = backward_working_bytes(
        arch, True, ctx, "megatron", "cudnn", te_fp8=te_fp8_backward("mxfp8", True)
    )
    assert mx == n + rh + rf + Fraction(33, 16) * (rh // 2) == 679477248


def test_megatron_and_deepspeed_read_the_copies():
    """Transformer Engine's layers run under megatron and under deepspeed's FP8 path
    (tests/model/test_deepspeed_te_fp8.py); fsdp2 (torchao) and textbook read none."""
    te = te_fp8_backward("delayed", True)
    ctx = _ctx(Fraction(1))
    for fw in ("megatron", "deepspeed"):
        assert backward_working_bytes(
            LLAMA, False, ctx, fw, "cudnn", te_fp8=te
        ) > backward_working_bytes(LLAMA, False, ctx, fw, "cudnn")
    for fw in ("fsdp2", "textbook"):
        assert backward_working_bytes(
            LLAMA, False, ctx, fw, "cudnn", te_fp8=te
        ) == backward_working_bytes(LLAMA, False, ctx, fw, "cudnn")


def test_te_fp8_of_reads_recipe_and_part():
    gb200 = DeviceSpec(name="GB200", memory_bytes=186 * 10**9, memory_unit="GB",
                       peak_flops_per_s=2.5e15)  # fmt: skip
    fp8 = TrainingSpec(seq_len=4096, global_batch_size=8, precision=Precision.FP8)
    assert te_fp8_of(fp8, None) == te_fp8_backward("delayed", True)
    assert te_fp8_of(fp8, gb200) == te_fp8_backward("delayed", False)
    assert te_fp8_of(TrainingSpec(seq_len=4096, global_batch_size=8), gb200) is None


@pytest.mark.parametrize(
    ("recipe", "requant_per_element"),
    [("tensorwise", 2), ("blockwise", Fraction(33, 32)), ("mxfp8", Fraction(33, 32))],
)
def test_output_projection_requantises_its_saved_bf16_input(recipe, requant_per_element):
    """Under a recipe other than delayed Megatron-Core's output projection saves its BF16 input
    (``set_save_original_input(self.linear_proj)``), and Transformer Engine's
    ``_Linear.backward`` quantises it again after ``grad_output_preprocess``, before the dgrad
    GEMM: tensorwise (``supports_only_rowwise_all_gather``, a row-parallel input not gathered)
    both usages, row-wise data and its transpose on Hopper, 2 B/el; blockwise and MXFP8 the
    column-wise copy, 1 + 1/32 B/el. It is freed after the wgrad GEMM
    (``clear_tensor_data(inputmat_total)``), so it sits beside the dgrad. Llama 3 70B, tp 8
    with SP, s 8,192: the input [S, O/tp] = 8,192 × 1,024 elements; the step holds n (16.8 MB),
    the gathered grad_output in FP8 (``both``·S·h), and the larger of the gather's temporaries
    and the dgrad (16.8 MB) with the requantised input (tensorwise 16.8 MB)."""
    te = te_fp8_backward(recipe, True)
    ctx = replace(_ctx(Fraction(1)), fp8_proj_saves_original=True)
    requant = requant_per_element * S * H8 // 8
    assert requant == te.saved_input * S * H8 / 8
    elements = S * H8
    gathered = te.both * elements
    temporaries = te.shard * elements / 8 + (te.interleaved + te.interleaved_scales) * elements
    dgrad = 2 * S * H8 // 8
    before = _row_step(ctx, te, Fraction(N), Fraction(elements), Fraction(dgrad))
    after = _row_step(ctx, te, Fraction(N), Fraction(elements), Fraction(dgrad), requant)
    assert before == N + gathered + max(temporaries, dgrad)
    assert after == N + gathered + max(temporaries, dgrad + requant)
    if recipe == "tensorwise":  # 16.8 + 134.2 + 16.8 + 16.8 MB
        assert after == 184_549_376 and after - before == 16_777_216
    # the step stays below FC1's, the layer's largest: here the working set does not move
    assert after < backward_working_bytes(LLAMA, False, ctx, "megatron", "cudnn", te_fp8=te)
