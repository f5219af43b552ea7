"""Collectives across NVLink domains where NVLink, not the NICs, binds the ring (model.nvlink_bound,
model.nccl_tuner.ring_graph): NCCL's search (NVIDIA/nccl 5067397c ``src/graph/search.cc``
``ncclTopoCompute``) bounds the ring's channels across nodes by the GPU's NVLinks
(``ncclTopoNVLinkBw``, ``src/graph/topo.h``: 18 × 40.1 = 721.8 GB/s on a GB200, 8 × 20.6 =
164.8 on an H800) as well as by the NIC, and ``ncclTopoTuneModel`` (``src/graph/tuning.cc``)
takes the Simple ring's bus bandwidth as that graph's ``nChannels × bwInter``. Every figure is
NCCL's own estimate, derived by hand from its constants (``scenarios/kernels/collectives.toml``
``[nccl_latency]``)."""

from __future__ import annotations

import math

import pytest

from tests.cli_runs import trainplan
from trainplan.model.nccl_tuner import candidate_seconds, protocol_seconds, ring_graph
from trainplan.model.op_rates import deployed_params
from trainplan.model.roofline import Collective, LinkTime, collective_seconds, collective_time

US = 1e-6
GIB = 2**30
AG, AR, RS = Collective.ALL_GATHER, Collective.ALL_REDUCE, Collective.REDUCE_SCATTER
GB200, H800, H100 = (deployed_params(p) for p in ("GB200", "H800", "H100-SXM"))


def test_gb200_ring_graph_across_racks_has_nccls_16_channels():
    """36 ranks in each NVL72 rack, one 50 GB/s NIC each (PCIe Gen5's 48 GB/s the fastest
    channel): 15 × 48 = 720 against 16 × 45.1 = 721.6 on the GPU's 721.8 GB/s of NVLink, so
    ``ncclTopoCompute`` keeps 16 channels at 45.1 (under 50 GB/s with more than 4:
    ``ncclTopoDupChannels`` keeps them), and ``ncclTopoPostset`` doubles them: 32 in the
    communicator. Without the NVLink bound and with the NIC inverted from the capped link
    (900 ÷ 36 = 25 GB/s, a 24 GB/s channel) the graph had min(36, 32) = 32 channels, 64 in the
    communicator, which doubled the tree's and LL128's per-channel caps."""
    assert ring_graph("GB200", False, 36, 900e9, 50e9, 900e9) == (16, 32)
    assert ring_graph("GB200", False, 36, 900e9) == (32, 64)  # the NIC and NVLink unknown


def test_gb200_dp_all_reduce_over_four_racks_is_nccls_16_channel_estimate():
    """Llama 3 70B's fp32 gradient bucket under Megatron-Core at dp 144: max(4·10⁷, 10⁶ × 144)
    = 144 M parameters, a 576 MB buffer; tp 2 × dp 144 on 288 GB200s puts 36 of each dp group
    in each of 4 racks. The link: min(36 × 50, 900) = 900 GB/s, NVLink binds, so the Simple
    ring's bus bandwidth is 900 × 0.8 = 720 GB/s (NCCL: 16 × 45.1 = 721.6). NCCL's tuner picks
    the ring in LL128: latency 14 + (286 − 6) × 1.9 + 6 × 4.0 = 570 µs (2 × 143 steps, 2 × 3
    of them across racks), the 2 × 143/144 × 576 MB sent at min(0.92 × 721.6, 16 × 40.0) = 640
    GB/s (``perChMaxRingLL128Bw`` 40 a channel on Blackwell). The tree is slower: 576 MB at
    0.5 × min(0.92 × 721.6, 16 × 24.0) = 192 GB/s, 3 ms. Before, 32 channels doubled the tree's
    cap (``perChMaxTreeBw`` 24.0 a channel at 4+ nodes): the tree in Simple, 8.4 + 2 × (35 ×
    4.0 + log₂ 4 × 14) = 344.4 µs and 576 MB at 0.5 × min(0.92 × 864, 32 × 24.0) = 384 GB/s,
    1.844 ms against NCCL's 2.358."""
    buffer = 144e6 * 4
    sent = 2 * 143 / 144 * buffer
    expected = (14 + 280 * 1.9 + 6 * 4.0) * US + sent / 640e9
    link = LinkTime(900e9, False, 36, 4, None, 50e9, 900e9)
    assert collective_seconds(AR, 144, sent, link, GB200) == pytest.approx(expected, rel=1e-12)
    ncclbw = 16 * 45.1e9  # the graph's nChannels × bwInter, as NCCL's tuner reads it
    pick, nccl = protocol_seconds("all-reduce", 144, sent, 900e9, ncclbw, False, "GB200", 36, 4,
                                  0.0, 50e9, 900e9)  # fmt: skip
    assert pick == ("ring", "LL128") and nccl == pytest.approx(expected, rel=1e-12)
    old = collective_time(AR, 144, sent, 900e9, False, GB200, 36, 4)  # the NIC and NVLink unknown
    assert old == pytest.approx(344.4 * US + buffer / 384e9, rel=1e-12)


def test_h800_all_gather_over_two_nodes_moves_at_160_gbps():
    """8 H800s a node, eight 50 GB/s NICs: 8 × 50 = 400 GB/s over its 200 GB/s of NVLink, so
    NVLink binds: NCCL's graph is 4 channels at 40 GB/s on 8 × 20.6 = 164.8 GB/s, doubled to 8 at
    20, 160 GB/s (the scale-up efficiency's 200 × 0.8 = 160), where 200 × 0.96 = 192 was
    charged. A 1 GiB all-gather over 16 ranks runs the ring in Simple: 8.4 + 14 × 3.4 + 1 × 14
    = 70.0 µs and 15/16 GiB at 160 GB/s, 6.3615 ms: 158.2 GB/s of bus bandwidth, no faster than
    inside one node (the published curve, 159.8 GB/s: 7/8 GiB in 5.8806 ms), where 189.5 was."""
    sent = 15 / 16 * GIB
    across = collective_time(AG, 16, sent, 200e9, False, H800, 8, 2, nic=50e9, nvlink=200e9)
    assert across == pytest.approx(70.0 * US + sent / 160e9, rel=1e-12)
    assert candidate_seconds("all-gather", 16, sent, 200e9, 160e9, False, "H800", 8, 2, 0.0,
                             50e9, 200e9)["ring", "Simple"] == across  # fmt: skip
    inside = collective_time(AG, 8, 7 / 8 * GIB, 200e9, True, H800)
    assert across >= inside
    assert round(7 / 8 * GIB / inside / 1e9, 1) == 159.8 and round(sent / across / 1e9, 1) == 158.2


def test_gb200_all_gather_over_two_racks_no_faster_than_inside_one():
    """1 GiB over 144 GB200s, 72 a rack: NVLink binds (72 × 50 over 900 GB/s), 16 channels at
    45.1, the ring in LL128: 14 + 142 × 1.9 + 1 × 4.0 = 287.8 µs and 143/144 GiB at
    min(0.92 × 720, 16 × 40) = 640 GB/s, 1.9539 ms (545.7 GB/s of bus bandwidth), where 32
    channels at 864 GB/s gave 1.6292 ms (654.5), faster than 72 GB200s inside one rack on the
    published curve (646.9 GB/s: 71/72 GiB in 1.6368 ms)."""
    sent = 143 / 144 * GIB
    across = collective_time(AG, 144, sent, 900e9, False, GB200, 72, 2, nic=50e9, nvlink=900e9)
    assert across == pytest.approx(287.8 * US + sent / 640e9, rel=1e-12)
    inside = collective_time(AG, 72, 71 / 72 * GIB, 900e9, True, GB200)
    assert across > inside
    assert round(71 / 72 * GIB / inside / 1e9, 1) == 646.9


def test_h100_nodes_run_at_nvlinks_bound_under_their_nics():
    """8 H100s a node: eight 50 GB/s NICs, 400 GB/s under the 450 of NVLink. The NICs allow
    400 × 0.96 = 384 GB/s, NVLink 450 × 0.8 = 360 (NCCL's graph: 8 channels at 45 on 18 × 20.6 =
    370.8 GB/s of NVLink, ``search.cc`` ``ncclTopoCompute``): the ring runs at the slower, 360.
    Without the NVLink figure the NICs' 384. A 1 GiB all-gather over 16 nodes of 8."""
    sent = 127 / 128 * GIB
    known = collective_time(AG, 128, sent, 400e9, False, H100, 8, 16, nic=50e9, nvlink=450e9)
    unknown = collective_time(AG, 128, sent, 400e9, False, H100, 8, 16)
    lat_known = known - sent / 360e9
    assert unknown - sent / 384e9 == pytest.approx(lat_known, rel=1e-9)  # same latency
    assert ring_graph("H100-SXM", False, 8, 400e9, 50e9, 450e9) == (8, 16)


def test_a_faster_nic_never_slows_the_ring():
    """The ring across H100 nodes with 25, 50, 56 and 100 GB/s NICs (links of 200, 400, 448
    and min(800, 450) = 450 GB/s a GPU): the NICs allow 192, 384, 430.08 and 432 GB/s, NVLink
    360, so the bytes of a 1 GiB reduce-scatter over 2 nodes of 8 move at 192, then 360 three
    times (NCCL's graph is 8 channels at 45 GB/s at 50 and at 100 GB/s NICs,
    :func:`model.nccl_channels.inter_search`). The rule picked by the cap had run the bytes at
    384, 430.08, then 360: 8 × 100 GB/s NICs slower than 8 × 50 (the data-parallel time of
    llama3-8b on 16 H100s, 145.8 ms at 50 GB/s and 153.6 ms at 100)."""
    sent = 15 / 16 * GIB
    times = [
        collective_time(RS, 16, sent, min(8 * nic, 450e9), False, H100, 8, 2, nic=nic,
                        nvlink=450e9)
        for nic in (25e9, 50e9, 56e9, 100e9)
    ]  # fmt: skip
    assert times[0] > times[1] == times[2] == times[3]
    assert times[0] - times[1] == pytest.approx(sent / 192e9 - sent / 360e9, rel=1e-9)


def test_the_nic_the_link_carries_bounds_the_graph():
    """The NIC the link carries, not one inverted from the capped link: 36 GB200s a rack with
    100 GB/s NICs (two 400 Gb/s ports a GPU; 3,600 GB/s capped at NVLink's 900) take PCIe's
    48 GB/s as the fastest channel, so the NVLink bound leaves 16 at 45.1 as with one NIC; read
    as 900 ÷ 36 = 25 GB/s each, the fastest channel would be 24 GB/s, 30 of them (721.8 ÷ 24),
    not doubled (under 25 GB/s), 60 in the communicator."""
    assert ring_graph("GB200", False, 36, 900e9, 100e9, 900e9) == (16, 32)
    assert ring_graph("GB200", False, 36, 900e9, 0.0, 900e9) == (30, 60)


def test_evaluate_llama3_70b_on_288_gb200_dp_all_reduce():
    """``trainplan evaluate --model llama3-70b --gpu GB200 --tp 2 --dp 144 --global-batch 1152
    --zero 0``, as a user runs it: the dp all-reduce of fp32 gradients, 280.26 GB sent a rank a
    step (2 × 143/144 × 4 B × 35,277,512,704 parameters a GPU), in ⌈35,277,512,704 ÷ 1.44·10⁸⌉ =
    245 buckets, each the ring in LL128 at NCCL's 16-channel figure (the test above): 245 ×
    570 µs + 280.26 GB ÷ 640 GB/s = 577.6 ms (451.9 ms before: each bucket the tree at 32
    channels' cap, 1.844 ms)."""
    done = trainplan("evaluate", "--model", "llama3-70b", "--gpu", "GB200", "--tp", "2", "--dp",
                     "144", "--global-batch", "1152", "--zero", "0")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    params = 35_277_512_704
    sent = 2 * 143 / 144 * 4 * params
    seconds = math.ceil(params / 1.44e8) * 570 * US + sent / 640e9
    row = next(line for line in done.stdout.splitlines() if line.startswith("dp "))
    assert "all-reduce (fp32)" in row and f"{sent / 1e9:.2f} GB" in row
    assert f"{seconds * 1e3:.1f} ms" in row and round(seconds * 1e3, 1) == 577.6
    said = "(link × 0.8 NVLink, 0.96 scale-out, NVLink × 0.8 across domains where NVLink binds"
    assert said in " ".join(done.stdout.split())  # the assumptions line states the rule


def test_the_assumptions_line_says_the_nvlink_bound_only_where_nccl_runs():
    """A part NCCL does not run on keeps the NIC's rule (the test below), and its step-time
    assumptions line says only the two tiers' efficiencies, as a user reads it."""
    done = trainplan("evaluate", "--model", "llama3-8b", "--gpu", "Gaudi3", "--gpus", "32")
    assert done.returncode == 0, done.stderr[-2000:]
    text = " ".join(done.stdout.split())
    assert "(link × 0.8 NVLink, 0.96 scale-out)" in text and "where NVLink binds" not in text


def test_a_part_nccl_does_not_run_on_keeps_the_nic_rule():
    """The bound is NCCL's (``ncclTopoCompute`` searching its ring graph over the GPU's NVLinks);
    a part NCCL does not run on (``nccl_arch`` empty: Gaudi under HCCL, TPUs under XLA) keeps
    the scale-out efficiency on the capped link. Gaudi 3: 8 a node, 75 GB/s of scale-out each,
    600 GB/s capped at its 525 of scale-up; a 1 GiB all-gather over 16 (two nodes) moves its
    15/16 GiB at 525 × 0.96 = 504 GB/s after NCCL's Simple latency, 70 µs (8.4 + 14 × 3.4 + 14
    µs a network hop), not at 525 × 0.8 = 420."""
    gaudi3 = deployed_params("Gaudi3")
    sent = 15 / 16 * GIB
    given = collective_time(AG, 16, sent, 525e9, False, gaudi3, 8, 2, nic=75e9, nvlink=525e9)
    assert given == collective_time(AG, 16, sent, 525e9, False, gaudi3, 8, 2)
    assert given == pytest.approx(70.0 * US + sent / 504e9, rel=1e-12)


def test_deepspeed_pipe_engine_gathers_over_tp_across_nodes_read_nvlink():
    """DeepSpeed's pipeline engine all-gathers each partitioned message over tp (model.step_time.
    pipe_engine_seconds); tp 16 on two H800 nodes is the ring of
    test_h800_all_gather_over_two_nodes_moves_at_160_gbps, NVLink-bound: each gather of 15 ×
    64 MiB runs the ring in Simple at 160 GB/s, not 192, as the tp collectives of the same
    layout do. m 8 on pp 2: 16 gathers (pipe_engine_counts), each 15 × 2²⁶ B × (1/160 − 1/192)
    ns/B = 2²⁶ ∕ 64·10⁹ s = 1.048576 ms slower: 16.777216 ms in all."""
    from trainplan.model.step_time import pipe_engine_seconds

    args = (2**26, 16, 8, 2, 0.0, 50e9, False, 200e9, False, H800, None, 8, 2)
    bound = pipe_engine_seconds(*args, tp_caps=(50e9, 200e9))
    assert bound - pipe_engine_seconds(*args) == pytest.approx(16 * 1.048576e-3, rel=1e-9)
