"""NCCL's NVLink SHARP (NVLS): which parts and communicators NCCL runs it on, its channel count,
and the device memory its buffers hold. One rule, read by the step time (the NVLS all-reduce's
speed-up, :func:`model.nvlink_rates.nvls_allreduce_speedup`, and its SM share,
:mod:`model.comm_sms`) and by the memory (:mod:`model.terms.nvls_memory`).

NCCL (``NVIDIA/nccl`` at 5067397):

* **Where.** ``ncclNvlsInit`` (``src/transport/nvls.cc``): ``NCCL_NVLS_ENABLE`` defaults to 2,
  "on where the device reports ``CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED``", and off where the
  communicator has fewer than 2 GPUs on the node (``ncclTopoGetGpuCount`` < 2). The NVLS graph
  search (``src/graph/search.cc`` ``ncclTopoCompute``) finds nothing without an NVSwitch or
  below compute capability 9.0: NVSwitch boards with multicast, HGX H100/H200/H800 and
  B200/B300, GB200/GB300 NVL72 (:data:`NVLS_CHANNELS`).
* **Channels.** ``ncclNvlsTuning``: ``NVLS_NCHANNELS_SM90`` = 16 on Hopper,
  ``NVLS_NCHANNELS_SM100_NVL`` = 24 on Blackwell in one NVLink domain (32 across domains,
  ``NVLS_NCHANNELS_SM100``).
* **Heads.** In one node (one NVLink domain: an NVL72's clique) the search forces as many NVLS
  channels ("heads") as the communicator's GPUs there, at most 32 (``minChannels =
  maxChannels = min(NCCL_MAX_NVLS_ARITY 32, GPUs)``); ``connectNvls`` (``src/graph/connect.cc``)
  gives every channel those heads.
* **Buffers.** ``ncclNvlsSetup`` (at ``ncclCommInitRank``) allocates the credits,
  ``channels × 2 × 64 B × heads``; ``ncclNvlsBufferSetup`` the buffers, ``channels × 2 ×
  (NCCL_NVLS_CHUNKSIZE 128 KiB × NCCL_STEPS 8) × heads`` — at init where runtime connection is
  off, else on the first collective NCCL runs as NVLS or NVLS-tree (``src/group.cc``
  ``ncclCollPreconnect``). ``nvlsAllocateMem`` rounds the physical allocation (``cuMemCreate``
  of ``ucsize``) up to the allocation granularity (``cuMemGetAllocationGranularity``
  RECOMMENDED, 2 MiB); the multicast granularity (``cuMulticastGetGranularity``, 512 MiB)
  rounds only the multicast object's virtual range (``mcsize``), which holds no memory.
  8 H100s: 16 × 2 × 1 MiB × 8 = 256 MiB (NCCL's ``NVLS comm ... nHeads 8 buffSize 1048576
  nvlsPerRankSize 33554432 nvlsTotalSize 268435456`` on 8 H100s, public logs).
* **Which collectives.** In one node NVLS can carry all-reduce, reduce-scatter and all-gather
  (``src/graph/tuning.cc`` ``ncclTopoTuneModel``), the tuner picking it where it is the
  fastest: a large all-reduce where NVLS's bus bandwidth reaches the ring's on the part's
  NVLinks (:func:`nvls_ring`, :mod:`model.nccl_search`: from 6 GPUs of an H100 node, 5 of an
  H800's, 8 of a B200's), never a large reduce-scatter or all-gather (about half the ring's).
  Across nodes, without CollNet (off by default), only the all-reduce, as NVLS-tree
  (``NCCL_ALGO_NVLS`` is disabled for ``nNodes > 1`` without CollNet; ``updateCollCostTable``
  in ``src/enqueue.cc``).
"""

from __future__ import annotations

from typing import Any

from trainplan.model.nccl_search import (
    NCCL_MAX_NVLS_ARITY,
    NvlinkNode,
    nvlink_node,
    nvls_allreduce_runs,
)
from trainplan.model.part_family import catalogue_part
from trainplan.model.xp import namespace

__all__ = [
    "NVLS_CHANNELS",
    "NVLS_MAX_HEADS",
    "NVLS_CHUNK_BYTES",
    "NCCL_STEPS",
    "NVLS_CREDIT_BYTES",
    "NVLS_ALLOCATION_GRANULE",
    "nvls_channels",
    "nvls_on",
    "nvls_ring",
    "nvls_ring_on_link",
    "nvls_buffer_bytes",
    "nvls_credit_bytes",
]

NVLS_CHANNELS: dict[str, int] = {
    "H100-SXM": 16,
    "H100-96GB-500W": 16,
    "H800": 16,
    "H200": 16,
    "B200": 24,
    "GB200": 24,
    "B300": 24,
    "GB300": 24,
}
"""NVLS channels (one thread block each) NCCL gives a communicator inside one NVLink domain, by
catalogue part: ``ncclNvlsTuning``'s ``NVLS_NCHANNELS_SM90`` = 16 (Hopper, compute capability
9.0) and ``NVLS_NCHANNELS_SM100_NVL`` = 24 (Blackwell, ≥ 10.0; also what
``ncclNvlsTreeSm100Tuning`` sets for more than two domains of ≤ 8 GPUs). The parts are those on
an NVSwitch with multicast (NVLink SHARP); a part not here (A100, H100-PCIe, H20, AMD) runs no
NVLS."""
NVLS_MAX_HEADS = NCCL_MAX_NVLS_ARITY
"""``NCCL_MAX_NVLS_ARITY`` (``src/include/device.h``, :data:`model.nccl_search.
NCCL_MAX_NVLS_ARITY`): the NVLS search's most heads (``maxChannels = min(32, GPUs)``), however
many GPUs an NVLink domain (an NVL72's) holds."""
NVLS_CHUNK_BYTES = 128 * 1024
"""``NCCL_NVLS_CHUNKSIZE`` default (``src/transport/nvls.cc``), bytes a step."""
NCCL_STEPS = 8
"""``NCCL_STEPS`` (``src/include/device.h``): steps a channel's buffer holds."""
NVLS_CREDIT_BYTES = 64
"""``memSize`` of ``ncclNvlsSetup``: the head and tail of one channel, head and direction."""
NVLS_ALLOCATION_GRANULE = 2 * 2**20
"""``cuMemGetAllocationGranularity`` RECOMMENDED for pinned device memory, taken as 2 MiB (the
granule every cuMem allocation of NCCL's measured 2 MiB apart on an H200,
:data:`model.terms.comm_memory.ALLOCATION_GRANULE`): ``nvlsAllocateMem`` rounds ``ucsize`` up to
it."""


def nvls_channels(device_name: str) -> int:
    """NVLS channels of a communicator in one NVLink domain on the part (:data:`NVLS_CHANNELS`);
    0 where the part runs no NVLS.

    >>> nvls_channels("H200"), nvls_channels("GB200"), nvls_channels("A100-80GB")
    (16, 24, 0)
    """
    return NVLS_CHANNELS.get(catalogue_part(device_name), 0)


def nvls_on(device_name: str, local_ranks: int, enabled: bool = True) -> bool:
    """Whether NCCL gives a communicator with ``local_ranks`` GPUs on each node NVLS
    (``ncclNvlsInit``): the part has it (:func:`nvls_channels`), at least 2 of the
    communicator's GPUs share the node, and ``enabled`` (:class:`model.timing.CostOptions`
    ``nccl_nvls``; false: ``NCCL_NVLS_ENABLE=0``).

    >>> nvls_on("H100-SXM", 8), nvls_on("H100-SXM", 1), nvls_on("H100-SXM", 8, False)
    (True, False, False)
    """
    return bool(enabled) and nvls_channels(device_name) > 0 and int(local_ranks) >= 2


def nvls_ring(node: NvlinkNode, in_domain: Any, ranks: Any) -> Any:
    """Whether NCCL runs a large all-reduce of a communicator of ``ranks`` GPUs as NVLS proper
    (``NCCL_ALGO_NVLS``), given a part that runs NVLS with it on (:func:`nvls_on`): all its GPUs
    in one NVLink domain (across nodes ``ncclTopoTuneModel`` disables ``NCCL_ALGO_NVLS``
    without CollNet, leaving NVLS-tree), at least 2 of them (``ncclNvlsInit``), and NVLS's bus
    bandwidth at that size at least the ring's on the part's NVLinks (``node``,
    :func:`model.nccl_search.nvls_allreduce_runs`: on an H100 node from 6 GPUs, on an H800's
    from 5, on a B200's from 8). Element-wise in ``in_domain`` and ``ranks``. The one rule the
    step time's NVLS all-reduce (:func:`model.roofline.collective_time`, through
    :func:`nvls_ring_on_link`), the NVLS buffers (:mod:`model.terms.nvls_memory`) and the SMs an
    all-reduce holds (:func:`model.nccl_channels.collective_blocks`) read.

    >>> from trainplan.model.nccl_search import nvlink_node
    >>> h100 = nvlink_node("H100-SXM", 450e9)
    >>> nvls_ring(h100, True, 8), nvls_ring(h100, True, 4), nvls_ring(h100, True, 1)
    (True, False, False)
    >>> nvls_ring(h100, False, 8)
    False
    """
    ns = namespace(ranks)
    if ns is None:
        runs = int(ranks) >= 2 and nvls_allreduce_runs(node, int(ranks))
        return in_domain & runs
    sizes = [int(k) for k in ns.unique(ranks).tolist()]
    runs_at = [k for k in sizes if k >= 2 and nvls_allreduce_runs(node, k)]
    return in_domain & ns.isin(ranks, runs_at)


def nvls_ring_on_link(part: str, link_bytes_per_s: Any, in_domain: Any, ranks: Any) -> Any:
    """:func:`nvls_ring` of a group on a link of ``link_bytes_per_s`` a direction (the NVLink of
    the part ``part`` where ``in_domain``; element-wise, each distinct bandwidth read as the
    part's NVLinks, :func:`model.nccl_search.nvlink_node`).

    >>> nvls_ring_on_link("H800", 200e9, True, 5), nvls_ring_on_link("H100-SXM", 450e9, True, 5)
    (True, False)
    """
    ns = namespace(link_bytes_per_s, ranks, in_domain)
    if ns is None:
        return nvls_ring(nvlink_node(part, float(link_bytes_per_s)), in_domain, ranks)
    out: Any = False
    for bandwidth in ns.unique(ns.asarray(link_bytes_per_s)).tolist():
        node = nvlink_node(part, float(bandwidth))
        out = out | ((link_bytes_per_s == bandwidth) & nvls_ring(node, in_domain, ranks))
    return out


def _granules(nbytes: int) -> int:
    return -(-int(nbytes) // NVLS_ALLOCATION_GRANULE) * NVLS_ALLOCATION_GRANULE


def nvls_buffer_bytes(channels: int, heads: int) -> int:
    """Bytes ``ncclNvlsBufferSetup`` allocates on each GPU: ``channels × 2 × (128 KiB × 8) ×
    heads``, rounded up to 2 MiB.

    >>> nvls_buffer_bytes(16, 8) // 2**20, nvls_buffer_bytes(16, 2) // 2**20  # 8 or 2 H100s
    (256, 64)
    >>> nvls_buffer_bytes(24, 4) // 2**20  # 4 GPUs of a GB200 host
    192
    """
    return _granules(channels * 2 * NVLS_CHUNK_BYTES * NCCL_STEPS * heads)


def nvls_credit_bytes(channels: int, heads: int) -> int:
    """Bytes ``ncclNvlsSetup`` allocates on each GPU at init: ``channels × 2 × 64 B × heads``
    (16 KiB on 8 H100s), rounded up to 2 MiB; 0 without channels.

    >>> nvls_credit_bytes(16, 8) // 2**20, nvls_credit_bytes(0, 8)
    (2, 0)
    """
    return _granules(channels * 2 * NVLS_CREDIT_BYTES * heads)
