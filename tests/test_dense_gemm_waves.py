"""Tile and wave quantisation of dense GEMMs (``model.op_rates.dense_wave_efficiency``, read by
``model.op_time._gemm``): hand-derived shares (NVIDIA's Matrix Multiplication Background guide,
tile and wave quantization; DeepGEMM's tile choice) and the GEMM's time on the clock."""

import math

import pytest

from trainplan.model.op_rates import dense_wave_efficiency
from trainplan.model.op_time import Clock, op_seconds
from trainplan.model.ops import Op, OpKind
from trainplan.model.roofline import RooflineParams, gemm_seconds


@pytest.mark.parametrize(
    ("part", "m", "n", "share"),
    [
        # Korthikanti's 22B QKV projection at tp 8 (4 × 2,048 tokens, 3 · 6,144 / 8 columns),
        # A100's 108 SMs: 256 × 120 tiles, 32 × 20 = 640 tiles, 6 waves of 108.
        ("A100-80GB", 8192, 2304, 8192 * 2304 / (6 * 108 * 256 * 120)),
        # the 1T model's (2,048 tokens, 3 · 25,600 / 8): 256 × 120 tiles, 8 × 80 = 640, 6 waves.
        ("A100-80GB", 2048, 9600, 2048 * 9600 / (6 * 108 * 256 * 120)),
        # H100's 132 SMs, 4,096²: 256 × 128 tiles, 16 × 32 = 512 tiles, 4 waves of 132.
        ("H100-SXM", 4096, 4096, 512 / 528),
        # MI300X's 304 compute units (AMD CDNA 3 white paper): 256 × 128, 576 tiles, 2 waves.
        ("MI300X", 8192, 2304, 576 / 608),
        # a TPU has no SMs: share 1, said in the docs.
        ("TPUv5p", 8192, 2304, 1.0),
    ],
)
def test_dense_wave_share_by_hand(part, m, n, share):
    assert dense_wave_efficiency(part, m, n) == pytest.approx(share, rel=1e-12)


def test_a_dense_gemm_on_the_clock_pays_its_wave_share():
    """The 22B QKV projection's forward on an A100: the roofline's compute term divided by the
    share above (2·m·n·k / (peak · e(k) · w)), plus t_kernel."""
    p = RooflineParams(gemm_efficiency=0.7, part="A100-80GB")
    c = Clock(312e12, 2.039e12, p)
    op = Op("QKV projection", OpKind.GEMM, m=8192, n=2304, k=6144, weights=True)
    w = 8192 * 2304 / (6 * 108 * 256 * 120)
    k0 = 0.7 * 312e12 / (0.9 * 2.039e12)
    by_hand = 2 * 8192 * 2304 * 6144 / (312e12 * 0.7 * 6144 / (6144 + k0) * w) + 3e-6
    assert math.isclose(op_seconds(op, c), by_hand, rel_tol=1e-12)
    unshaped = gemm_seconds(8192, 2304, 6144, 1, 312e12, 2.039e12, p)
    assert op_seconds(op, c) > unshaped


def test_a_dense_fp8_gemm_pays_its_own_casts():
    """Under Megatron-Core (Transformer Engine caching FP8 weights) a dense FP8 GEMM runs at the
    kernel-only speed-up and adds the cast of its own ``m × k`` input (forward) or output
    gradient (input gradient), none in the weight gradient: the casts' share falls as 1/n."""
    from trainplan.model.grouped_gemm import GroupedFp8

    p = RooflineParams(gemm_efficiency=0.6, part="TPUv5p")  # no SM count: no wave share
    g = GroupedFp8((2.0, 1.5, 1.8), (1e-12, 3e-12))
    c = Clock(989e12, 3.35e12, p, linear_speedup=(1.7, 1.6, 1.9), grouped_fp8=g)
    op = Op("QKV projection", OpKind.GEMM, m=4096, n=9216, k=16384, weights=True)
    fwd = gemm_seconds(4096, 9216, 16384, 1, 2.0 * 989e12, 3.35e12, p, 1, 4096 * 9216)
    assert math.isclose(op_seconds(op, c), fwd + 1e-12 * 4096 * 16384, rel_tol=1e-12)
    # backward: input gradient [m, n] × [n, k] casting the m × n output gradient, weight
    # gradient [k, m] × [m, n] into the FP32 main gradient (8 B per weight) without casts
    dgrad = gemm_seconds(4096, 16384, 9216, 1, 1.5 * 989e12, 3.35e12, p, 1, 4096 * 16384)
    wgrad = gemm_seconds(
        16384, 9216, 4096, 1, 1.8 * 989e12, 3.35e12, p, 1, 8 * 16384 * 9216 + 16384 * 9216
    )
    by_hand = dgrad + 3e-12 * 4096 * 9216 + wgrad
    assert math.isclose(op_seconds(op, c, backward=True), by_hand, rel_tol=1e-12)
