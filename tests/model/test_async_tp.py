"""torchtitan's async TP (``tp_comm_overlap = async-tp``): the backward reduce-scatter Inductor
cannot fuse and the fused reduce-scatters' closing reduction (:mod:`model.async_tp`), derived
by hand for a Llama 3 70B block at tp 8 on H100 SXM."""

from __future__ import annotations

import pytest

from trainplan.model.async_tp import fused_input_scatter, partials_reduction_seconds
from trainplan.model.layer_time import _tp_collectives
from trainplan.model.op_rates import deployed_params
from trainplan.model.op_time import Clock, TpOverlap, layer_compute
from trainplan.model.ops import LayerShape
from trainplan.model.recompute_ops import repeated_tp
from trainplan.model.roofline import LinkTime
from trainplan.model.specs import AttentionKind
from trainplan.scenarios.catalogue import get_model

LLAMA_70B = get_model("llama3-70b").model.arch
H100 = deployed_params("H100-SXM")
LINK = LinkTime(450e9, True)  # the curve system's NVLink: the curve is read unscaled


def _block() -> tuple[LayerShape, Clock]:
    x = LayerShape(LLAMA_70B, False, 8192, 1, 8, sequence_parallel=True)
    return x, Clock(989e12, 3.35e12, H100, tp_link=LINK, tp_comm_overlap=TpOverlap.ASYNC_TP)


def test_only_a_single_gemm_input_gradient_is_fused():
    """torch 2.13 ``_find_producer_matmul`` takes ``mm`` or ``reshape(mm(reshape))`` only: the
    attention's input gradient comes from torchtitan's one fused ``wqkv`` (fused), the SwiGLU
    MLP's is ``w1``'s plus ``w3``'s (an ``add``: not fused), MLA's Q and KV down-projections
    likewise add."""
    x, _ = _block()
    assert fused_input_scatter(x, "attn_in") and not fused_input_scatter(x, "mlp_in")
    mla = get_model("deepseek-v3").model.arch
    assert mla.attention is AttentionKind.MLA
    assert not fused_input_scatter(
        LayerShape(mla, False, 4096, 1, 8, sequence_parallel=True), "attn_in"
    )


def _exposed(full_recompute: bool = False) -> tuple[Clock, LayerShape, object, float, float]:
    x, c = _block()
    ops = layer_compute(x, Clock(989e12, 3.35e12, H100))
    return (c, x, ops, *_tp_collectives(x, ops, c, repeated_tp(x, (), full_recompute))[:2])


RS = 7 / 8 * 2 * 8192 * 8192 / (400.61e9 / (48 / 37))  # H100 nvls_allreduce_speedup = 48/37
REDUCTION = 2 * 8192 * 8192 * 9 / 8 / (0.9 * 3.35e12) + 3e-6


def test_llama3_70b_tp8_block_async_tp_by_hand():
    """Llama 3 70B (h 8192), one micro-batch of 8192 tokens, tp 8 on H100 SXM NVLink.

    Reduce-scatter of the 2·8192·8192 = 134,217,728 B (128 MiB) input gradient: the published
    8-GPU H100 all-reduce curve at 128 MiB is 400.61 GB/s; a reduce-scatter runs as a ring,
    the curve ÷ the NVLS speed-up 48/37 = 308.80 GB/s; each GPU sends 7/8 of the buffer,
    117,440,512 B / 308.80 GB/s = 380.3 µs. An all-gather of the same bytes reads the same
    curve: 380.3 µs too.

    The reduction of a fused reduce-scatter: reads 2·8192·8192 B of partials and writes their
    1/8, 150,994,944 B / (0.9 · 3.35 TB/s) = 50.08 µs + 3 µs launch = 53.08 µs.

    Per layer: 7 fused collectives (the attention's 4; the MLP's forward gather and scatter and
    backward gather), each waiting for what 7/8 of its GEMM leaves and adding 7 × 3 µs for the
    decomposed GEMM; 3 fused reduce-scatters (both forward ones, the attention's backward one)
    each + 53.08 µs; the MLP's backward reduce-scatter plain NCCL, waited for whole: 380.3 µs.
    Before, that one was counted fused and hidden under 7/8 of the w1 + w3 input-gradient
    GEMMs (2·2·8192·3584·8192 = 962 GFLOP, well over 380 µs), so it cost only its 21 µs of
    kernels: the layer's exposed tp time grows by 380.3 − 21 + 3 × 53.08 = 518.5 µs."""
    c, x, ops, total, exposed = _exposed()
    assert RS * 1e6 == pytest.approx(380.3, abs=0.05)
    assert REDUCTION * 1e6 == pytest.approx(53.08, abs=0.01)
    assert partials_reduction_seconds(x, c) == pytest.approx(REDUCTION)
    assert total == pytest.approx(8 * RS)  # 4 gathers, 4 scatters; no byte moved or dropped
    fused = [
        ("attn_in", "forward"), ("attn_out", "forward"), ("attn_out", "dgrad"),
        ("attn_in", "dgrad"), ("mlp_in", "forward"), ("mlp_out", "forward"), ("mlp_out", "dgrad"),
    ]  # fmt: skip
    waits = sum(max(0.0, RS - 7 / 8 * ops.role(role, which)) for role, which in fused)
    assert exposed == pytest.approx(waits + 7 * 7 * 3e-6 + 3 * REDUCTION + RS)
    assert 7 / 8 * ops.role("mlp_in", "dgrad") > RS  # before: hidden, 21 µs of kernels
    before = waits + 7 * 7 * 3e-6 + 7 * 3e-6
    assert (exposed - before) * 1e6 == pytest.approx(380.3 - 21 + 3 * 53.08, abs=0.1)


def test_recomputed_forward_scatters_are_fused_and_reduced_again():
    """Under full recomputation the forward's gather and scatter of both halves run once more,
    fused: each waits for what 7/8 of its forward GEMM leaves, + 21 µs of kernels, and the two
    scatters 2 more reductions of 53.08 µs; the backward's unfused reduce-scatter is still one."""
    _, _, ops, total, plain = _exposed()
    _, _, _, total_full, full = _exposed(full_recompute=True)
    assert total_full == pytest.approx(total + 4 * RS)
    halves = ("attn_in", "attn_out", "mlp_in", "mlp_out")
    forward = sum(max(0.0, RS - 7 / 8 * ops.role(role, "forward")) for role in halves)
    assert full - plain == pytest.approx(forward + 4 * 7 * 3e-6 + 2 * REDUCTION)


def test_a_forward_alone_waits_for_its_own_fused_collectives_only():
    """A forward-only pass (the RLHF scoring forward, no grad) waits for the forward's gather
    and scatter of both halves, fused: each what 7/8 of its forward GEMM leaves, + 21 µs of
    kernels, and the two scatters' reductions of 53.08 µs — the same figure a recomputed
    forward adds (the test above), and none of the backward's (the MLP's plain 380.3 µs
    reduce-scatter among them)."""
    x, c = _block()
    ops = layer_compute(x, Clock(989e12, 3.35e12, H100))
    own = _tp_collectives(x, ops, c, repeated_tp(x, (), False))[2]
    halves = ("attn_in", "attn_out", "mlp_in", "mlp_out")
    forward = sum(max(0.0, RS - 7 / 8 * ops.role(role, "forward")) for role in halves)
    assert own == pytest.approx(forward + 4 * 7 * 3e-6 + 2 * REDUCTION)
    assert own < _tp_collectives(x, ops, c, repeated_tp(x, (), False))[1] - RS
