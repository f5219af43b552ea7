"""DeepSpeed + FP8: Megatron-DeepSpeed trains FP8 only through Transformer Engine's
``TransformerLayer`` (deepspeedai/Megatron-DeepSpeed 4efb479d ``megatron/model/transformer.py``
``ParallelTransformer.build_layer``), whose linear layers make the FP8 backward copies
model.te_fp8_backward counts under megatron (one rule, read under both profiles), whose
``LayerNormMLP`` keeps FC2's quantised ``grad_output``, ``fc2_dgrad`` and ``fc2_wgrad`` alive
through FC1's backward (Transformer Engine d0067d0da ``module/layernorm_mlp.py``
``_LayerNormMLP.backward``), and whose weight gradients go back to autograd unfused (DeepSpeed
allocates no ``main_grad``). Each figure derived by hand below."""

from trainplan.model.activations import ActivationContext
from trainplan.model.backward_working import backward_working_bytes
from trainplan.model.te_fp8_backward import te_fp8_backward
from trainplan.scenarios.catalogue import get_model

DELAYED_HOPPER = te_fp8_backward("delayed", True)  # both = 2 B per element


def _ctx(seq: int, tp: int) -> ActivationContext:
    return ActivationContext(
        seq_len=seq, cp=1, micro_batch_size=1, tp=tp, sequence_parallel=tp > 1,
        flash_attention=True, fp8_gemms=True, fp8_linear_inputs=True, fp8_input_bytes=1,
    )  # fmt: skip


def test_llama3_8b_tp1_fc1_step():
    """Llama 3 8B, s 8,192, tp 1 (no gather). The FC1 step:
    n (67.1 MB) + the SwiGLU's BF16 input gradient [S, 2f] (469.8) + its FP8 copies, both usages
    (2 B: 469.8) + FC1's dgrad [S, h] (67.1) + FC1's weight gradient 2·4,096·28,672 (234.9)
    + what LayerNormMLP still holds: FC2's grad_output in FP8 (2·8,192·4,096 = 67.1), fc2_dgrad
    [S, f] BF16 (234.9) and fc2_wgrad 2·14,336·4,096 (117.4)
    - the SwiGLU input (469.8, BF16) and the down projection's FP8 input (117.4) released:
    1,140,850,688 B. Under megatron (separate TE modules, weight gradients fused into
    main_grad) the FC1 step is 1,140,850,688 - 234.9 - 419.4 MB = 486.5 MB and the largest is
    the SwiGLU's step, n + fc2_dgrad + the SwiGLU's input gradient - the FP8 down input:
    67.1 + 234.9 + 469.8 - 117.4 = 654,311,424 B (the deepspeed figure before)."""
    S, h, f = 8192, 4096, 14336
    n = dgrad = 2 * S * h
    dact, dact_fp8 = 2 * S * 2 * f, 2 * S * 2 * f
    fc1_wgrad = 2 * h * 2 * f
    held = 2 * S * h + 2 * S * f + 2 * f * h
    released = 2 * S * 2 * f + 1 * S * f
    want = n + dact + dact_fp8 + dgrad + fc1_wgrad + held - released
    assert want == 1_140_850_688
    arch = get_model("llama3-8b").model.arch
    ctx = _ctx(S, 1)
    got = backward_working_bytes(arch, False, ctx, "deepspeed", "cudnn", te_fp8=DELAYED_HOPPER)
    assert got == want
    mega = backward_working_bytes(arch, False, ctx, "megatron", "cudnn", te_fp8=DELAYED_HOPPER)
    assert mega == n + 2 * S * f + dact - S * f == 654_311_424


def test_gpt3_175b_tp8_sequence_parallel_fc1_step():
    """GPT-3 175B (MHA, LayerNorm, GELU: what Megatron-DeepSpeed's TE layer builds), s 2,048,
    tp 8 with sequence parallelism. The FC1 step: n = 2·2,048·12,288/8 (6.3 MB) + the GELU's
    input gradient [S, f/tp] (25.2) + its FP8 copies (25.2) + ln_out gathered again for the
    wgrad, row-wise data and transpose (2·2,048·12,288 = 50.3; Megatron-DeepSpeed's "mpu"
    buffer is its own layers', not TE's) + FC1's dgrad [S, h] (50.3) + its reduce-scatter's
    output (6.3) + FC1's weight gradient 2·12,288·6,144 (151.0) + LayerNormMLP's FC2
    grad_output gathered in FP8 (50.3), fc2_dgrad (25.2), fc2_wgrad (151.0) - the GELU input
    (25.2) and FC2's FP8 input (12.6): 503,316,480 B (before: 81,788,928, no TE copies)."""
    S, h, f = 2048, 12288, 49152 // 8
    n = 2 * S * h // 8
    dact = dact_fp8 = 2 * S * f
    regathered, dgrad = 2 * S * h, 2 * S * h
    fc1_wgrad = 2 * h * f
    held = 2 * S * h + 2 * S * f + 2 * f * h
    released = 2 * S * f + S * f
    want = n + dact + dact_fp8 + regathered + dgrad + n + fc1_wgrad + held - released
    assert want == 503_316_480
    arch = get_model("gpt3-175b").model.arch
    got = backward_working_bytes(arch, False, _ctx(S, 8), "deepspeed", "cudnn",
                                 te_fp8=DELAYED_HOPPER)  # fmt: skip
    assert got == want


def test_deepspeed_bf16_unchanged():
    """BF16 (no TE): the weight gradient and the "mpu" plan as before, no TE copies even when a
    te_fp8 is passed (the copies are read only with FP8 GEMMs)."""
    arch = get_model("llama3-8b").model.arch
    ctx = ActivationContext(seq_len=8192, cp=1, micro_batch_size=1, tp=1,
                            sequence_parallel=False, flash_attention=True)  # fmt: skip
    plain = backward_working_bytes(arch, False, ctx, "deepspeed", "cudnn")
    assert (
        backward_working_bytes(arch, False, ctx, "deepspeed", "cudnn", te_fp8=DELAYED_HOPPER)
        == plain
    )
