"""What a flex dispatcher's token-row carries beside its hidden vector (model.moe_dispatch.
side_bytes), read from the kernels: DeepEP (deepseek-ai/DeepEP dd758ca) copies each token's
``topk_idx`` (int64, ``topk_idx_t``) and float32 ``topk_weights`` with it in the intranode
``dispatch`` (``intranode.cu``) and, across runs of 8, a row of ``get_num_bytes_per_token``
bytes (hidden + 8-byte ``SourceMeta`` + int32 indices + weights, aligned to 16, ``internode.cu``);
Megatron-Core's combine in backward sends the weights' gradient back (``fused_a2a.py``
``FusedDispatch.backward``: ``combine(..., topk_weights=grad_token_probs.float())``). HybridEP
(``hybrid-ep`` 94a9f8f6b1 ``hybrid_ep_backend.cuh``) writes each token's probability row,
``NUM_OF_EXPERTS_PER_RANK × NUM_OF_RANKS_PER_NODE`` floats, beside it in the forward dispatch
and back in the backward combine (``HybridEPDispatch.backward``: ``combine_with_unpermute(...,
probs=grad_probs)``). The published kernel rates count the hidden bytes alone over kernels
whose rows carried their own side bytes (HybridEP's benchmark: 8 local experts, probabilities
both ways; DeepEP's: a cached dispatch and a weightless combine, none). Every figure by hand."""

from __future__ import annotations

import math

import pytest

from tests.archs import one_moe_layer
from trainplan.model.dispatch_buffers import hybridep_buffer_bytes, hybridep_tokens_per_rank
from trainplan.model.ep_kernels import kernel_rates
from trainplan.model.layer_time import ep_all_to_all_seconds
from trainplan.model.moe import expected_distinct_nodes
from trainplan.model.moe_dispatch import side_bytes, transfer_side_bytes
from trainplan.model.moe_run import MoERun
from trainplan.model.op_time import Clock
from trainplan.model.ops import LayerShape
from trainplan.model.roofline import LinkTime, RooflineParams

DEEPEP, HYBRIDEP = MoERun(dispatcher="deepep"), MoERun(dispatcher="hybridep")


def test_the_rows_side_bytes_from_the_kernels():
    """DeepSeek-V3, k 8, 14,336-byte BF16 rows. DeepEP intranode: 8 × 8 (int64 indices) + 8 × 4
    (weights) = 96 bytes in the forward dispatch, 8 × 4 = 32 in the backward combine; across
    runs 14,336 + 8 + 8 × 4 + 8 × 4 = 14,408 → 14,416 (forward dispatch), 14,336 + 8 = 14,344 →
    14,352 (forward combine, backward dispatch), 14,336 + 8 + 32 = 14,376 → 14,384 (backward
    combine). HybridEP at EP 64 in one domain, 4 experts a rank: 4 × 64 floats = 1,024 bytes
    in the forward dispatch and the backward combine; Qwen3-30B-A3B (128 experts, EP 8): 16 × 8
    × 4 = 512. The NCCL all-to-all's rows carry nothing (its probabilities ride their own
    all-to-all, model.moe_kernels.dispatch_metadata)."""
    assert side_bytes(DEEPEP, 14336, 8, 0, False) == (96, 0, 32, 0)
    assert side_bytes(DEEPEP, 14336, 8, 0, True) == (14416 - 14336, 16, 14384 - 14336, 16)
    assert side_bytes(HYBRIDEP, 14336, 8, 4 * 64, False) == (1024, 0, 1024, 0)
    assert transfer_side_bytes(HYBRIDEP, 14336, 256, 8, 64, 1, 64) == (1024, 0, 1024, 0)
    assert transfer_side_bytes(HYBRIDEP, 4096, 128, 8, 8, 1, 8) == (512, 0, 512, 0)
    assert transfer_side_bytes(MoERun(), 14336, 256, 8, 64, 1, 8) == (0, 0, 0, 0)
    # FP8 rows would add h/128 float32 scaling factors to the forward dispatch (none runs FP8)
    assert side_bytes(HYBRIDEP, 7168, 8, 256, False, fp8=True)[0] == 1024 + 4 * 56


def test_hybridep_buffers_hold_the_rows_the_dispatch_sends():
    """HybridEP's NVLink buffer holds, for each of its T·R·N tokens, the 2h-byte token, the
    probability row the dispatch sends beside it and the scaling factors (allocated for BF16 too):
    DeepSeek-V3 at EP 64 in one domain, 4,096 tokens: 262,144 × (14,336 + 1,024 + 224) plus the
    custom all-gather's routing map (256 × 4,096 × 64 booleans) = 4,152,360,960 bytes, the
    1,024 the same figure the time reads."""
    t = hybridep_tokens_per_rank(4096)
    nvl, rdma = hybridep_buffer_bytes(7168, 4096, 4, 64, 1)
    probs = side_bytes(HYBRIDEP, 14336, 8, 4 * 64, False)[0]
    assert nvl == t * 64 * (14336 + probs + 4 * 7168 // 128) + 256 * t * 64 == 4_152_360_960
    assert rdma == 0


def test_hybridep_deepseek_v3_ep64_on_gb200_with_its_probabilities():
    """DeepSeek-V3's 4,096 tokens a rank at EP 64 in one GB200 domain: a token reaches R =
    64·(1 − C(252, 8)/C(256, 8)) = 7.675 ranks; a rank receives 4,096·R rows each transfer. The
    published GB200 EP 36 figures (held beyond), 612.85 / 543.27 GB/s of 14,336-byte rows, came
    from rows carrying 8 × 36 × 4 = 1,152 bytes of probabilities: the kernels moved 15,488/14,336
    of them, 662.10 / 586.93 GB/s. The run's forward dispatch and backward combine carry 1,024
    bytes (15,360 a row), the forward combine and backward dispatch none: forward 4,096·R ×
    (15,360/662.10e9 + 14,336/586.93e9), backward 4,096·R × (15,360/586.93e9 + 14,336/662.10e9),
    against 4,096·R × 14,336 × (1/612.85e9 + 1/543.27e9) each before (0.9587 of it)."""
    r = 64 * (1 - math.comb(252, 8) / math.comb(256, 8))
    assert float(expected_distinct_nodes(256, 64, 8)) == pytest.approx(r, rel=1e-12)
    rates = kernel_rates("hybridep", "GB200", 900e9, 72)
    assert rates is not None
    d, c = rates.at(64)
    assert (d, c) == pytest.approx((612.85e9 * 15488 / 14336, 543.27e9 * 15488 / 14336))
    rows = 4096 * r
    x = LayerShape(one_moe_layer(256), True, 4096, 1, 1, ep=64, moe_run=HYBRIDEP)
    clock = Clock(
        2.5e15, 8e12, RooflineParams(gemm_efficiency=0.6), ep_link=LinkTime(900e9, True),
        ep_per_domain=64, ep_kernel=(d, c),
    )  # fmt: skip
    fwd, bwd = ep_all_to_all_seconds(x, clock, False)
    assert fwd == pytest.approx(rows * (15360 / d + 14336 / c), rel=1e-12)
    assert bwd == pytest.approx(rows * (15360 / c + 14336 / d), rel=1e-12)
    before = rows * 14336 * (1 / 612.85e9 + 1 / 543.27e9)
    assert (fwd + bwd) / (2 * before) == pytest.approx(0.9587, abs=5e-5)
