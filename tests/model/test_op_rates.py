"""Per-operation rates of a part as deployed (model.op_rates): attention kernels by sequence
length from their published curves, FP8 recipes' speed-ups, the power-capped clock, the
optimizer step's streaming fraction and the FP8/MXFP8 bytes — against the published points,
derived by hand here."""

from __future__ import annotations

import pytest

from trainplan.model.attention_rates import (
    PUBLISHED_PEAK_TFLOPS,
    attention_fractions,
    default_attention_kernel,
)
from trainplan.model.errors import InputError
from trainplan.model.nvlink_rates import BUSBW_LINK_GBPS
from trainplan.model.op_rates import (
    check_fp8_recipe,
    deployed_params,
    fp8_linear_speedups,
    recipe_speedups,
    stream_triad_fraction,
    sustained_clock_fraction,
    te_caches_fp8_weights,
)
from trainplan.model.op_time import Clock, op_seconds
from trainplan.model.ops import LayerShape, layer_ops
from trainplan.model.precision import fp8_activation_bytes, fp8_weight_cache_bytes
from trainplan.model.roofline import roofline_params_for
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator


@pytest.mark.parametrize("part", sorted(PUBLISHED_PEAK_TFLOPS))
def test_published_peaks_are_the_accelerator_tables(part):
    assert get_accelerator(part).peak_flops_per_s == pytest.approx(
        PUBLISHED_PEAK_TFLOPS[part] * 1e12
    )


def test_cudnn_on_hopper_is_the_h200_sweep_in_the_planners_count():
    """cuDNN 9.19.1 on H200, causal, d 128 (the CSV): forward 644 TFLOP/s at 8k and 688 at 32k,
    backward 541 and 581, counted ``nonmasked``. The planner counts the forward as the CSV does
    (2·pairs·2d) and the backward as twice the forward (8·pairs·d) where the CSV counts
    2·pairs·(3d + 2d) = 10·pairs·d: the backward fraction is 0.8 of the CSV's rate."""
    for s, fwd, bwd in ((8192, 644.0, 541.0), (32768, 688.0, 581.0)):
        f, b = attention_fractions("cudnn", "H100-SXM", (128, 128), s)
        assert f == pytest.approx(fwd / 989.4)
        assert b == pytest.approx(0.8 * bwd / 989.4)
    # between 8k and 16k (673, 579) half-way in log2
    f, _ = attention_fractions("cudnn", "H200", (128, 128), round(2**13.5))
    assert f == pytest.approx((644 + 673) / 2 / 989.4, rel=1e-4)
    # past the 9.19 sweep's end: its 32k rate × the cudnn-frontend 1.12 H200 sweep's 64k/32k
    # (631.20 / 636.08), held beyond 64k (nothing longer published on Hopper)
    shape = 631.20 / 636.08
    f, _ = attention_fractions("cudnn", "H200", (128, 128), 131072)
    assert f == pytest.approx(688 / 989.4 * shape)


def test_cudnn_on_blackwell_ultra_is_the_gb300_sweep():
    """cuDNN 9.22.0 on GB300 (cudnn-frontend results/llama3.1/gb300, causal, d 128, BF16):
    forward 1,856 TFLOP/s and backward 1,435 at 8k, against GB200's 1,574 and 1,332 in the
    companion run; fractions of GB300's 2,500 dense BF16, the backward at 0.8 of the CSV's rate
    (its 10·pairs·d against the planner's 8·pairs·d). B300 reads the same curves; B200 and GB200
    keep GB200's."""
    for part in ("GB300", "B300"):
        f, b = attention_fractions("cudnn", part, (128, 128), 8192)
        assert f == pytest.approx(1856 / 2500) and b == pytest.approx(0.8 * 1435 / 2500)
    f, b = attention_fractions("cudnn", "B200", (128, 128), 8192)
    assert f == pytest.approx(1574 / 2500) and b == pytest.approx(0.8 * 1332 / 2500)


def test_flash_attention_2_on_hopper_continues_past_16k_with_pytorchs_h200_sweep():
    """FlashAttention-2 on H100, d 128: the FlashAttention-3 paper's figures end at 16k (forward
    causal 335 TFLOP/s; backward only unmasked, 322). Beyond, PyTorch SDPA's flash backend on an
    H200 (cudnn-frontend benchmark_results.csv, NGC 24.12) gives the shape: forward causal
    327.17 → 345.64 at 32k, backward unmasked 317.34 → 320.44. FlashAttention's count is
    4·s²·d/2 forward (the planner's 2·s(s+1)·d: × (1 + 1/s)) and 2.5× that backward (the
    planner's 4·s(s+1)·d over 5·s²·d: × 0.8 (1 + 1/s))."""
    s = 32768
    f, b = attention_fractions("flash-attention-2", "H100-96GB-500W", (128, 128), s)
    assert f == pytest.approx(335 * 345.64 / 327.17 * (1 + 1 / s) / 989.4)
    assert b == pytest.approx(322 * 320.44 / 317.34 * 0.8 * (1 + 1 / s) / 989.4)
    f16, _ = attention_fractions("flash-attention-2", "H100-SXM", (128, 128), 16384)
    assert f16 == pytest.approx(335 * (1 + 1 / 16384) / 989.4)  # the paper's point, unchanged


def test_flash_attention_2_on_a100_from_its_fwd_bwd_figure():
    """FlashAttention-2 paper, A100 forward + backward, causal, d 128: 182 TFLOP/s at 8k in
    FlashAttention's count (3.5 × 4·s²·d/2 = 7·s²·d); the planner counts 3 × 2·(s(s+1)/2)·2d =
    6·s(s + 1)·d, so both passes run at (6/7)·(1 + 1/s)·182/312 of the peak."""
    s = 8192
    f, b = attention_fractions("flash-attention-2", "A100-40GB", (128, 128), s)
    expected = 6 / 7 * (1 + 1 / s) * 182 / 312
    assert f == pytest.approx(expected) and b == pytest.approx(expected)
    assert expected == pytest.approx(0.5001, abs=1e-4)


def test_no_curve_keeps_the_constant():
    assert attention_fractions("cudnn", "MI300X", (128, 128), 4096) is None
    assert attention_fractions("cudnn", "A100-80GB", (128, 128), 4096) is None  # none published
    with pytest.raises(InputError, match="attention_kernel"):
        attention_fractions("xformers", "H100-SXM", (128, 128), 4096)


def test_default_kernels_follow_transformer_engine_and_pytorch():
    assert default_attention_kernel("megatron", "GB200") == "cudnn"
    assert default_attention_kernel("megatron", "A100-80GB") == "flash-attention-2"
    # torchtitan's SDPA wrapper puts cuDNN first (torchtitan/models/common/attention.py at
    # b5bcd76c6; since 6a3a9da95); DeepSpeed calls the flash-attn package (FlashAttention-2)
    assert default_attention_kernel("fsdp2", "H100-96GB-500W") == "cudnn"
    assert default_attention_kernel("fsdp2", "A100-80GB") == "flash-attention-2"
    assert default_attention_kernel("deepspeed", "H100-SXM") == "flash-attention-2"
    assert default_attention_kernel("megatron", "H20") is None


def test_recipe_speedups_are_transformer_engines_profile():
    """H200 NVL autocast milliseconds (lowp.toml, TE's gemm_profiling guide): BF16 over the
    recipe's, per pass: delayed 10.653/6.188, 10.813/6.306, 10.548/6.484."""
    fwd, dgrad, wgrad = recipe_speedups("H100-SXM", "delayed")
    assert fwd == pytest.approx(10.653 / 6.188)
    assert dgrad == pytest.approx(10.813 / 6.306)
    assert wgrad == pytest.approx(10.548 / 6.484)
    assert recipe_speedups("H20", "delayed") is None
    b300 = recipe_speedups("GB200", "mxfp8")
    assert b300 is not None and 1.3 < b300[0] < 1.5


def test_megatron_runs_fp8_with_te_weight_caching_and_torchao_does_not():
    """Under Megatron-Core (TE caches FP8 weights for the step) current scaling is charged the
    kernel-only GEMMs and the activation casts (model.gemm_shapes.cached_weight_speedup);
    torchtitan's torchao Float8Linear keeps the autocast rows; block scaling on Hopper keeps
    them everywhere (no kernel-only row)."""
    h100 = get_accelerator("H100-SXM")
    te = fp8_linear_speedups("fp8", "tensorwise", h100, te_caches_fp8_weights("megatron"))
    torchao = fp8_linear_speedups("fp8", "tensorwise", h100, te_caches_fp8_weights("fsdp2"))
    assert te[2] == pytest.approx(10.548 / 5.547)  # wgrad: the pre-quantized GEMMs alone
    assert torchao[2] == pytest.approx(10.548 / 6.987)  # the autocast row
    assert fp8_linear_speedups("fp8", "blockwise", h100, True) == fp8_linear_speedups(
        "fp8", "blockwise", h100
    )


def test_fp8_recipe_is_refused_where_it_does_not_apply():
    h100, b200 = get_accelerator("H100-SXM"), get_accelerator("B200")
    with pytest.raises(InputError, match="fp8_recipe: mxfp8 needs Blackwell"):
        check_fp8_recipe("fp8", "mxfp8", h100)
    with pytest.raises(InputError, match="applies only with precision fp8"):
        check_fp8_recipe("bf16", "delayed", h100)
    assert check_fp8_recipe("fp8", None, h100).value == "delayed"
    assert fp8_linear_speedups("bf16", None, b200) == (1.0, 1.0, 1.0)
    # a part with FP8 but no published profile keeps the flat figure: 2 × 0.75
    mi300 = get_accelerator("MI300X")
    flat = fp8_linear_speedups("fp8", "delayed", mi300)
    assert flat[0] == pytest.approx(mi300.fp8_flops_per_s / mi300.peak_flops_per_s * 0.75)


def test_power_capped_h100_sustains_the_clock_between_its_two_ratings():
    """835.5 at 400 W (H100 NVL) and 989.4 at 700 W (H100 SXM), linear in power: at 500 W
    835.5 + 153.9/3 = 886.8 TFLOP/s."""
    assert sustained_clock_fraction("H100-96GB-500W") * 989.4 == pytest.approx(886.8)
    assert sustained_clock_fraction("H100-SXM") == 1.0


def test_optimizer_streams_at_babelstreams_triad():
    """BabelStream triad: A100 80GB and H100 SXM from the Azure guide (memory.toml)."""
    assert stream_triad_fraction("H800") == stream_triad_fraction("H100-SXM")
    assert stream_triad_fraction("H100-SXM") == pytest.approx(2.97 / 3.35, abs=1e-3)
    assert stream_triad_fraction("TPUv5p") is None


def test_mxfp8_bytes_are_transformer_engines_copies_and_scales():
    """Weight: row-wise and column-wise FP8 copies (1 + 1 B) and an E8M0 scale per 32 elements
    of each (2/32 B); saved input: the column-wise copy only (1 + 1/32 B)."""
    assert fp8_weight_cache_bytes("mxfp8") == 2 + 2 / 32
    assert fp8_activation_bytes("mxfp8") == 1 + 1 / 32
    assert fp8_weight_cache_bytes("tensorwise") == 2 and fp8_activation_bytes("delayed") == 1
    assert fp8_weight_cache_bytes("blockwise") == 2 + 2 * 4 / 128**2
    assert fp8_activation_bytes("blockwise") == 1 + 4 / 128


def test_deployed_params():
    p = deployed_params("H100-96GB-500W", "flash-attention-2")
    assert (p.attention_kernel, p.part) == ("flash-attention-2", "H100-96GB-500W")
    assert p.clock_fraction == pytest.approx(0.8963, abs=1e-4)
    assert (
        deployed_params("H100-SXM").gemm_efficiency
        == roofline_params_for("H100-SXM").gemm_efficiency
    )
    assert deployed_params("H100-SXM", attention_efficiency=0.4).attention_kernel is None
    with pytest.raises(InputError, match="attention_kernel"):
        deployed_params("H100-SXM", "xformers")


def test_attention_core_on_the_clock_uses_the_curve_by_chunk_length():
    """Llama 3 70B layer at s = 32,768, cp 4, tp 8, b 1, on H100 with cuDNN: the core's call
    sees 8,192 queries; its forward takes the causal pairs' FLOPs / (989.4e12 · 644/989.4)."""
    arch = get_model("llama3-70b").model.arch
    shape = LayerShape(arch, False, 32768, 1, 8, 4, causal=True)
    core = next(op for op in layer_ops(shape) if op.name.startswith("attention core"))
    assert core.seq_len == 8192 and core.head_dims == (128, 128)
    pairs = 32768 * 32769 / 2
    assert core.masked_flops == pytest.approx(2 * 64 * pairs * 256 / 32)
    p = deployed_params("H100-SXM", "cudnn")
    c = Clock(989.4e12, 3.35e12, p)
    seconds = op_seconds(core, c)
    compute = core.masked_flops / (644e12)
    assert seconds == pytest.approx(max(compute, core.forward_bytes / (0.9 * 3.35e12)) + 3e-6)


def test_mxfp8_memory_counts_the_scales():
    """Llama 3 8B on 8 B200, one stage, tp 1 (32 × 218,103,808 linear weights): MXFP8 caches
    the row- and column-wise copies with one E8M0 byte per 32 elements each, 2 + 2/32 B per
    linear weight = 32 × 218,103,808 × 33/16 = 14,394,851,328 B against delayed scaling's
    6,979,321,856 (one copy: per-tensor scaling keeps no transpose on Blackwell,
    :func:`trainplan.model.precision.keeps_fp8_transpose`); each FP8-saved linear input gains
    1/32 B per element, and under MXFP8 (not delayed) the output projection saves the BF16
    attention output the kernel keeps, not its own FP8 copy of a·d = 4,096 per token
    (Megatron-Core ``Attention.__init__``: ``set_save_original_input(self.linear_proj)``)."""
    from trainplan.optimizer.case import Case

    base = {"model": "llama3-8b", "dp": 8, "seq_len": 8192, "global_batch_size": 64,
            "device": "B200", "precision": "fp8"}  # fmt: skip
    mx = Case.of(**{**base, "fp8_recipe": "mxfp8"}).evaluate().stages[0]
    delayed = Case.of(**base).evaluate().stages[0]
    assert delayed.state.weight_cache_bytes == 32 * 218_103_808 * 1
    assert mx.state.weight_cache_bytes == 32 * 218_103_808 * 33 // 16 == 14_394_851_328
    # FP8 rows per token of one layer: QKV and FC1 inputs (h each) and the down input (f)
    fp8_elements = (2 * 4096 + 14336) * 8192
    assert mx.activations is not None and delayed.activations is not None
    extra = mx.activations.layers_bytes - delayed.activations.layers_bytes
    assert extra == 32 * (fp8_elements / 32 - 4096 * 8192)  # 32 layers, b 1


def test_nvls_all_reduce_inside_an_hgx_hopper_board():
    """A tensor-parallel all-reduce of 64 MiB over 8 H100 SXM on NVLink: each GPU sends
    2·(7/8)·64 MiB at the published NVLS bus bandwidth of a 64 MiB buffer, 361.78 GB/s (Azure
    ND H100 v5, all_reduce_perf); an all-gather of a 64 MiB buffer (7/8 of it sent) runs as a
    ring, the same curve ÷ 480/370 (the stated peaks, nccl-tests issue 212). The H800 (200 of
    the H100's 450 GB/s) reads the H100's curve × 200/450. Across nodes nothing changes."""
    from trainplan.model.roofline import Collective, LinkTime, collective_seconds

    p = deployed_params("H100-SXM")
    sent = 2 * 7 / 8 * 64 * 2**20
    link = LinkTime(450e9, True)
    t = collective_seconds(Collective.ALL_REDUCE, 8, sent, link, p)
    assert t == pytest.approx(sent / 361.78e9)
    ring = collective_seconds(Collective.ALL_GATHER, 8, sent / 2, link, p)
    assert ring == pytest.approx(sent / 2 / (361.78e9 * 370 / 480))
    h800 = collective_seconds(Collective.ALL_REDUCE, 8, sent, LinkTime(200e9, True),
                              deployed_params("H800"))  # fmt: skip
    assert h800 == pytest.approx(sent / (361.78e9 * 200 / 450))
    net = collective_seconds(Collective.ALL_GATHER, 8, sent / 2, LinkTime(50e9, False), p)
    assert net == pytest.approx(8.4e-6 + 7 * 14e-6 + sent / 2 / (0.96 * 50e9))
    a100 = deployed_params("A100-80GB")
    assert a100.nvls_allreduce_speedup == 1.0


def test_a_message_below_the_smallest_published_size_takes_its_time():
    """A 4-rank all-reduce of 256 bytes on an A100 board: the curve starts at 1 KiB (0.04 GB/s),
    so it takes that size's time, 2·(3/4)·1024 B / 0.04 GB/s = 38.4 µs (a latency floor)."""
    from trainplan.model.roofline import Collective, LinkTime, collective_seconds

    p = deployed_params("A100-80GB")
    t = collective_seconds(Collective.ALL_REDUCE, 4, 2 * 3 / 4 * 256, LinkTime(300e9, True), p)
    assert t == pytest.approx(2 * 3 / 4 * 1024 / 0.04e9)


@pytest.mark.parametrize("part", sorted(BUSBW_LINK_GBPS))
def test_curve_systems_links_are_the_accelerator_tables(part):
    assert get_accelerator(part).nvlink_bytes_per_s == pytest.approx(BUSBW_LINK_GBPS[part] * 1e9)


def test_a_calibrated_scaleup_efficiency_times_the_domain_without_the_curve():
    p = deployed_params("H100-SXM", scaleup_efficiency=0.7)
    assert p.busbw_curve == () and deployed_params("MI300X").busbw_curve == ()


def test_grouped_gemm_wave_efficiency_for_few_tokens_per_expert():
    """Grouped expert GEMMs on an H100 (132 SMs), n 4096, contiguous layout (M blocks of 128):
    8 experts of 256 tokens make 8·2·⌈4096/bn⌉ tiles; 64 experts of 64 tokens pad each expert's
    64 rows to a 128-row block, so at most half of every tile is useful."""
    from trainplan.model.op_rates import gemm_wave_efficiency

    assert gemm_wave_efficiency("H100-SXM", 256, 4096, 8) == pytest.approx(512 / 528)
    few = gemm_wave_efficiency("H100-96GB-500W", 64, 4096, 64)
    assert few is not None and few <= 0.5
    assert gemm_wave_efficiency("TPUv5p", 256, 4096, 8) is None
