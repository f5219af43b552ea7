"""Parallel groups that straddle host nodes (``gpus_per_node``): NCCL's channel count of a
communicator reads its ranks' node membership as the groups lie, not ``⌈span ÷ node⌉``
(:func:`model.nccl_channels.group_placements` through :func:`model.rank_groups.
domain_placements`, the rule NVLink domains are read by), in the evaluator, the search's tables
and the point-to-point channels (:func:`model.nccl_channels.spans_nodes`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.model.test_comm_memory import DENSE, MIB, TRAINING, _comm
from trainplan.model.layout import Layout, Recompute
from trainplan.model.nccl_channels import (
    collective_channels,
    group_blocks,
    group_channels,
    group_placements,
    spans_nodes,
    strided_placement,
)
from trainplan.model.nccl_search import nvlink_node
from trainplan.model.pipeline import Schedule
from trainplan.model.rlhf.engine import engine_communicator_bytes
from trainplan.model.roofline import Collective, RooflineParams, collective_latency
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import check_against_evaluate
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.tables import build_tables
from trainplan.topology.placement import axis_links

H100 = nvlink_node("H100-SXM", 450e9)


def test_a_dp_group_of_12_on_8_gpu_nodes_has_4_a_node():
    """dp·cp 12 at stride 1 on H100 nodes of 8: ranks 0–11 lie 8 + 4 on nodes 0 and 1, 12–23
    4 + 8 on nodes 1 and 2. NCCL's count across nodes is every rank's fewest (``src/init.cc``:
    each graph's ``nChannels`` the least over ``allGather3Data``), 4 a node: 4 search channels at
    48 GB/s, DupChannels (4 is not > 4) → 8, Postset → 16; 24 GB/s is not > 45: 16 channels
    (test_nccl_channels' "4 a node"). ``⌈12 ÷ 8⌉`` = 2 nodes of 6 gave 6 at 48, no dup, Postset
    12, 48 > 45 and 12 < 16 → 24."""
    assert group_placements(12, 12, 8, 24) == ((4, 2),)
    assert collective_channels(4, 2, 50e9, H100) == 16
    assert collective_channels(6, 2, 50e9, H100) == 24  # the ⌈span ÷ node⌉ count's
    assert group_channels(12, 12, 8, 24, False, 50e9, H100) == 16
    assert group_blocks("ring", "H100-SXM", True, 12, 12, 8, 24, False, 50e9, H100) == 16


def test_a_span_of_6_in_8_has_one_group_in_a_node_and_others_across():
    """cp 3 after tp 2 (stride 2, span 6) on nodes of 8: {0, 2, 4} lies in node 0; {6, 8, 10}
    has rank 6 on node 0 and 8, 10 on node 1 (1 a node: 1 → 2 → 4 channels); {7, 9, 11} too;
    {12, 14, 16}: 12, 14 on node 1, 16 on node 2. The GPUs of {0, 2, 4} hold the most: one
    node's 24 channels (the figure the ⌈6 ÷ 8⌉ = 1 count gave), and those groups are not across
    hosts for their point-to-point channels; GB200's 4-GPU trays: 8 ranks always are."""
    assert group_placements(3, 6, 8, 24) == ((1, 2), (3, 1))
    assert collective_channels(1, 2, 50e9, H100) == 4
    assert group_channels(3, 6, 8, 24, False, 50e9, H100) == 24
    assert not spans_nodes(3, 6, 8, 24) and spans_nodes(8, 8, 4, 8) and spans_nodes(2, 16, 8, 16)
    # Megatron's model-parallel group: the tp block {0, 1, 2} at pp stride 6: 0 1 2 6 on node 0,
    # 7 8 on node 1 — 2 the fewest, not ⌈6 ÷ 2⌉ = 3.
    assert strided_placement(1, 3, 6, 2, 8) == (1, 2)
    assert strided_placement(1, 2, 6, 3, 8) == (2, 2)
    # vLLM's engine of tp 6 on nodes of 8: engine 0 on one node, the custom all-reduce's buffers
    # stay (rank 0's GPU holds the most); tp 12: across, no custom all-reduce.
    assert engine_communicator_bytes(6, 8) == engine_communicator_bytes(6, 16)
    assert engine_communicator_bytes(12, 8)[0] == engine_communicator_bytes(12, 8)[1]


def test_the_communicators_of_cp_3_on_24_h100s_by_hand():
    """tp 1, cp 3, dp 4, pp 2 on 24 H100s (8 a node): the dp·cp group is 12 consecutive ranks,
    4 a node on 2 nodes (above): 16 channels, 16 × 12 MiB = 192 MiB of connections and
    (pow2Up(16) × 3 + 2) × 2 MiB = 100 MiB of set-up, 292 MiB, where the ⌈12 ÷ 8⌉ count gave 24
    channels: 288 + (32 × 3 + 2) × 2 = 484 MiB. Every stage holds 192 MiB less: 1,518 → 1,326
    MiB (the other communicators as test_comm_memory derives them)."""
    training = replace(TRAINING, seq_len=768, global_batch_size=48)
    got = _comm(DENSE, Layout(tp=1, cp=3, dp=4, pp=2), training)
    assert (288 + 196) - (192 + 100) == 192
    assert got == [1326 * MIB, 1326 * MIB]


def test_the_search_reads_the_same_placement_as_the_evaluator():
    """Llama 3 8B on 24 H100s, tp 1, cp 3, pp 2: the search's tables (memory per stage, both
    time terms, fits) agree with the evaluator term by term (``check_against_evaluate`` raises
    on any difference) where the dp·cp group straddles the nodes."""
    case = Case.of("llama3-8b", "H100-SXM", global_batch_size=48, seq_len=6144)
    for est in _tables_agree(case, 24, cp=3, pp=2):
        assert est.stages[0].communicator_bytes > 0


def _tables_agree(case: Case, gpus: int, cp: int, pp: int) -> list:
    """The evaluator's estimates of the search's rows at tp 1, ``cp``, ``pp`` (1F1B, ZeRO-1,
    full recomputation, b 1), each checked term by term against the tables
    (``check_against_evaluate`` raises on any difference); at least one row."""
    space = SearchSpace(
        num_gpus=gpus, tp=(1,), pp=(pp,), cp=(cp,), micro_batch_size=(1,),
        schedules=(Schedule.ONE_F_ONE_B,), zero_stages=(1,), recomputes=(Recompute.FULL,),
        virtual_stages=(1,),
    )  # fmt: skip
    tables = build_tables(Problem(jobs=(Job(case, gpus, "t"),), space=space))
    rows = [s for s, sh in enumerate(tables.shapes) if (sh.tp, sh.cp, sh.pp) == (1, cp, pp)]
    assert rows
    return [check_against_evaluate(tables, (s, 0, 0)) for s in rows]


def _by_hand(stride: int, size: int, total: int, node: int) -> set[tuple[int, int]]:
    """Every group of ``size`` ranks at ``stride`` (blocks of stride·size over ``total``
    ranks): its fewest ranks on one node and the nodes it touches."""
    out = set()
    span = stride * size
    for base in range(0, total, span):
        for offset in range(stride):
            counts: dict[int, int] = {}
            for k in range(size):
                n = (base + offset + k * stride) // node
                counts[n] = counts.get(n, 0) + 1
            out.add((min(counts.values()), len(counts)))
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 12), st.integers(1, 12), st.sampled_from([2, 3, 4, 6, 8, 16]), st.integers(1, 24)
)
def test_the_placements_are_every_groups(stride, size, node, blocks):
    """Over strides, sizes, node sizes and worlds of any number of blocks (shorter than one
    repeat of blocks and nodes, lcm(span, node), or longer, whole or not): the placements are
    exactly the groups' that exist, by hand, and the channels the figure of the group that has
    the most."""
    span = stride * size
    total = blocks * span
    assert set(group_placements(size, span, node, total)) == _by_hand(stride, size, total, node)
    if size > 1:
        most = max(collective_channels(*p, 50e9, H100) for p in _by_hand(stride, size, total, node))
        assert group_channels(size, span, node, total, False, 50e9, H100) == most


def test_a_world_shorter_than_one_repeat_places_only_its_own_groups():
    """The groups listed by hand, on nodes of 8 (nodes 0–7, 8–15, 16–23 …):

    * a dp·cp group of 12 at stride 1 in a world of 24: ranks 0–11 (8 + 4), 12–23 (4 + 8); in
      a world of 48 also 24–35 (8 + 4) and 36–47 (4 + 8): 4 a node on 2 nodes either way;
    * a span of 6 (cp 3 after tp 2) in a world of 12: {0, 2, 4}, {1, 3, 5} in node 0; {6, 8,
      10}, {7, 9, 11} 1 + 2 on nodes 0 and 1; in a world of 6 only the first two, one node;
    * a dp group of 10 in a world of 10: ranks 0–9, 8 + 2 — 2 a node; a world of 20 adds 10–19,
      6 + 4 (its fewest 4). One repeat, lcm(10, 8) = 40 ranks, listed 4 a node for the world of
      10 too, a group that does not exist: 16 channels (4 search channels at 48 GB/s → 8 → 16)
      where its 2 a node get 8 (2 → 4 → 8, and 48 > 45 with under 16 channels doubles it)."""
    assert group_placements(12, 12, 8, 24) == group_placements(12, 12, 8, 48) == ((4, 2),)
    assert group_placements(3, 6, 8, 12) == ((1, 2), (3, 1))
    assert group_placements(3, 6, 8, 6) == ((3, 1),)
    assert group_placements(10, 10, 8, 10) == ((2, 2),)
    assert group_placements(10, 10, 8, 20) == ((2, 2), (4, 2))
    assert collective_channels(2, 2, 50e9, H100) == 8
    assert collective_channels(4, 2, 50e9, H100) == 16
    assert group_channels(10, 10, 8, 10, False, 50e9, H100) == 8
    assert group_channels(10, 10, 8, 20, False, 50e9, H100) == 16
    assert spans_nodes(10, 10, 8, 10) and not spans_nodes(3, 6, 8, 12)


def test_ten_h100s_hold_the_channels_of_their_one_dp_group():
    """Llama 3 8B, dp 10 on 10 H100s (nodes of 8: the dp group is ranks 0–9, 8 + 2). Three
    rings run on that one group of 10 (the dp·cp gradient group, the gradient statistics', the
    world's), each 8 channels: 8 × 12 MiB = 96 MiB of connections and (pow2Up(8) × 3 + 2) × 2 =
    52 MiB of set-up, 148 MiB, plus 2 MiB of NVLS credits (≥ 2 ranks share a node): 3 × 150 =
    450 MiB. Counting one repeat (40 ranks) charged 16 channels, 192 + 100 + 2 = 294 MiB each,
    882 MiB. The step's exposed dp time falls with the ring's SM share (8 blocks, not 16):
    3.5425 s → 3.4977 s (3.4945 s with the ring's steps between members of one node at
    NVLink's latency, model/nccl_latency.py). NCCL counts the group's nodes as 2, the distinct
    hosts of its ranks (``comm->nNodes``, :func:`model.rank_groups.nccl_nodes`), so each of
    its reduce-scatters and all-gathers crosses the network once in its 9 steps: 8.4 + 14 +
    8 × 3.4 = 49.6 µs, where ⌈10 ∕ 2⌉ = 5 nodes counted 4 crossings, 8.4 + 4 × 14 + 5 × 3.4 =
    81.4 µs; 31.8 µs less on each of the step's 402 calls, 12.78 ms of dp time of which 15 %
    waits (overlap 0.85): 3.4945 s → 3.4926 s. The search's tables agree term by term."""
    case = Case.of("llama3-8b", "H100-SXM", global_batch_size=40)
    est = Case.of("llama3-8b", "H100-SXM", global_batch_size=40, dp=10, num_gpus=10).evaluate()
    assert est.stages[0].communicator_bytes == 3 * (8 * 12 + (8 * 3 + 2) * 2 + 2) * MIB
    assert 3 * (8 * 12 + (8 * 3 + 2) * 2 + 2) == 450
    p = RooflineParams(gemm_efficiency=0.6)
    rs = Collective.REDUCE_SCATTER
    assert collective_latency(rs, 10, False, p, 2, 2) == pytest.approx(49.6e-6)
    assert collective_latency(rs, 10, False, p, 2) == pytest.approx(81.4e-6)
    # 3.4926 s before the whole gradient buffer was zeroed: 4 B × 9/10 × 8,030,261,248 at
    # 2.97 TB/s, 9.7 ms (model.terms.optimizer_time.whole_buffer_zeroing_bytes); 3.5023 s before
    # Megatron-Core's own optimizer-step passes (model.step_passes: 12 B × 8,030,261,248 / 10 at
    # 2.97 TB/s, 3.2 ms)
    assert est.step_s == pytest.approx(3.5023 + 12 * 8_030_261_248 / 10 / 2.97e12, abs=1e-4)
    for got in _tables_agree(case, 10, cp=1, pp=1):
        assert got.stages[0].communicator_bytes == 450 * MIB


def test_twelve_h100s_cross_between_their_two_nodes_once():
    """Llama 3 8B, dp 12 on 12 H100s (nodes of 8): the one dp group, ranks 0–11, lies 8 + 4 on
    two nodes. NCCL counts its nodes by their distinct hosts, 2 however unevenly they hold the
    ranks (NVIDIA/nccl 5067397c ``src/init.cc`` ``initTransportsRank``: ``comm->nNodes``), and
    its tuner's ring crosses the network ``nNodes − 1`` times a round (``src/graph/tuning.cc``
    ``ncclTopoTuneModel``: ``nInterSteps``): each reduce-scatter and all-gather of 11 steps is
    8.4 + 14 + 10 × 3.4 = 56.4 µs, where ⌈12 ∕ 4⌉ = 3 nodes counted 2 crossings, 8.4 + 2 × 14 +
    9 × 3.4 = 67.0 µs. 10.6 µs less on each of the step's 402 calls: the dp time 0.256968 s →
    0.252706 s (4.2612 ms), 23.9 % of it exposed (overlap 0.761): the step 3.48137 s →
    3.48035 s. The search's tables agree term by term."""
    links = Case.of("llama3-8b", "H100-SXM", global_batch_size=48).links
    placed = axis_links({"dp": 12}, links)["dp_cp"]
    assert (placed.per_domain, placed.domains) == (4, 2)
    p = RooflineParams(gemm_efficiency=0.6)
    ag = Collective.ALL_GATHER
    assert collective_latency(ag, 12, False, p, 4, 2) == pytest.approx(56.4e-6)
    assert collective_latency(ag, 12, False, p, 4) == pytest.approx(67.0e-6)
    assert 402 * (67.0 - 56.4) == pytest.approx(4261.2)
    case = Case.of("llama3-8b", "H100-SXM", global_batch_size=48)
    est = Case.of("llama3-8b", "H100-SXM", global_batch_size=48, dp=12, num_gpus=12).evaluate()
    # 3.48035 s before the whole gradient buffer was zeroed: 4 B × 11/12 × 8,030,261,248 at
    # 2.97 TB/s, 9.9 ms (model.terms.optimizer_time.whole_buffer_zeroing_bytes); 3.49027 s
    # before Megatron-Core's own optimizer-step passes (model.step_passes: 12 B ×
    # 8,030,261,248 / 12 at 2.97 TB/s, 2.7 ms)
    assert est.step_s == pytest.approx(3.49027 + 12 * 8_030_261_248 / 12 / 2.97e12, abs=1e-5)
    assert _tables_agree(case, 12, cp=1, pp=1)
