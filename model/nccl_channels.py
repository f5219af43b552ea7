"""How many channels NCCL gives a communicator, and how many thread blocks a large collective
runs on: the one rule the communicators' memory (:mod:`model.terms.comm_memory`: connections and
set-up per channel) and the SMs an overlapped collective holds (:mod:`model.comm_sms`) read.

NCCL (``NVIDIA/nccl`` at 5067397c; NCCL's defaults, no ``NCCL_*`` variable set):

* **Channels.** ``ncclTopoCompute`` (``src/graph/search.cc``) searches rings at the per-channel
  speeds of the part's architecture (``speedArrayIntra``/``Inter`` on Ampere,
  ``sm90SpeedArray*`` on Hopper, ``sm100SpeedArray*`` on Blackwell) for the most
  ``channels × speed`` the links allow (in a node :func:`model.nccl_search.ring_search` on the
  part's NVLinks: 24 in an A100 or H100 node, 16 in an H800's, 32 on NVLink 5);
  ``ncclTopoDupChannels`` doubles them (not below 25 GB/s a
  channel, nor on sm90+ below 50 GB/s with more than 4); ``src/init.cc`` takes the tree's and
  the ring's fewer (``comm->nChannels = min(treeGraph, ringGraph)``, the tree searched with the
  ring's count as its minimum and maximum); ``ncclTopoPostset`` (``src/graph/connect.cc``)
  doubles again ("Duplication should be complete now"), doubles once more across nodes on sm90+
  above 45 GB/s a channel under 16 channels ("4 compute channels per search channel"), and
  clamps to ``NCCL_MAX_NCHANNELS``/``NCCL_MIN_NCHANNELS`` (``ncclMaxNchannels`` = ``MAXCHANNELS``
  64, ``ncclMinNchannels`` = 0 by default: no change) and the communicator's ``maxCTAs``/
  ``minCTAs`` (``NCCL_MAX_CTAS``/``NCCL_MIN_CTAS``, unset: 64 and 1): :func:`collective_channels`.
  ``p2pnChannels`` is that count rounded up to a power of two (``src/graph/paths.cc``
  ``ncclTopoComputeP2pChannels``): :func:`setup_channels`.
* **Blocks a collective runs on.** ``topoGetAlgoInfo`` (``src/enqueue.cc``) gives a ring or tree
  collective (and PAT's, all-gather and reduce-scatter at one rank a node) ``comm->nChannels``
  channels, fewer only while the bytes are under ``nc × nt × threadThreshold`` (Simple: 512
  threads × ``NCCL_SIMPLE_THREAD_THRESHOLD`` 64 B = 32 KiB a channel, 768 KiB at 24 channels),
  and an NVLS or NVLS-tree one ``comm->nvlsChannels`` (:func:`model.nvls.nvls_channels`);
  ``scheduleCollTasksToPlan`` spreads one large collective over all of them, and the kernel
  runs one block (CTA) per channel for the whole collective. Grouped send/recv (the expert
  all-to-all) runs on the ``p2pnChannels`` channels, a large one on every one
  (``scheduleP2pTasksToPlan``: each peer's transfer striped over ``p2pnChannelsPerPeer``
  channels from a base that differs by peer). :func:`collective_blocks`.
* **Which algorithm.** ``ncclTopoTuneModel`` (``src/graph/tuning.cc``) and ``topoGetAlgoInfo``
  pick the algorithm of least ``latency + bytes ÷ bandwidth``. Reduce-scatter and all-gather
  run as rings (PAT at one rank a node): across nodes NVLS is disabled without CollNet
  (``NCCL_ALGO_NVLS`` off for ``nNodes > 1``; CollNet is off by default), and in one node its
  bus bandwidth ``heads × bwIntra × nvlsEfficiency × ((n − 1)/n)²`` (8 H100s: 8 × 40 × 0.85 ×
  0.766 = 208 GB/s) is about half the ring's ``12 × 30 × n/(n − 1)`` = 411 GB/s (8 B200s: 363
  against 823). An all-reduce runs as NVLS in one NVLink domain and NVLS-tree across nodes
  where the part and the communicator have NVLS (:func:`model.nvls.nvls_on`: ≥ 2 of its GPUs
  on a node, ``NCCL_NVLS_ENABLE`` not 0) — the rule the step time's NVLS speed-up
  (:func:`model.nvls.nvls_ring`) and NVLS's memory read: 8 H100s 8 × min(40 × 0.85 × 7/8 × 2,
  60) = 476 GB/s against the ring's 360 at the same ``n/(2(n − 1))``; across nodes (8 a node,
  400 Gb/s NICs) NVLS-tree's 8 × min(59.5, 48, ``perChMaxNVLSTreeBw`` 45.5) = 364 GB/s against
  the ring's 8 × 45 = 360 at the same ratio (:func:`inter_search`: the ring's channels cross
  the NVLinks too), with 25 + 2·log2(nodes)·20.9 µs of latency against the ring's ~3.4 µs a
  step and 14 µs a network step (×1.4, the ring's plateau), so NVLS-tree at every size. Inside a node NVLS's bus
  bandwidth falls with the GPUs (:mod:`model.nccl_search`): at 2 or 4 GPUs of an H100 node the
  NVLS all-reduce's 2 × min(51, 60) = 102 and 4 × min(76.5, 60) = 240 GB/s are under the
  ring's 360, so NCCL runs it as a ring, on the ring's 24 blocks, not NVLS's 16
  (:func:`model.nvls.nvls_ring`, the rule the step time and NVLS's buffers read). Else the
  ring's (or tree's: the same channels) count.

Across nodes the search's channels are bound by the NICs and by the GPU's NVLinks, which each
channel crosses in and out at every GPU of its node (:func:`inter_search`: an H800's 8 NVLinks
hold 4 channels at 40 GB/s; the 16 GB200s of an NVLink clique, 16 at 45.1). NCCL's node is the
host, or the NVLink clique on a multi-node NVLink domain
(:func:`model.rank_groups.nccl_node_size`: the callers place groups on it).

Assumed: collectives large enough for every channel (all the overlapped ones the model charges:
gradient buckets of tens of MB, a layer's activations), NCCL's defaults (no ``NCCL_ALGO``,
``NCCL_MAX_NCHANNELS``, ``NCCL_NVLS_NCHANNELS``, no tuner plugin), non-registered buffers
(``NCCL_CTA_POLICY_EFFICIENCY`` not set), and the topology of a DGX/HGX node: every GPU on
the NVSwitch through all its NVLinks, one NIC per GPU behind a PCIe switch.
"""

from __future__ import annotations

import math
from enum import StrEnum
from functools import lru_cache
from typing import Any

from trainplan.model.nccl_search import NvlinkNode, node_channels
from trainplan.model.nvls import nvls_channels, nvls_on, nvls_ring
from trainplan.model.rank_groups import domain_placements

__all__ = [
    "MAXCHANNELS",
    "NODE_CHANNELS",
    "NcclKernel",
    "pow2_up",
    "collective_channels",
    "inter_search",
    "inter_graph",
    "setup_channels",
    "group_placements",
    "strided_placement",
    "spans_nodes",
    "group_channels",
    "strided_group_channels",
    "collective_blocks",
    "group_blocks",
]

MAXCHANNELS = 64
"""``MAXCHANNELS`` (``src/include/device.h``): the most channels a communicator gets
(``ncclMaxNchannels``' default)."""

NODE_CHANNELS = 24
"""Collective channels (``comm->nChannels``) of a communicator inside an A100, H100 or H200 node
(12 or 18 NVLinks): :func:`model.nccl_search.node_channels`, which :func:`collective_channels`
reads for the part's own NVLinks (16 on an H800's 8, 32 on NVLink 5). ``ncclTopoCompute`` (``src/graph/search.cc``) finds 6 ring
channels at 60 GB/s on an H100's 18 × ``SM90_NVLINK_BW`` 20.6 = 370.8 GB/s (7 × 50 and 9 × 40
are no better), ``ncclTopoDupChannels`` doubles them (``bwIntra`` ≥ 50) to 12 at 30 GB/s, and
``ncclTopoPostset`` (``src/graph/connect.cc``, "Duplication should be complete now") doubles
them again: 24. An A100 (12 × 20 GB/s, 6 at 40 GB/s) reaches 24 the same way. The ring connects
these (``src/transport/generic.cc`` ``ncclTransportRingConnect``: ``c < comm->nChannels``); the
channels set up are the point-to-point count, 32 (:func:`setup_channels`, NVIDIA/nccl#1685).
"""


def pow2_up(n: int) -> int:
    """``n`` rounded up to a power of two (NCCL's ``pow2Up``).

    >>> pow2_up(24), pow2_up(16), pow2_up(1)
    (32, 16, 1)
    """
    return 1 << max(0, math.ceil(math.log2(n)))


SM90_INTER_SPEEDS = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0)
"""``sm90SpeedArrayInter`` (``src/graph/search.cc``), GB/s: the bandwidths the ring search tries
per channel across nodes, highest first."""
SM100_INTER_SPEEDS = (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                      15.0, 12.0, 6.0, 3.0)  # fmt: skip
"""``sm100SpeedArrayInter`` (``src/graph/search.cc``), GB/s: Blackwell's (``ccMin >= 100``);
45.1 × 16 = 721.6 fits NVLink 5's 18 × 40.1 = 721.8 GB/s a GPU."""
PCIE_GEN5_X16 = 48.0
"""A GPU's or NIC's PCIe Gen5 × 16 link as NCCL's topology counts it, GB/s (``src/graph/topo.cc``
``kvDictPciGen`` "32.0 GT/s PCIe" 240 × 16 lanes ÷ 80): the path from a GPU to its own NIC."""


@lru_cache(maxsize=256)
def collective_channels(
    local: int, nodes: int, nic_bytes_per_s: float | None, node: NvlinkNode
) -> int:
    """Collective channels NCCL gives a communicator of ``local`` ranks on each of ``nodes``
    nodes (``comm->nChannels`` after ``ncclTopoPostset``; ``src/init.cc``,
    ``src/graph/search.cc``, ``src/graph/connect.cc`` at 5067397).

    * One node (one NVLink domain): :func:`model.nccl_search.node_channels` of ``node``, the
      part's NVLinks: 24 on an A100 or H100 (:data:`NODE_CHANNELS`), 16 on an H800 (8 NVLinks
      × 20.6 GB/s: 4 search channels at 40 GB/s, doubled twice), 32 on NVLink 5 (18 ×
      ``SM100_NVLINK_BW`` 40.1 GB/s, 8 search channels at 90 GB/s, doubled twice).
    * Across nodes, one NIC per GPU behind its PCIe path (a DGX H100's eight): the node's
      ``local`` GPUs carry a search channel each at the fastest inter-node speed its NIC and
      PCIe Gen5 path (:data:`PCIE_GEN5_X16`) allow, 48 GB/s for 400 Gb/s NICs, as many as the
      GPUs' NVLinks carry (:func:`inter_search`: 8 H100s, 8 at 45); ``ncclTopoDupChannels``
      doubles them unless the speed is under 25 GB/s or, on sm90, under 50 GB/s with more
      than 4 channels; ``ncclTopoPostset`` doubles; and on sm90
      with more than 45 GB/s a channel and under 16 channels "4 compute channels per search
      channel" doubles again. 8 ranks a node: 8 → 16 (NVIDIA/nccl#1453's three H100 nodes:
      ``Channel 00/16``; nccl#1041: "execution channels are typically 2x the search channels",
      8 search channels on H100s with eight CX7s); 4 a node: 4 → 8 → 16; 1 a node: 1 → 2 → 4.
      Unknown NIC bandwidth: 400 Gb/s.

    >>> from trainplan.model.nccl_search import nvlink_node
    >>> h100, b200 = nvlink_node("H100-SXM", 450e9), nvlink_node("B200", 900e9)
    >>> collective_channels(8, 1, None, h100), collective_channels(8, 1, None, b200)
    (24, 32)
    >>> collective_channels(8, 1, None, nvlink_node("H800", 200e9))
    16
    >>> [collective_channels(r, 8, 50e9, h100) for r in (1, 2, 4, 6, 8)]
    [4, 8, 16, 24, 16]
    >>> collective_channels(8, 4, 25e9, h100)  # 200 Gb/s NICs: 8 at 24 GB/s, no duplication
    16
    """
    if nodes <= 1:
        return node_channels(node)
    search, speed = inter_graph(local, nic_bytes_per_s, node)
    channels = 2 * search
    if speed > 45.0 and channels < 16:
        channels *= 2
    return min(channels, MAXCHANNELS)


@lru_cache(maxsize=256)
def inter_graph(local: int, nic_bytes_per_s: float | None, node: NvlinkNode) -> tuple[int, float]:
    """``(channels, GB/s each)`` of the ring graph across nodes as ``ncclTopoTuneModel`` reads
    it (``graphs[NCCL_ALGO_RING]->nChannels`` and ``bwInter``): :func:`inter_search`'s, doubled
    at half the speed by ``ncclTopoDupChannels`` (``src/graph/search.cc`` at 5067397c) unless
    the speed is under 25 GB/s or, above compute capability 8.0, under 50 GB/s with more than 4
    channels. ``ncclTopoPostset``'s doublings (:func:`collective_channels`) give the
    communicator more channels, not the graph. 8 H100s a node at 50 GB/s: 8 at 45, kept; one
    a node: 1 at 48 → 2 at 24.

    >>> from trainplan.model.nccl_search import nvlink_node
    >>> h100 = nvlink_node("H100-SXM", 450e9)
    >>> inter_graph(8, 50e9, h100), inter_graph(1, 50e9, h100), inter_graph(4, 50e9, h100)
    ((8, 45.0), (2, 24.0), (8, 24.0))
    """
    search, speed = inter_search(local, nic_bytes_per_s, node)
    if speed >= 25.0 and not (speed < 50.0 and search > 4):
        return 2 * search, speed / 2
    return search, speed


def inter_search(local: int, nic_bytes_per_s: float | None, node: NvlinkNode) -> tuple[int, float]:
    """``(search channels, GB/s each)`` of the ring ``ncclTopoCompute`` (``src/graph/search.cc``
    at 5067397) finds across nodes for ``local`` ranks a node, before ``ncclTopoDupChannels``:
    at each speed of the part's inter-node array (:data:`SM100_INTER_SPEEDS` on Blackwell,
    else :data:`SM90_INTER_SPEEDS`) no faster than a NIC and its PCIe path
    (:data:`PCIE_GEN5_X16`), one channel per rank's NIC (``local``), at most ``maxChannels`` =
    ``MAXCHANNELS / 2`` (``src/init.cc``), and, with ≥ 2 ranks a node, no more than the GPU's
    NVLinks carry (each channel crosses every GPU of the node in and out:
    ``node.link_gbps ÷ speed``); the search keeps the most ``channels × speed``
    (``ncclTopoCompareGraphs``), the faster on a tie (it starts at the fastest). 8 H100s a node
    at 50 GB/s: 7 × 48 = 336 against 8 × 45 = 360 on 370.8 GB/s of NVLink: 8 at 45 (NVIDIA/nccl#1453's 16
    channels); 16 GB200s of a clique: 15 × 48 = 720 against 16 × 45.1 = 721.6: 16 at 45.1; 64:
    still 16 at 45.1; an H800's 8 NVLinks (164.8 GB/s): 4 × 40 = 160.

    >>> from trainplan.model.nccl_search import nvlink_node
    >>> h100, gb200 = nvlink_node("H100-SXM", 450e9), nvlink_node("GB200", 900e9)
    >>> inter_search(8, 50e9, h100), inter_search(1, 50e9, h100), inter_search(8, 25e9, h100)
    ((8, 45.0), (1, 48.0), (8, 24.0))
    >>> inter_search(16, 50e9, gb200), inter_search(64, 50e9, gb200), inter_search(4, 50e9, gb200)
    ((16, 45.1), (16, 45.1), (4, 48.0))
    >>> inter_search(8, 50e9, nvlink_node("H800", 200e9))
    (4, 40.0)
    """
    bw = min(PCIE_GEN5_X16, (nic_bytes_per_s or 50e9) / 1e9)
    speeds = SM100_INTER_SPEEDS if node.arch == "blackwell" else SM90_INTER_SPEEDS
    fitting = [s for s in speeds if s <= bw] or [speeds[-1]]
    best = (0, fitting[0])
    for s in fitting:
        n = min(int(local), MAXCHANNELS // 2)
        if int(local) > 1 and node.link_gbps > 0:
            n = min(n, int(round(node.link_gbps * 1000)) // int(round(s * 1000)))
        if n * s > best[0] * best[1]:
            best = (n, s)
    return best if best[0] else (1, fitting[0])


def setup_channels(channels: int) -> int:
    """Channels a communicator with ``channels`` collective channels sets up (``initChannel``):
    ``ncclTopoComputeP2pChannels`` (``src/graph/paths.cc``) runs it up to ``p2pnChannels``, the
    collective count rounded up to a power of two.

    >>> setup_channels(24), setup_channels(16), setup_channels(12)
    (32, 16, 16)
    """
    return pow2_up(int(channels))


def group_placements(
    size: int, span: int, gpus_per_node: int, world: int
) -> tuple[tuple[int, int], ...]:
    """The distinct ``(ranks on one node, nodes)`` of an axis's groups of ``size`` ranks at
    stride ``span ÷ size`` (the groups tile the ``world`` ranks of the layout in blocks of
    ``span``; only groups that exist are counted, so a world shorter than one repeat of blocks
    and nodes, ``lcm(span, gpus_per_node)``, lists only its own groups): the groups' fewest
    ranks on one node (the count every rank of a communicator takes: ``src/init.cc``, each
    graph's ``nChannels`` the least over the ranks' ``allGather3Data``) and the nodes each
    touches — :func:`model.rank_groups.domain_placements` with host nodes of ``gpus_per_node``
    ranks as the domains, the rule NVLink domains are read by. Groups that line up with the
    nodes are all alike: ``min(size, span ÷ gpus_per_node)`` nodes with ``size ÷ nodes`` ranks
    on each. A span that fits a node without lining up with it (6 on 8-GPU nodes: ranks 6–11
    lie 2 + 4 on two) has groups of both kinds; one longer than a node (12 on 8: ranks 0–11
    are 8 + 4) has 4 ranks a node, not ``12 ÷ 2``. The figures read per group
    (:func:`group_channels`, :func:`group_blocks`, NVLS's bytes) take their groups' most: the
    GPU that holds the most buffers and SMs.

    >>> group_placements(32, 64, 8, 64), group_placements(2, 16, 8, 16)
    (((4, 8),), ((1, 2),))
    >>> group_placements(6, 6, 8, 12), group_placements(12, 12, 8, 24)
    (((2, 2), (6, 1)), ((4, 2),))
    >>> group_placements(10, 10, 8, 10), group_placements(10, 10, 8, 20)  # 8 + 2; and 6 + 4
    (((2, 2),), ((2, 2), (4, 2)))
    """
    size, span = max(1, int(size)), max(1, int(span))
    return domain_placements(max(1, span // size), size, int(world), int(gpus_per_node))


def strided_placement(s1: int, n1: int, s2: int, n2: int, gpus_per_node: int) -> tuple[int, int]:
    """``(fewest ranks on one node, nodes)`` of the group of ranks ``i·s1 + j·s2`` (``i < n1``,
    ``j < n2``) over nodes of ``gpus_per_node`` consecutive ranks: the fewest, the count every
    rank of its communicator takes (:func:`group_placements`).

    >>> strided_placement(1, 4, 16, 4, 8), strided_placement(8, 16, 0, 1, 8)
    ((4, 4), (1, 16))
    >>> strided_placement(1, 3, 6, 2, 8)  # ranks 0 1 2 and 6 7 8: 5 on node 0, 1 on node 1
    (1, 2)
    """
    counts: dict[int, int] = {}
    for i in range(int(n1)):
        for j in range(int(n2)):
            node = (i * int(s1) + j * int(s2)) // int(gpus_per_node)
            counts[node] = counts.get(node, 0) + 1
    return min(counts.values()), len(counts)


def spans_nodes(size: int, span: int, gpus_per_node: int, world: int) -> bool:
    """Whether every group of :func:`group_placements` (an axis's groups of ``size`` ranks over
    ``span``, of a layout of ``world`` ranks) has ranks on more than one host node (NCCL's ``nNodes > 1``): across hosts for
    its point-to-point channels (:func:`model.terms.comm_memory.p2p_channels_per_peer`) and
    vLLM's custom all-reduce (:func:`model.rlhf.engine.engine_communicator_bytes`) on every
    GPU; where one group lies in one node, its GPUs hold the in-node figures, the most.

    >>> spans_nodes(6, 6, 8, 24), spans_nodes(2, 16, 8, 16), spans_nodes(8, 8, 4, 8)
    (False, True, True)
    """
    return all(nodes > 1 for _, nodes in group_placements(size, span, gpus_per_node, world))


@lru_cache(maxsize=4096)
def group_channels(
    size: int, span: int, gpus_per_node: int, world: int, nvlink: bool, nic: Any, node: NvlinkNode
) -> int:
    """:func:`collective_channels` of a group of ``size`` ranks spread over ``span`` consecutive
    ranks of a layout of ``world`` ranks: one node where ``nvlink`` (the group lies in one
    NVLink domain), else the most over the groups' :func:`group_placements` (a 2-rank pipeline
    group spanning 8 nodes has one rank on each of 2; tp 12 on 8-GPU nodes, ranks 0–11 8 + 4
    and 12–23 4 + 8: 4 a node on 2, 16 channels, not 6 a node's 24; a dp group of 10 in a world
    of 10, ranks 0–9 8 + 2: 2 a node, 8 channels, where a world of 20 adds ranks 10–19, 6 + 4,
    16).

    >>> from trainplan.model.nccl_search import nvlink_node
    >>> h100 = nvlink_node("H100-SXM", 450e9)
    >>> group_channels(32, 64, 8, 64, False, 50e9, h100)
    16
    >>> group_channels(2, 2, 8, 8, True, None, h100), group_channels(12, 12, 8, 24, False, 50e9, h100)
    (24, 16)
    >>> group_channels(6, 6, 8, 24, False, 50e9, h100), group_channels(10, 10, 8, 10, False, 50e9, h100)
    (24, 8)
    """
    if nvlink or size <= 1:
        return collective_channels(int(size), 1, None, node)
    nic = float(nic) if nic else None
    places = group_placements(size, span, gpus_per_node, world)
    return max(collective_channels(local, nodes, nic, node) for local, nodes in places)


@lru_cache(maxsize=4096)
def strided_group_channels(
    s1: int, n1: int, s2: int, n2: int, gpus_per_node: int, nvlink: bool, nic: Any,
    node: NvlinkNode,
) -> int:  # fmt: skip
    """:func:`collective_channels` of the group of ranks ``i·s1 + j·s2`` (``i < n1``,
    ``j < n2``), two axes' groups combined (Megatron-LM's model-parallel group: a tp block at
    each pp stride): one node where ``nvlink``, else :func:`strided_placement` (the nodes of
    ``gpus_per_node`` consecutive ranks the group touches, its fewest ranks on one).

    >>> from trainplan.model.nccl_search import nvlink_node
    >>> h100 = nvlink_node("H100-SXM", 450e9)
    >>> strided_group_channels(1, 4, 16, 4, 8, False, 50e9, h100)  # tp 4 × pp 4 on 64: 4 × 4
    16
    >>> strided_group_channels(8, 16, 0, 1, 8, False, 50e9, h100)  # one rank on each of 16
    4
    """
    size = int(n1) * int(n2)
    if nvlink or size <= 1:
        return collective_channels(size, 1, None, node)
    local, nodes = strided_placement(s1, n1, s2, n2, gpus_per_node)
    return collective_channels(local, nodes, float(nic) if nic else None, node)


class NcclKernel(StrEnum):
    """What NCCL runs a collective as, for the blocks it holds (:func:`collective_blocks`)."""

    ALL_REDUCE = "all-reduce"
    """An all-reduce: NVLS or NVLS-tree where the communicator has NVLS, else a ring or tree."""
    RING = "ring"
    """A reduce-scatter, all-gather, reduce or broadcast: a ring (PAT at one rank a node)."""
    SEND_RECV = "send-recv"
    """Grouped send/recv (NCCL's all-to-all): the point-to-point channels."""


@lru_cache(maxsize=1024)
def collective_blocks(
    kind: str, device_name: str, nvls_enabled: bool, local: int, nodes: int,
    nic_bytes_per_s: float | None, node: NvlinkNode,
) -> int:  # fmt: skip
    """Thread blocks (one per channel, each on its own SM) NCCL runs a large collective of
    ``kind`` (a :class:`NcclKernel` value) on, for a communicator of ``local`` ranks on each of
    ``nodes`` nodes of the part ``device_name`` with ``node``'s NVLinks
    (:func:`model.nccl_search.nvlink_node`; module docstring): an all-reduce on the NVLS count
    (:func:`model.nvls.nvls_channels`) where :func:`model.nvls.nvls_on` (``nvls_enabled``:
    :class:`model.timing.CostOptions` ``nccl_nvls``) and NCCL's tuner runs it as NVLS — in
    one node where :func:`model.nvls.nvls_ring` (the group large enough for NVLS's bus
    bandwidth to reach the ring's), across nodes as NVLS-tree; send/recv on
    :func:`setup_channels`; everything else on :func:`collective_channels`. Raises
    ``ValueError`` on an unknown ``kind``.

    8 H100s: an all-reduce on NVLS's 16, a reduce-scatter on the ring's 24, an all-to-all on
    32; 4 H100s: the all-reduce as a ring, 24; an A100 node (no NVLS): 24 for both collectives.
    Across nodes at one rank a node (400 Gb/s NICs): 4 whatever the part; at two, 8 on H100
    (48 GB/s doubled: 4 → 8) and 4 on A100 (its 200 Gb/s NICs at 24 GB/s: no duplication).

    >>> from trainplan.model.nccl_search import nvlink_node
    >>> h100, a100 = nvlink_node("H100-SXM", 450e9), nvlink_node("A100-80GB", 300e9)
    >>> [collective_blocks(k, "H100-SXM", True, 8, 1, None, h100) for k in NcclKernel]
    [16, 24, 32]
    >>> collective_blocks("all-reduce", "H100-SXM", True, 4, 1, None, h100)
    24
    >>> [collective_blocks(k, "A100-80GB", True, 8, 1, None, a100) for k in NcclKernel]
    [24, 24, 32]
    >>> collective_blocks("all-reduce", "H100-SXM", True, 1, 16, 50e9, h100)
    4
    >>> collective_blocks("ring", "H100-SXM", True, 2, 128, 50e9, h100)
    8
    >>> collective_blocks("ring", "A100-80GB", True, 2, 128, 25e9, a100)
    4
    >>> collective_blocks("all-reduce", "H100-SXM", False, 8, 1, None, h100)  # NCCL_NVLS_ENABLE=0
    24
    """
    kernel = NcclKernel(kind)
    local, nodes = int(local), int(nodes)
    if kernel is NcclKernel.ALL_REDUCE and nvls_on(device_name, local, nvls_enabled):
        if nodes > 1 or nvls_ring(node, True, local):
            return nvls_channels(device_name)
    channels = collective_channels(local, nodes, nic_bytes_per_s, node)
    return setup_channels(channels) if kernel is NcclKernel.SEND_RECV else channels


@lru_cache(maxsize=4096)
def group_blocks(
    kind: str, device_name: str, nvls_enabled: bool, size: int, span: int, gpus_per_node: int,
    world: int, nvlink: bool, nic: Any, node: NvlinkNode,
) -> int:  # fmt: skip
    """:func:`collective_blocks` of a group of ``size`` ranks over ``span`` consecutive ranks
    (of a layout of ``world`` ranks), placed as :func:`group_channels` places it (one node where ``nvlink``, the group in one
    NVLink domain; else the most over :func:`group_placements`' groups); 0 for a group of one
    rank (no collective).

    >>> from trainplan.model.nccl_search import nvlink_node
    >>> h100 = nvlink_node("H100-SXM", 450e9)
    >>> group_blocks("ring", "H100-SXM", True, 256, 1024, 8, 1024, False, 50e9, h100)  # 2 a node
    8
    >>> group_blocks("all-reduce", "H100-SXM", True, 8, 8, 8, 8, True, 0.0, h100)
    16
    >>> group_blocks("ring", "H100-SXM", True, 1, 1, 8, 8, True, 0.0, h100)
    0
    """
    if int(size) <= 1:
        return 0
    if nvlink:
        return collective_blocks(kind, device_name, nvls_enabled, int(size), 1, None, node)
    nic = float(nic) if nic else None
    places = group_placements(size, span, gpus_per_node, world)
    return max(collective_blocks(kind, device_name, nvls_enabled, *p, nic, node) for p in places)
