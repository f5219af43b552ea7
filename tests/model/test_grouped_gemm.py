"""The routed experts' grouped GEMMs by their own shape (model.grouped_gemm, model.op_time): the
wave rule over the part's SMs, and FP8 under Megatron-Core as kernels plus the casts of the
experts' own rows — hand-derived from DeepGEMM's tile rule and Transformer Engine's profile."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from trainplan.model.gemm_shapes import deepgemm_blocks
from trainplan.model.grouped_gemm import (
    cast_seconds_per_element,
    grouped_fp8_rates,
    grouped_shape,
    kernel_speedup,
)
from trainplan.model.hardware import DeviceSpec
from trainplan.model.kernel_tables import GemmTable
from trainplan.model.op_time import (
    Clock,
    dgrad_seconds,
    expert_quantise_seconds,
    op_seconds,
    wgrad_seconds,
)
from trainplan.model.ops import Op, OpKind
from trainplan.model.roofline import RooflineParams, gemm_seconds, roofline_params_for
from trainplan.scenarios.kernel_data import gemm_data, low_precision_data
from trainplan.topology.accelerators import get_accelerator

ROWS = low_precision_data().layer_gemms
H100 = DeviceSpec(name="H100-SXM", memory_bytes=80 * 10**9, memory_unit="GB",
                  peak_flops_per_s=989.4e12, fp8_flops_per_s=1978.9e12, hbm_bytes_per_s=3.35e12)  # fmt: skip


def test_the_wave_rule_counts_every_experts_tiles_together() -> None:
    """Qwen3-30B-A3B at micro-batch 1 on 8 B200s: 4,096·8/128 = 256 rows for each of 16
    local experts, FC1 n = 2·768. DeepGEMM's contiguous layout takes 128-row M blocks; its
    rule picks 128 × 120 (16·2·13 = 416 tiles, 3 waves of 148 SMs): 16·256·1536 / (3·148·128·120).
    40 rows per expert fill a third of a 128-row tile (tile quantisation inside the rule); a
    part without a sourced SM count keeps the 128-row rounding alone."""
    assert deepgemm_blocks(256, 1536, 16, 148, True) == (128, 120)
    rows, w = grouped_shape("B200", 256, 1536, 16, True)
    assert rows == 256 and w == pytest.approx(16 * 256 * 1536 / (3 * 148 * 128 * 120))
    _, few = grouped_shape("B200", 40, 1536, 16, True)
    assert few <= 40 / 128
    assert grouped_shape("TPUv5p", 40, 1536, 16, True) == (128.0, 1.0)
    assert grouped_shape("TPUv5p", 2048, 1536, 16, False) == (2048, 1.0)  # a wgrad's k: not rows


def test_fp8_kernels_and_casts_from_the_profile() -> None:
    """Transformer Engine's H200 NVL profile (lowp.toml): current scaling's forward kernels
    10.653 / 5.577 ms; its forward casts (6.503 − 5.577) ms over 15,872·28,672 input and
    4,096·49,152 weight elements; delayed scaling's kernel is current scaling's GEMM, its casts
    what its autocast row adds. MXFP8 on B300: (2.847 − 2.365) ms over the same elements."""
    assert kernel_speedup(ROWS, "H200-NVL", "fp8-current", "fprop") == pytest.approx(10.653 / 5.577)
    assert kernel_speedup(ROWS, "H200-NVL", "fp8-delayed", "dgrad") == pytest.approx(10.813 / 5.661)
    elements = 15872 * 28672 + 4096 * 49152
    assert cast_seconds_per_element(ROWS, "H200-NVL", "fp8-current", "fprop") == pytest.approx(
        (6.503 - 5.577) * 1e-3 / elements
    )
    assert cast_seconds_per_element(ROWS, "H200-NVL", "fp8-delayed", "fprop") == pytest.approx(
        (6.188 - 5.577) * 1e-3 / elements
    )
    assert cast_seconds_per_element(ROWS, "B300", "mxfp8", "fprop") == pytest.approx(
        (2.847 - 2.365) * 1e-3 / elements
    )


def test_only_megatron_fp8_runs_the_experts_own_casts() -> None:
    """Megatron-Core caches FP8 weights (TEGroupedLinear passes is_first_microbatch); the cast
    time scales from the H200 NVL's 4.8 TB/s to the H100's 3.35. torchtitan's Float8 and BF16
    run no GroupedLinear cast. Block scaling on Hopper (no kernel-only row) keeps the linear
    layers' speed-up (no kernel rates, no measured cast rate) but still pays one cast launch
    per expert (``nvte_quantize_v2``) and casts at 2 + 2 B an element (read, two FP8 copies)."""
    g = grouped_fp8_rates("fp8", "tensorwise", H100, "megatron")
    assert g is not None
    assert g.cast_s_per_element[1] == pytest.approx(
        cast_seconds_per_element(ROWS, "H200-NVL", "fp8-current", "dgrad") * 4.8 / 3.35
    )
    assert grouped_fp8_rates("fp8", "tensorwise", H100, "fsdp2") is None
    assert grouped_fp8_rates("bf16", None, H100, "megatron") is None
    b = grouped_fp8_rates("fp8", "blockwise", H100, "megatron")
    assert b is not None
    assert (b.kernel_speedup, b.cast_s_per_element, b.cast_kernels, b.cast_bytes) == (
        None, None, 1, 4)  # fmt: skip


def test_an_fp8_grouped_gemm_is_its_kernel_and_its_rows_casts() -> None:
    """16 experts of 256 rows, [256, 2048] × [2048, 1536], forward on an H100 clock with the
    grouped FP8 rates: the GEMM at the kernel-only FP8 rate on 1-byte operands with a BF16
    output, its efficiency times the wave rule, plus 16·256·2048 input elements cast, plus the
    launch gaps of 16 experts over 4 streams (3 more t_kernel)."""
    p = RooflineParams(gemm_efficiency=0.6, part="H100-SXM")
    g = grouped_fp8_rates("fp8", "tensorwise", H100, "megatron")
    c = Clock(989.4e12, 3.35e12, p, linear_speedup=1.5, grouped_fp8=g)
    op = Op("experts up", OpKind.GEMM, m=256, n=1536, k=2048, batch=16)
    assert g is not None
    _, w = grouped_shape("H100-SXM", 256, 1536, 16, True)
    gemm = gemm_seconds(256, 1536, 2048, 16, 989.4e12 * g.kernel_speedup[0], 3.35e12, p, 1,
                        256 * 1536 * 16, w)  # fmt: skip
    cast = g.cast_s_per_element[0] * 256 * 2048 * 16
    launches = (math.ceil(16 / 4) - 1) * p.kernel_overhead_s
    cast_launches = 15 * 4 * p.kernel_overhead_s
    assert op_seconds(op, c) == pytest.approx(gemm + cast + launches + cast_launches)
    # without the grouped rates the experts run at the linear layers' 1.5×
    bare = Clock(989.4e12, 3.35e12, p, linear_speedup=1.5)
    plain = gemm_seconds(256, 1536, 2048, 16, 989.4e12 * 1.5, 3.35e12, p, 1, 256 * 1536 * 16, w)
    assert op_seconds(op, bare) == pytest.approx(plain + launches)


def test_each_experts_cast_launches_its_own_kernels() -> None:
    """Transformer Engine 2.9 ``split_quantize`` (``multi_tensor_quantize_impl``) fuses every
    expert's cast into one ``nvte_multi_cast_transpose`` only under delayed scaling; otherwise
    each expert's quantizer runs alone: current scaling 4 kernels (``zero_amax_kernel``, the amax
    kernel, ``compute_scale_from_amax_kernel``, the cast-transpose), MXFP8 1 (``mxfp8_quantize``
    writes both directions). The forward and input gradient pay them; the weight gradient reads
    the forward's column-wise copies. Qwen3-30B-A3B FC1 on a B200 (16 local experts, MXFP8):
    15 launches more per pass."""
    b200 = DeviceSpec(name="B200", memory_bytes=180 * 10**9, memory_unit="GB",
                      peak_flops_per_s=2250e12, fp8_flops_per_s=4500e12, hbm_bytes_per_s=8e12)  # fmt: skip
    assert grouped_fp8_rates("fp8", "tensorwise", H100, "megatron").cast_kernels == 4  # type: ignore[union-attr]
    g = grouped_fp8_rates("fp8", "mxfp8", b200, "megatron")
    assert g is not None and g.cast_kernels == 1
    p = RooflineParams(gemm_efficiency=0.6, part="B200")
    c = Clock(2250e12, 8e12, p, linear_speedup=1.5, grouped_fp8=g)
    op = Op("experts up", OpKind.GEMM, m=2048, n=1536, k=2048, batch=16)
    assert expert_quantise_seconds(op, c, 0) == pytest.approx(15 * p.kernel_overhead_s)
    assert expert_quantise_seconds(op, c, 1) == pytest.approx(15 * p.kernel_overhead_s)
    assert expert_quantise_seconds(op, c, 2) == 0.0
    dense = Op("mlp up", OpKind.GEMM, m=2048, n=1536, k=2048, batch=1)
    assert expert_quantise_seconds(dense, c, 0) == 0.0


def test_delayed_scaling_casts_each_expert_where_no_fp8_transpose_is_kept() -> None:
    """Delayed scaling fuses every expert's cast into one ``nvte_multi_cast_transpose`` only
    where the outputs keep an FP8 transpose (Transformer Engine v2.9 70f536662a,
    ``pytorch/csrc/extensions/cast.cpp`` ``multi_tensor_quantize_impl``); Blackwell's FP8 GEMMs
    take non-TN layouts, so no transpose is kept (``quantizer.cpp``: ``with_transpose =
    columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()``) and each expert's
    ``Float8Quantizer::quantize`` runs alone, one kernel. Qwen3-30B-A3B on 8 B200s at ep 8
    (16 local experts): 15 launches more per quantised operand; 4 operands a micro-batch and
    MoE layer (the two expert linears' inputs and output gradients), 48 MoE layers, 64
    micro-batches (B 512, dp 8, b 1): 64 × 48 × 4 × 15 × 3 µs = 0.55296 s a step, none on
    an H100."""
    assert grouped_fp8_rates("fp8", "delayed", H100, "megatron").cast_kernels == 0  # type: ignore[union-attr]
    b200 = get_accelerator("B200")
    g = grouped_fp8_rates("fp8", "delayed", b200, "megatron")
    assert g is not None and g.cast_kernels == 1
    c = _clock("B200", "delayed")
    op = Op("experts up", OpKind.GEMM, m=2048, n=1536, k=2048, batch=16)
    per_pass = expert_quantise_seconds(op, c, 0)
    assert per_pass == pytest.approx(15 * 3e-6) == expert_quantise_seconds(op, c, 1)
    assert 64 * 48 * 4 * per_pass == pytest.approx(0.55296)


def _clock(part: str, recipe: str | None) -> Clock:
    """The Megatron-Core clock of ``part`` (BF16 when ``recipe`` is None): the part's default
    roofline parameters and, under FP8, Transformer Engine's grouped FP8 rates."""
    device = get_accelerator(part)
    params = roofline_params_for(part, part=part)
    if recipe is None:
        return Clock(device.peak_flops_per_s, device.hbm_bytes_per_s, params)
    g = grouped_fp8_rates("fp8", recipe, device, "megatron")
    assert g is not None
    return Clock(device.peak_flops_per_s, device.hbm_bytes_per_s, params,
                 linear_speedup=g.kernel_speedup, grouped_fp8=g)  # fmt: skip


def _kernel_tflops(c: Clock, groups: int, m: int, n: int, k: int) -> tuple[float, ...]:
    """The model's TFLOP/s of a grouped GEMM's forward, input-gradient and weight-gradient
    kernels (``groups`` experts, ``[m, k] × [k, n]`` each): the experts' op without the casts
    of their rows (the published kernel tables time the GEMM kernels alone)."""
    if c.grouped_fp8 is not None:
        c = replace(
            c, grouped_fp8=replace(c.grouped_fp8, cast_s_per_element=(0.0, 0.0), cast_kernels=0)
        )
    op = Op("experts up", OpKind.GEMM, m=m, n=n, k=k, batch=groups, weights=True)
    flops = 2 * groups * m * n * k
    return tuple(
        flops / t / 1e12 for t in (op_seconds(op, c), dgrad_seconds(op, c), wgrad_seconds(op, c))
    )


def _published(library: str, part: str) -> GemmTable:
    return next(t for t in gemm_data().gemms if (t.library, t.part) == (library, part))


def test_b200_mxfp8_grouped_gemm_against_torchaos_kernel_table() -> None:
    """torchao's B200 MXFP8 grouped GEMM kernels at DeepSeek-V3's expert shape (8 experts of
    16,384 rows, h = 7,168, FFN 2,048; gemm.toml): forward 2,302.7, input gradient 2,286.0,
    weight gradient 1,829.6 TFLOP/s. The model's grouped GEMM under Megatron-Core's MXFP8
    (the wave rule × e_GEMM × Transformer Engine's kernel-only speed-up) runs the forward and
    input gradient 5–7 % slower and the weight gradient 20 % faster than this kernel (torchao's
    2D-2D weight-gradient kernel is its least tuned, README 'next steps'): no per-operation
    figure here says the model's large grouped GEMMs are too fast on B200."""
    table = _published("torch-scaled-grouped-mm", "B200")
    assert table.tflops_per_s == (2302.7, 2286.0, 1829.6)
    model = _kernel_tflops(_clock("B200", "mxfp8"), 8, 16384, 2048, 7168)
    ratios = [round(m / p, 2) for m, p in zip(model, table.tflops_per_s, strict=True)]
    assert ratios == [0.95, 0.93, 1.2]


def test_h100_bf16_small_experts_against_grouped_gemm_tables() -> None:
    """Few rows per expert: Qwen3-30B-A3B's FC1 with 128 experts of 512 rows on an H100, BF16
    (gemm.toml, tgale96/grouped_gemm #37): a cuBLAS GEMM per expert 129.5 TFLOP/s, one CUTLASS
    SM90 grouped kernel 160.5. The model times it as one grouped kernel over the experts' tiles
    (plus TE's ⌈128/4⌉ − 1 stream gaps) at about 3× either — the regime (a fixed cost per
    expert's GEMM) the model does not have; no validation row runs it (their experts see 1,024
    rows or more), docs/moe.md."""
    cublas, cutlass = _published("cublas", "H100-SXM"), _published("cutlass", "H100-SXM")
    assert (cublas.groups, cublas.m, cublas.n, cublas.k) == ((128,), (512,), (1536,), (2048,))
    forward = _kernel_tflops(_clock("H100-SXM", None), 128, 512, 1536, 2048)[0]
    assert forward / cublas.tflops_per_s[0] == pytest.approx(3.4, abs=0.1)
    assert forward / cutlass.tflops_per_s[0] == pytest.approx(2.8, abs=0.1)


def test_h100_fp8_expert_gemms_against_cublaslt_and_deepgemm_tables() -> None:
    """H100 under current scaling (docs/moe.md): cuBLASLt's FP8 GEMMs (Azure's table) at 1,024³,
    1,024 × 2,145 × 1,024, 2,048³ and 4,096³ run at 274.1, 410.7, 1,011.3 and 1,216.9 TFLOP/s;
    the model's forward at 397, 535, 826 and 984 — faster below 2,048, slower from it. The
    H100 Qwen3-30B-A3B experts' forward GEMMs (16 experts, 2,048 × 1,536 × 2,048 and
    2,048 × 2,048 × 768) at 879 and 763, between the table's points; DeepGEMM's contiguous
    grouped GEMMs (H800) 19–24 % faster than the model's."""
    c = _clock("H100-SXM", "tensorwise")
    table = _published("cublaslt", "H100-SXM")
    shapes_of = zip(table.m, table.n, table.k, strict=True)
    published = dict(zip(shapes_of, table.tflops_per_s, strict=True))
    shapes = [(1024, 1024, 1024), (1024, 2145, 1024), (2048, 2048, 2048), (4096, 4096, 4096)]
    model = [round(_kernel_tflops(c, 1, *s)[0]) for s in shapes]
    assert model == [397, 535, 826, 984]
    assert [published[s] for s in shapes] == [274.1, 410.7, 1011.3, 1216.9]
    experts = [round(_kernel_tflops(c, 16, 2048, *nk)[0]) for nk in ((1536, 2048), (2048, 768))]
    assert experts == [879, 763]
    deep = next(t for t in gemm_data().gemms if t.layout == "grouped-contiguous")
    rows = zip(deep.groups, deep.m, deep.n, deep.k, deep.tflops_per_s, strict=True)
    ratios = [_kernel_tflops(c, g, m, n, k)[0] / p for g, m, n, k, p in rows]
    assert 0.76 < min(ratios) and max(ratios) < 0.81
