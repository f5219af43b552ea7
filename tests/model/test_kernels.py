"""Attention and memory-bound kernels at their published rates (``model.kernels``): every
published point comes back exactly, the interpolation between points is checked by hand, and
each benchmark's FLOP convention reproduces its own published time-to-rate conversion."""

from __future__ import annotations

import math

import pytest

from trainplan.model.errors import InputError
from trainplan.model.flops import attention_core_forward_flops
from trainplan.model.kernels import (
    AttentionKey,
    attention_kernel_flops,
    attention_rate,
    interpolate_log2,
    norm_bandwidth,
    published_attention_seconds,
    stream_fraction,
)
from trainplan.model.specs import Architecture
from trainplan.scenarios.kernel_data import attention_curves, memory_data

CURVES = attention_curves()


def _rate(kernel, part, dtype, direction, causal, d, s, dv=None):
    key = AttentionKey(kernel, part, dtype, direction, causal)
    return attention_rate(CURVES, key, (d, dv or d), s)


def test_every_published_attention_point_comes_back_exactly():
    """Every main curve's points (a longer sweep, ``extends``, is read only beyond its main
    curve: :func:`test_a_longer_sweep_continues_a_curve_beyond_its_longest_length`)."""
    for c in (c for c in CURVES if not c.extends):
        for s, tflops in zip(c.seq_len, c.tflops_per_s, strict=True):
            key = AttentionKey(c.kernel, c.part, c.dtype, c.direction, c.causal, c.window)
            r = attention_rate(CURVES, key, (c.head_dim_qk, c.head_dim_v), s)
            assert (r.tflops_per_s, r.clamped, r.flop_count) == (tflops, None, c.flop_count)


def test_sequence_interpolation_by_hand():
    # FlashAttention-2 on A100, fwd+bwd, no mask, d 64: 1k 153, 2k 162 TFLOP/s.
    # s = 1448: log2 1448 = 10.4998…, t = 0.4998 → 153 + 9·t
    t = math.log2(1448) - 10
    r = _rate("flash-attention-2", "A100-80GB", "fp16", "fwd+bwd", False, 64, 1448)
    assert r.tflops_per_s == pytest.approx(153 + 9 * t)
    assert r.tflops_per_s == pytest.approx(157.498, abs=1e-3)
    # s = 3000 between 2k (162) and 4k (171): t = log2(3000/2048) = 0.5507
    r = _rate("flash-attention-2", "A100-80GB", "bf16", "fwd+bwd", False, 64, 3000)
    assert r.tflops_per_s == pytest.approx(162 + 9 * math.log2(3000 / 2048))


def test_head_dim_interpolation_and_clamping_by_hand():
    # FlashAttention-3 forward on H100, causal, s 4k: d 64 → 420, d 128 → 579; d 96 half-way.
    r = _rate("flash-attention-3", "H100-SXM", "bf16", "fwd", True, 96, 4096)
    assert (r.tflops_per_s, r.clamped) == (pytest.approx(499.5), None)
    assert len(r.sources) == 3  # the three head dims' curves (64, 128, 256) were read
    # Outside the published lengths: the end point, flagged.
    low = _rate("flash-attention-2", "A100-80GB", "fp16", "fwd+bwd", True, 128, 256)
    high = _rate("flash-attention-2", "A100-80GB", "fp16", "fwd+bwd", True, 128, 131072)
    assert (low.tflops_per_s, low.clamped) == (99, "below")
    assert (high.tflops_per_s, high.clamped) == (189, "above")
    # Head dim above the published ones: held at d 256, flagged.
    r = _rate("flash-attention-3", "H100-SXM", "fp16", "fwd", False, 512, 16384)
    assert (r.tflops_per_s, r.clamped) == (756, "above")


def test_missing_curves_are_refused_with_what_is_published():
    with pytest.raises(InputError, match="no published curve for flash-attention-3 on A100-80GB"):
        _rate("flash-attention-3", "A100-80GB", "bf16", "fwd", False, 128, 4096)
    with pytest.raises(InputError, match=r"head_dim: \(192, 64\)"):
        _rate("cudnn", "GB200", "bf16", "fwd", True, 192, 4096, dv=64)
    with pytest.raises(InputError, match="dtype: 'fp4'"):
        _rate("cudnn", "GB200", "fp4", "fwd", True, 128, 4096)


@pytest.mark.parametrize(
    "convention, direction, shape, time_ms, published",
    [
        # cudnn-frontend llama3.1 on H200, cuDNN 9.19: causal, b 1, 64 heads of 128, s 32,768.
        ("nonmasked", "fwd", (1, 64, 32768, 128, 128, True), 25.566, 688),
        ("nonmasked", "bwd", (1, 64, 32768, 128, 128, True), 75.688, 581),
        # DeepSeek-V3's MLA shapes on GB200, cuDNN 9.22: 128 heads, d_qk 192, d_v 128, b 2.
        ("nonmasked", "fwd", (2, 128, 32768, 192, 128, True), 50.456, 1743),
        ("nonmasked", "bwd", (2, 128, 32768, 192, 128, True), 212.546, 1076),
        # cuDNN 9.13 on B200, fa-half convention: causal, b 1, 128 heads of 128, s 131,072.
        ("fa-half", "fwd", (1, 128, 131072, 128, 128, True), 395.922, 1421.873),
        ("fa-half", "bwd", (1, 128, 131072, 128, 128, True), 1248.042, 1127.667),
    ],
)
def test_flop_conventions_reproduce_the_published_time_to_rate(
    convention, direction, shape, time_ms, published
):
    b, h, s, dqk, dv, causal = shape
    flops = attention_kernel_flops(convention, direction, b, h, s, dqk, dv, causal)
    assert flops / (time_ms * 1e-3) / 1e12 == pytest.approx(published, rel=2e-3)


def test_nonmasked_forward_is_the_models_own_attention_count():
    """The model's forward count (``model.flops``: s(s+1)/2 causal pairs) is cuDNN's; the
    FlashAttention count halves s² instead (s/(s+1) of it)."""
    arch = Architecture(
        num_layers=1, hidden_size=512, num_attention_heads=4, ffn_hidden_size=2048, vocab_size=16
    )
    s, b = 1024, 2
    model = attention_core_forward_flops(arch, 0, s, b, causal=True)
    assert attention_kernel_flops("nonmasked", "fwd", b, 4, s, 128, 128, True) == model
    half = attention_kernel_flops("fa-half", "fwd", b, 4, s, 128, 128, True)
    assert half / model == pytest.approx(s / (s + 1))


def test_attention_seconds_by_hand():
    # cuDNN 9.22 on GB200, bf16, causal fwd, s 8,192 (1,574 TFLOP/s), Llama 3 70B's 64 heads
    # of 128, b 1: 2·64·(8192·8193/2)·256 FLOPs at 1,574e12 FLOP/s.
    key = AttentionKey("cudnn", "GB200", "bf16", "fwd", True)
    t = published_attention_seconds(CURVES, key, 1, 64, 8192, (128, 128))
    assert t == pytest.approx(2 * 64 * (8192 * 8193 / 2) * 256 / 1574e12)


def test_interpolate_refuses_a_non_positive_size():
    with pytest.raises(InputError, match="size: 0"):
        interpolate_log2([1, 2], [1, 2], 0)


def test_stream_fractions_by_hand():
    rows = memory_data().stream
    assert stream_fraction(rows, "A100-80GB", "copy", 2.039) == pytest.approx(1.61 / 2.039)
    assert stream_fraction(rows, "H200", "triad", 4.8) == pytest.approx(4.15 / 4.8)
    with pytest.raises(InputError, match="no published triad on B200"):
        stream_fraction(rows, "B200", "triad", 8.0)


def test_norm_bandwidth_points_and_interpolation():
    norms = memory_data().norms
    # GB200 cuDNN RMSNorm backward at 2048 × 4096 (8 Mi elements, two shapes: 2048 × 4096 and
    # 4096 × 2048) is the mean of the two published rates.
    c = next(c for c in norms if (c.part, c.norm, c.backend) == ("GB200", "rms_norm", "cudnn"))
    pair = [g for r, h, g in zip(c.rows, c.hidden, c.bwd_gbps, strict=True) if r * h == 2**23]
    assert len(pair) == 2
    got = norm_bandwidth(norms, "GB200", "rms_norm", "cudnn", "bwd", 2**23)
    assert got.value == pytest.approx(sum(pair) / 2)
    # PyTorch's eager RMSNorm backward on H200 runs far below cuDNN's at one shape.
    torch = norm_bandwidth(norms, "H200", "rms_norm", "pytorch", "bwd", 16384 * 4096)
    cudnn = norm_bandwidth(norms, "H200", "rms_norm", "cudnn", "bwd", 16384 * 4096)
    assert torch.value < 0.5 * cudnn.value
    with pytest.raises(InputError, match="direction: 'both'"):
        norm_bandwidth(norms, "H200", "rms_norm", "cudnn", "both", 1)


def test_a_longer_sweep_continues_a_curve_beyond_its_longest_length():
    """cuDNN on GB200, causal, d 128: the 9.22 sweep stops at 32K (1,622 TFLOP/s forward); the
    9.17 sweep reaches 128K, 1,467 there against 1,681 at 32K, so 128K reads 1,622 · 1,467/1,681;
    64K half-way in log2 on neither: the 9.17 point itself, 1,622 · 1,573/1,681. Beyond 128K
    the end holds (flagged); up to 32K the longer sweep is not read."""
    from trainplan.model.kernels import AttentionKey, attention_rate
    from trainplan.scenarios.kernel_data import attention_curves

    key = AttentionKey("cudnn", "GB200", "bf16", "fwd", True)
    lengths = (32768, 65536, 131072, 262144)
    at = {s: attention_rate(attention_curves(), key, (128, 128), s) for s in lengths}
    assert at[32768].tflops_per_s == 1622.0 and at[32768].clamped is None
    assert at[65536].tflops_per_s == pytest.approx(1622 * 1573 / 1681)
    assert at[131072].tflops_per_s == pytest.approx(1622 * 1467 / 1681)
    assert at[262144].tflops_per_s == pytest.approx(1622 * 1467 / 1681)
    assert at[262144].clamped == "above" and len(at[131072].sources) == 2
