"""NCCL's choice of algorithm and protocol for one all-reduce, all-gather or reduce-scatter, as its
tuner makes it, and the time it models for that choice: the one rule
:func:`model.roofline.collective_time` reads wherever a collective is not read off a published
bus-bandwidth curve (across nodes, and inside a node on a part without a curve).

NCCL (``NVIDIA/nccl`` at 5067397c; its defaults, no ``NCCL_ALGO``, ``NCCL_PROTO`` or tuner
plugin):

* **The table.** ``ncclTopoTuneModel`` (``src/graph/tuning.cc``) fills, for each collective,
  algorithm and protocol (LL, LL128, Simple), a latency and a bandwidth; ``topoGetAlgoInfo``
  (``src/enqueue.cc``, through ``updateCollCostTable``) runs the collective as the pair of
  least ``ncclTopoGetAlgoTime``: ``latency + nBytes ÷ bandwidth``, ``nBytes`` the whole
  buffer (``ncclFuncMaxSendRecvCount``). A ring's algorithm bandwidth is its bus bandwidth ×
  ``nRanks ∕ nsteps``, so its bytes take ``sent ÷ busBw`` (``sent`` a rank's share of the
  buffer, :func:`model.roofline.ring_share`); a tree's is half its bus bandwidth.
* **Algorithms timed here.** Ring (all three collectives), tree (the all-reduce; inside a node
  too) and NVLS (the all-reduce inside an NVLink domain where :func:`model.nvls.nvls_ring` says
  NCCL runs it: ``hwLatencies[NVLINK][NVLS][SIMPLE]`` 25 µs and no base). Not timed: PAT (the
  all-gather and reduce-scatter at one rank a node, ``ncclPatEnable``), NVLS-tree across
  nodes, CollNet (off by default: ``collnetEnable`` 0).
* **Latency.** Ring: ``baseLat + (nsteps − nInterSteps)·intraLat + nInterSteps·interLat``
  (:func:`model.collective_rates.ring_steps_us` over :func:`model.nccl_latency.steps_latency`),
  ``intraLat`` at least ``getNetOverhead`` (1 µs on Intel and other hosts; ×3 for Simple)
  across nodes, ``interLat`` the tree's network hop where each node holds one rank
  (``ppn == 1``). Tree: ``baseLat + 2·((nRanks∕nNodes − 1)·intraLat +
  log2i(nNodes)·interLat)`` (:func:`model.nccl_latency.tree_latency`). ``ncclTopoGetAlgoTime``
  multiplies a multi-node Simple ring all-reduce's latency by 1.4 once each rank's share of a
  channel is 64 bytes or more (the ring's "plateau", ``comm->nChannels``:
  :func:`model.nccl_channels.collective_channels`).
* **Bandwidth.** The Simple ring's bus bandwidth is the model's (the link's bandwidth at its
  tier's efficiency, NVLink's where NVLink binds a ring across nodes,
  :func:`model.nvlink_bound.ring_busbw`: NCCL's ``nChannels × bw``); the tuner's
  refinements on it: LL ``min(llMaxBw, 0.5·busBw)``, LL128 ``min(0.92·busBw, nChannels ×
  perChMaxRingLL128Bw)`` (:func:`model.collective_rates.ring_busbw_gbps`); the tree all-reduce
  ``min(0.92·busBw, nChannels × perChMaxTreeBw)``, in LL that ÷ 3.8 at most ``llMaxBw``, in
  LL128 that × 7∕9 in one node (120∕128 across) at most ``nChannels × perChMaxTreeLL128Bw``,
  × 0.85 at one rank a node (the tree graph's plain pattern there, :data:`_LONE_TREE`), and
  by the message size's ``treeCorrectionFactor``. The caps' column is ``nNodes`` 1, 2 or
  more; ``llMaxBw``'s row the part's generation in one node, the host CPU's across (Intel's
  taken: DGX/HGX hosts; Grace and other non-AMD hosts read the same row). ``nChannels`` is the
  ring graph's (:func:`ring_graph`).
* **LL128 on.** ``ncclTopoTuneModel`` enables LL128 by default on compute capability 9.0 and
  up where the graph's NIC path is at most ``PATH_PXN`` (8.0: ``PATH_PXB``) and its path
  inside a node at most ``PATH_NVB``: so on the DGX/HGX and NVL72 topologies the model assumes
  (each GPU on the NVSwitch, its NIC behind its own PCIe switch: ``PATH_PXB``). A part whose
  node joins GPUs over PCIe (two NVLink-bridged H100 PCIe cards of an 8-GPU host) has LL128 off
  there and PCIe's hop latencies (``hwLatencies[PCI]``); not modelled: its steps in the host
  take NVLink's hops, LL128 on.

Parts outside :data:`model.nccl_search.NCCL_ARCH` (AMD's RCCL, TPUs, Gaudi, a part described by
the user) have no NCCL tuner here: :func:`model.roofline.collective_time` keeps Simple's latency
there. Units: seconds, bytes, bytes/s; element-wise for the search's arrays (:mod:`model.xp`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainplan.model.collective_rates import (
    ll_max_gbps,
    node_column,
    ring_busbw_gbps,
    ring_steps_us,
)
from trainplan.model.kernel_tables import NcclLatency
from trainplan.model.nccl_channels import collective_channels, inter_graph
from trainplan.model.nccl_latency import tree_latency
from trainplan.model.nccl_search import NCCL_ARCH, nvlink_node, ring_search
from trainplan.model.part_family import catalogue_part
from trainplan.model.xp import (
    elementwise,
    floor,
    is_array,
    log2,
    maximum,
    minimum,
    namespace,
    where,
)
from trainplan.scenarios.kernel_data import collective_data

__all__ = [
    "TUNED", "nccl_arch", "ring_graph", "candidate_seconds", "tuned_seconds", "protocol_seconds",
]  # fmt: skip

TUNED: tuple[str, ...] = ("all-reduce", "all-gather", "reduce-scatter")
"""The collectives whose algorithm and protocol NCCL's tuner picks (``NCCL_NUM_FUNCTIONS``: an
all-to-all and a send are grouped point-to-point calls, :mod:`model.nccl_latency`)."""

_PLATEAU = "ampere_and_later"
"""``ncclTopoGetAlgoTime``'s ring plateau from compute capability 8.0 (every NCCL part here)."""

_LONE_TREE = 0.85
"""``ncclTopoTuneModel``'s factor on the tree's bus bandwidth where the communicator's tree graph
has the plain pattern (``comm->maxTreePattern == NCCL_TOPO_PATTERN_TREE``: ``busBw *= .85``,
``src/graph/tuning.cc`` at 5067397c, after the protocols' refinements): ``ncclTopoCompute``
(``src/graph/search.cc``) gives a node holding one of the communicator's GPUs that pattern
(``ngpus == 1 && graph->pattern != NCCL_TOPO_PATTERN_RING``), and ``src/init.cc`` takes the
ranks' largest, so every communicator of one rank a node (``ppn == 1``) has it."""


def nccl_arch(device_name: str) -> str:
    """NCCL's generation of a part (:data:`model.nccl_search.NCCL_ARCH`: ampere, hopper,
    blackwell); ``""`` for a part NCCL's tuner does not run on here.

    >>> nccl_arch("H100-SXM"), nccl_arch("GB200[nic×2]"), nccl_arch("MI300X")
    ('hopper', 'blackwell', '')
    """
    return NCCL_ARCH.get(catalogue_part(device_name), "")


@lru_cache(maxsize=1024)
def _graph(
    part: str, scaleup: bool, local: int, bandwidth: float, nic: float, nvlink: float
) -> tuple[int, float, int]:
    """``(graph channels, GB/s each, communicator channels)`` of one collective's ring
    (:func:`ring_graph`)."""
    if scaleup:
        node = nvlink_node(part, bandwidth)
        channels, speed = ring_search(node)
        return channels, speed, collective_channels(local, 1, None, node)
    nic = nic if nic > 0 else bandwidth / max(local, 1)
    node = nvlink_node(part, nvlink if nvlink > 0 else None)
    channels, speed = inter_graph(local, nic, node)
    return channels, speed, collective_channels(local, 2, nic, node)


def ring_graph(
    part: str, scaleup: Any, local: Any, bandwidth: Any, nic: Any = 0.0, nvlink: Any = 0.0
) -> tuple[Any, Any]:
    """``(channels, communicator channels)`` NCCL gives a ring over the link: in one NVLink
    domain (``scaleup``, ``bandwidth`` the part's NVLink) the node's ring graph
    (:func:`model.nccl_search.ring_search`: 12 on an H100 node) and ``comm->nChannels``
    (:func:`model.nccl_channels.collective_channels`: 24); across nodes the graph of ``local``
    ranks a node (:func:`model.nccl_channels.inter_graph`) and the communicator's, each GPU's
    NIC ``nic`` bytes/s (0: ``bandwidth ÷ local``, the inverse of
    :func:`model.step_time.rings_bandwidth`, exact where the NICs bind) and its NVLink
    ``nvlink`` (the cluster's, bytes/s a direction; 0: unknown, the channels unbound by it).
    ``ncclTopoCompute`` (``src/graph/search.cc``) bounds the channels across nodes by the GPU's
    NVLinks as well as by the NIC: 16 GB200s or more of an NVL72 rack find 16 channels at
    45.1 GB/s (721.6 of the 18 × 40.1 = 721.8 GB/s NCCL counts), not ``min(local, 32)``; an
    H800 node, 4 at 40 doubled to 8 at 20 (:func:`model.nccl_channels.inter_search`).
    Element-wise. Units: channels.

    >>> ring_graph("H100-SXM", True, 8, 450e9), ring_graph("H100-SXM", False, 8, 400e9)
    ((12, 24), (8, 16))
    >>> ring_graph("H100-SXM", False, 1, 50e9)
    (2, 4)
    >>> ring_graph("GB200", False, 36, 900e9, 50e9, 900e9), ring_graph("GB200", False, 36, 900e9)
    ((16, 32), (32, 64))
    """
    if namespace(scaleup, local, bandwidth, nic, nvlink) is None:
        channels, _, comm = _graph(
            part, bool(scaleup), int(local), float(bandwidth), float(nic), float(nvlink)
        )
        return channels, comm

    def pick(i: int) -> Any:
        return elementwise(lambda u, g, b, c, v: _graph(part, bool(u), int(g), b, c, v)[i],
                           scaleup, local, bandwidth, nic, nvlink)  # fmt: skip

    return pick(0), pick(2)


def _hops(t: NcclLatency, algo: str, p: int, shape: tuple[Any, ...]) -> Any:
    """The latency (µs) of one algorithm ``algo`` (ring, tree) in protocol ``p`` (its index):
    ``shape`` = (kind, n, scaleup, per-domain, nodes, one rank a node). The ring's is
    :func:`model.collective_rates.ring_steps_us`, the tree's
    :func:`model.nccl_latency.tree_latency` after its base."""
    kind, n, _, local, nodes, alone = shape
    intra, net = t.hw_us["nvlink"][algo][p], t.hw_us["net"]
    if algo == "tree":
        return t.base_us["tree"][p] + tree_latency(n, nodes, intra, net["tree"][p])
    inter = where(alone, net["tree"][p], net["ring"][p])
    return ring_steps_us(t, kind, t.protocols[p], n, local, intra, inter, domains=nodes)


def _bus(
    t: NcclLatency, arch: str, algo: str, p: int, busbw: Any, fit: tuple[Any, Any, Any]
) -> Any:
    """The tuner's bus bandwidth (GB/s) of ``algo`` in protocol ``p`` from the Simple ring's
    ``busbw`` (GB/s), ``fit`` = (channels, nodes, one rank a node): the ring's
    :func:`model.collective_rates.ring_busbw_gbps`; the tree all-reduce's
    ``min(0.92·busBw, nChannels × perChMaxTreeBw)``, in LL ÷ 3.8 at most ``llMaxBw``, in LL128
    × 7/9 in one node (120/128 across) at most ``nChannels × perChMaxTreeLL128Bw``; at one
    rank a node that × 0.85 (:data:`_LONE_TREE`)."""
    channels, nodes, alone = fit
    name = t.protocols[p]
    if algo == "ring":
        return ring_busbw_gbps(t, name, channels, busbw / channels, nodes, arch)
    tree = minimum(0.92 * busbw, channels * node_column(t.tree_channel_gbps[arch], nodes))
    if name == "LL":
        tree = minimum(tree / 3.8, ll_max_gbps(t, arch, nodes))
    elif name == "LL128":
        share = where(nodes == 1, 7 / 9, 120 / 128)
        cap = channels * node_column(t.tree_ll128_channel_gbps[arch], nodes)
        tree = minimum(tree * share, cap)
    return tree * where(alone, _LONE_TREE, 1.0)


def _correction(t: NcclLatency, p: int, buffer: Any) -> Any:
    """``treeCorrectionFactor[p][log2i(nBytes >> 6)]`` where that index is 0–22, else 1."""
    index = floor(log2(maximum(buffer, 1) / 64))
    inside = (buffer >= 64) & (index < 23)
    index = where(inside, index, 0)
    factors = t.tree_correction[t.protocols[p]]
    ns = namespace(index)
    factor = (
        factors[int(index)]
        if ns is None
        else ns.take(ns.asarray(factors), ns.astype(index, ns.int64))
    )
    return where(inside, factor, 1.0)


def candidate_seconds(
    kind: str, group_size: Any, sent_bytes: Any, bandwidth: Any, busbw: Any, scaleup: Any,
    part: str, per_domain: Any = 1, domains: Any = 0, nvls_busbw: Any = 0.0, nic: Any = 0.0,
    nvlink: Any = 0.0,
) -> dict[tuple[str, str], Any]:  # fmt: skip
    """Seconds ``ncclTopoGetAlgoTime`` models for each ``(algorithm, protocol)`` NCCL's tuner
    weighs for a ``kind`` collective (:data:`TUNED`) over ``group_size`` ranks in which each
    rank sends ``sent_bytes`` (the module docstring): the ring in LL, LL128 and Simple; for an
    all-reduce the tree in the three and, where ``nvls_busbw`` > 0 (bytes/s: NVLS's bus
    bandwidth on the link, :func:`model.nvls.nvls_ring`), NVLS in Simple. ``bandwidth``: the
    link's nominal bytes/s (the part's NVLink where ``scaleup``; across nodes ``per_domain``
    NICs' worth, :func:`model.step_time.rings_bandwidth`), ``busbw``: the Simple ring's bus
    bandwidth on it (bytes/s, at the link's efficiency); ``per_domain`` ranks in each NVLink
    domain and ``domains`` NCCL's nodes (:attr:`model.roofline.LinkTime.domains`; 0:
    ``⌈n ∕ per_domain⌉``); ``nic`` and ``nvlink`` the GPU's NIC and the cluster's NVLink
    (bytes/s, 0: unknown; :attr:`model.roofline.LinkTime.nic_bytes_per_s`), what the ring's
    channels across nodes are bound by (:func:`ring_graph`). Element-wise.

    Raises ``KeyError`` for a part outside :data:`model.nccl_search.NCCL_ARCH`
    (:func:`nccl_arch` says which are in).

    Examples
    --------
    A 1 MiB all-reduce over 64 H100s, 8 a node, given a ring bus bandwidth of 384 GB/s (8 NICs
    of 50 GB/s at 0.96; the planner's own H100 ring runs at 360, bound by NVLink too,
    :func:`model.nvlink_bound.ring_busbw`) and the ring graph's 8 channels. The ring in LL128: 14 + 14 × 4.0 + 112 × 1.9 µs and
    2·63∕64 MiB at min(0.92 × 384, 8 × 36.7) = 293.6 GB/s; in Simple (8.4 + 14 × 14 + 112 ×
    3.4) × 1.4 µs (the plateau) and the bytes at 384. The tree in Simple 8.4 + 2 × (7 × 4.0 +
    3 × 14) µs and 1 MiB at min(0.92 × 384, 8 × 36.0) × 0.5 × 0.5 (the correction at
    2^14 × 64 B) = 72 GB/s; in LL128 14 + 2 × (7 × 1.25 + 3 × 8.5) µs and 1 MiB at
    min(288 × 120∕128, 8 × 29.0) × 0.5 × 0.6 = 69.6 GB/s, the least:

    >>> out = candidate_seconds("all-reduce", 64, 2 * 63 / 64 * 2**20, 400e9, 384e9, False,
    ...                         "H100-SXM", 8, 8)
    >>> {k: round(v * 1e6, 1) for k, v in out.items() if k[1] != "LL"}
    {('ring', 'LL128'): 289.8, ('ring', 'Simple'): 824.7, ('tree', 'LL128'): 97.6, ('tree', 'Simple'): 163.0}
    """
    t, arch = collective_data().nccl_latency, NCCL_ARCH[catalogue_part(part)]
    local = maximum(minimum(per_domain, group_size), 1)
    nodes = where(scaleup, 1, where(domains > 0, domains, -floor(-group_size / local)))
    shape = (kind, group_size, scaleup, local, nodes, nodes >= group_size)
    channels, comm = ring_graph(part, scaleup, local, bandwidth, nic, nvlink)
    channels = maximum(channels, 1)
    fit = (channels, nodes, shape[-1])
    gbps = where(busbw > 0, busbw, 1.0) / 1e9
    out: dict[tuple[str, str], Any] = {}
    for algo in ("ring", "tree") if kind == "all-reduce" else ("ring",):
        for p, name in enumerate(t.protocols):
            rate = _bus(t, arch, algo, p, gbps, fit) * 1e9
            out[algo, name] = _seconds(t, algo, p, shape, rate, sent_bytes, comm)
    if kind == "all-reduce" and (is_array(nvls_busbw) or nvls_busbw > 0):
        hop = t.hw_us["nvlink"]["nvls"][t.protocols.index("Simple")] * 1e-6
        nvls = hop + sent_bytes / where(nvls_busbw > 0, nvls_busbw, 1.0)
        out["nvls", "Simple"] = where(nvls_busbw > 0, nvls, float("inf"))
    return out


def _seconds(
    t: NcclLatency, algo: str, p: int, shape: tuple[Any, ...], rate: Any, sent: Any, comm: Any
) -> Any:
    """``ncclTopoGetAlgoTime`` of ``algo`` in protocol ``p`` at bus bandwidth ``rate``
    (bytes/s): its latency (the Simple ring all-reduce's × the plateau across nodes once
    ``nBytes ∕ (comm->nChannels × nRanks)`` ≥ 64) plus a rank's ``sent`` bytes at the ring's
    rate, or the whole buffer at half the tree's, corrected by the message size."""
    kind, n, _, _, nodes, _ = shape
    latency = _hops(t, algo, p, shape) * 1e-6
    share = (n - 1) / maximum(n, 1) * (2 if kind == "all-reduce" else 1)
    buffer = sent / where(share > 0, share, 1.0)
    if algo == "tree":
        return latency + buffer / (0.5 * rate * _correction(t, p, buffer))
    if t.protocols[p] == "Simple" and kind == "all-reduce":
        flat = (nodes > 1) & (buffer / (comm * n) >= 64)
        latency = latency * where(flat, t.ring_plateau[_PLATEAU], 1.0)
    return latency + sent / rate


def tuned_seconds(*args: Any, **kwargs: Any) -> Any:
    """Seconds of the collective as NCCL's tuner runs it: the least of
    :func:`candidate_seconds` (same arguments), element-wise.

    >>> t = tuned_seconds("all-reduce", 64, 2 * 63 / 64 * 2**20, 400e9, 384e9, False,
    ...                   "H100-SXM", 8, 8)
    >>> round(t * 1e6, 1)  # the tree in LL128
    97.6
    """
    best: Any = None
    for seconds in candidate_seconds(*args, **kwargs).values():
        best = seconds if best is None else minimum(best, seconds)
    return best


def protocol_seconds(*args: Any, **kwargs: Any) -> tuple[tuple[str, str], float]:
    """``((algorithm, protocol), seconds)`` NCCL's tuner picks for one collective (scalars;
    :func:`candidate_seconds`' arguments): what the tests and reports name.

    >>> protocol_seconds("all-gather", 8, 7 / 8 * 2**16, 450e9, 360e9, True, "H20")[0]
    ('ring', 'LL')
    """
    out = candidate_seconds(*args, **kwargs)
    pick = min(out, key=lambda k: float(out[k]))
    return pick, float(out[pick])
