"""The communicator term: the bytes NCCL's communicators hold on one GPU, per process group.

PyTorch's ``ProcessGroupNCCL`` (``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``) gives each
process group one NCCL communicator per device, made on the group's first collective
(``getKeyFromDevice``); batched point-to-point operations (``batch_isend_irecv``, which
Megatron-Core's and torch.distributed.pipelining's schedules use) run on the same communicator,
and a lone send or receive gets a two-rank one per pair (``getKeySendRecv``), which connects the
same peer with the same buffers. A group no collective runs on costs nothing: NCCL makes no
communicator for it.

NCCL (``NVIDIA/nccl`` at 5067397) gives each communicator, for every channel and every peer it
connects to, a receive buffer per protocol — LL (``DEFAULT_LL_BUFFSIZE`` =
``NCCL_LL_LINES_PER_THREAD`` 8 × ``NCCL_LL_MAX_NTHREADS`` 512 × ``NCCL_STEPS`` 8 × 16 B =
512 KiB), LL128 (``DEFAULT_LL128_BUFFSIZE`` = 120 × 640 × 8 × 8 B = 4,915,200 B) and Simple
(``DEFAULT_BUFFSIZE`` = 4 MiB, ``NCCL_BUFFSIZE``): ``src/init.cc`` ``computeBuffSizes``. The
P2P transport (``src/transport/p2p.cc``, ``p2pRecvSetup``) sums the three for a connection and
rounds the allocation up to ``CUDA_IPC_MIN`` = 2 MiB (``src/include/comm.h``); the sender's
``ncclSendMem`` (``p2pSendSetup``) is rounded up to 2 MiB too. With P2P read the Simple buffer
moves to the sender's side: 6 + 6 MiB, the same 12 MiB. NCCL's ``ALLOC`` log of an intra-node
all-to-all on 8 H100s shows exactly these two sizes for every channel and peer, 10,485,760 and
2,097,152 B (NVIDIA/nccl#1685). Memory grows linearly with the channels (NVIDIA/nccl#986, NCCL's
maintainer: "The memory usage is linearly tied to the number of channels ... Ring uses a limited
amount of memory as it only has 2 connections regardless of the scale").

Beside the buffers, each channel a communicator sets up holds three small device allocations
(``src/channel.cc`` ``initChannel``: the shared peer array ``sharedRes->devPeers[c]``, the
channel's ``devPeers`` and its ring's ``devRingUserRanks``), and the communicator two more
(``src/init.cc`` ``devCommSetup``: ``devCommAndChans`` and ``rankToLocalRank``), each made by
``ncclCudaCallocAsync`` as an allocation of its own. With cuMem (``NCCL_CUMEM_ENABLE``, on by
default) each is rounded up to the allocation granularity (``src/include/alloc.h``
``ncclCuMemAlloc``: ``cuMemGetAllocationGranularity`` ``MINIMUM``, 2 MiB), so a channel costs
6 MiB however few ranks it has. ``ncclTopoComputeP2pChannels`` (``src/graph/paths.cc``) sets up
the point-to-point channels beyond the collective ones up to ``p2pnChannels``, the collective
count rounded up to a power of two: :func:`channel_setup_bytes`. Measured on one H200 (NCCL
2.28.9; ``tests/data/device/h200-2026-12-04/``): a one-rank communicator took (64 × 3 + 2) ×
2 MiB = 388 MiB, its ALLOC log those allocations 2 MiB apart.

Per communicator on one GPU (:func:`communicator_bytes`): a **ring** (all-reduce,
reduce-scatter, all-gather) connects one peer in and one out on each of its collective channels
(:func:`group_channels`: 24 inside an H100 node, 16 across nodes at 4 or 8 ranks a node);
**point-to-point peers** (pipeline, context parallelism, the expert all-to-all) get
:func:`p2p_channels_per_peer` channels each.

A ring holds NVLink SHARP's credits, and its buffers where its step runs a large collective as
NVLS (:mod:`model.terms.nvls_memory`; ``nccl_nvls``). Not counted: CollNet buffers (off by
default), the tree algorithm's connections (NCCL connects an algorithm on its first use,
``NCCL_RUNTIME_CONNECT``), NCCL's host-side proxy buffers (host memory), and communicators split
with shared resources (``splitShare``), which PyTorch does not request by default.
"""

from __future__ import annotations

import math
from functools import lru_cache, partial
from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.nccl_channels import (
    NODE_CHANNELS,
    collective_channels,
    group_channels,
    pow2_up,
    setup_channels,
    spans_nodes,
    strided_group_channels,
)
from trainplan.model.nccl_search import nvlink_node
from trainplan.model.params import shares_embedding_with_last_stage
from trainplan.model.pipeline import Schedule
from trainplan.model.rank_groups import nccl_node_size
from trainplan.model.terms.activation_fields import cp_mechanism_of
from trainplan.model.terms.comm_groups import (
    data_rings,
    expert_tp_ring,
    grad_stats_rings,
    group_rings,
    own_group,
    placed_rings,
    world_ring,
)
from trainplan.model.terms.fields import Context, Fields, world_ranks
from trainplan.model.terms.nvls_memory import (
    nvls_group_bytes,
    nvls_strided_bytes,
    world_runs_large,
)
from trainplan.model.xp import maximum, where

__all__ = [
    "CONNECTION_BYTES",
    "RING_CHANNELS",
    "NODE_CHANNELS",
    "collective_channels",
    "group_channels",
    "strided_group_channels",
    "setup_channels",
    "P2P_CHANNELS",
    "P2P_NET_BYTES_PER_CHANNEL",
    "P2P_PEERS_PER_ROUND",
    "communicator_bytes",
    "channel_setup_bytes",
    "p2p_channels_per_peer",
    "net_channels_per_peer",
    "comm_memory_term",
    "grad_stats_rings",
    "world_ring",
]

MIB = 2**20
LL_BYTES = 8 * 512 * 8 * 16
"""NCCL's ``DEFAULT_LL_BUFFSIZE``: ``NCCL_LL_LINES_PER_THREAD`` 8 × ``NCCL_LL_MAX_NTHREADS`` 512
× ``NCCL_STEPS`` 8 × 16 B per ``ncclLLFifoLine`` (``src/init.cc``, ``src/include/device.h``)."""
LL128_BYTES = 120 * 640 * 8 * 8
"""NCCL's ``DEFAULT_LL128_BUFFSIZE``: ``NCCL_LL128_ELEMS_PER_THREAD`` 120 ×
``NCCL_LL128_MAX_NTHREADS`` 640 × ``NCCL_STEPS`` 8 × 8 B."""
SIMPLE_BYTES = 4 * MIB
"""NCCL's ``DEFAULT_BUFFSIZE`` (``NCCL_BUFFSIZE``): 4 MiB."""
ALLOCATION_GRANULE = 2 * MIB
"""``CUDA_IPC_MIN`` (``src/include/comm.h``): NCCL rounds each connection's buffers up to it; also
the cuMem allocation granularity every other device allocation of NCCL's is rounded up to."""
CHANNEL_ALLOCATIONS = 3
"""Device allocations ``initChannel`` (``src/channel.cc``) makes for each channel: the shared
peer array, the channel's peer pointers and its ring's user ranks."""
COMMUNICATOR_ALLOCATIONS = 2
"""Device allocations ``devCommSetup`` (``src/init.cc``) makes once per communicator:
``devCommAndChans`` and ``rankToLocalRank``."""


def _granules(nbytes: int) -> int:
    return -(-nbytes // ALLOCATION_GRANULE) * ALLOCATION_GRANULE


CONNECTION_BYTES = _granules(LL_BYTES + LL128_BYTES + SIMPLE_BYTES) + ALLOCATION_GRANULE
"""Bytes one connection (one channel to one peer) holds on a GPU: the receive buffers of the
three protocols, 9.1875 MiB rounded up to 10 MiB, and the send side's ``ncclSendMem`` rounded up
to 2 MiB: 12 MiB (NVIDIA/nccl#1685's two allocation sizes)."""

RING_CHANNELS = NODE_CHANNELS
"""Collective channels of a ring counted where no placement is given (a communicator inside one
node: the RLHF engines' and OpenRLHF's rings, :func:`communicator_bytes`' default); the layout
term counts each group's :func:`group_channels`."""
P2P_CHANNELS = 32
"""Point-to-point channels of a communicator (``p2pnChannels``) and the most per peer: 32 on
8 H100s (NVIDIA/nccl#1685). Inside a node each NVLink peer gets ``2 × (path bandwidth ÷ one
NVLink's)`` channels, rounded up to a power of two and capped here
(``ncclTopoGetNchannels``, ``ncclTopoComputeP2pChannels``)."""
P2P_NET_BYTES_PER_CHANNEL = 14e9
"""``NCCL_P2P_PER_CHANNEL_NET_BW``, 14 GB/s (``src/graph/paths.cc``): a network peer gets one
channel per this much of the GPU's NIC bandwidth, at least one per NIC."""
P2P_PEERS_PER_ROUND = 8
"""``NCCL_MAX_DEV_WORK_P2P_PER_BATCH`` (``src/include/device.h``): across nodes NCCL halves the
channels per peer until ``channels × ⌈peers ÷ 8⌉`` fits :data:`P2P_CHANNELS`."""


def net_channels_per_peer(scaleout_bytes_per_s: float | None) -> int:
    """Channels per network peer (``ncclTopoGetNchannels``, remote rank): one NIC per GPU,
    ``max(1, ⌈NIC bandwidth ÷ 14 GB/s⌉)``, rounded up to a power of two; 2 where the bandwidth is
    unknown (NCCL's default without a NIC count).

    >>> net_channels_per_peer(50e9), net_channels_per_peer(None)
    (4, 2)
    """
    if not scaleout_bytes_per_s:
        return 2
    return pow2_up(max(1, math.ceil(scaleout_bytes_per_s / P2P_NET_BYTES_PER_CHANNEL)))


@lru_cache(maxsize=4096)  # bounded: a long-lived server sees many layouts and NICs
def p2p_channels_per_peer(ranks: int, across_hosts: bool, nic_bytes_per_s: float | None) -> int:
    """Channels per point-to-point peer of a communicator of ``ranks`` ranks
    (``ncclTopoComputeP2pChannelsPerPeer`` takes the fewest over every rank's peers, then
    ``ncclTopoComputeP2pChannels``): :data:`P2P_CHANNELS` for NVLink peers (``nic_bytes_per_s``
    0), else :func:`net_channels_per_peer` of the NIC; in a communicator across hosts, halved
    while ``channels × ⌈ranks ÷ 8⌉`` exceeds :data:`P2P_CHANNELS`.

    >>> p2p_channels_per_peer(8, False, 0), p2p_channels_per_peer(64, True, 50e9)
    (32, 4)
    >>> p2p_channels_per_peer(64, True, 0), p2p_channels_per_peer(256, True, 50e9)
    (4, 1)
    """
    per_peer = P2P_CHANNELS if nic_bytes_per_s == 0 else net_channels_per_peer(nic_bytes_per_s)
    per_peer = min(per_peer, P2P_CHANNELS)
    rounds = -(-int(ranks) // P2P_PEERS_PER_ROUND)
    while across_hosts and per_peer * rounds > P2P_CHANNELS and per_peer > 1:
        per_peer //= 2
    return per_peer


def channel_setup_bytes(channels: Any) -> Any:
    """Bytes a communicator's ``channels`` set-up channels hold on one GPU beyond their
    connections' buffers: :data:`CHANNEL_ALLOCATIONS` per channel and
    :data:`COMMUNICATOR_ALLOCATIONS`, each one :data:`ALLOCATION_GRANULE` (module docstring).

    >>> channel_setup_bytes(64) // 2**20, channel_setup_bytes(32) // 2**20  # measured; a ring
    (388, 196)
    """
    return (channels * CHANNEL_ALLOCATIONS + COMMUNICATOR_ALLOCATIONS) * ALLOCATION_GRANULE


def communicator_bytes(
    ring: Any,
    peers: Any,
    channels_per_peer: Any,
    setup: bool = False,
    channels: Any = RING_CHANNELS,
    init: Any = None,
) -> Any:
    """Bytes one NCCL communicator with ``channels`` collective channels
    (:func:`collective_channels`) holds on one GPU: a ring's ``channels`` connections where
    ``ring``, plus ``peers`` point-to-point peers' ``channels_per_peer`` channels each, every one
    :data:`CONNECTION_BYTES`; and where ``setup`` (:class:`model.timing.CostOptions`
    ``nccl_channel_setup``) the set-up of its channels (:func:`channel_setup_bytes` of
    :func:`setup_channels`, or ``init`` where given, whether it connects a ring or peers). Exact
    for ints; element-wise for arrays (pass ``init`` with array ``channels``).

    Examples
    --------
    A tp group's ring in a node: 24 × 12 MiB = 288 MiB of buffers, and with the set-up (32 × 3 +
    2) × 2 MiB = 196 MiB more; a dp ring across nodes, 16 channels: 192 MiB and (16 × 3 + 2) ×
    2 MiB = 100 MiB; a middle pipeline stage's two neighbours on other nodes (4 channels), 4
    channels each: 2 × 4 × 12 MiB = 96 MiB, and (4 × 3 + 2) × 2 MiB = 28 MiB more.

    >>> communicator_bytes(True, 0, 0) // 2**20, communicator_bytes(False, 2, 4) // 2**20
    (288, 96)
    >>> communicator_bytes(True, 0, 0, True) // 2**20, communicator_bytes(True, 0, 0, True, 16) // 2**20
    (484, 292)
    >>> communicator_bytes(False, 2, 4, True, 4) // 2**20, communicator_bytes(False, 0, 0, True)
    (124, 0)
    """
    connections = (where(ring, channels, 0) + peers * channels_per_peer) * CONNECTION_BYTES
    if not setup:
        return connections
    made = where(ring, True, peers > 0)
    init = setup_channels(channels) if init is None else init
    return connections + where(made, channel_setup_bytes(maximum(init, channels_per_peer)), 0)


def _pipeline_peers(f: Fields) -> Any:
    """The stages a pipeline stage sends to or receives from: the previous and the next (one at
    the ends). Only the interleaved schedule wraps around: its last stage sends a chunk's output
    to the first stage's next chunk (Megatron-Core's ``p2p_communication``, next rank
    ``(rank + 1) % pp``); the V-shaped schedules (``zb-v``, ``dualpipev``) turn on the last rank
    itself and DualPipe's two directions run between neighbours, so their end ranks have one."""
    ends = (f.stage == 0) | (f.stage == f.pp - 1)
    wraps = (f.schedule == Schedule.INTERLEAVED) & (f.virtual_stages > 1)
    peers = where(wraps, 2, where(ends, 1, 2))
    return where(f.pp == 1, 0, where(f.pp == 2, 1, peers))


def _node(c: Context) -> int:
    """GPUs of NCCL's node for the context's accelerator: the host, or the NVLink clique on a
    multi-node NVLink domain (:func:`model.rank_groups.nccl_node_size`)."""
    return nccl_node_size(c.gpu.gpus_per_node, c.gpu.placement_domain)


def _p2p(c: Context, f: Fields, axis: str, ranks: Any, span: Any = None) -> Any:
    """Channels per peer of the point-to-point communicator over ``axis`` (``ranks`` ranks over
    ``span``, the axis's span unless given): a group outside one NVLink domain spans nodes; one
    inside spans nodes where its ranks lie on more than one of NCCL's nodes (:func:`_node`: the
    host, the clique on a multi-node NVLink domain; :func:`model.nccl_channels.spans_nodes`:
    node membership as the groups lie, not ``ranks`` against the node's GPUs)."""
    link = f.link(axis)
    span = link.span if span is None else span
    gpn = _node(c)
    across = where(
        link.nvlink, f.lookup_values(spans_nodes, (), ranks, span, gpn, world_ranks(f)), True
    )
    nic = where(link.nvlink, 0.0, link.bandwidth)  # one NIC's bandwidth across domains
    return f.lookup_values(p2p_channels_per_peer, (), ranks, across, nic)


def comm_memory_term(c: Context, f: Fields) -> Any:
    """Bytes of NCCL communicator buffers on one GPU of pipeline stage ``f.stage``: one
    communicator per process group the layout runs collectives on (:func:`communicator_bytes`):

    * rings: tp; the dp·cp gradient group; with experts the expert tensor-parallel group
      (:func:`expert_tp_ring`); the pp and ep groups' own (:func:`group_rings`);
      cp's all-gather flavour; with tied embeddings or MTP, the first and last stage's two-rank
      embedding group; Megatron-Core's gradient-statistics groups (:func:`grad_stats_rings`);
      the world group's (:func:`world_ring`: the frameworks' barriers); the loss and token-count
      groups (:func:`data_rings`: torchtitan's "batch" and "loss", Megatron-DeepSpeed's dp group
      under Ulysses); the expert dp group and Megatron-LM's model-parallel and MoE groups,
      placed as their ranks lie (:func:`placed_rings`, :func:`_pipeline_bytes`); under DualPipe
      the group of ranks r and pp − 1 − r that sum the two copies' gradients (DeepSeek-V3
      report §3.2.1; no public code names it; DualPipe runs under ``textbook`` only here: 0);
    * point-to-point: cp's ring flavour's two neighbours (one at cp = 2), Ulysses' cp − 1
      all-to-all peers (the hybrid's both), ep's ep − 1 all-to-all peers (NCCL's all-to-all
      dispatcher; DeepEP's and HybridEP's buffers are the state's ``dispatch_buffer_bytes``),
      the pipeline's neighbouring stages (:func:`_pipeline_bytes`), with
      :func:`p2p_channels_per_peer` channels each (across nodes as the topology placed the axis).

    Each ring connects, and each communicator sets up, the channels its placement gets
    (:func:`_channels`); a world-sized DeviceMesh group is the world's (:func:`_communicator`).
    0 under ``textbook``.

    Scope: tp, dp, cp, cp_kind, cp_a2a, ep, etp, pp, schedule, virtual_stages, framework,
    rank_order, zero_stage.
    Control: pp, framework, zero_stage.
    """
    if not Framework(f.framework).physical:
        return 0
    chans = partial(_channels, c, f)
    comm = partial(_communicator, f, c.options.nccl_channel_setup)
    world = chans(None, f.tp * f.pp * f.shard_degree, world_runs_large(f))
    dp = chans("dp", f.shard_degree)
    total = comm(f.tp > 1, 0, 0, chans("tp", f.tp), f.tp)
    total = total + comm(f.shard_degree > 1, 0, 0, dp, f.shard_degree)
    r, u, gather = f.lookup(cp_mechanism_of, (), "cp_kind", "cp", "cp_a2a")
    ring_peers = where(r > 2, 2, where(r == 2, 1, 0))
    cp_peers = where(gather, 0, ring_peers) + (u - 1)
    cp_ring = where(gather, r > 1, False)
    total = total + comm(cp_ring, cp_peers, _p2p(c, f, "cp", f.cp), chans("cp", f.cp), f.cp)
    arch = c.model.arch
    pp_ring, ep_ring = group_rings(c, f)
    if arch is not None and arch.moe is not None:
        peers = 0 if c.training.moe_run.dispatcher.deduplicates else f.ep - 1
        total = total + comm(ep_ring, peers, _p2p(c, f, "ep", f.ep), chans("ep", f.ep, False), f.ep)
        total = total + comm(expert_tp_ring(f), 0, 0, chans("tp", f.expert_tp), f.expert_tp)
    pp = chans("pp", f.pp, False)
    total = total + _pipeline_bytes(c, f, comm, pp, pp_ring)
    if arch is not None and shares_embedding_with_last_stage(arch):
        ends = ((f.stage == 0) | (f.stage == f.pp - 1)) & (f.pp > 1)
        total = total + comm(ends, 0, 0, chans("pp", f.pp))
    total = total + grad_stats_rings(c, f) * comm(True, 0, 0, world)
    total = total + comm(world_ring(f), 0, 0, world)
    for present, ranks in data_rings(f):
        total = total + comm(present, 0, 0, chans("dp", ranks, False))
    for present, a, b, axes in placed_rings(c, f):
        total = total + comm(present, 0, 0, _strided(c, f, a, b, axes), a[1] * b[1])
    mirror = (f.schedule == Schedule.DUALPIPE) & (f.pp > 1)
    return total + comm(mirror, 0, 0, pp)


def _communicator(
    f: Fields, setup: bool, ring: Any, peers: Any, per_peer: Any, ch: tuple[Any, ...],
    ranks: Any = None,
) -> Any:  # fmt: skip
    """:func:`communicator_bytes` of a group on ``ch``, its ``(collective, set-up)`` channels
    (:func:`_channels`). Where ``ranks`` (the group's size) is given and the group is the
    default group (:func:`own_group`: under ``fsdp2`` a DeviceMesh dimension of the whole
    world), only its point-to-point peers' connections: its ring and its set-up are the world
    ring's (:func:`world_ring`)."""
    full = communicator_bytes(ring, peers, per_peer, setup, ch[0], ch[1])
    full = full + (where(ring, ch[2], 0) if len(ch) > 2 else 0)  # NVLS: nvls_memory
    if ranks is None:
        return full
    shared = communicator_bytes(False, peers, per_peer, False, ch[0], ch[1])
    return where(own_group(f, ranks), full, shared)


def _channels(c: Context, f: Fields, axis: str | None, size: Any, large: Any = True) -> Any:
    """``(collective, set-up)`` channels of a group of ``size`` ranks over ``axis``'s link
    (:func:`group_channels`, :func:`setup_channels`), and its ring's NVLS bytes
    (:func:`model.terms.nvls_memory.nvls_group_bytes`; ``large`` false: its step runs only
    one-float all-reduces, so no NVLS buffers); ``None``: the world, every GPU."""
    gpn = _node(c)
    node = nvlink_node(c.gpu.part, c.gpu.nvlink_bytes_per_s)
    if axis is None:
        domain = c.gpu.placement_domain or gpn
        args = (size, size, gpn, size, size <= domain, c.gpu.scaleout_bytes_per_s, node)
    else:
        link = f.link(axis)
        nic = where(link.nvlink, 0.0, link.bandwidth)
        args = (size, link.span, gpn, world_ranks(f), link.nvlink, nic, node)
    coll = f.lookup_values(group_channels, (), *args)
    nvls_args = (c.gpu.part, c.options.nccl_nvls, node)
    nvls = f.lookup_values(nvls_group_bytes, nvls_args, *args[:5], large)
    return coll, f.lookup_values(setup_channels, (), coll), nvls


def _strided(c: Context, f: Fields, a: Any, b: Any, axes: tuple[str, str]) -> Any:
    """:func:`_channels` of the group of ``a``'s ``(stride, size)`` times ``b``'s
    (:func:`strided_group_channels`), on ``axes[1]``'s link where ``b`` has more than one rank,
    else ``axes[0]``'s; NVLS buffers on the expert dp group alone (``("edp", "edp")``, gradients)."""
    large = axes == ("edp", "edp")
    inner, outer = f.link(axes[0]), f.link(axes[1])
    nvlink = where(b[1] > 1, outer.nvlink, inner.nvlink)
    nic = where(nvlink, 0.0, where(b[1] > 1, outer.bandwidth, inner.bandwidth))
    node = nvlink_node(c.gpu.part, c.gpu.nvlink_bytes_per_s)
    args = (a[0], a[1], b[0], b[1], _node(c), nvlink, nic, node)
    coll = f.lookup_values(strided_group_channels, (), *args)
    nvls_args = (c.gpu.part, c.options.nccl_nvls, node)
    nvls = f.lookup_values(nvls_strided_bytes, nvls_args, *args[:6], large)
    return coll, f.lookup_values(setup_channels, (), coll), nvls


def _pipeline_bytes(
    c: Context, f: Fields, comm: Any, pp: tuple[Any, ...], ring: Any = False
) -> Any:
    """The pipeline's communicators on one stage. Megatron-LM's interleaved schedule overlaps
    its sends by default (``--no-overlap-p2p-communication`` turns it off), and then does not
    batch them (``argument_utils.py``: ``batch_p2p_comm = not args.overlap_p2p_comm``;
    ``p2p_communication.py`` ``_p2p_ops``: lone ``isend``/``irecv``; at d98e8a64dd), so PyTorch
    gives each neighbour pair a two-rank communicator of its own (``getKeySendRecv``): where
    pp > 2 a stage holds two, one per neighbour, each with its own set-up
    (:func:`collective_channels` of a pair of adjacent stages). Otherwise one communicator over
    the pp group reaches :func:`_pipeline_peers`. Where ``ring`` (an all-reduce over the pp group,
    :func:`model.terms.comm_groups.group_rings`) that communicator connects a ring too; under
    lone sends the pp group's ring is a communicator of its own."""
    link = f.link("pp")
    megatron = Framework(f.framework) is Framework.MEGATRON
    lone = (f.schedule == Schedule.INTERLEAVED) & (f.virtual_stages > 1) & (f.pp > 2) & megatron
    stride = link.span // maximum(f.pp, 1)
    nic = where(link.nvlink, 0.0, link.bandwidth)
    node = nvlink_node(c.gpu.part, c.gpu.nvlink_bytes_per_s)
    gpn = _node(c)
    args = (2, 2 * stride, gpn, world_ranks(f), link.nvlink, nic, node)
    pair_coll = f.lookup_values(group_channels, (), *args)
    pair = (pair_coll, f.lookup_values(setup_channels, (), pair_coll))
    per_peer = _p2p(c, f, "pp", 2, 2 * stride)
    group = comm(ring, _pipeline_peers(f), _p2p(c, f, "pp", f.pp), pp, f.pp)
    return where(lone, 2 * comm(False, 1, per_peer, pair) + comm(ring, 0, 0, pp), group)
