"""NVLink SHARP's (NVLS) buffers in a ring communicator's bytes (:mod:`model.nvls` has NCCL's
code): where the communicator's GPUs share a node and the part runs NVLS (:func:`model.nvls.
nvls_on`), ``ncclNvlsSetup``'s credits at init, whatever algorithm NCCL's tuner later picks;
where the whole group lies in one NVLink domain, NCCL's tuner runs its large all-reduce as NVLS
(:func:`model.nvls.nvls_ring`, the rule the step time's NVLS all-reduce speed-up and the SM
charge read: not at 2 to 5 GPUs of an H100 node, whose all-reduces run as rings) and its step
runs large collectives, also ``ncclNvlsBufferSetup``'s buffers. NCCL (5067397) makes those
lazily: ``runtimeConn`` is on by default
(``NCCL_RUNTIME_CONNECT`` = 1, ``src/init.cc``), and ``ncclPrepareTasks`` (``src/enqueue.cc``)
marks NVLS for connection only when a task's algorithm is NVLS or NVLS-tree, after which
``ncclCollPreconnect`` (``src/group.cc``) calls ``ncclNvlsBufferSetup``. The tuner
(``src/graph/tuning.cc`` ``ncclTopoTuneModel``) gives NVLS the Simple protocol only, at 25 µs of
NVLink latency against the ring's LL at 0.6 µs a step, so a one-float all-reduce (a barrier,
a grad norm, a loss or token count) runs as a ring and never sets the buffers up: rings whose
step runs only those hold the credits alone (``large`` false, :mod:`model.terms.comm_memory`).
Across nodes NCCL runs only the all-reduce as NVLS-tree, whose buffers are not counted (below).
Read by :mod:`model.terms.comm_memory`.

Not counted: the NVLS-tree buffers of a communicator across nodes whose all-reduces NCCL's tuner
gives NVLS-tree (chosen by message size; the same per-GPU buffers, on its first such
all-reduce), and the tree's network connections.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.nccl_channels import group_placements, strided_placement
from trainplan.model.nccl_search import NvlinkNode
from trainplan.model.nvls import (
    NVLS_MAX_HEADS,
    nvls_buffer_bytes,
    nvls_channels,
    nvls_credit_bytes,
    nvls_on,
    nvls_ring,
)

__all__ = [
    "group_placements",
    "strided_placement",
    "nvls_group_bytes",
    "nvls_strided_bytes",
    "world_runs_large",
]


def _bytes(
    device: str, enabled: bool, node: NvlinkNode, size: int, local: int, domain: bool,
    large: bool,
) -> int:  # fmt: skip
    """NVLS bytes of a ring communicator of ``size`` ranks, ``local`` a node, on a part with
    ``node``'s NVLinks; ``domain``: all in one NVLink domain (heads = its ranks,
    :mod:`model.nvls`); ``large``: its step runs large collectives (:func:`nvls_group_bytes`)."""
    if not nvls_on(device, local, enabled):
        return 0
    heads = min(NVLS_MAX_HEADS, int(size) if domain else int(local))
    channels = nvls_channels(device)
    credit = nvls_credit_bytes(channels, heads)
    buffers = bool(nvls_ring(node, bool(domain), int(size))) and bool(large)
    return credit + (nvls_buffer_bytes(channels, heads) if buffers else 0)


@lru_cache(maxsize=4096)
def nvls_group_bytes(
    device: str, enabled: bool, node: NvlinkNode, size: int, span: int, gpus_per_node: int,
    world: int, nvlink: bool, large: bool,
) -> int:  # fmt: skip
    """NVLS bytes on one GPU of the ring communicator of ``size`` ranks over ``span`` (of a
    layout of ``world`` ranks; :func:`model.terms.comm_memory.group_channels`' placement) on a part with ``node``'s
    NVLinks (:func:`model.nccl_search.nvlink_node`): in one NVLink domain (``nvlink``)
    credits, and buffers where NCCL runs its large all-reduce as NVLS
    (:func:`model.nvls.nvls_ring`) and ``large`` (its step runs large collectives: not only
    one-float all-reduces); else credits where ≥ 2 ranks share a node.

    8 H100s: 2 MiB of credits and 16 × 2 × 1 MiB × 8 = 256 MiB; 4 H100s (their all-reduce a
    ring): the credits alone, 16 × 2 × 64 B × 4 = 8 KiB in a 2 MiB granule; a dp ring of 4
    ranks a node across 8 nodes: 2 MiB; 1 rank a node: 0.

    >>> from trainplan.model.nccl_search import nvlink_node
    >>> h100 = ("H100-SXM", True, nvlink_node("H100-SXM", 450e9))
    >>> [nvls_group_bytes(*h100, *a, True) // 2**20 for a in
    ...  ((8, 8, 8, 8, True), (4, 4, 8, 8, True), (32, 64, 8, 64, False), (16, 128, 8, 128, False))]
    [258, 2, 2, 0]
    >>> nvls_group_bytes(*h100, 8, 8, 8, 8, True, False) // 2**20  # barriers only
    2
    >>> a100 = ("A100-80GB", True, nvlink_node("A100-80GB", 300e9))
    >>> off = ("H100-SXM", False, h100[2])  # NCCL_NVLS_ENABLE=0
    >>> nvls_group_bytes(*off, 8, 8, 8, 8, True, True), nvls_group_bytes(*a100, 8, 8, 8, 8, True, True)
    (0, 0)
    """
    if nvlink:
        return _bytes(device, enabled, node, size, size, True, large)
    places = group_placements(size, span, gpus_per_node, world)
    return max(_bytes(device, enabled, node, size, local, False, large) for local, _ in places)


@lru_cache(maxsize=4096)
def nvls_strided_bytes(
    device: str, enabled: bool, node: NvlinkNode, s1: int, n1: int, s2: int, n2: int,
    gpus_per_node: int, nvlink: bool, large: bool,
) -> int:  # fmt: skip
    """:func:`nvls_group_bytes` of the group of ranks ``i·s1 + j·s2`` (``i < n1``, ``j < n2``;
    :func:`model.terms.comm_memory.strided_group_channels`).

    >>> from trainplan.model.nccl_search import nvlink_node
    >>> h200 = ("H200", True, nvlink_node("H200", 450e9))
    >>> nvls_strided_bytes(*h200, 1, 4, 16, 4, 8, False, True) // 2**20  # tp 4 × pp 4 on 64
    2
    """
    size = int(n1) * int(n2)
    if nvlink:
        return _bytes(device, enabled, node, size, size, True, large)
    local, _ = strided_placement(s1, n1, s2, n2, gpus_per_node)
    return _bytes(device, enabled, node, size, local, False, large)


def world_runs_large(f: Any) -> Any:
    """Whether the world (default) group's ring runs a collective NCCL gives NVLS, so holds NVLS's
    buffers: under ``fsdp2`` where the tp or the FSDP (dp·cp) group spans the whole world,
    DeviceMesh hands it the default group (:func:`model.terms.comm_groups.own_group`), and its
    all-gathers and reduce-scatters run on the world's communicator. Elsewhere the world ring
    runs the barriers' one-float all-reduces only (:func:`model.terms.comm_groups.world_ring`).

    >>> from types import SimpleNamespace as F
    >>> world_runs_large(F(framework="fsdp2", tp=1, pp=1, shard_degree=8))
    True
    >>> world_runs_large(F(framework="fsdp2", tp=2, pp=1, shard_degree=4))
    False
    >>> world_runs_large(F(framework="megatron", tp=1, pp=1, shard_degree=8))
    False
    """
    if Framework(f.framework) is not Framework.FSDP2:
        return False
    world = f.tp * f.pp * f.shard_degree
    return ((f.tp == world) & (f.tp > 1)) | ((f.shard_degree == world) & (f.shard_degree > 1))
