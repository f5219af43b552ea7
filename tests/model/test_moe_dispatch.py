"""What one expert dispatch sends under each dispatcher (model.moe_dispatch): NCCL's all-to-all one
row per (token, expert) pair (Megatron-LM d98e8a64dd ``MoEAlltoAllTokenDispatcher.preprocess``:
``input_splits`` = tokens per expert summed per rank), DeepEP and HybridEP one row per
destination rank (deepseek-ai/DeepEP dd758ca ``layout.cu`` ``is_token_in_rank``,
``intranode.cu`` / ``internode.cu`` ``dispatch``; ``hybrid-ep`` 94a9f8f6b1
``hybrid_ep_backend.cuh`` ``scan`` and ``S2G_warp_group_device_function``). Every figure
derived by hand here."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from trainplan.model.comm_layers import ep_bytes
from trainplan.model.moe import expected_distinct_nodes, expected_remote_nodes
from trainplan.model.moe_dispatch import (
    all_to_all_sent,
    dispatch_copies,
    dispatch_time_share,
    dispatch_traffic_share,
)
from trainplan.model.moe_run import MoERun
from trainplan.model.op_rates import deployed_params
from trainplan.model.roofline import Collective, LinkTime, collective_seconds
from trainplan.model.specs import Architecture, MoESpec
from trainplan.scenarios.kernel_data import collective_data
from trainplan.topology.accelerators import get_accelerator

DEEPEP = MoERun(dispatcher="deepep")
HYBRIDEP = MoERun(dispatcher="hybridep")


def test_k8_of_256_over_ep8_is_sent_to_5_29_ranks():
    """k 8 of 256 experts over ep 8 (32 experts a rank) in one NVLink domain. A rank is missed
    when all 8 experts fall among the other 224:
    C(224, 8)/C(256, 8) = 138,535,357,316,356 / 409,663,695,276,000 = 0.338168...,
    so a token reaches R = 8·(1 − 0.338168) = 5.294652 distinct ranks; by symmetry 7/8 of them
    are not its own: 4.632821 rows sent a token, against NCCL's 8·7/8 = 7 copies — R/k =
    0.661832 of the bytes, and (one domain: the NVLink share is all of it) of the time."""
    assert math.comb(224, 8) == 138_535_357_316_356
    assert math.comb(256, 8) == 409_663_695_276_000
    r = 8 * (1 - Fraction(138_535_357_316_356, 409_663_695_276_000))
    assert float(r) == pytest.approx(5.294652, abs=5e-7)
    assert expected_distinct_nodes(256, 8, 8) == r  # the one rule, the ranks as its groups
    for run in (DEEPEP, HYBRIDEP):
        assert dispatch_copies(run, 256, 8, 8, 8) == (r * Fraction(7, 8), r * Fraction(7, 8))
        assert dispatch_traffic_share(run, 256, 8, 8, 8) == r / 8
        assert float(r / 8) == pytest.approx(0.661832, abs=5e-7)
        assert dispatch_time_share(run, 256, 8, 8, 8) == 1
    assert dispatch_copies(MoERun(), 256, 8, 8, 8) == (Fraction(7), Fraction(7))
    # the busiest rank's bytes: 4,096 tokens, 7,168 BF16 a row, imbalance 1.25
    run = MoERun(dispatcher="deepep", imbalance=Fraction(5, 4))
    expected = 1.25 * 4096 * float(r) * 7 / 8 * 14336
    assert all_to_all_sent(run, 4096, 256, 8, 8, 8, 14336) == pytest.approx(expected, rel=1e-12)
    assert all_to_all_sent(MoERun(imbalance=Fraction(5, 4)), 4096, 256, 8, 8, 8, 14336) == (
        1.25 * 4096 * 8 * 14336 * 7 / 8
    )


def test_unknown_domain_counts_the_ranks_as_one_domain():
    """No domain known (``per_domain`` 0): the once-per-rank sends still hold, counted as in
    one domain; a domain that does not divide ep, likewise."""
    r = expected_distinct_nodes(256, 8, 8)
    assert dispatch_copies(DEEPEP, 256, 8, 8, 0)[0] == r * Fraction(7, 8)
    assert dispatch_copies(DEEPEP, 256, 8, 8, 3)[0] == r * Fraction(7, 8)


def test_across_nodes_the_nvlink_forward_is_once_per_rank():
    """DeepEP over 8 nodes of 8 (ep 64, 4 experts a rank, 32 a node), k 8, no node limit:
    * RDMA: E[D]·7/8 remote nodes a token, E[D] = 8·(1 − C(224, 8)/C(256, 8)) = 5.294652 →
      4.632821 rows;
    * NVLink forward: the forwarder of each reached node sends a token once to each of the
      node's destination ranks other than itself (``SourceMeta::is_token_in_nvl_rank``), and
      inside its own node the sender does: R = 64·(1 − C(252, 8)/C(256, 8)) distinct ranks,
      C(252, 8)/C(256, 8) = 360,531,254,845,125 / 409,663,695,276,000 = 0.880068..., R =
      7.675750; the 1/8 of them at the sender's local index are the forwarder itself: R·7/8 =
      6.716281 rows;
    * sent 11.349102 rows a token against NCCL's 8·63/64 = 7.875 (1.441156: a forwarded row
      crosses two links); timed, the scale-out share at the rule's scale, 4.632821·63/56 =
      5.211923 rows, 0.459237 of what is sent."""
    assert math.comb(252, 8) == 360_531_254_845_125
    d = 8 * (1 - Fraction(math.comb(224, 8), math.comb(256, 8)))
    r = 64 * (1 - Fraction(360_531_254_845_125, 409_663_695_276_000))
    assert float(r) == pytest.approx(7.675750, abs=5e-7)
    assert expected_remote_nodes(256, 8, 8) == d * Fraction(7, 8)
    sent, timed = dispatch_copies(DEEPEP, 256, 8, 64, 8)
    assert sent == d * Fraction(7, 8) + r * Fraction(7, 8)
    assert timed == d * Fraction(7, 8) * Fraction(63, 56)
    assert (float(sent), float(timed)) == pytest.approx((11.349102, 5.211923), abs=5e-7)
    assert float(dispatch_traffic_share(DEEPEP, 256, 8, 64, 8)) == pytest.approx(1.441156, abs=5e-7)
    assert float(dispatch_time_share(DEEPEP, 256, 8, 64, 8)) == pytest.approx(0.459237, abs=5e-7)
    assert dispatch_copies(HYBRIDEP, 256, 8, 64, 8) == (sent, timed)


def _enumerated(experts: int, ep: int, g: int, k: int) -> tuple[Fraction, Fraction]:
    """(RDMA rows, NVLink rows) a token sends on average, counted on every expert subset and
    every source rank: ranks ``0 … ep − 1`` in domains of ``g`` consecutive ranks, ``E/ep``
    consecutive experts a rank; a token goes once to each remote domain that holds one of its
    experts (to the rank at its own local index there) and then once over NVLink to each of
    that domain's destination ranks other than the receiver (in its own domain, other than
    itself)."""
    per_rank = experts // ep
    rdma = nvl = 0
    cases = 0
    for chosen in itertools.combinations(range(experts), k):
        ranks = {e // per_rank for e in chosen}
        for source in range(ep):
            cases += 1
            home, local = divmod(source, g)
            domains = {rank // g for rank in ranks}
            rdma += len(domains - {home})
            nvl += sum(1 for rank in ranks if rank % g != local)
    return Fraction(rdma, cases), Fraction(nvl, cases)


@pytest.mark.parametrize(("experts", "ep", "g", "k"), [(8, 4, 2, 2), (8, 4, 2, 3), (12, 6, 3, 2)])
def test_sends_agree_with_enumerating_every_routing(experts, ep, g, k):
    """The closed form of :func:`dispatch_copies` against the count over every expert subset
    and source rank, small groups across domains and inside one."""
    rdma, nvl = _enumerated(experts, ep, g, k)
    sent, timed = dispatch_copies(DEEPEP, experts, k, ep, g)
    assert sent == rdma + nvl
    assert timed == rdma * Fraction(ep - 1, ep - g)
    one_rdma, one_nvl = _enumerated(experts, ep, ep, k)
    assert one_rdma == 0
    assert dispatch_copies(DEEPEP, experts, k, ep, ep) == (one_nvl, one_nvl)


def test_traffic_table_counts_the_ranks_sent_to():
    """``comm_layers.ep_bytes`` under DeepEP in one domain: 4 experts a rank of 32 (gpt-oss-20b's
    32 experts, top-4) over ep 8: C(28, 4)/C(32, 4) = 20,475/35,960, R = 8·15,485/35,960 =
    3.444939 ranks; one micro-batch of 4,096 tokens, h 2,880, BF16, 24 layers, dispatch and
    combine in forward and backward: 4,096·R·7/8·2,880·2·4·24 bytes, R/4 = 0.861235 of NCCL's."""
    arch = Architecture(
        num_layers=24, hidden_size=2880, num_attention_heads=64, ffn_hidden_size=2880,
        vocab_size=1024, moe=MoESpec(num_experts=32, experts_per_token=4, expert_ffn_hidden_size=2880),
    )  # fmt: skip
    r = 8 * Fraction(35960 - 20475, 35960)
    assert Fraction(math.comb(28, 4), math.comb(32, 4)) == Fraction(20475, 35960)
    share = dispatch_traffic_share(DEEPEP, 32, 4, 8, 8)
    assert share == r / 4
    plain = ep_bytes(arch, 24, 8, 1, 1, 1, 1, 4096, 2, False, False)
    got = ep_bytes(arch, 24, 8, 1, 1, 1, 1, 4096, 2, False, False, DEEPEP, share)
    assert plain == 4096 * 4 * 2880 * 2 * Fraction(7, 8) * 4 * 24 == 7_927_234_560
    assert got == 4096 * r * Fraction(7, 8) * 2880 * 2 * 4 * 24
    assert float(got / plain) == pytest.approx(0.861235, abs=5e-7)


def test_nccl_rule_against_the_kernels_published_bandwidth():
    """A check, not a fit. DeepEP's intranode normal kernels at EP 8 on H800 (docs/legacy.md at
    dd758ca; scenarios/kernels/collectives.toml): 153 GB/s FP8 dispatch, 158 GB/s BF16 combine,
    counted by its tests/legacy/test_intranode.py as the bytes a rank receives (``recv_x``: R·T
    rows, its own copy in) over the time. The model times R·7/8·T rows on NVLink at NCCL's
    0.8 of 200 GB/s plus the all-to-all's 11.8 µs: for 4,096 tokens of 7,168 BF16, R·T·row =
    310.90 MB received in 11.8 µs + 272.04 MB / 160 GB/s = 1,712.05 µs, 181.6 GB/s as DeepEP
    counts — 15 % faster than DeepEP's combine (timed as every routed copy, 120.5 GB/s, it was
    24 % slower). HybridEP's B200 figures (``hybrid-ep`` 94a9f8f6b1 docs/README_Hybrid-EP.md, EP
    8, 8 experts a rank, its kernel-only BF16 dispatch 734.95 and combine 673.84 GB/s, the
    same count) stand 9 % and 19 % under the model's 798.6 GB/s (0.8 of 900 GB/s; R = 5.4326 of
    64 experts). NCCL's rule, that is: DeepEP's and HybridEP's kernels do not reach NCCL's
    NVLink efficiency, and the layer clock times them at their own published rates instead
    (model.ep_kernels; tests/model/test_ep_kernels.py)."""
    r = float(expected_distinct_nodes(256, 8, 8))
    received = 4096 * r * 14336
    sent = all_to_all_sent(DEEPEP, 4096, 256, 8, 8, 8, 14336)
    assert sent == pytest.approx(received * 7 / 8, rel=1e-12)
    p = deployed_params("H800")
    assert (p.scaleup_efficiency, get_accelerator("H800").nvlink_bytes_per_s) == (0.8, 200e9)
    t = collective_seconds(Collective.ALL_TO_ALL, 8, sent, LinkTime(200e9, True), p)
    assert t == pytest.approx(11.8e-6 + received * 7 / 8 / 160e9, rel=1e-12)
    assert (received / 1e6, t * 1e6) == pytest.approx((310.90, 1712.05), abs=0.01)
    combine = next(
        row.combine_gbps[0]
        for row in collective_data().expert_all_to_all
        if (row.library, row.part, row.link) == ("deepep-v1-normal", "H800", "nvlink")
    )
    assert combine == 158
    assert received / t / 1e9 == pytest.approx(181.6, abs=0.05)
    assert received / t / 158e9 == pytest.approx(1.149, abs=5e-4)
    b200 = 4096 * float(expected_distinct_nodes(64, 8, 8)) * 14336
    t_b200 = 11.8e-6 + b200 * 7 / 8 / 720e9
    assert b200 / t_b200 / 1e9 == pytest.approx(798.6, abs=0.05)
