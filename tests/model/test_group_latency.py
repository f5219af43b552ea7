"""Each group of an axis timed with its own latency and its own bandwidth, the step waiting for
the slowest (:func:`model.rank_groups.other_placement`, :func:`model.roofline.collective_time`'s
``other``): NCCL tunes every communicator on its own (nccl 5067397c ``src/graph/tuning.cc``
``ncclTopoTuneModel`` over the communicator's own ``nRanks`` and ``nNodes``), so a group's
latency is never read off one group and its bandwidth off another."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.model.test_node_straddle import _by_hand, _tables_agree
from trainplan.model.collective_rates import ring_busbw_gbps
from trainplan.model.dp_exposure import dp_seconds
from trainplan.model.mechanisms import mechanism
from trainplan.model.rank_groups import (
    domain_placements,
    fewest_in_domain,
    nccl_nodes,
    other_placement,
)
from trainplan.model.roofline import Collective, RooflineParams, collective_time
from trainplan.optimizer.case import Case
from trainplan.scenarios.kernel_data import collective_data
from trainplan.topology.placement import axis_links

P = RooflineParams(gemm_efficiency=0.7)
NIC = 50e9
"""One 400 Gb/s NIC a GPU, bytes/s (the H100 cluster's); 0.96 of it reached
(``RooflineParams.scaleout_efficiency``)."""


def _group_time(kind: Collective, size: int, sent: float, members: int, nodes: int) -> float:
    """One group's own time: across domains its members' NICs and its own node count; inside
    one domain a 900 GB/s NVLink (no published curve in ``P``)."""
    if nodes == 1:
        return float(collective_time(kind, size, sent, 900e9, True, P, size, 1))
    return float(collective_time(kind, size, sent, NIC * members, False, P, members, nodes))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 16),
    st.integers(2, 40),
    st.sampled_from([2, 3, 4, 6, 8, 16, 72]),
    st.integers(1, 4),
    st.sampled_from([Collective.ALL_REDUCE, Collective.ALL_GATHER]),
    st.sampled_from([1e3, 1e5, 1e6, 1e7, 1e9]),
)
def test_two_groups_stand_for_every_group(stride, size, domain, blocks, kind, sent):
    """Groups at one stride touch at most two numbers of domains; the other's have no fewer
    members and fewer domains; and the slower of the slowest group ``(f, n)`` and the other's
    slowest ``(m, N)``, each at its own latency and NICs, is the slowest of every group counted
    rank by rank, at every size."""
    total = stride * size * blocks
    every = _by_hand(stride, size, total, domain)  # each group's (fewest, domains), by hand
    assert len({n for _, n in every}) <= 2
    f, n = fewest_in_domain(stride, size, total, domain), nccl_nodes(stride, size, total, domain)
    m, other = other_placement(stride, size, total, domain)
    if other:
        assert m >= f and other < n
    if n == 1:  # every group in one domain
        return
    slowest = max(_group_time(kind, size, sent, *g) for g in every)
    link = (NIC * m, False, m, other) if other > 1 else (900e9, True, size, 1)
    got = collective_time(kind, size, sent, NIC * f, False, P, f, n, link if other else None)
    assert float(got) == pytest.approx(slowest, rel=1e-12)


def test_an_all_reduce_of_13_on_8_gpu_nodes_waits_for_the_group_on_two():
    """dp 13 at stride 1 on 8-GPU nodes (26 ranks, pp 2): ranks 0–12 lie 8 + 5 on 2 nodes,
    13–25 3 + 8 + 2 on 3. The slowest group by NICs, 13–25 (2 a node, 3 nodes), and the other
    (5 a node, 2 nodes). NCCL's tree all-reduce latency (``ncclTopoTuneModel``: base 8.4 µs +
    ``2·((nRanks/nNodes − 1)·4 + log2i(nNodes)·14)``; its ring, 8.4 + (24 − 2(n − 1))·3.4 +
    2(n − 1)·14, is longer for both): 13–25 8.4 + 2·(3·4 + 14) = 60.4 µs over 13 // 3 = 4 a
    node, 0–12 8.4 + 2·(5·4 + 14) = 76.4 µs over 6 a node. At 1 MB sent a rank, 13–25 takes
    60.4 + 1e6 / (2·50e9·0.96) s = 70.817 µs and 0–12 76.4 + 1e6 / (5·50e9·0.96) s =
    80.567 µs: the step waits 80.567 µs, where the slowest group's bandwidth with its latency
    gave 70.817. From 2.56 MB up (16 µs = S·(1/96e9 − 1/240e9)) 13–25 is slower, and nothing
    moves: an all-gather's ring crosses the network once less on 0–12 (8.4 + 14 + 11·3.4 =
    59.8 µs against 8.4 + 2·14 + 10·3.4 = 70.4), never slower."""
    links = Case.of("llama3-8b", "H100-SXM", global_batch_size=52).links
    placed = axis_links({"dp": 13, "pp": 2}, links)["dp_cp"]
    assert (placed.per_domain, placed.domains) == (2, 3)
    assert (placed.other_per_domain, placed.other_domains) == (5, 2)
    assert domain_placements(1, 13, 26, 8) == ((2, 3), (5, 2))
    ar, ag = Collective.ALL_REDUCE, Collective.ALL_GATHER
    other = (250e9, False, 5, 2)
    one = collective_time(ar, 13, 1e6, 100e9, False, P, 2, 3)
    both = collective_time(ar, 13, 1e6, 100e9, False, P, 2, 3, other)
    assert one == pytest.approx(60.4e-6 + 1e6 / 96e9)
    assert both == pytest.approx(76.4e-6 + 1e6 / 240e9)
    assert (round(one * 1e6, 3), round(both * 1e6, 3)) == (70.817, 80.567)
    big = collective_time(ar, 13, 3e6, 100e9, False, P, 2, 3, other)
    assert big == collective_time(ar, 13, 3e6, 100e9, False, P, 2, 3)
    gather = collective_time(ag, 13, 1e6, 100e9, False, P, 2, 3, other)
    assert gather == pytest.approx(70.4e-6 + 1e6 / 96e9)
    assert gather == collective_time(ag, 13, 1e6, 100e9, False, P, 2, 3)


def test_the_dp_term_reads_both_groups():
    """The data-parallel term's function (:func:`model.dp_exposure.dp_seconds`) with the
    other groups' link: Megatron's DDP all-reduce (ZeRO-0, FP32 gradients) of 13 buckets of
    1 MB sent each over the dp 13 above: 13 × 80.567 µs where the slowest group alone gave
    13 × 70.817 µs."""
    mech = mechanism("megatron", 0, 2, 4, 12)
    args = (mech, 13e6, 0.0, 13, 13, 100e9, False, P)
    both = dp_seconds(*args, per_domain=2, domains=3, other=(250e9, False, 5, 2))
    one = dp_seconds(*args, per_domain=2, domains=3)
    assert mech.all_reduce
    assert both.step_s == pytest.approx(13 * (76.4e-6 + 1e6 / 240e9))
    assert one.step_s == pytest.approx(13 * (60.4e-6 + 1e6 / 96e9))


def test_llama3_8b_on_dp_13_does_not_move_and_the_search_agrees():
    """Llama 3 8B, dp 13 × pp 2 on 26 H100s: Megatron's buckets are ≥ 4·10⁷ parameters (160 MB
    of FP32 gradients), far above 2.56 MB, so the slowest group by NICs is the slowest group:
    the step stays 2.30245 s under ZeRO-1 (rings) and is 2.36691 s under ZeRO-0 (all-reduce).
    The ZeRO-0 step was 2.36389 s while the all-reduce paid the tree's latency at the ring's
    bandwidth; NCCL's tuner (model.nccl_tuner) weighs each algorithm whole: a bucket of the
    slowest group (2 NICs, 96 GB/s, 3 nodes) runs the ring in Simple, (8.4 + 4 × 14 + 20 ×
    3.4) × 1.4 = 185.36 µs and 2 × 12/13 × 1.6·10⁸ B at 96 GB/s (3,262.4 µs), where the tree
    in Simple (60.4 µs and 1.6·10⁸ B at min(0.92 × 96, 4 × 36.0) × 0.5 × 0.9 = 39.744 GB/s,
    4,086.2 µs) and the ring in LL128 (68 µs and the bytes at 88.32 GB/s, 3,412.7 µs) are
    slower: 125 µs a bucket more than the 60.4 µs the tree's latency gave. The search's tables
    read the same two groups (``check_against_evaluate``)."""
    case = Case.of("llama3-8b", "H100-SXM", global_batch_size=52)
    # ZeRO-1 2.30245 s before its whole gradient buffer was zeroed at the step, 4 B × 12/13 of
    # 4,015,130,624 at 2.97 TB/s (model.terms.optimizer_time.whole_buffer_zeroing_bytes)
    # Megatron-Core's own optimizer-step passes (model.step_passes: the clip's scaling and the
    # master's second read, 12 B an element stepped) add 12 B × 4,015,130,624 at ZeRO-0 (16.2 ms)
    # and × 1/13 of it at ZeRO-1 (1.2 ms), at 2.97 TB/s, to 2.36691 and 2.30745 s
    for stage, step in ((0, 2.36691), (1, 2.30745)):
        got = Case.of(
            "llama3-8b", "H100-SXM", global_batch_size=52, dp=13, pp=2, num_gpus=26,
            zero_stage=stage,
        ).evaluate()  # fmt: skip
        own = 12 * 4_015_130_624 / (1 if stage == 0 else 13) / 2.97e12
        assert got.step_s == pytest.approx(step + own, abs=1e-5)
    assert _tables_agree(case, 26, cp=1, pp=2)


def test_a_rings_bus_bandwidth_by_protocol_and_node_count():
    """NCCL's tuner on a ring (nccl 5067397c ``src/graph/tuning.cc`` ``ncclTopoTuneModel``):
    ``bw = nNodes <= 2 ? bwIntra : bwInter`` reads one figure for a ring graph (``search.cc``
    sets both to the speed tried), so Simple's bus bandwidth is ``channels × speed`` at 1, 2
    or 4 nodes; what the node count changes is the LL and LL128 caps' column (``index2`` =
    ``nNodes <= 2 ? nNodes - 1 : 2``):

    * 8 H100s, one node, 12 channels at 30 GB/s (``model.nccl_search.ring_search``): 360;
      LL min(llMaxBws[hopper][N1] 141, 180) = 141; LL128 min(0.92 × 360 = 331.2, 12 × 36.7
      = 440.4) = 331.2;
    * 16 H100s over two nodes, 8 channels at 48 GB/s (``model.nccl_channels``' 8 a node):
      384; LL on an Intel host min(llMaxBws[0][N2] 39.0, 192) = 39.0, on AMD
      llMaxBws[1][N2] 22.5; LL128 min(353.28, 8 × 36.7 = 293.6) = 293.6;
    * the same ring over four nodes: LL 20.4 (Intel N4), 19.0 (AMD N4); LL128 293.6;
    * 8 A100s, one node, 12 at 20: LL min(llMaxBws[ampere][N1] 87.7, 120) = 87.7; LL128
      min(220.8, 12 × 20 = 240) = 220.8."""
    lat = collective_data().nccl_latency
    for nodes in (1, 2, 4):
        assert ring_busbw_gbps(lat, "Simple", 8, 48.0, nodes, "hopper") == 384.0
    assert ring_busbw_gbps(lat, "LL", 12, 30.0, 1, "hopper") == 141.0
    assert ring_busbw_gbps(lat, "LL128", 12, 30.0, 1, "hopper") == pytest.approx(331.2)
    assert ring_busbw_gbps(lat, "LL", 8, 48.0, 2, "hopper") == 39.0
    assert ring_busbw_gbps(lat, "LL", 8, 48.0, 2, "hopper", "x86_amd") == 22.5
    assert ring_busbw_gbps(lat, "LL128", 8, 48.0, 2, "hopper") == pytest.approx(293.6)
    assert ring_busbw_gbps(lat, "LL", 8, 48.0, 4, "hopper") == 20.4
    assert ring_busbw_gbps(lat, "LL", 8, 48.0, 4, "hopper", "x86_amd") == 19.0
    assert ring_busbw_gbps(lat, "LL", 12, 20.0, 1, "ampere") == 87.7
    assert ring_busbw_gbps(lat, "LL128", 12, 20.0, 1, "ampere") == pytest.approx(220.8)
