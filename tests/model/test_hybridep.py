"""HybridEP (Megatron-Core ``--moe-flex-dispatcher-backend hybridep``) as it runs: its dispatch
across NVLink domains (model.moe_dispatch.all_to_all_sent, the rule DeepEP's reads) and its resident
buffers (model.dispatch_buffers). Read at deepseek-ai/DeepEP ``hybrid-ep`` 94a9f8f6b1; every
figure derived by hand here."""

from __future__ import annotations

import math

import pytest

from trainplan.model.dispatch_buffers import (
    dispatch_buffer_bytes,
    hybridep_buffer_bytes,
    hybridep_tokens_per_rank,
)
from trainplan.model.errors import InputError
from trainplan.model.moe_dispatch import (
    all_to_all_sent,
    dispatch_time_share,
    dispatch_traffic_share,
)
from trainplan.model.moe_run import Dispatcher, MoERun

HYBRIDEP = MoERun(dispatcher=Dispatcher.HYBRIDEP)


def test_a_token_crosses_to_each_remote_domain_once():
    """EP 64 over 8 domains of 8 (H100 nodes), 256 experts (32 a domain), top-8, no node limit.
    HybridEP's metadata kernel (``hybrid_ep_backend.cuh`` ``scan``) sets one
    ``rdma_to_attn_map`` flag per token and domain when any of the domain's 32 experts takes
    it, and the dispatch's RDMA warp group writes each flagged token once: E[D] = 8·(1 −
    C(224, 8)/C(256, 8)) domains a token reaches, E[D]·7/8 of them remote, as DeepEP's rule
    (the link rule times the message at NIC·63/56, so the scale-out bytes are handed to it as
    T·E[remote]·row·63/56)."""
    d = 8 * (1 - math.comb(224, 8) / math.comb(256, 8))
    expected = 4096 * d * 7 / 8 * 14336 * 63 / 56
    got = all_to_all_sent(HYBRIDEP, 4096, 256, 8, 64, 8, 14336)
    assert got == pytest.approx(expected, rel=1e-12)
    assert got == all_to_all_sent(MoERun(dispatcher="deepep"), 4096, 256, 8, 64, 8, 14336)
    # 4.63 remote domains a token in place of 7 remote copies: 0.661 of the plain time (the
    # traffic's share, sends and NVLink forwards, times the timed share of it)
    share = dispatch_traffic_share(HYBRIDEP, 256, 8, 64, 8) * dispatch_time_share(
        HYBRIDEP, 256, 8, 64, 8
    )
    assert float(share) == pytest.approx(d / 8, rel=1e-12)
    assert round(d * 7 / 8, 2) == 4.63
    # within one NVLink domain (GB200 NVL72 at EP 64) nothing crosses the scale-out network and
    # the S2G warp group writes a token once to each rank whose sparse_to_dense_map entry is
    # set: R = 64·(1 − C(252, 8)/C(256, 8)) ≈ 7.676 ranks of 4 experts, 63/64 of them remote, in
    # place of 8·63/64 copies
    r = 64 * (1 - math.comb(252, 8) / math.comb(256, 8))
    inside = all_to_all_sent(HYBRIDEP, 4096, 256, 8, 64, 64, 14336)
    assert inside == pytest.approx(4096 * r * 63 / 64 * 14336, rel=1e-12)
    assert all_to_all_sent(MoERun(), 4096, 256, 8, 64, 64, 14336) == 462_422_016
    assert inside / 462_422_016 == pytest.approx(r / 8) == pytest.approx(0.95947, abs=5e-6)


def test_node_limited_routing_bounds_hybrideps_dispatch_too():
    """Megatron-Core's group-limited routing (``--moe-router-num-groups`` = domains,
    ``--moe-router-group-topk`` M) bounds the domains a token reaches whatever the flex backend:
    M = 4 gives DeepEP's E[min(D, 4)]·7/8 ≤ 3.5 remote domains."""
    limited = MoERun(dispatcher="hybridep", node_limit=4)
    got = all_to_all_sent(limited, 4096, 256, 8, 64, 8, 14336)
    assert got == all_to_all_sent(
        MoERun(dispatcher="deepep", node_limit=4), 4096, 256, 8, 64, 8, 14336
    )
    assert got * 56 / 63 / (4096 * 14336) <= 3.5
    with pytest.raises(InputError, match="deepep or hybridep"):
        MoERun(node_limit=4)


def test_tokens_per_rank_as_the_configurer_pads_them():
    """``Configurer`` (``csrc/hybrid_ep/config.cuh``): ``max(tokens, 512)`` rounded up to the
    combine's 64-token chunk."""
    assert hybridep_tokens_per_rank(4096) == 4096
    assert hybridep_tokens_per_rank(4097) == 4160  # 65 chunks of 64
    assert hybridep_tokens_per_rank(100) == 512
    assert hybridep_tokens_per_rank(12288.0) == 12288


def test_buffers_across_eight_domains_item_by_item():
    """DeepSeek-V3 (h 7,168; 256 experts, 4 a rank at EP 64), 4,096 tokens a rank, 8 domains of
    8 ranks (T 4,096, R 8, N 8, L 4, s = 7,168 // 128 = 56), each buffer as the code allocates
    it:

    NVLink (``intranode.cu``; dispatch shares the combine's token and prob buffers), M = T·R·N
    = 262,144 tokens: tokens M·h·2 = 3,758,096,384; probabilities M·(L·R)·4 = 33,554,432;
    scaling factors M·s·4 = 58,720,256; the custom all-gather's routing map (``allgather.cu``)
    (L·R·N)·T·R·N = 256·4,096·64 = 67,108,864 booleans.

    RDMA (``internode_doca.cu``), T·(N − 1) = 28,672 remote tokens: the dispatch's
    ``attn_input_token`` T·h·2 = 58,720,256, ``attn_input_prob`` T·(L·R·N)·4 = 4,194,304,
    ``attn_input_scaling_factor`` T·s·4 = 917,504, ``rdma_inter_node_group_token`` 28,672·h·2
    = 411,041,792, ``_prob`` 28,672·32·4 = 3,670,016, ``_scaling_factor`` 28,672·56·4 =
    6,422,528; the combine's ``rdma_intra_node_red_token`` and ``rdma_inter_node_group_token``
    411,041,792 each, their probabilities 3,670,016 each."""
    nvl = 3_758_096_384 + 33_554_432 + 58_720_256 + 67_108_864
    dispatch = 58_720_256 + 4_194_304 + 917_504 + 411_041_792 + 3_670_016 + 6_422_528
    combine = 2 * (411_041_792 + 3_670_016)
    assert hybridep_buffer_bytes(7168, 4096, 4, 8, 8) == (nvl, dispatch + combine)
    assert nvl + dispatch + combine == 5_231_869_952
    assert dispatch_buffer_bytes(HYBRIDEP, 7168, 64, True, 4096, 4, 8) == 5_231_869_952


def test_one_domain_against_the_branchs_own_table():
    """The branch's ``docs/Hybrid-EP_Implementation.md`` §4.2, MNNVL row (EP 64 in one domain,
    256 experts, BF16, h 7,168, 4,096 tokens a rank): token buffer 262,144·7,168·2 ≈ 3.5 GB and
    probabilities 262,144·256·4 ≈ 256 MB; the code adds the scaling factors (262,144·56·4 =
    58,720,256) and the all-gather's map (67,108,864); no RDMA buffers."""
    token, prob = 262_144 * 7168 * 2, 262_144 * 256 * 4
    assert (token, prob) == (3_758_096_384, 268_435_456)
    assert round(token / 2**30, 1) == 3.5 and prob == 256 * 2**20
    assert hybridep_buffer_bytes(7168, 4096, 4, 64, 1) == (
        token + prob + 58_720_256 + 67_108_864,
        0,
    )


def test_the_group_and_its_domains():
    """Nothing at EP 1 or for the NCCL all-to-all; a domain count that does not divide the
    group (HybridEP asserts it does) is read as one domain, as the dispatch rule reads it."""
    assert dispatch_buffer_bytes(HYBRIDEP, 7168, 1, True, 4096, 256, 1) == 0
    assert dispatch_buffer_bytes(MoERun(), 7168, 64, True, 4096, 4, 8) == 0
    one = dispatch_buffer_bytes(HYBRIDEP, 7168, 64, True, 4096, 4, 0)
    assert one == dispatch_buffer_bytes(HYBRIDEP, 7168, 64, True, 4096, 4, 36)
    assert one == sum(hybridep_buffer_bytes(7168, 4096, 4, 64, 1)) == 4_152_360_960
