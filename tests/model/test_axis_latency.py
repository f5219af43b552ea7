"""NCCL's latency by where each parallel axis's ranks lie, for every axis (model.nccl_latency:
NVIDIA/nccl 5067397c ``src/graph/tuning.cc`` ``ncclTopoTuneModel``): a ring's steps between
two ranks of one NVLink domain at NVLink's 3.4 µs, those between domains at the network's
14 µs (``Simple``, after the 8.4 µs base); the tree all-reduce ``2((n/N − 1)·4 + ⌊log₂ N⌋·14)``
µs; an all-to-all or a send one hop (NCCL's tuner has none for them: ``ncclAlltoAll`` is one
send and receive a peer, ``src/enqueue.cc``). The tp, cp and ep clocks read the placement's
members per domain (model.terms.fields.axis_members) as the dp groups did. Every figure by
hand."""

from __future__ import annotations

from typing import Any

import pytest

from tests.archs import one_moe_layer
from trainplan.model.collective_rates import nccl_latency_us, ring_latency_us
from trainplan.model.context_parallel import CpKind
from trainplan.model.estimate import evaluation_context
from trainplan.model.layer_time import PARTS, ep_all_to_all_seconds, layer_time
from trainplan.model.layout import Layout, Recompute
from trainplan.model.moe_kernels import ExpertPasses, counts_gather_seconds
from trainplan.model.nccl_latency import steps_latency, tree_latency
from trainplan.model.op_time import Clock
from trainplan.model.ops import LayerShape
from trainplan.model.roofline import Collective, LinkTime, RooflineParams, collective_latency
from trainplan.model.terms.cp_links import cp_clock_links, hybrid_cp_groups
from trainplan.model.terms.ep_link import ep_dispatch_link, ep_dispatch_members
from trainplan.model.terms.fields import LayoutFields, axis_members
from trainplan.model.terms.roofline import axis_link, stage_parts_term
from trainplan.optimizer.case import Case, links_for
from trainplan.scenarios.catalogue import get_model
from trainplan.scenarios.kernel_data import collective_data
from trainplan.topology.accelerators import get_accelerator

P = RooflineParams(gemm_efficiency=0.6)
AG, RS, AR = Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE
A2A, SEND = Collective.ALL_TO_ALL, Collective.SEND_RECV
US = 1e-6


def _stage(name: str, gpu: Any, layout: Layout, **options: object) -> tuple:
    """(case, context, fields, the first stage's PARTS by name for one micro-batch) of the
    evaluator on the two-tier cluster the accelerator's nodes make."""
    case = Case.of(name, gpu, layout, **options)
    links = links_for(layout, case.links)
    c = evaluation_context(case.model, case.training, case.device, case.options, None)
    f = LayoutFields(layout, case.training.global_batch_size, 0, links)
    parts = dict(zip(("total", *PARTS), stage_parts_term(c, f), strict=True))
    return case, c, f, parts


def test_a_tp_16_ring_over_two_8_gpu_nodes_crosses_once():
    """tp 16 over two H100 nodes of 8: N = 2 domains. An all-gather's 15 ring steps, 1 across:
    8.4 + 14 + 14 × 3.4 = 70.0 µs, where every step over the network was 8.4 + 15 × 14 = 218.4.
    An all-reduce: the ring 2 × 15 = 30 steps, 2 across, 8.4 + 2 × 14 + 28 × 3.4 = 131.6 µs;
    NCCL's tree 2 × ((16/2 − 1) × 4 + ⌊log₂ 2⌋ × 14) = 84 µs + 8.4 = 92.4, the quicker (every
    step over the network: the tree over 16 one-rank nodes, 2 × 4 × 14 + 8.4 = 120.4)."""
    assert collective_latency(AG, 16, False, P, 8) == pytest.approx(70.0 * US)
    assert collective_latency(RS, 16, False, P, 8) == pytest.approx(70.0 * US)
    assert collective_latency(AG, 16, False, P) == pytest.approx(218.4 * US)
    ring = steps_latency(16, False, 3.4e-6, 14e-6, rounds=2, per_domain=8)
    assert ring == pytest.approx((2 * 14 + 28 * 3.4) * US)
    assert collective_latency(AR, 16, False, P, 8) == pytest.approx(92.4 * US)
    assert collective_latency(AR, 16, False, P) == pytest.approx(120.4 * US)


def test_the_evaluator_times_tp_16_over_two_nodes_by_hand():
    """Megatron 18.4B (40 layers, h 6,144, s 2,048, b 1), tp 16 with sequence parallelism over
    two H100 nodes, ``tp_comm_overlap`` none (every collective waits). The tp group has 8
    members a node, so it rides 8 NICs, 8 × 50 GB/s at 0.96, and NCCL's ring crosses once. One
    all-gather or reduce-scatter moves (15/16)·2·2,048·6,144 = 23,592,960 B. NCCL's tuner
    (model.nccl_tuner; the ring graph 8 channels, 2 nodes) runs it as the ring in LL128:
    14 + 4.0 + 14 × 1.9 = 44.6 µs and the bytes at min(0.92 × 384, 8 × 36.7) = 293.6 GB/s,
    80.358 µs: 124.958 µs (Simple: 70.0 µs + 61.44 µs = 131.44 µs). A layer waits on 10
    (forward: the attention and MLP gathers and scatters, 4; backward: each half's
    output-gradient gather, input re-gather and input-gradient scatter, 6), the embedding on 2,
    the output layer on 3 and the cross entropy's 3 all-reduces of 4 bytes a token (8,192 B, 2 ×
    15/16 × 8,192 = 15,360 B sent) as the tree in LL: 6.8 + 2 × (7 × 0.6 + ⌊log₂ 2⌋ × 5.0) =
    25.2 µs and 8,192 B at min(min(0.92 × 384, 8 × 41.4) ÷ 3.8, 39.0) × 0.5 × 0.7
    (``treeCorrectionFactor`` at 2^7 × 64 B) = 13.65 GB/s, 25.800 µs (Simple's 92.4 + 0.04 µs).
    40 × 10 × 124.958 + 5 × 124.958 + 3 × 25.800 = 50,685.19 µs a micro-batch (53,510.52 in
    Simple alone); with every step over the network in Simple (70.0 → 218.4 µs, 92.4 → 120.4
    µs) it was 113,696.52 µs."""
    case, c, f, parts = _stage(
        "megatron-18.4b", "H100-SXM", Layout(tp=16, sequence_parallel=True),
        global_batch_size=4, tp_comm_overlap="none",
    )  # fmt: skip
    arch = case.model.arch
    assert (arch.num_layers, arch.hidden_size, case.training.seq_len) == (40, 6144, 2048)
    assert axis_members(c, f, "tp") == 8
    assert axis_link(c, f, "tp") == (400e9, False)
    one = 15 / 16 * 2 * 2048 * 6144
    assert one == 23_592_960
    ll128 = 44.6 + one / 293.6e9 / US
    ce = 25.2 + 8192 / 13.65e9 / US
    assert ll128 == pytest.approx(124.958, abs=1e-3) and ce == pytest.approx(25.800, abs=1e-3)
    assert parts["tp"] / US == pytest.approx(40 * 10 * ll128 + 5 * ll128 + 3 * ce)
    assert parts["tp"] / US == pytest.approx(50_685.19, abs=0.01)
    ring = 70.0 + one / (400e9 * 0.96) / US
    simple_ce = 92.4 + 15_360 / (400e9 * 0.96) / US
    assert 40 * 10 * ring + 5 * ring + 3 * simple_ce == pytest.approx(53_510.52)
    before = 40 * 10 * (ring + 148.4) + 5 * (ring + 148.4) + 3 * (simple_ce + 28)
    assert before == pytest.approx(113_696.52)


def test_a_cp_4_ring_across_two_h100_nodes():
    """Llama 3 8B (s 8,192, 8 K/V heads of 128), tp 4, cp 4 on two H100 nodes: the cp group
    (stride 4, span 16) has 2 members a node; its 4-rank ring crosses once. Ring attention's
    step waits for the chunk its neighbour received the step before, so a chunk travels the
    ring all-gather's path: 8.4 + 14 + 2 × 3.4 = 29.2 µs of latency (every step over the
    network: 8.4 + 3 × 14 = 50.4). K + V of a rank: 2 × 2 heads × 128 × 2,048 tokens × 2 B =
    2 MiB; the ring moves 3 of them forward and 6 backward over 2 NICs (2 × 50 GB/s at 0.96).
    NCCL's tuner (model.nccl_tuner; the ring graph 2 channels at 48 GB/s doubled to 4 at 24)
    runs the forward's 6 MiB in LL128, 14 + 4.0 + 2 × 1.9 = 21.8 µs and the bytes at
    min(0.92 × 96, 4 × 36.7) = 88.32 GB/s, 93.035 µs (Simple 29.2 + 65.536 = 94.736), the
    backward's 12 MiB in Simple, 29.2 + 131.072 µs: 253.307 µs a layer, 8,105.82 µs over 32
    layers (8,160.256 in Simple alone; every step over the network before that, 1,356.8 µs
    more)."""
    case, c, f, parts = _stage(
        "llama3-8b", "H100-SXM", Layout(tp=4, cp=4, sequence_parallel=True), global_batch_size=4
    )
    assert case.training.seq_len == 8192 and case.model.arch.num_layers == 32
    assert axis_members(c, f, "cp") == 2 and axis_link(c, f, "cp") == (100e9, False)
    assert collective_latency(AG, 4, False, P, 2) == pytest.approx(29.2 * US)
    assert collective_latency(AG, 4, False, P) == pytest.approx(50.4 * US)
    kv = 2 * 2 * 128 * 2048 * 2
    forward = 21.8 + 3 * kv / 88.32e9 / US
    backward = 29.2 + 6 * kv / 96e9 / US
    assert (forward, backward) == (pytest.approx(93.035, abs=1e-3), pytest.approx(160.272))
    assert 29.2 + 3 * kv / 96e9 / US == pytest.approx(94.736)
    assert parts["cp"] / US == pytest.approx(32 * (forward + backward))
    assert parts["cp"] / US == pytest.approx(8_105.82, abs=0.01)


def test_the_hybrid_cp_ring_and_its_inner_all_to_all_each_on_their_own_groups_link():
    """a2a+p2p, tp 2, cp 8 = an inner all-to-all of u = 2 and a ring of r = 4 on two H100 nodes
    of 8 (450 GB/s NVLink, 50 GB/s NICs). Megatron-Core's ``create_hierarchical_groups``
    (Megatron-LM d98e8a64dd ``parallel_state.py``: level k ``"(l s u) -> (l u) s"``) makes the
    inner groups consecutive cp ranks and the rings every u-th: over the cp group 0 2 4 … 14,
    the pairs (0, 2) (4, 6) (8, 10) (12, 14), each inside a node, and the rings (0, 4, 8, 12)
    (2, 6, 10, 14), 2 ranks on each of 2 nodes. So the all-to-all rides NVLink (450 GB/s,
    scale-up) and the ring 2 NICs, 100 GB/s, 2 members and 2 nodes a domain — where the cp
    group as a whole had 4 NICs, 200 GB/s, for both."""
    layout = Layout(tp=2, cp=8, cp_kind=CpKind.HYBRID, cp_a2a=2, micro_batch_size=1)
    _, c, f, _ = _stage("llama3-8b", "H100-SXM", layout)
    whole = axis_link(c, f, "cp")
    assert whole == (200e9, False)
    assert cp_clock_links(c, f, 4, 2, *whole) == (100e9, False, 2, 2, 450e9, True, 1)
    assert hybrid_cp_groups(2, 8, 2) == ((2, 2), (4, 4))


def test_the_hybrid_cp_layer_on_its_groups_links_by_hand():
    """The layer of the case above (Llama 3 8B, 8,192 tokens over cp 8: 1,024 a rank; tp 2: 16
    query heads and 4 K/V heads of 128, BF16: Q = O = 4 MiB, K + V = 2 MiB). The ring of 4:
    3 × 2 MiB forward and 6 × 2 MiB backward, each 8.4 + 14 + 2 × 3.4 = 29.2 µs of latency
    (one network step of 3) at 2 NICs × 50 GB/s × 0.96 = 96 GB/s: 29.2 + 65.536 and
    29.2 + 131.072 µs. The all-to-alls over the pair, ½(Q + KV + O) = 5 MiB forward and
    ½(Q + KV + 2·O) = 7 MiB backward, one NVLink hop each (8.4 + 3.4 = 11.8 µs) at 450 × 0.8 =
    360 GB/s: 23.6 + 12 MiB ∕ 360 GB/s = 58.553 µs, all waited for. 313.561 µs in all; on the
    cp group's 4 NICs (192 GB/s) the ring was 29.2 + 32.768 + 29.2 + 65.536 and the all-to-alls
    23.6 + 65.536 µs: 245.84 µs, 89.136 of them waited for."""
    x = LayerShape(get_model("llama3-8b").model.arch, False, 8192, 1, 2, cp=8)

    def cp(**links: LinkTime) -> tuple[float, float]:
        clock = Clock(989e12, 3.35e12, P, cp_ring=4, cp_a2a=2, **links)
        t = layer_time(x, clock, Recompute.NONE)
        return t.cp_s / US, t.cp_exposed_s / US

    placed = cp(cp_link=LinkTime(100e9, False, 2, 2), cp_a2a_link=LinkTime(450e9, True, 1))
    a2a = 23.6 + 12 * 2**20 / 360e9 / US
    assert placed == (pytest.approx(29.2 + 65.536 + 29.2 + 131.072 + a2a), pytest.approx(a2a))
    assert placed[0] == pytest.approx(313.5605) and a2a == pytest.approx(58.5525)
    assert collective_latency(A2A, 2, False, P, 4) == pytest.approx(11.8 * US)
    assert cp(cp_link=LinkTime(200e9, False, 2)) == (pytest.approx(245.84), pytest.approx(89.136))


def test_a_send_waits_on_the_pair_across_the_domain_edge():
    """A send between neighbours of a group that leaves its domain (PyTorch's ring-attention
    sends, a pipeline's): the ring waits on the pair that straddles the edge, one network hop,
    8.4 + 14 = 22.4 µs, whatever the members a domain; inside one domain 8.4 + 3.4 = 11.8."""
    assert collective_latency(SEND, 2, False, P, 4) == pytest.approx(22.4 * US)
    assert collective_latency(SEND, 2, True, P) == pytest.approx(11.8 * US)


def test_an_ep_64_all_to_all_in_an_nvl72_and_across_8_h100_nodes():
    """Qwen3-30B-A3B, ep 64 under NCCL's all-to-all (Megatron-Core's ``alltoall`` dispatcher).
    On GB200 the 64 share one NVL72 domain: each dispatch and combine is one NVLink hop,
    8.4 + 3.4 = 11.8 µs, and the token counts' all-gather (LL: 6.6 µs base, 0.6 µs an NVLink
    step) 6.6 + 63 × 0.6 = 44.4 µs. On H100 the 64 lie 8 a node on 8 nodes: a peer off the
    node, so one network hop, 8.4 + 14 = 22.4 µs — what the model charged before too, NCCL's
    p2p rule — and the counts' ring crosses 7 times (LL's network step 2.7 µs) and rides NVLink
    56 times at NCCL's network overhead (1 µs, over NVLink's 0.6 once the ring leaves the
    node): 6.6 + 7 × 2.7 + 56 = 81.5 µs, where every step over the network was 6.6 + 63 × 2.7
    = 176.7 µs (NCCL's own network step for one rank a node is the tree's 5.0 µs: 321.6)."""
    rack = get_accelerator("GB200").with_links(nvlink_domain=72)  # the job owns it: no segments
    gb200 = _stage("qwen3-30b-a3b", rack, Layout(dp=64, ep=64), global_batch_size=64)
    h100 = _stage("qwen3-30b-a3b", "H100-SXM", Layout(dp=64, ep=64), global_batch_size=64)
    assert str(gb200[0].training.moe_run.dispatcher) == "alltoall"
    assert ep_dispatch_link(gb200[1], gb200[2]) == (900e9, True)
    assert ep_dispatch_members(gb200[1], gb200[2]) == 64
    assert ep_dispatch_link(h100[1], h100[2])[1] is False
    assert ep_dispatch_members(h100[1], h100[2]) == 8
    assert collective_latency(A2A, 64, True, P) == pytest.approx(11.8 * US)
    assert collective_latency(A2A, 64, False, P, 8) == pytest.approx(22.4 * US)
    assert counts_gather_seconds(64, True) == pytest.approx(44.4 * US)
    assert counts_gather_seconds(64, False, 8) == pytest.approx(81.5 * US)
    assert counts_gather_seconds(64, False) == pytest.approx(321.6 * US)
    # a Megatron-Core layer's forward: the counts' gather is the only collective they move
    x = LayerShape(one_moe_layer(128), True, 4096, 1, 1, ep=64, expert_passes=ExpertPasses(True))
    link = 56.25e9

    def forward(per_domain: int) -> float:
        clock = Clock(2.5e15, 8e12, P, ep_link=LinkTime(link, False, per_domain))
        return ep_all_to_all_seconds(x, clock, False)[0]

    assert (forward(1) - forward(8)) / US == pytest.approx(321.6 - 81.5)


def test_nccl_tree_takes_the_whole_log2_and_its_own_nvlink_hop():
    """``2 * ((nRanks / nNodes - 1) * intraLat + log2i(nNodes) * interLat)``: MT-NLG's dp 10,
    one rank a node, 2 × ⌊log₂ 10⌋ × 14 = 84 µs (log₂ 10 = 3.32 gave 93.0); 96 ranks on 12
    nodes of 8, 2 × (7 × 4 + 3 × 14) = 140 µs, as the tuner's restatement has it
    (nccl_latency_us, + the 8.4 µs base)."""
    assert tree_latency(10, 10, 4e-6, 14e-6) == pytest.approx(84 * US)
    assert collective_latency(AR, 10, False, P) == pytest.approx(92.4 * US)
    assert tree_latency(96, 12, 4e-6, 14e-6) == pytest.approx(140 * US)
    lat = collective_data().nccl_latency
    assert nccl_latency_us(lat, "all-reduce", "tree", "Simple", 96, 12) == pytest.approx(148.4)
    assert collective_latency(AR, 96, False, P, 8) == pytest.approx(148.4 * US)
    # the ring restatement by members a domain: 64 ranks, 8 a node, Simple, as the step time's
    assert ring_latency_us(lat, "all-gather", "Simple", 64, 8) == pytest.approx(
        collective_latency(AG, 64, False, P, 8) / US
    )


def test_the_token_counts_gather_over_an_ep_group_split_8_plus_4_crosses_once():
    """Megatron-Core's all-gather of the token counts (``LL``: 6.6 µs base, 2.7 µs a network
    step, NVLink's steps at NCCL's 1 µs network overhead once the ring leaves a node) over an
    ep group of 12 lying 8 + 4 on two nodes: NCCL's 2 nodes, 1 of its 11 steps over the
    network, 6.6 + 2.7 + 10 × 1.0 = 19.3 µs; ⌈12 ∕ 4⌉ = 3 counted 2, 6.6 + 2 × 2.7 + 9 = 21.0."""
    assert counts_gather_seconds(12, False, 4, 2) / US == pytest.approx(19.3)
    assert counts_gather_seconds(12, False, 4) / US == pytest.approx(21.0)
