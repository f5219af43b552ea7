"""Parallel groups that straddle host nodes (``gpus_per_node``): NCCL's channel count of a
communicator reads its ranks' node membership as the groups lie, not ``⌈span ÷ node⌉``
(:func:`model.nccl_channels.group_placements` through :func:`model.rank_groups.
domain_placements`, the rule NVLink domains are read by), in the evaluator, the search's tables
and the point-to-point channels (:func:`model.nccl_channels.spans_nodes`)."""

from __future__ import annotations

from dataclasses import replace

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
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import check_against_evaluate
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.tables import build_tables

H100 = nvlink_node("H100-SXM", 450e9)


def test_a_dp_group_of_12_on_8_gpu_nodes_has_4_a_node():
    """dp·cp 12 at stride 1 on H100 nodes of 8: ranks 0–11 lie 8 + 4 on nodes 0 and 1, 12–23
    4 + 8 on nodes 1 and 2. NCCL's count across nodes is every rank's fewest (``src/init.cc``:
    each graph's ``nChannels`` the least over ``allGather3Data``), 4 a node: 4 search channels at
    48 GB/s, DupChannels (4 is not > 4) → 8, Postset → 16; 24 GB/s is not > 45: 16 channels
    (test_nccl_channels' "4 a node"). ``⌈12 ÷ 8⌉`` = 2 nodes of 6 gave 6 at 48, no dup, Postset
    12, 48 > 45 and 12 < 16 → 24."""
    assert group_placements(12, 12, 8) == ((4, 2),)
    assert collective_channels(4, 2, 50e9, H100) == 16
    assert collective_channels(6, 2, 50e9, H100) == 24  # the ⌈span ÷ node⌉ count's
    assert group_channels(12, 12, 8, False, 50e9, H100) == 16
    assert group_blocks("ring", "H100-SXM", True, 12, 12, 8, False, 50e9, H100) == 16


def test_a_span_of_6_in_8_has_one_group_in_a_node_and_others_across():
    """cp 3 after tp 2 (stride 2, span 6) on nodes of 8: {0, 2, 4} lies in node 0; {6, 8, 10}
    has rank 6 on node 0 and 8, 10 on node 1 (1 a node: 1 → 2 → 4 channels); {7, 9, 11} too;
    {12, 14, 16}: 12, 14 on node 1, 16 on node 2. The GPUs of {0, 2, 4} hold the most: one
    node's 24 channels (the figure the ⌈6 ÷ 8⌉ = 1 count gave), and those groups are not across
    hosts for their point-to-point channels; GB200's 4-GPU trays: 8 ranks always are."""
    assert group_placements(3, 6, 8) == ((1, 2), (3, 1))
    assert collective_channels(1, 2, 50e9, H100) == 4
    assert group_channels(3, 6, 8, False, 50e9, H100) == 24
    assert not spans_nodes(3, 6, 8) and spans_nodes(8, 8, 4) and spans_nodes(2, 16, 8)
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
    space = SearchSpace(
        num_gpus=24, tp=(1,), pp=(2,), cp=(3,), micro_batch_size=(1,),
        schedules=(Schedule.ONE_F_ONE_B,), zero_stages=(1,), recomputes=(Recompute.FULL,),
        virtual_stages=(1,),
    )  # fmt: skip
    tables = build_tables(Problem(jobs=(Job(case, 24, "t"),), space=space))
    rows = [s for s, sh in enumerate(tables.shapes) if (sh.tp, sh.cp, sh.pp) == (1, 3, 2)]
    assert rows
    for s in rows:
        est = check_against_evaluate(tables, (s, 0, 0))
        assert est.stages[0].communicator_bytes > 0


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
@given(st.integers(1, 12), st.integers(1, 12), st.sampled_from([2, 3, 4, 6, 8, 16]))
def test_the_placements_are_every_groups(stride, size, node):
    """Over strides, sizes and node sizes, on a world of whole periods (lcm(span, node) × 2):
    the placements are exactly the groups' by hand, and the channels the figure of the group
    that has the most."""
    span = stride * size
    total = 2 * span * node
    assert set(group_placements(size, span, node)) == _by_hand(stride, size, total, node)
    if size > 1:
        most = max(collective_channels(*p, 50e9, H100) for p in _by_hand(stride, size, total, node))
        assert group_channels(size, span, node, False, 50e9, H100) == most
