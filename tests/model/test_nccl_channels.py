"""NCCL's collective channel count per communicator, by placement
(:func:`model.terms.comm_memory.collective_channels`; NVIDIA/nccl at 5067397,
``src/graph/search.cc`` ``ncclTopoCompute`` / ``ncclTopoDupChannels``, ``src/graph/connect.cc``
``ncclTopoPostset``, ``src/graph/paths.cc`` ``ncclTopoComputeP2pChannels``)."""

from __future__ import annotations

import pytest

from trainplan.model.nccl_search import nvlink_node
from trainplan.model.terms.comm_memory import (
    channel_setup_bytes,
    collective_channels,
    group_channels,
    setup_channels,
)

MIB = 2**20
H100 = nvlink_node("H100-SXM", 450e9)
B200 = nvlink_node("B200", 900e9)


def test_inside_one_h100_node():
    """18 NVLinks × 20.6 GB/s = 370.8 GB/s a GPU. sm90's intra speeds start at 60 GB/s:
    ⌊370.8 / 60⌋ = 6 channels (360 < 370.8, so the search does not stop early; 7 × 50 = 350 and
    9 × 40 = 360 are no larger). DupChannels: bwIntra 60 ≥ 50 → 12 at 30 GB/s; pass 2 cannot
    raise 12 channels to 40 GB/s (480 > 370.8). Postset doubles: 24 collective channels;
    p2pnChannels = pow2Up(24) = 32 set up (NVIDIA/nccl#1685: 32 p2p channels on 8 H100s).
    The group size inside the node does not enter: a 2-rank tp group is the same."""
    assert collective_channels(8, 1, None, H100) == collective_channels(2, 1, None, H100) == 24
    assert setup_channels(24) == 32
    assert group_channels(2, 2, 8, 8, True, None, H100) == 24
    # NVLink 5: 18 × 40.1 = 721.8 GB/s; sm100 speeds 90 → 8 channels (720 < 721.8), dup 16 at
    # 45, Postset 32.
    assert collective_channels(8, 1, None, B200) == 32


def test_across_h100_nodes_with_a_400g_nic_per_gpu():
    """NIC 400 Gb/s = 50 GB/s, the GPU's PCIe Gen5 x16 path 240 × 16 / 80 = 48 GB/s: the search
    starts at sm90's inter speed 48, one channel per GPU of the communicator on the node (each
    GPU's PCIe link carries one 48 GB/s channel each way).

    * 8 a node: 8 × 48 = 384 ≥ totalBw 370.8 → done; no DupChannels (sm90, bwIntra 48 < 50 and
      8 > 4 channels); Postset 16; the 4-compute-channel rule needs < 16: 16 (NVIDIA/nccl#1453,
      3 × 8 H100s: "Channel 00/16").
    * 4 a node (GPT-3 20B's dp 32 over 8 nodes at tp 2): 4 at 48; DupChannels (4 is not > 4)
      → 8 at 24; Postset 16; 24 GB/s is not > 45: 16.
    * 1 a node: 1 → 2 (dup) → 4 (Postset).
    * 6 a node: 6 at 48, no dup; Postset 12; 48 > 45 and 12 < 16 → 24."""
    assert collective_channels(8, 8, 50e9, H100) == 16
    assert collective_channels(4, 8, 50e9, H100) == 16
    assert collective_channels(1, 8, 50e9, H100) == 4
    assert collective_channels(6, 8, 50e9, H100) == 24
    # dp 32 at tp 2 spans 64 consecutive ranks: 32 × 8 / 64 = 4 ranks on each of 8 nodes.
    assert group_channels(32, 64, 8, 64, False, 50e9, H100) == 16
    # the set-up: 16 channels × 3 + 2 granules of 2 MiB = 100 MiB (was 196 MiB at 32).
    assert setup_channels(16) == 16 and channel_setup_bytes(16) == 100 * MIB


def test_across_nodes_with_200g_nics():
    """25 GB/s NICs: the search runs at 24 GB/s, one channel per NIC; DupChannels needs bwIntra
    ≥ 25: none; Postset 2 × 8 = 16."""
    assert collective_channels(8, 4, 25e9, H100) == 16


def test_inside_one_h800_node():
    """The H800's NVLink: NVIDIA states 400 GB/s both ways (``nvlink_gbps`` 200 a direction,
    topology/accelerators.toml), 8 fourth-generation links of 25 GB/s a direction (the H100's 18
    carry 900 GB/s); NCCL counts 8 × ``SM90_NVLINK_BW`` 20.6 = 164.8 GB/s on the GPU's link to
    the NVSwitch (src/graph/topo.cc ncclTopoAddNvLinks; DeepSeek-V3's report measures about
    160 GB/s). The ring search (src/graph/search.cc ncclTopoCompute, sm90SpeedArrayIntra 60, 50,
    40, 30, 24, 20, 15, …; a ring channel takes its speed on every GPU's link each way): ⌊164.8
    / 60⌋ = 2 channels (120 GB/s), 3 at 50 (150, kept), 4 at 40 (160, kept), 5 at 30 (150), 6 at
    24 (144) and 8 at 20 (160, not more: kept only when strictly more); 15 is under 0.49 × 40:
    stop at 4 × 40. ncclTopoDupChannels: 40 < 50 but 4 channels are not more than 4 → 8 at 20;
    the tree at the ring's 8 (8 × 20 = 160 ≤ 164.8); ncclTopoPostset doubles: 16 collective
    channels (24 on an H100), p2pnChannels pow2Up(16) = 16 set up. A ring in the node: 16 × 12 =
    192 MiB and (16 × 3 + 2) × 2 = 100 MiB of set-up, 292 MiB (484 on an H100)."""
    from trainplan.model.nccl_search import node_channels, ring_search

    h800 = nvlink_node("H800", 200e9)
    assert (h800.arch, h800.links, h800.link_gbps) == ("hopper", 8, pytest.approx(164.8))
    assert ring_search(h800) == (8, 20.0)
    assert node_channels(h800) == collective_channels(8, 1, None, h800) == 16
    assert collective_channels(2, 1, None, h800) == 16  # the group's size does not enter
    assert group_channels(8, 8, 8, 8, True, None, h800) == 16
    assert setup_channels(16) == 16 and channel_setup_bytes(16) == 100 * MIB
    # a what-if H100 with half its NVLinks (9 × 20.6 = 185.4): 3 at 60 (180) → 6 at 30 → 12
    assert node_channels(nvlink_node("H100-SXM[nvlink×0.5]", 225e9)) == 12
