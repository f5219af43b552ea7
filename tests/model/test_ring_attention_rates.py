"""The attention core under context parallelism, as its kernels run it: a load-balanced ring's
one causal call and r − 1 unmasked calls (model.attention_rates.ring_fractions, read by
model.op_time through the clock's cp degrees), and PyTorch's ring exchanging the K/V heads SDPA
sees (model.context_parallel.templated_kv_repeat). Hand derivations from the published curves."""

from __future__ import annotations

import pytest

from trainplan.model.attention_rates import attention_fractions, ring_fractions
from trainplan.model.context_parallel import templated_kv_repeat
from trainplan.model.op_time import Clock, op_seconds
from trainplan.model.ops import LayerShape, OpKind, layer_ops
from trainplan.model.roofline import RooflineParams
from trainplan.scenarios.catalogue import get_model

PEAK = 989.4


def test_ring_reads_the_unmasked_curve_for_all_but_one_call():
    """FlashAttention-3 paper, FlashAttention-2 bars on the H100 SXM5, d 128: unmasked forward
    370 TFLOP/s at 16K (FlashAttention's count 4·s²·d is the planner's 2·s²·2d); the causal
    32K call 335 at 16K × 345.64/327.17 (PyTorch SDPA's flash backend on the H200, the shape
    beyond 16K) in the planner's count × (1 + 1/s). At cp 8 each call is 1/8 of the work, so
    the forward runs at 1 / (1/(8·causal) + 7/(8·370))."""
    s = 32768
    causal = 335 * 345.64 / 327.17 * (1 + 1 / s) / PEAK
    unmasked = 370 / PEAK
    f, _ = ring_fractions("flash-attention-2", "H100-SXM", (128, 128), s, 8)
    assert f == pytest.approx(1 / (1 / (8 * causal) + 7 / (8 * unmasked)))
    assert attention_fractions("flash-attention-2", "H100-SXM", (128, 128), 16384, False)[
        0
    ] == pytest.approx(unmasked)
    one = attention_fractions("flash-attention-2", "H100-SXM", (128, 128), s)
    assert ring_fractions("flash-attention-2", "H100-SXM", (128, 128), s, 1) == one


def test_cudnn_ring_on_h200_from_its_sweep():
    """cuDNN 9.19 on the H200, d 128 (benchmark_single_sdpa.py's count: forward the planner's,
    backward 2·E·5d against the planner's 2·2·E·2d, so × 0.8): causal 4,096 591 forward, 474
    backward; unmasked 2,048 633 and 504 (the cp 2 ring of an 8K sequence: one causal call on
    4K, one unmasked 4K × 2K)."""
    f, b = ring_fractions("cudnn", "H200", (128, 128), 4096, 2)
    assert f == pytest.approx(1 / (1 / (2 * 591 / PEAK) + 1 / (2 * 633 / PEAK)))
    assert b == pytest.approx(1 / (1 / (2 * 0.8 * 474 / PEAK) + 1 / (2 * 0.8 * 504 / PEAK)))


def _core_seconds(clock: Clock, cp: int) -> float:
    arch = get_model("llama3-8b").model.arch
    x = LayerShape(arch, False, 262144, 1, 1, cp, causal=True)
    core = next(o for o in layer_ops(x) if o.kind is OpKind.ATTENTION)
    return op_seconds(core, clock)


def test_the_clock_times_the_ring_and_ulysses_by_their_calls():
    """The same core, cp 8: the ring's calls (causal 32K + unmasked 16K) beat one causal call at
    32K (the all-gather's); Ulysses' single call sees the whole 256K sequence."""
    params = RooflineParams(
        gemm_efficiency=0.7, attention_kernel="flash-attention-2", part="H100-SXM"
    )
    base = (PEAK * 1e12, 3.35e12, params)
    gather = _core_seconds(Clock(*base, cp_ring=8, cp_gather=True), 8)
    ring = _core_seconds(Clock(*base, cp_ring=8), 8)
    ulysses = _core_seconds(Clock(*base, cp_a2a=8), 8)
    f_gather = attention_fractions("flash-attention-2", "H100-SXM", (128, 128), 32768)[0]
    f_ring = ring_fractions("flash-attention-2", "H100-SXM", (128, 128), 32768, 8)[0]
    f_ulysses = attention_fractions("flash-attention-2", "H100-SXM", (128, 128), 262144)[0]
    assert ring / gather == pytest.approx(f_gather / f_ring, rel=1e-3)
    assert ulysses / gather == pytest.approx(f_gather / f_ulysses, rel=1e-3)


def test_pytorch_ring_exchanges_the_repeated_kv_heads():
    """torchtitan repeats the K/V heads before SDPA: Llama 3 8B 32/8, 405B 128/8; MHA 1."""
    assert templated_kv_repeat(get_model("llama3-8b").model.arch) == 4
    assert templated_kv_repeat(get_model("llama3-405b").model.arch) == 16
    assert templated_kv_repeat(get_model("gpt3-175b").model.arch) == 1


def test_torchtitan_long_context_calls_read_published_lengths():
    """torchtitan's Llama 3.1 rows at 32K-256K run cp = s/32K, so every ring call is a causal
    32K x 32K or an unmasked 32K x 16K / 16K x 32K one (read at 16K): the FlashAttention-3
    paper's FlashAttention-2 bars (causal forward 335, unmasked forward 370, unmasked backward
    322 TFLOP/s at 16K) and, past 16K, PyTorch's flash backend sweep on the H200 (causal forward
    327.17 -> 345.64 from 16K to 32K; unmasked backward 317.34 -> 320.44) — no rate is held past
    a curve's end. Only a call beyond 64K would be (flagged 'above')."""
    from trainplan.model.kernels import AttentionKey, attention_rate
    from trainplan.scenarios.kernel_data import attention_curves

    def rate(direction: str, causal: bool, s: int):
        key = AttentionKey("flash-attention-2", "H100-SXM", "bf16", direction, causal)
        return attention_rate(attention_curves(), key, (128, 128), s)

    causal_32k = rate("fwd", True, 32768)
    assert causal_32k.tflops_per_s == pytest.approx(335 * 345.64 / 327.17)
    assert causal_32k.clamped is None
    assert (rate("fwd", False, 16384).tflops_per_s, rate("bwd", False, 16384).tflops_per_s) == (
        370,
        322,
    )
    assert rate("bwd", False, 32768).tflops_per_s == pytest.approx(322 * 320.44 / 317.34)
    assert rate("fwd", True, 65536).clamped is None
    assert rate("fwd", True, 131072).clamped == "above"


def test_long_context_rows_read_no_rate_below_the_published_ones():
    """What the long-context rows (MPT 7B at 64K on A100, torchtitan at 32K chunks on H100) are
    charged, derived from the published figures. FlashAttention-2 on A100: its paper's
    fwd+bwd figure ends at 16K (causal, d 128: 189 TFLOP/s); 64K holds it (flagged 'above'), in
    the planner's count 3·2·s(s+1)·d against FlashAttention's 3.5·2·s²·d. On Hopper the causal
    backward borrows the unmasked FlashAttention-3-paper curve (322 at 16K, × 320.44/317.34 at
    32K) in the planner's 4·s(s+1)·d against the kernel's 5·s²·d: 325 TFLOP/s, where the flash
    backend's own causal backward on the H200 measures 316.92 — the one published rate at these
    lengths below the charged one, by 2.5 %."""
    from trainplan.model.kernels import AttentionKey, attention_rate
    from trainplan.scenarios.kernel_data import attention_curves

    a100 = AttentionKey("flash-attention-2", "A100-80GB", "bf16", "fwd+bwd", True)
    held = attention_rate(attention_curves(), a100, (128, 128), 65536)
    assert (held.tflops_per_s, held.clamped) == (189, "above")
    s = 65536
    both = attention_fractions("flash-attention-2", "A100-80GB", (128, 128), s)
    assert both == pytest.approx((6 / 7 * 189 / 312 * (1 + 1 / s),) * 2)
    s = 32768
    _, bwd = attention_fractions("flash-attention-2", "H100-SXM", (128, 128), s)
    charged = 322 * 320.44 / 317.34
    assert bwd == pytest.approx(0.8 * charged * (1 + 1 / s) / PEAK)
    assert 316.92 / charged == pytest.approx(0.975, abs=0.001)
