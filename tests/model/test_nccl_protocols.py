"""NCCL's choice of algorithm and protocol (model.nccl_tuner), as its tuner makes it (NVIDIA/nccl
5067397c ``src/graph/tuning.cc`` ``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``,
``src/enqueue.cc`` ``topoGetAlgoInfo``): the least ``latency + bytes ÷ bandwidth`` over the ring
in LL, LL128 and Simple and, for an all-reduce, the tree in the three; and NCCL's node on parts
whose NVLink joins two GPUs of a host (model.rank_groups.nccl_node_size, the one rule). Every
figure by hand from NCCL's constants (``scenarios/kernels/collectives.toml`` ``[nccl_latency]``)."""

from __future__ import annotations

import pytest

from trainplan.model.hardware import ClusterLinks
from trainplan.model.nccl_tuner import candidate_seconds, protocol_seconds, ring_graph
from trainplan.model.op_rates import deployed_params
from trainplan.model.rank_groups import nccl_node_size, nccl_nodes, other_placement
from trainplan.model.roofline import Collective, collective_latency, collective_time
from trainplan.topology.accelerators import get_accelerator
from trainplan.topology.placement import axis_links

US = 1e-6
H100 = deployed_params("H100-SXM")
AG, AR = Collective.ALL_GATHER, Collective.ALL_REDUCE


@pytest.mark.parametrize(
    ("buffer", "pick", "micros"),
    [
        # 64 KiB: LL, 6.6 + 15 × 5.0 µs and 15/16 · 65,536 B at min(20.4, 0.5 × 48) GB/s
        (2**16, ("ring", "LL"), 6.6 + 15 * 5.0 + 15 / 16 * 2**16 / 20.4e3),
        # 4 MiB: LL128, 14 + 15 × 8.5 µs and the bytes at min(0.92 × 48, 2 × 36.7) GB/s
        (2**22, ("ring", "LL128"), 14 + 15 * 8.5 + 15 / 16 * 2**22 / 44.16e3),
        # 128 MiB: Simple, 8.4 + 15 × 14 µs and the bytes at 48 GB/s (the model's figure before)
        (2**27, ("ring", "Simple"), 8.4 + 15 * 14 + 15 / 16 * 2**27 / 48e3),
    ],
)
def test_an_all_gather_over_16_nodes_one_rank_a_node_by_size(buffer, pick, micros):
    """dp 16 outside tp 8 on H100 nodes: one rank a node, one 50 GB/s NIC at 0.96 (48 GB/s of
    bus bandwidth, NCCL's ``nChannels × bw``). Every step crosses the network, at the tree's
    network hop since each node holds one rank (``ppn == 1``): LL 5.0, LL128 8.5, Simple 14 µs.
    The ring graph: 1 channel at 48 GB/s, doubled to 2 at 24 (``ncclTopoDupChannels``), so
    LL128's cap is 2 × 36.7 GB/s; LL's is ``llMaxBws`` on an Intel host at 4+ nodes, 20.4.
    LL128 from 2.27 MB sent a rank (59.9 µs of latency ÷ (1/20.4 − 1/44.16) ns a byte), Simple
    from 42.4 MB (76.9 µs ÷ (1/44.16 − 1/48))."""
    sent = 15 / 16 * buffer
    chosen, seconds = protocol_seconds("all-gather", 16, sent, 50e9, 48e9, False, "H100-SXM", 1, 16)
    assert chosen == pick
    assert seconds == pytest.approx(micros * US, rel=1e-12)
    assert collective_time(AG, 16, sent, 50e9, False, H100, 1, 16) == pytest.approx(seconds)


def test_large_all_reduces_across_nodes_run_the_ring_in_ll128_then_simple():
    """Over 64 H100s, 8 a node (8 NICs: 400 GB/s, 384 at 0.96; the ring graph's 8 channels at
    45 GB/s). The ring in Simple: 2 × 63 = 126 steps, 2 × 7 = 14 across nodes, (8.4 + 14 × 14
    + 112 × 3.4) µs × 1.4 (``ncclTopoGetAlgoTime``'s plateau: each rank's share of a channel,
    the buffer ÷ (16 × 64), is over 64 bytes) = 819.28 µs, the bytes at 384 GB/s. In LL128:
    14 + 14 × 4.0 + 112 × 1.9 = 282.8 µs, the bytes at min(0.92 × 384, 8 × 36.7) = 293.6
    GB/s. The tree in Simple: 8.4 + 2 × (7 × 4.0 + ⌊log₂ 8⌋ × 14) = 148.4 µs and the buffer at
    min(0.92 × 384, 8 × 36.0) × 0.5 × ``treeCorrectionFactor`` (0.9 at 2^22 × 64 B; none from
    2^23 × 64 B). LL128's 536.5 µs less latency outweighs its slower bytes up to 668 MB sent a
    rank: a 256 MiB buffer (528 MB sent) runs the ring in LL128, 2,082.8 µs (Simple 2,195.5,
    the tree 2,219.7; the model before charged the tree's latency with Simple's bandwidth,
    148.4 + 1,376.3 = 1,524.7 µs); a 2 GiB one the ring in Simple."""
    for buffer, pick in ((2**28, "LL128"), (2**31, "Simple")):
        sent = 2 * 63 / 64 * buffer
        out = candidate_seconds("all-reduce", 64, sent, 400e9, 384e9, False, "H100-SXM", 8, 8)
        ll128 = 282.8 * US + sent / 293.6e9
        simple = (8.4 + 14 * 14 + 112 * 3.4) * 1.4 * US + sent / 384e9
        assert out["ring", "LL128"] == pytest.approx(ll128, rel=1e-12)
        assert out["ring", "Simple"] == pytest.approx(simple, rel=1e-12)
        assert min(out, key=out.__getitem__) == ("ring", pick)
        t = collective_time(AR, 64, sent, 400e9, False, H100, 8, 8)
        assert t == pytest.approx(min(ll128, simple), rel=1e-12)
    tree = 148.4 * US + 2**28 / 129.6e9
    sent = 2 * 63 / 64 * 2**28
    out = candidate_seconds("all-reduce", 64, sent, 400e9, 384e9, False, "H100-SXM", 8, 8)
    assert out["tree", "Simple"] == pytest.approx(tree, rel=1e-12)
    assert [round(out[k] / US, 1) for k in (("ring", "LL128"), ("ring", "Simple"))] == [
        2082.8, 2195.5,
    ]  # fmt: skip
    before = collective_latency(AR, 64, False, H100, 8, 8) + sent / 384e9
    assert before == pytest.approx(1524.66 * US, abs=0.01 * US)


def test_a_tree_all_reduce_at_one_rank_a_node_takes_the_plain_patterns_085():
    """dp 64 outside tp 8 on H100 nodes, a 16 MiB all-reduce: each node holds one rank, so
    ``ncclTopoCompute`` gives each rank's tree graph the plain pattern (``src/graph/search.cc``:
    ``ngpus == 1`` → ``NCCL_TOPO_PATTERN_TREE``) and ``ncclTopoTuneModel`` scales the tree's
    bus bandwidth by 0.85 (``src/graph/tuning.cc``: ``comm->maxTreePattern ==
    NCCL_TOPO_PATTERN_TREE``). The tree in LL128: 14 + 2 × (0 × 1.25 + ⌊log₂ 64⌋ × 8.5) = 116
    µs; min(0.92 × 48, 2 × 36.0) = 44.16 GB/s × 120/128 = 41.4 (under 2 × 29.0), × 0.85 =
    35.19, × 0.5 and × 0.9 (``treeCorrectionFactor`` at 2^18 × 64 B): 15.8355 GB/s for the
    whole buffer, 116 + 1,059.5 µs (without the 0.85, 1,016.5). The tree in Simple: 8.4 + 2 ×
    6 × 14 = 176.4 µs at 44.16 × 0.85 × 0.5 × 0.7 GB/s; the ring in LL128 14 + 126 × 8.5 µs at
    44.16 GB/s for 2 × 63/64 of it: both slower."""
    buffer, sent = 2**24, 2 * 63 / 64 * 2**24
    out = candidate_seconds("all-reduce", 64, sent, 50e9, 48e9, False, "H100-SXM", 1, 64)
    tree_ll128 = 116 * US + buffer / (41.4e9 * 0.85 * 0.5 * 0.9)
    tree_simple = 176.4 * US + buffer / (44.16e9 * 0.85 * 0.5 * 0.7)
    ring_ll128 = (14 + 126 * 8.5) * US + sent / 44.16e9
    assert out["tree", "LL128"] == pytest.approx(tree_ll128, rel=1e-12)
    assert out["tree", "Simple"] == pytest.approx(tree_simple, rel=1e-12)
    assert out["ring", "LL128"] == pytest.approx(ring_ll128, rel=1e-12)
    assert protocol_seconds("all-reduce", 64, sent, 50e9, 48e9, False, "H100-SXM", 1, 64)[0] == (
        "tree", "LL128",
    )  # fmt: skip
    assert round(tree_ll128 / US, 1) == 1175.5
    t = collective_time(AR, 64, sent, 50e9, False, H100, 1, 64)
    assert t == pytest.approx(tree_ll128, rel=1e-12)
    two_a_node = candidate_seconds("all-reduce", 64, sent, 100e9, 96e9, False, "H100-SXM", 2, 32)
    lat = (14 + 2 * (1 * 1.25 + 5 * 8.5)) * US  # 2 a node: the balanced tree, no 0.85
    bus = min(min(0.92 * 96, 4 * 36.0) * 120 / 128, 4 * 29.0)  # the ring graph: 4 channels
    assert two_a_node["tree", "LL128"] == pytest.approx(lat + buffer / (bus * 0.45e9), rel=1e-12)


def test_the_ring_graph_of_a_node_and_across_nodes():
    """``ncclTopoCompute``'s ring graph as the tuner reads it: 8 H100s of a node 6 channels at
    60 GB/s doubled to 12 at 30 (``comm->nChannels`` 24 after ``ncclTopoPostset``); across
    nodes at 8 a node 8 at 45 (8 NICs, 400 GB/s: not doubled below 50 GB/s with more than 4;
    NCCL's bound of the channels by the NVLinks is not read, so 48 GB/s's 8, the same count;
    16 after Postset), at 4 a node 4 at 48 doubled to 8 at 24 (16)."""
    assert ring_graph("H100-SXM", True, 8, 450e9) == (12, 24)
    assert ring_graph("H100-SXM", False, 8, 400e9) == (8, 16)
    assert ring_graph("H100-SXM", False, 4, 200e9) == (8, 16)


def test_inside_a_node_without_a_curve_small_messages_run_ll():
    """8 H20s (no published curve: NCCL's latency and bandwidth time the node's collectives):
    an all-gather of 64 KiB runs the ring in LL, 6.6 + 7 × 0.6 µs and 7/8 × 64 KiB at
    min(141, 0.5 × 0.8 × 450) GB/s (Simple's 8.4 + 7 × 3.4 = 32.2 µs before); 1 GiB runs
    Simple at 0.8 × 450 GB/s, as before."""
    p = deployed_params("H20")
    assert p.busbw_curve == ()
    small, large = 7 / 8 * 2**16, 7 / 8 * 2**30
    ll = (6.6 + 7 * 0.6) * US + small / 141e9
    assert collective_time(AG, 8, small, 450e9, True, p, 8, 1) == pytest.approx(ll, rel=1e-12)
    simple = 32.2 * US + large / 360e9
    assert collective_time(AG, 8, large, 450e9, True, p, 8, 1) == pytest.approx(simple, rel=1e-12)


def test_a_part_outside_nccl_keeps_simple():
    """MI300X (RCCL, not NCCL's tuner): Simple's latency plus the bytes at the link's
    efficiency, as before: 8.4 + 7 × 3.4 µs over its Infinity Fabric at 0.8."""
    p = deployed_params("MI300X")
    sent = 7 / 8 * 2**16
    t = collective_time(AG, 8, sent, 448e9, True, p, 8, 1)
    assert t == pytest.approx(32.2 * US + sent / (0.8 * 448e9), rel=1e-12)


def test_nccl_node_is_the_host_where_nvlink_bridges_two_cards():
    """H100 PCIe: NVLink bridges join pairs of cards (the domain, 2), NCCL's node is the host of
    8 (``nccl_node_size``): the placement counts each group's ``comm->nNodes`` over hosts, so
    dp 8 on one host is one node (its ring's steps inside the node; 4 before, 3 of 7 steps
    over the network), while its NICs stay one pair's members (2). dp 16 over two hosts: 2
    nodes; groups at stride 2 (tp 2 inside the pairs): 1 member a pair, 4 a host, 2 hosts.
    Groups of 6 at stride 1 over 24: 0–5 and 18–23 on one host, 6–11 and 12–17 on two, each 2
    a pair; over pairs as NCCL's nodes every group touched 3 and all lay alike."""
    device = get_accelerator("H100-PCIe").with_links(scaleout_bytes_per_s=25e9)
    links = ClusterLinks.from_device(device)
    assert (links.nvlink_domain, links.nccl_node) == (2, 8)
    assert nccl_node_size(device.gpus_per_node, device.placement_domain) == 8
    dp = axis_links({"dp": 8}, links)["dp"]
    assert (dp.link, dp.per_domain, dp.domains) == ("scale-out", 2, 1)
    assert nccl_nodes(1, 8, 8, 2) == 4
    assert nccl_nodes(1, 16, 16, 2, 8) == 2
    assert nccl_nodes(2, 8, 16, 2, 8) == 2
    assert other_placement(1, 6, 24, 2, 8) == (2, 1)
    assert nccl_nodes(1, 6, 24, 2, 8) == 2
    assert other_placement(1, 6, 24, 2) == (0, 0)
    placed = axis_links({"tp": 2, "dp": 8}, links)["dp"]
    assert (placed.per_domain, placed.domains) == (1, 2)
