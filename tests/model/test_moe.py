"""MoE mechanisms of model.moe and the routed rows of model.moe_rows, each against a derivation
written out here."""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.model.errors import InputError
from trainplan.model.moe import (
    all_to_all_bytes,
    deepep_buffer_bytes,
    deepep_low_latency_bytes,
    distinct_nodes_distribution,
    expected_distinct_nodes,
    expected_remote_nodes,
    expert_capacity,
    expert_flops,
    scale_out_dispatch_bytes,
    shared_expert_flops,
)
from trainplan.model.moe_rows import mean_rows_sent, rank_rows, row_factors
from trainplan.model.moe_run import MoERun


def test_capacity_is_megatrons_get_capacity():
    """get_capacity(num_tokens = tokens·topk, num_experts, cf) = ceil(num_tokens/E · cf):
    Mixtral-like 8 experts, top-2, 4,096 tokens, cf 1.1 → ceil(1024 · 1.1) = ceil(1126.4) = 1127."""
    assert expert_capacity(4096, 8, 2, Fraction(11, 10)) == 1127
    assert expert_capacity(4096, 8, 2, Fraction(1)) == 1024


def test_dropless_padded_and_dropping_rows():
    """DeepSeek-V3-like layer through model.moe_rows: T = 4,096 tokens on a rank, E = 256
    experts, top-8: T·k = 32,768 routed copies, a mean of 4096·8/256 = 128 per expert; the
    busiest rank's experts take imbalance 1.5 × the mean.
    * dropless: every rank sends its 32,768 copies (mean_rows_sent = T·k); the busiest rank
      receives ceil(1.5 · 32,768) = 49,152 (rank_rows);
    * cf 1 padded: C = ceil(32,768/256 · 1) = 128, every expert takes exactly C from each rank:
      E·C = 256 · 128 = 32,768 rows sent and received, whatever the imbalance;
    * cf 1 dropping: sent min(T·k, E·C) = min(32,768, 32,768) = 32,768 (the imbalance's drops are
      not subtracted from the mean rank's copies); received min(49,152, E·C) = 32,768;
    * cf 2 padded: C = ceil(128 · 2) = 256, E·C = 65,536 rows both sides, twice dropless."""
    rows = (4096, 256, 8)
    dropless = MoERun(imbalance=Fraction(3, 2))
    assert (mean_rows_sent(dropless, *rows), rank_rows(dropless, *rows)) == (32768, 49152)
    padded = MoERun(Fraction(1), pad_to_capacity=True, imbalance=Fraction(3, 2))
    assert (mean_rows_sent(padded, *rows), rank_rows(padded, *rows)) == (256 * 128, 256 * 128)
    dropping = MoERun(Fraction(1), imbalance=Fraction(3, 2))
    assert (mean_rows_sent(dropping, *rows), rank_rows(dropping, *rows)) == (32768, 32768)
    twice = MoERun(Fraction(2), pad_to_capacity=True)
    assert (mean_rows_sent(twice, *rows), rank_rows(twice, *rows)) == (65536, 65536)
    # as factors of the balanced dropless T·k at ep 8: 65,536/32,768 = 2 on both sides;
    # dropless at imbalance 1.5: sent 1, received 49,152/32,768 = 3/2
    assert row_factors(twice, Fraction(4096), 256, 8, 8) == (2, 2)
    assert row_factors(dropless, Fraction(4096), 256, 8, 8) == (1, Fraction(3, 2))


def test_routing_refusals():
    """The routing a run asks for is checked where it is given (model.moe_run.MoERun)."""
    with pytest.raises(InputError, match=r"moe_imbalance: 0\.5 must be at least 1"):
        MoERun(imbalance=Fraction(1, 2))
    with pytest.raises(InputError, match="moe_pad_to_capacity: padding needs"):
        MoERun(pad_to_capacity=True)


def test_expert_and_shared_flops():
    """One token through a SwiGLU expert of DeepSeek-V3 (h 7168, expert width 2048): three
    GEMMs of 2·7168·2048 = 29,360,128 FLOPs each → 88,080,384; the shared expert runs for every
    token, no routing."""
    assert expert_flops(1, 7168, 2048) == 3 * 2 * 7168 * 2048 == 88_080_384
    assert expert_flops(10, 4096, 14336, gated=False) == 10 * 2 * 2 * 4096 * 14336
    assert shared_expert_flops(4096, 7168, 2048, shared_experts=2) == 2 * 4096 * 88_080_384


def test_all_to_all_volume():
    """32,768 rows of 7,168 BF16 values, EP 64: 63/64 of them leave the rank —
    32768 · 7168 · 2 · 63/64 = 462,422,016 B; padded at E·C with cf 2, twice that."""
    assert all_to_all_bytes(32768, 7168, 2, 64) == 462_422_016
    # cf 2 padded: E·C = 256 · ceil(4096·8/256 · 2) = 65,536 rows (mean_rows_sent)
    padded = mean_rows_sent(MoERun(Fraction(2), pad_to_capacity=True), 4096, 256, 8)
    assert all_to_all_bytes(padded, 7168, 2, 64) == 2 * 462_422_016
    assert all_to_all_bytes(100, 10, 1, 1) == 0  # one rank: nothing leaves


def test_distinct_nodes_hand_check():
    """4 experts on 2 nodes (a1 a2 | b1 b2), top-2: of the C(4,2) = 6 pairs, a1a2 and b1b2 sit
    on one node, the other 4 on two: P(D=1) = 1/3, P(D=2) = 2/3, E[D] = 5/3; from a token on
    node a the remote nodes: E[D]·1/2 = 5/6. Without de-duplication 2·(4 − 2)/4 = 1 copy crosses
    per token on average, de-duplicated 5/6."""
    assert distinct_nodes_distribution(4, 2, 2) == [0, Fraction(1, 3), Fraction(2, 3)]
    assert expected_distinct_nodes(4, 2, 2) == Fraction(5, 3)
    assert expected_remote_nodes(4, 2, 2) == Fraction(5, 6)
    assert scale_out_dispatch_bytes(1, 1, 4, 2, 2, dedup=False) == 1
    assert scale_out_dispatch_bytes(1, 1, 4, 2, 2) == Fraction(5, 6)
    # the M-node limit at M = 1: every token reaches one node
    assert expected_distinct_nodes(4, 2, 2, node_limit=1) == 1


def test_deepseek_v3_node_count():
    """DeepSeek-V3: 256 routed experts, top-8, EP 64 on 8 nodes (32 experts a node). A node is
    missed with probability C(224, 8)/C(256, 8) = Π_{i<8} (224 − i)/(256 − i); E[D] = 8·(1 − that)
    ≈ 5.29 nodes; capped at M = 4 (report §2.1.2) ≈ 3.98. Without de-duplication 8·224/256 = 7
    copies cross the scale-out links per token, de-duplicated E[D]·7/8 ≈ 4.63."""
    miss = math.prod(Fraction(224 - i, 256 - i) for i in range(8))
    assert expected_distinct_nodes(256, 8, 8) == 8 * (1 - miss)
    assert round(float(expected_distinct_nodes(256, 8, 8)), 4) == 5.2947
    assert round(float(expected_distinct_nodes(256, 8, 8, 4)), 4) == 3.9831
    assert scale_out_dispatch_bytes(1, 1, 256, 8, 8, dedup=False) == 7
    assert scale_out_dispatch_bytes(1, 1, 256, 8, 8) == 8 * (1 - miss) * Fraction(7, 8)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 4))
def test_distinct_nodes_by_enumeration(nodes, per_node, k):
    """The inclusion–exclusion distribution against enumerating every k-subset of experts."""
    experts = nodes * per_node
    if k > experts:
        return
    counts = [0] * (nodes + 1)
    for chosen in combinations(range(experts), k):
        counts[len({e // per_node for e in chosen})] += 1
    total = math.comb(experts, k)
    assert distinct_nodes_distribution(experts, nodes, k) == [Fraction(c, total) for c in counts]
    mean = sum(Fraction(d * c, total) for d, c in enumerate(counts))
    assert expected_distinct_nodes(experts, nodes, k) == mean


def test_deepep_normal_buffers_for_deepseek_v3():
    """DeepEP get_buffer for hidden 7168 in BF16 (hidden_bytes 14,336) on EP 64 (8 nodes of 8):
    num_sms 20 → 10 channels; both configs receive 288 NVL tokens and 128 RDMA tokens.
    NVL: 10·8·(2·8 + 3)·4 = 6,080 B of counters + 10·8·288 tokens · (14,336 + 8 meta + 128·8 top-k
    indices + 128·4 weights + 128·4 scales = 16,392) = 377,671,680 → 377,677,760, aligned up to
    128: 377,677,824 B.
    RDMA: 10·8·(8·2 + 2)·2·4 = 11,520 + 10·8·128 · 2·(14,336 + 8 + 1,024 + 512 + 512 + 16 =
    16,408) = 336,035,840 → 336,047,360 B (already aligned)."""
    nvl = 10 * 8 * (2 * 8 + 3) * 4 + 10 * 8 * 288 * (14336 + 8 + 128 * 8 + 128 * 4 + 128 * 4)
    assert nvl == 377_677_760
    rdma = 10 * 8 * 18 * 2 * 4 + 10 * 8 * 128 * 2 * (14336 + 8 + 1024 + 512 + 512 + 16)
    assert rdma == 336_047_360
    assert deepep_buffer_bytes(7168, 64) == (377_677_824, 336_047_360)
    assert deepep_buffer_bytes(7168, 8)[1] == 0  # one node: NVLink only
    with pytest.raises(InputError, match="ep: 12 has no DeepEP config"):
        deepep_buffer_bytes(7168, 12)


def test_deepep_low_latency_buffer():
    """Low-latency mode, 128 tokens per rank, hidden 7168, 256 experts: dispatch message
    16 + max(14,336, 7,168 + 56·4) = 14,352 B, combine 56·4 + 14,336 = 14,560 B; send buffer
    max(128·14,352, 256·128·14,560) = 477,102,080, receive max(256·128·14,352, 256·128·14,560) =
    477,102,080; signalling 256·4 = 1,024 (aligned). Total 2·(477,102,080·2 + 1,024) =
    1,908,410,368; DeepEP adds 128 and floors to 128: 1,908,410,496 B."""
    total = 2 * 477_102_080 + 2 * 477_102_080 + 2 * 1024
    assert total == 1_908_410_368
    assert deepep_low_latency_bytes(128, 7168, 256) == (total + 128) // 128 * 128 == 1_908_410_496
