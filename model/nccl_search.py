"""What NCCL's topology search and tuner find inside one NVLink domain, from the part's NVLinks:
the ring's channels and bus bandwidth, NVLink SHARP's (NVLS) heads and bus bandwidth, and which
of the two NCCL's tuner runs a large all-reduce as. The one rule the communicators' channels
(:func:`model.nccl_channels.collective_channels`), the SMs a collective holds
(:func:`model.nccl_channels.collective_blocks`), the step time's NVLS all-reduce
(:func:`model.nvls.nvls_ring`, read by :func:`model.roofline.collective_time`) and NVLS's buffers
(:mod:`model.terms.nvls_memory`) read.

NCCL (``NVIDIA/nccl`` at 5067397c; its defaults, no ``NCCL_*`` variable set):

* **The links.** ``ncclTopoAddNvLinks`` (``src/graph/topo.cc``) joins a GPU to the NVSwitch by
  one link of ``count × ncclTopoNVLinkBw(cc)`` GB/s each way, ``count`` the GPU's NVLinks
  (NVML), ``ncclTopoNVLinkBw`` (``src/graph/topo.h``) ``SM80_NVLINK_BW`` 20.0,
  ``SM90_NVLINK_BW`` 20.6, ``SM100_NVLINK_BW`` 40.1 (:data:`NCCL_LINK_GBPS`). The NVLink count
  is the part's NVLink bandwidth a direction over one link's (:data:`LINK_BYTES_PER_S`):
  NVLink 3 and 4 carry 25 GB/s a direction per link (A100: 12 links, 600 GB/s both ways; H100:
  18, 900 GB/s; NVIDIA's A100 and H100 datasheets, "18x 4th Gen NVLink, 900GB/s" in NVIDIA's
  MLPerf system descriptions), NVLink 5 50 GB/s (B200: 18, 1.8 TB/s). The H800: NVIDIA states
  400 GB/s of NVLink (its ``nvlink_gbps`` 200 a direction, ``topology/accelerators.toml``), so 8
  fourth-generation links; DeepSeek-V3's report (arXiv 2412.19437 §3.2.2) measures about
  160 GB/s of NVLink on it, what NCCL's 8 × 20.6 = 164.8 GB/s stands for.
* **The ring** (:func:`ring_search`). ``ncclTopoCompute`` (``src/graph/search.cc``) tries the
  architecture's per-channel speeds (``speedArrayIntra``, ``sm90SpeedArrayIntra``,
  ``sm100SpeedArrayIntra``: :data:`INTRA_SPEEDS`) from the fastest the link allows, each ring
  channel taking its speed on every GPU's link each way, keeps the most ``channels × speed``
  (a later speed replaces it only when strictly more), stops where that reaches the link's
  bandwidth and goes on to the next speed only while it is more than 0.49 of the kept one;
  ``ncclTopoDupChannels`` then doubles the channels at half the speed, unless the speed is under
  25 GB/s or, above compute capability 8.0, under 50 GB/s with more than 4 channels.
  ``src/init.cc`` takes the tree's count, searched at the ring's, and ``ncclTopoPostset``
  (``src/graph/connect.cc``) doubles it: :func:`node_channels`. 8 H100s: 6 at 60 → 12 at 30 →
  24; 8 A100s: 6 at 40 → 12 at 20 → 24; 8 B200s: 8 at 90 → 16 at 45 → 32; 8 H800s (164.8 GB/s):
  2 at 60, 3 at 50, 4 at 40 (160), no more at 30 (5, 150), 24 (6, 144) or 20 (8, 160, not
  more), stop at 15 (under 0.49 of 40) → 4 at 40 → 8 at 20 (4 is not more than 4) → 16.
* **NVLS** (:func:`nvls_search`). Forced to ``heads = min(NCCL_MAX_NVLS_ARITY 32, GPUs)``
  channels in one node, one head each; ``ncclTopoSearchTryNvls`` takes twice the speed on the
  head's link and the speed on every other GPU's, each way, so a GPU's link carries
  ``(heads + 1) × speed``: the first speed at which that fits is ``bwIntra``. Pass 2 raises
  ``bwInter`` (unused inside a node) a speed at a time while it is under ``2 × bwIntra``.
* **The tuner** (``src/graph/tuning.cc`` ``ncclTopoTuneModel``, ``src/enqueue.cc``
  ``topoGetAlgoInfo``: least ``latency + bytes ÷ bandwidth``). An all-reduce's bus bandwidth:
  the ring's ``channels × speed`` (the graph's, before Postset); NVLS's ``heads × min(bwIntra ×
  nvlsEfficiency × (heads − 1)/heads × 2, bwInter)`` (``nvlsEfficiency`` 0.85 Hopper, 0.74
  Blackwell: :data:`NVLS_EFFICIENCY`), both turned into algorithm bandwidth by the same
  ``n / (2(n − 1))``. NVLS's latency (25 µs, Simple) is under the ring's Simple one (8.4 +
  2(n − 1) × 3.4 µs) from 4 GPUs, so a large all-reduce runs as NVLS where its bus bandwidth is
  at least the ring's (:func:`nvls_allreduce_runs`). H100 (ring 360): NVLS 102 at 2, 180 at 3,
  240 at 4, 300 at 5 (rings), 360 at 6, 408 at 7, 476 at 8 (NVLS). H800 (ring 160): 85, 136,
  153 (rings), 163.2 at 5, 170 at 6, 204 at 7, 178.5 at 8 (NVLS). B200 (ring 720): 133.2 at 2
  … 630 at 7 (rings), 720 at 8 (NVLS, the latency decides), 888 at 16, 917.6 from 32 (an
  NVL72's 72: 32 heads at 20 GB/s, 33 × 20 = 660 ≤ 721.8).

Assumed: the NVLink domain is one NVSwitch fabric every GPU reaches through all its NVLinks
(an HGX board, an NVL72 rack as one node); the search's time budget is never spent (a
switch fabric's rings are found at once). Parts outside :data:`NCCL_ARCH` (AMD, TPU, Gaudi, a
part described by the user) keep the H100's 24 channels in a node (32 above NVLink 4's
450 GB/s a direction, :attr:`NvlinkNode.nvl5`) and run no NVLS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from trainplan.model.part_family import catalogue_part

__all__ = [
    "NVLINK5_ABOVE_BYTES_PER_S",
    "NCCL_ARCH",
    "NCCL_LINK_GBPS",
    "LINK_BYTES_PER_S",
    "INTRA_SPEEDS",
    "NVLS_EFFICIENCY",
    "NCCL_MAX_NVLS_ARITY",
    "NvlinkNode",
    "nvlink_node",
    "ring_search",
    "node_channels",
    "ring_busbw",
    "nvls_search",
    "nvls_allreduce_busbw",
    "nvls_allreduce_runs",
]

NVLINK5_ABOVE_BYTES_PER_S = 450e9
"""Above this a part's NVLink (bytes/s a direction) is NVLink 5's or faster (:attr:`NvlinkNode.
nvl5`): Hopper's NVLink 4 is 18 links × 25 GB/s = 450 GB/s a direction, Blackwell's NVLink 5
18 × 50 = 900 GB/s (NVIDIA's H100 and B200 datasheets; the parts' ``nvlink_gbps`` in
``topology/accelerators.toml``)."""

NCCL_ARCH: dict[str, str] = {
    "A100-40GB": "ampere",
    "A100-80GB": "ampere",
    "H100-SXM": "hopper",
    "H100-96GB-500W": "hopper",
    "H100-PCIe": "hopper",
    "H100-NVL": "hopper",
    "H800": "hopper",
    "H20": "hopper",
    "H200": "hopper",
    "B200": "blackwell",
    "B300": "blackwell",
    "GB200": "blackwell",
    "GB300": "blackwell",
}
"""NCCL's compute-capability class of each NVIDIA part (``ncclTopoTuneModel``'s
``compCapIndex`` and the search's speed arrays): Ampere 8.0, Hopper 9.0, Blackwell 10.x."""

NCCL_LINK_GBPS: dict[str, float] = {"ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
"""GB/s NCCL counts for one NVLink each way (``src/graph/topo.h``: ``SM80_NVLINK_BW``,
``SM90_NVLINK_BW``, ``SM100_NVLINK_BW``)."""

LINK_BYTES_PER_S: dict[str, float] = {"ampere": 25e9, "hopper": 25e9, "blackwell": 50e9}
"""Bytes/s one NVLink carries each way: NVLink 3 (A100: 12 links, 600 GB/s both ways) and 4
(H100: 18 links, 900 GB/s), NVLink 5 (B200: 18 links, 1.8 TB/s); NVIDIA's datasheets."""

INTRA_SPEEDS: dict[str, tuple[float, ...]] = {
    "ampere": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
"""GB/s a channel, fastest first, the search tries inside a node (``src/graph/search.cc``
``speedArrayIntra``, ``sm90SpeedArrayIntra``, ``sm100SpeedArrayIntra``)."""

NVLS_EFFICIENCY: dict[str, float] = {"hopper": 0.85, "blackwell": 0.74}
"""``nvlsEfficiency`` (``src/graph/tuning.cc``): NVLS's bus bandwidth per unit of its graph's."""

NCCL_MAX_NVLS_ARITY = 32
"""``NCCL_MAX_NVLS_ARITY`` (``src/include/device.h``): the most NVLS heads."""

_MAX_RING_CHANNELS = 32
"""``ringGraph->maxChannels = MAXCHANNELS / 2`` (``src/init.cc``)."""


@dataclass(frozen=True, slots=True)
class NvlinkNode:
    """One GPU's NVLinks as NCCL's topology sees them (:func:`nvlink_node`)."""

    arch: str
    """NCCL's compute-capability class (:data:`NCCL_ARCH`); ``""`` for a part outside it."""
    links: int
    """NVLinks from the GPU to the NVSwitch; 0 without NVLink."""
    nvl5: bool = False
    """Whether the part's NVLink is NVLink 5's or faster (:data:`NVLINK5_ABOVE_BYTES_PER_S`)."""

    @property
    def link_gbps(self) -> float:
        """GB/s the search counts on the GPU's link to the NVSwitch each way: ``links ×``
        :data:`NCCL_LINK_GBPS`; 0 for a part outside :data:`NCCL_ARCH`."""
        return self.links * NCCL_LINK_GBPS.get(self.arch, 0.0)


def nvlink_node(device_name: str, nvlink_bytes_per_s: float | None) -> NvlinkNode:
    """The :class:`NvlinkNode` of a part (its catalogue name, :func:`model.part_family.
    catalogue_part`) of ``nvlink_bytes_per_s`` of NVLink a direction (None: none): its NVLinks,
    the bandwidth over :data:`LINK_BYTES_PER_S` rounded (a what-if link scales the count).

    >>> nvlink_node("H100-SXM", 450e9), nvlink_node("H800", 200e9).links
    (NvlinkNode(arch='hopper', links=18, nvl5=False), 8)
    >>> nvlink_node("MI300X", 448e9), nvlink_node("B200", 900e9).nvl5
    (NvlinkNode(arch='', links=0, nvl5=False), True)
    """
    arch = NCCL_ARCH.get(catalogue_part(device_name), "")
    bandwidth = float(nvlink_bytes_per_s or 0.0)
    nvl5 = bandwidth > NVLINK5_ABOVE_BYTES_PER_S
    if not arch:
        return NvlinkNode("", 0, nvl5)
    return NvlinkNode(arch, int(round(bandwidth / LINK_BYTES_PER_S[arch])), nvl5)


def _fits(channels: int, speed: float, capacity: float) -> bool:
    """Whether ``channels`` at ``speed`` fit ``capacity`` GB/s (NCCL subtracts in thousandths)."""
    return round(channels * speed * 1000) <= round(capacity * 1000)


@lru_cache(maxsize=64)
def ring_search(node: NvlinkNode) -> tuple[int, float]:
    """``(channels, GB/s each)`` of the ring graph ``ncclTopoCompute`` finds in one node, after
    ``ncclTopoDupChannels`` (module docstring); ``(0, 0.0)`` for a part outside
    :data:`NCCL_ARCH` or without NVLink.

    >>> [ring_search(nvlink_node(p, b)) for p, b in (("H100-SXM", 450e9), ("H800", 200e9))]
    [(12, 30.0), (8, 20.0)]
    >>> ring_search(nvlink_node("A100-80GB", 300e9)), ring_search(nvlink_node("B200", 900e9))
    ((12, 20.0), (16, 45.0))
    """
    capacity = node.link_gbps
    if capacity <= 0:
        return 0, 0.0
    speeds = INTRA_SPEEDS[node.arch]
    i = next((k for k, s in enumerate(speeds) if s <= capacity), len(speeds) - 1)
    best: tuple[int, float] | None = None
    while True:
        speed = speeds[i]
        n = next((k for k in range(_MAX_RING_CHANNELS, 0, -1) if _fits(k, speed, capacity)), 0)
        if n and (best is None or n * speed > best[0] * best[1]):
            best = (n, speed)
        if best is not None and best[0] * best[1] >= capacity:
            break  # "graph->nChannels * graph->bwInter >= system->totalBw": the link is full
        if i + 1 >= len(speeds) or (best is not None and speeds[i + 1] / best[1] <= 0.49):
            break
        i += 1
    if best is None:
        return 0, 0.0
    n, speed = best
    if speed < 25.0 or (node.arch != "ampere" and speed < 50.0 and n > 4):
        return n, speed
    doubled = min(2 * n, _MAX_RING_CHANNELS)
    return doubled, speed / math.ceil(doubled / n)


@lru_cache(maxsize=64)
def node_channels(node: NvlinkNode) -> int:
    """Collective channels (``comm->nChannels``) of a communicator inside one NVLink domain:
    :func:`ring_search`'s, doubled by ``ncclTopoPostset``, at most ``MAXCHANNELS`` 64. A part
    outside :data:`NCCL_ARCH`: 24, or 32 on NVLink 5 (:attr:`NvlinkNode.nvl5`), the H100's and
    B200's.

    >>> [node_channels(nvlink_node(p, b)) for p, b in
    ...  (("H100-SXM", 450e9), ("H800", 200e9), ("A100-80GB", 300e9), ("GB200", 900e9))]
    [24, 16, 24, 32]
    """
    n, _ = ring_search(node)
    if n == 0:
        return 32 if node.nvl5 else 24
    return min(2 * n, 64)


def ring_busbw(node: NvlinkNode) -> float:
    """A ring all-reduce's bus bandwidth in ``ncclTopoTuneModel``, GB/s: the ring graph's
    ``channels × speed`` (Simple).

    >>> ring_busbw(nvlink_node("H100-SXM", 450e9)), ring_busbw(nvlink_node("H800", 200e9))
    (360.0, 160.0)
    """
    n, speed = ring_search(node)
    return n * speed


@lru_cache(maxsize=1024)
def nvls_search(node: NvlinkNode, ranks: int) -> tuple[int, float, float]:
    """``(heads, bwIntra, bwInter)`` of the NVLS graph of a communicator of ``ranks`` GPUs in one
    node (module docstring); ``(0, 0.0, 0.0)`` where no speed fits.

    >>> h100 = nvlink_node("H100-SXM", 450e9)
    >>> nvls_search(h100, 8), nvls_search(h100, 4)
    ((8, 40.0, 60.0), (4, 60.0, 60.0))
    >>> nvls_search(nvlink_node("GB200", 900e9), 72)
    (32, 20.0, 40.0)
    """
    heads = min(NCCL_MAX_NVLS_ARITY, int(ranks))
    capacity = node.link_gbps
    speeds = INTRA_SPEEDS.get(node.arch, ())
    i = next((k for k, s in enumerate(speeds) if _fits(heads + 1, s, capacity)), None)
    if heads < 2 or i is None:
        return 0, 0.0, 0.0
    intra = inter = speeds[i]
    while i > 0 and inter < 2 * intra:
        i -= 1
        inter = speeds[i]
    return heads, intra, inter


def nvls_allreduce_busbw(node: NvlinkNode, ranks: int) -> float:
    """An NVLS all-reduce's bus bandwidth in ``ncclTopoTuneModel``, GB/s, over ``ranks`` GPUs of
    one node: ``heads × min(bwIntra × nvlsEfficiency × (heads − 1)/heads × 2, bwInter)``; 0 on a
    part without NVLS figures.

    >>> round(nvls_allreduce_busbw(nvlink_node("H100-SXM", 450e9), 8), 1)  # 8 × 59.5
    476.0
    >>> round(nvls_allreduce_busbw(nvlink_node("H100-SXM", 450e9), 2), 1)  # 2 × 51
    102.0
    """
    heads, intra, inter = nvls_search(node, ranks)
    if heads == 0 or node.arch not in NVLS_EFFICIENCY:
        return 0.0
    per_head = intra * NVLS_EFFICIENCY[node.arch] * (heads - 1) / heads * 2
    return heads * min(per_head, inter)


@lru_cache(maxsize=1024)
def nvls_allreduce_runs(node: NvlinkNode, ranks: int) -> bool:
    """Whether NCCL's tuner runs a large all-reduce of ``ranks`` GPUs of one NVLink domain as NVLS
    rather than as a ring: NVLS's bus bandwidth (:func:`nvls_allreduce_busbw`) at least the
    ring's (:func:`ring_busbw`; at equal bandwidth NVLS's 25 µs of latency is under the ring's
    8.4 + 2(n − 1) × 3.4 µs from 4 GPUs). True on a part outside :data:`NCCL_ARCH` (its NVLS,
    if any, is not derived here: kept wherever it has it). Whether the part and the
    communicator have NVLS at all is :func:`model.nvls.nvls_on`'s.

    >>> h100, h800 = nvlink_node("H100-SXM", 450e9), nvlink_node("H800", 200e9)
    >>> [n for n in range(2, 9) if nvls_allreduce_runs(h100, n)]
    [6, 7, 8]
    >>> [n for n in range(2, 9) if nvls_allreduce_runs(h800, n)]
    [5, 6, 7, 8]
    >>> [nvls_allreduce_runs(nvlink_node("B200", 900e9), n) for n in (4, 8, 72)]
    [False, True, True]
    """
    if not node.arch:
        return True
    nvls, ring = nvls_allreduce_busbw(node, ranks), ring_busbw(node)
    if nvls != ring:
        return nvls > ring
    return 25.0 < 8.4 + 2 * (int(ranks) - 1) * 3.4
