"""The routed experts' grouped GEMMs by their own shape (model.grouped_gemm, model.op_time): the
wave rule over the part's SMs, and FP8 under Megatron-Core as kernels plus the casts of the
experts' own rows — hand-derived from DeepGEMM's tile rule and Transformer Engine's profile."""

from __future__ import annotations

import math

import pytest

from trainplan.model.gemm_shapes import deepgemm_blocks
from trainplan.model.grouped_gemm import (
    cast_seconds_per_element,
    grouped_fp8_rates,
    grouped_shape,
    kernel_speedup,
)
from trainplan.model.hardware import DeviceSpec
from trainplan.model.op_time import Clock, expert_cast_launches, op_seconds
from trainplan.model.ops import Op, OpKind
from trainplan.model.roofline import RooflineParams, gemm_seconds
from trainplan.scenarios.kernel_data import low_precision_data

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
    time scales from the H200 NVL's 4.8 TB/s to the H100's 3.35. torchtitan's Float8, BF16 and
    block scaling on Hopper (no kernel-only row) keep the linear layers' speed-up."""
    g = grouped_fp8_rates("fp8", "tensorwise", H100, "megatron")
    assert g is not None
    assert g.cast_s_per_element[1] == pytest.approx(
        cast_seconds_per_element(ROWS, "H200-NVL", "fp8-current", "dgrad") * 4.8 / 3.35
    )
    assert grouped_fp8_rates("fp8", "tensorwise", H100, "fsdp2") is None
    assert grouped_fp8_rates("bf16", None, H100, "megatron") is None
    assert grouped_fp8_rates("fp8", "blockwise", H100, "megatron") is None


def test_an_fp8_grouped_gemm_is_its_kernel_and_its_rows_casts() -> None:
    """16 experts of 256 rows, [256, 2048] × [2048, 1536], forward on an H100 clock with the
    grouped FP8 rates: the GEMM at the kernel-only FP8 rate on 1-byte operands with a BF16
    output, its efficiency times the wave rule, plus 16·256·2048 input elements cast, plus the
    launch gaps of 16 experts over 4 streams (3 more t_kernel)."""
    p = RooflineParams(gemm_efficiency=0.6, part="H100-SXM")
    g = grouped_fp8_rates("fp8", "tensorwise", H100, "megatron")
    c = Clock(989.4e12, 3.35e12, p, linear_speedup=1.5, grouped_fp8=g)
    op = Op("experts fc1", OpKind.GEMM, m=256, n=1536, k=2048, batch=16)
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
    op = Op("experts fc1", OpKind.GEMM, m=2048, n=1536, k=2048, batch=16)
    assert expert_cast_launches(op, c, 0) == pytest.approx(15 * p.kernel_overhead_s)
    assert expert_cast_launches(op, c, 1) == pytest.approx(15 * p.kernel_overhead_s)
    assert expert_cast_launches(op, c, 2) == 0.0
    dense = Op("mlp up", OpKind.GEMM, m=2048, n=1536, k=2048, batch=1)
    assert expert_cast_launches(dense, c, 0) == 0.0
