"""GEMMs by shape and the low-precision recipes (``model.gemm_shapes``): the published tables
come back exactly, the wave rule and DeepGEMM's tile choice are checked by hand, the proposed
shape rule reproduces its anchor and is held to its measured error on every other published
shape, and Transformer Engine's own printed speed-ups come back from its tables."""

from __future__ import annotations

import pytest

from trainplan.model.errors import InputError
from trainplan.model.gemm_shapes import (
    GemmPart,
    block_scale_bytes,
    cached_weight_speedup,
    deepgemm_blocks,
    gemm_point,
    large_gemm_fraction,
    quantization_share,
    recipe_speedup,
    shape_seconds,
    shape_speedup,
    sm_count,
    wave_efficiency,
)
from trainplan.scenarios.kernel_data import gemm_data, low_precision_data, memory_data

GEMM = gemm_data()
LOWP = low_precision_data()


def test_every_published_gemm_row_comes_back_exactly():
    for t in GEMM.gemms:
        rows = zip(t.groups, t.m, t.n, t.k, t.tflops_per_s, strict=True)
        for g, m, n, k, tflops in rows:
            assert (
                gemm_point(GEMM.gemms, t.library, t.part, t.dtype, t.layout, m, n, k, g) == tflops
            )


def test_unpublished_shapes_and_parts_are_refused():
    with pytest.raises(InputError, match="1x4096x4096x4096 .* is not in the deepgemm table"):
        gemm_point(GEMM.gemms, "deepgemm", "H800", "fp8", "dense", 4096, 4096, 4096)
    with pytest.raises(InputError, match="no published cublaslt bf16 dense table on H100-SXM"):
        gemm_point(GEMM.gemms, "cublaslt", "H100-SXM", "bf16", "dense", 1024, 1024, 1024)
    with pytest.raises(InputError, match="'TPUv5p' has no sourced SM count"):
        sm_count(GEMM.sm_counts, "TPUv5p")
    # Blackwell Ultra: 160 SMs (NVIDIA's Blackwell Ultra blog); GB200 as the B200's 148.
    assert [sm_count(GEMM.sm_counts, p) for p in ("B300", "GB300", "GB200")] == [160, 160, 148]


def test_wave_rule_by_hand():
    # 4096 × 7168 in 256 × 128 tiles on 132 SMs: 16 · 56 = 896 tiles, ⌈896/132⌉ = 7 waves.
    assert wave_efficiency(4096, 7168, 1, 132, 256, 128) == pytest.approx(896 / (7 * 132))
    # Tile quantisation: 4100 rows need 17 M tiles of 256 (4352 rows computed).
    assert wave_efficiency(4100, 128, 1, 108, 256, 128) == pytest.approx(
        4100 / (17 * 256) * 17 / 108
    )
    # Four grouped GEMMs count their tiles together: 4 · 2 · 32 = 256 tiles = 2 waves on 132 SMs.
    assert wave_efficiency(256, 4096, 4, 132, 128, 128) == pytest.approx(
        4 * 256 * 4096 / (2 * 132 * 128 * 128)
    )
    with pytest.raises(InputError):
        wave_efficiency(0, 128, 1, 132, 128, 128)


def test_deepgemm_tile_choice_by_hand():
    # 4096 × 7168 on 132 SMs: 256 × 128 → 896 tiles, 7 waves, last wave 104; no candidate needs
    # fewer than 7 waves with a fuller last one.
    assert deepgemm_blocks(4096, 7168, 1, 132) == (256, 128)
    # 64 rows (decoding): the 64-row M block; N blocks chosen to fill one wave: 7168 / 56 = 128 tiles.
    assert deepgemm_blocks(64, 7168, 1, 132) == (64, 56)
    # Contiguous grouped layout: M block fixed at 128.
    assert deepgemm_blocks(8192, 4096, 4, 132, contiguous=True)[0] == 128


def _rule_errors(table, peak, sms, hbm_tbps, e_hbm, anchor, in_bytes, t_kernel=3e-6):
    """Relative error of the rule (with the roofline's t_kernel, 3 µs) on each published row."""
    contiguous = table.layout == "grouped-contiguous"
    part = GemmPart(sms=sms, peak_tflops=peak, hbm_tbps=hbm_tbps, hbm_efficiency=e_hbm)
    rows = list(zip(table.groups, table.m, table.n, table.k, table.tflops_per_s, strict=True))
    g, m, n, k, measured = next(r for r in rows if r[1:4] == anchor)
    f = large_gemm_fraction(measured, m, n, k, g, part, 2, contiguous)
    out = {}
    for g, m, n, k, measured in rows:
        t = shape_seconds(m, n, k, g, f, part, (in_bytes, 2), t_kernel, contiguous)
        out[(g, m, n, k)] = 2 * g * m * n * k / t / 1e12 / measured - 1
    return out


def _triad(part, hbm_tbps):
    row = next(r for r in memory_data().stream if r.part == part)
    return row.tbps[row.kernels.index("triad")] / hbm_tbps


def test_shape_rule_reproduces_its_anchor_exactly():
    deep = next(t for t in GEMM.gemms if (t.library, t.layout) == ("deepgemm", "dense"))
    errors = _rule_errors(
        deep, 1978.9, 132, 3.35, _triad("H100-SXM", 3.35), (4096, 7168, 16384), 1, 0.0
    )
    assert errors[(1, 4096, 7168, 16384)] == pytest.approx(0, abs=1e-12)


@pytest.mark.parametrize(
    "library, part, layout, peak, hbm, anchor, in_bytes, bound",
    [
        # cuBLASLt FP16 on A100: within 4 % from 2048³ up.
        ("cublaslt", "A100-80GB", "dense", 312, 2.039, (16384, 16384, 16384), 2, 0.04),
        # cuBLASLt FP8 on H100: within 7 % from 2048³ up.
        ("cublaslt", "H100-SXM", "dense", 1978.9, 3.35, (16384, 16384, 16384), 1, 0.07),
        # DeepGEMM's contiguous grouped GEMMs (MoE training): within 4 %.
        ("deepgemm", "H800", "grouped-contiguous", 1978.9, 3.35, (8192, 4096, 7168), 1, 0.04),
    ],
)
def test_shape_rule_error_on_large_published_shapes(
    library, part, layout, peak, hbm, anchor, in_bytes, bound
):
    table = next(t for t in GEMM.gemms if (t.library, t.part, t.layout) == (library, part, layout))
    sms = sm_count(GEMM.sm_counts, part)
    e_hbm = _triad("H100-SXM" if part == "H800" else part, hbm)
    errors = _rule_errors(table, peak, sms, hbm, e_hbm, anchor, in_bytes)
    large = {s: e for s, e in errors.items() if min(s[1:]) >= 2048}
    assert large and max(abs(e) for e in large.values()) < bound


def test_shape_rule_overestimates_small_and_few_token_gemms():
    """Where the rule is known short (docs/time-model-sources.md): DeepGEMM's masked layout with
    256 tokens per expert (+19 %, +25 %) and 1024³ on H100 (+49 %: a fixed cost beyond t_kernel)."""
    masked = next(t for t in GEMM.gemms if t.layout == "grouped-masked")
    e_hbm = _triad("H100-SXM", 3.35)
    errors = _rule_errors(masked, 1978.9, 132, 3.35, e_hbm, (1024, 4096, 7168), 1)
    assert errors[(4, 256, 4096, 7168)] == pytest.approx(0.246, abs=0.01)
    h100 = next(t for t in GEMM.gemms if (t.library, t.part) == ("cublaslt", "H100-SXM"))
    errors = _rule_errors(h100, 1978.9, 132, 3.35, e_hbm, (16384, 16384, 16384), 1)
    assert errors[(1, 1024, 1024, 1024)] > 0.4


def test_blackwell_peak_fractions_as_published():
    row = GEMM.peak_fractions[0]
    assert dict(zip(row.dtype, row.fraction, strict=True)) == {
        "bf16": 0.942,
        "fp16": 0.9686,
        "fp8": 0.9122,
        "mxfp8": 0.9835,
    }


@pytest.mark.parametrize(
    "part, recipe, mode, printed",
    [
        # Transformer Engine's own "Estimated GEMM Speedups" lines (gemm_profiling.rst).
        ("B300", "mxfp8", "autocast", 1.42),
        ("B300", "nvfp4", "autocast", 1.98),
        ("B300", "mxfp8", "pre-quantized", 1.83),
        ("B300", "nvfp4", "pre-quantized", 3.48),
        ("H200-NVL", "fp8-delayed", "autocast", 1.69),
        ("H200-NVL", "fp8-current", "autocast", 1.58),
        ("H200-NVL", "fp8-block", "autocast", 1.40),
        ("H200-NVL", "fp8-current", "pre-quantized", 1.90),
        ("H200-NVL", "fp8-delayed", "pre-quantized", 1.67),
    ],
)
def test_recipe_speedups_are_transformer_engines_own(part, recipe, mode, printed):
    assert round(recipe_speedup(LOWP.layer_gemms, part, recipe, mode), 2) == printed


def test_recipe_speedup_by_pass_and_quantisation_share_by_hand():
    rows = LOWP.layer_gemms
    # B300 MXFP8, weight gradients only: 4.272 / 3.092.
    assert recipe_speedup(rows, "B300", "mxfp8", passes=("wgrad",)) == pytest.approx(4.272 / 3.092)
    # B300 MXFP8: 1 − 7.162 / 8.984 of the autocast time is quantisation.
    assert quantization_share(rows, "B300", "mxfp8") == pytest.approx(1 - 7.162 / 8.984)
    with pytest.raises(InputError, match="fp8-delayed has no kernel-only time"):
        quantization_share(rows, "H200-NVL", "fp8-delayed")
    with pytest.raises(InputError, match="no published mxfp8"):
        recipe_speedup(rows, "H200-NVL", "mxfp8")
    with pytest.raises(InputError, match="passes: 'bprop'"):
        recipe_speedup(rows, "B300", "mxfp8", passes=("bprop",))
    # The small attention-output GEMM gains least: 0.307 / 0.269 (MXFP8), 0.307 / 0.317 (current).
    shapes = LOWP.shape_gemms
    assert shape_speedup(shapes, "B300", "fp8-current", "Attn Out", "autocast") == pytest.approx(
        0.307 / 0.317
    )


def test_cached_weights_charge_only_the_activation_casts_by_hand():
    """B300 MXFP8, TE's layer (M 15,872, h 4,096, f 16,384). The autocast run quantises each
    GEMM's input and weight; Megatron-Core's TE quantises weights once per step, and wgrad reads
    the casts' columnwise copies. fprop inputs M·(3h + f) against weights 3h² + h² + 2hf:
    share 0.6933 of the cast time (2.847 − 2.365); dgrad inputs M·(3h + h + f + h): 0.744 of
    (3.045 − 2.397); wgrad 2.400 alone; BF16 4.196 + 4.290 + 4.272."""
    m, h, f = 15872, 4096, 16384
    weights = 3 * h * h + h * h + 2 * h * f
    fprop_share = m * (3 * h + f) / (m * (3 * h + f) + weights)
    dgrad_share = m * (5 * h + f) / (m * (5 * h + f) + weights)
    assert (round(fprop_share, 4), round(dgrad_share, 4)) == (0.6933, 0.744)
    ms = (2.365 + fprop_share * (2.847 - 2.365)) + (2.397 + dgrad_share * (3.045 - 2.397)) + 2.400
    rows = LOWP.layer_gemms
    assert cached_weight_speedup(rows, "B300", "mxfp8") == pytest.approx(12.758 / ms)
    assert cached_weight_speedup(rows, "B300", "mxfp8") > recipe_speedup(rows, "B300", "mxfp8")
    # Delayed scaling runs current scaling's per-tensor GEMM: H200 NVL kernel-only 5.577,
    # 5.661, 5.547 ms (current, pre-quantized), casts as delayed's autocast adds to them.
    f = 5.577 + 0.6933 * (6.188 - 5.577)
    d = 5.661 + 0.744 * (6.306 - 5.661)
    delayed = cached_weight_speedup(rows, "H200-NVL", "fp8-delayed")
    assert delayed == pytest.approx(32.014 / (f + d + 5.547), rel=1e-4)
    with pytest.raises(InputError, match="no published fp8-block"):
        cached_weight_speedup(rows, "H200-NVL", "fp8-block")


def test_mxfp8_scale_bytes():
    fmt = LOWP.block_format
    assert (fmt.block_elements, fmt.scale_bits, fmt.scale_format) == (32, 8, "e8m0")
    # 1/32 B per element per copy, two copies (rowwise and columnwise); a partial block counts.
    assert block_scale_bytes(33, fmt) == 2 * 2
