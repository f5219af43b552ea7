"""e_GEMM from per-operation anchors (model.gemm_anchors): the Maximum Achievable Matmul FLOPS
table's best BF16 torch.mm rates (stas00/ml-engineering compute/accelerator/README.md at
744d01e1), each solved under the step time's own GEMM rule, written out here from the cited
numbers; and the former fit, still in force, against them."""

from __future__ import annotations

import pytest

from trainplan.model.errors import InputError
from trainplan.model.gemm_anchors import ANCHOR_PART, anchor_gemm, anchored_gemm_efficiency
from trainplan.model.gemm_shapes import deepgemm_blocks
from trainplan.model.op_rates import dense_wave_efficiency
from trainplan.model.roofline import (
    GEMM_EFFICIENCY_BY_GENERATION,
    RooflineParams,
    gemm_efficiency,
    roofline_params_for,
)
from trainplan.topology.accelerators import load_accelerators

DEVICES = load_accelerators()


def _spec(part: str) -> tuple[float, float]:
    d = DEVICES[part]
    return d.peak_flops_per_s, d.hbm_bytes_per_s


# (part, MAMF TFLOP/s, best shape m, n, k, SMs, dense BF16 peak TFLOP/s, HBM TB/s, tiles, waves)
# The tiles are DeepGEMM's 256 x 128 (the dense wave rule's choice for these three shapes).
WRITTEN_OUT = [
    # A100 SXM: 271.2 at 1024x10240x5120; 4 x 80 = 320 tiles, 3 waves of 108 (324 slots)
    ("A100-80GB", 271.2, 1024, 10240, 5120, 108, 312.0, 2.039, 320, 3),
    # H100 SXM: 794.5 at 2048x2048x13312; 8 x 16 = 128 tiles, 1 wave of 132
    ("H100-SXM", 794.5, 2048, 2048, 13312, 132, 989.4, 3.35, 128, 1),
    # B200: 1745.0 at 1792x16128x3072; 7 x 126 = 882 tiles, 6 waves of 148 (888 slots)
    ("B200", 1745.0, 1792, 16128, 3072, 148, 2250.0, 8.0, 882, 6),
]


@pytest.mark.parametrize(
    ("part", "tflops", "m", "n", "k", "sms", "peak", "hbm", "tiles", "waves"), WRITTEN_OUT
)
def test_anchor_written_out(part, tflops, m, n, k, sms, peak, hbm, tiles, waves):  # fmt: skip
    """e = r·k/(k − r·c), r = R/(peak·w), w = tiles/(waves·SMs), c = peak/(0.9·HBM)."""
    row = anchor_gemm(part)
    assert (row.m, row.n, row.k, row.tflops_per_s) == ((m,), (n,), (k,), (tflops,))
    assert _spec(part) == pytest.approx((peak * 1e12, hbm * 1e12))
    assert deepgemm_blocks(m, n, 1, sms) == (256, 128)
    w = tiles / (waves * sms)
    assert dense_wave_efficiency(part, m, n) == pytest.approx(w)
    r = tflops / (peak * w)
    c = peak / (0.9 * hbm)  # FLOP per byte: (β/2)·peak/(e_HBM·HBM), β = 2
    assert anchored_gemm_efficiency(part, *_spec(part)) == pytest.approx(r * k / (k - r * c))


def test_anchors_by_generation():
    """A100 0.9066, H100 0.8454, B200 0.8482: 1.30, 1.48 and (against the H100 figure Blackwell
    takes today) 1.48 times the fitted figures still in force."""
    got = {g: anchored_gemm_efficiency(p, *_spec(p)) for g, p in ANCHOR_PART.items()}
    assert got == pytest.approx({"A100": 0.9066, "H100": 0.8454, "B200": 0.8482}, abs=5e-5)
    assert roofline_params_for("H100-SXM").gemm_efficiency == GEMM_EFFICIENCY_BY_GENERATION["H100"]
    assert roofline_params_for("B200").gemm_efficiency == GEMM_EFFICIENCY_BY_GENERATION["H100"]
    assert got["A100"] / GEMM_EFFICIENCY_BY_GENERATION["A100"] == pytest.approx(1.296, abs=1e-3)
    assert got["H100"] / GEMM_EFFICIENCY_BY_GENERATION["H100"] == pytest.approx(1.477, abs=1e-3)


@pytest.mark.parametrize("part", ["A100-80GB", "H100-SXM", "B200", "GB200"])
def test_the_step_times_rule_reproduces_the_measurement(part):
    """peak × gemm_efficiency(k; e) × dense_wave_efficiency(m, n) = the published rate, with
    the roofline's own functions and default e_HBM."""
    row = anchor_gemm(part)
    peak, hbm = _spec(part)
    e = anchored_gemm_efficiency(part, peak, hbm)
    p = RooflineParams(gemm_efficiency=e)
    rate = (
        peak
        * gemm_efficiency(row.k[0], peak, hbm, p)
        * dense_wave_efficiency(part, row.m[0], row.n[0])
    )
    assert rate / 1e12 == pytest.approx(row.tflops_per_s[0], rel=1e-9)


def test_b300_row_is_beyond_the_depth_rule():
    """1,769 TFLOP/s at k = 1024 on B300 (0.786 of 2,250): the depth rule's k/(k + k₀),
    k₀ = e·2250/(0.9·8000) ≈ 0.31·e·1000, cannot reach it with e ≤ 1 after the wave share."""
    assert anchor_gemm("B300").k == (1024,)
    with pytest.raises(InputError, match="outside \\(0, 1\\]"):
        anchored_gemm_efficiency("B300", *_spec("B300"))


def test_part_without_a_row():
    with pytest.raises(InputError, match="no BF16 torch-mm row"):
        anchor_gemm("MI300X")
