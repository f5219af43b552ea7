"""Where each parallel axis's rank groups lie in the rank order: (stride, size) of an axis's
groups and their span, written once for the topology's placement (:mod:`topology.placement`,
which gives each span its link) and the legality rules that depend on it (:mod:`model.legality`:
HybridEP's token limit across NVLink domains). The convention is docs/concepts/conventions.md
"Layout": rank order inner to outer, ep carved out of the cp·dp block, Megatron-Core's expert
rank order etp-ep-edp-pp over the tp·cp·dp block where etp ≠ tp. Ints, or arrays of layouts
that share one rank order (the search's tables). Units: ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.xp import is_array, maximum, minimum, namespace, where

__all__ = [
    "AXES", "stride_size", "axis_spans", "in_one_domain", "windows", "fewest_in_domain",
    "members_in_domain", "members_per_domain_of", "domain_placements", "group_members",
    "domain_counts", "nccl_nodes", "nodes_in_domain", "other_placement", "other_in_domain",
    "nccl_node_size", "node_placements",
]  # fmt: skip

AXES: tuple[str, ...] = ("tp", "cp", "ep", "dp", "dp_cp", "edp", "pp")
"""Axes :func:`stride_size` knows: the five degrees, ``dp_cp`` (the dp·cp gradient group) and
``edp`` (the expert data-parallel group, :func:`_expert_dp`)."""


def stride_size(d: Mapping[str, Any], axis: str, order: tuple[str, ...]) -> tuple[Any, Any]:
    """(stride, size) of ``axis``'s groups: rank offsets between members, and member count.
    The degrees may be ints or arrays of layouts (the search's tables: one rank order at a
    time).

    Raises
    ------
    LayoutError
        An unknown axis; etp ≠ tp with tp not innermost or pp not outermost.

    >>> stride_size({"tp": 8, "cp": 1, "ep": 8, "dp": 16, "pp": 2}, "ep", ("tp", "cp", "ep", "dp", "pp"))
    (8, 8)
    """
    dense = _dense(order)

    def stride(a: str) -> Any:
        return math.prod(d[x] for x in dense[: dense.index(a)])

    if axis in ("tp", "cp", "dp", "pp"):
        return stride(axis), d[axis]
    block = minimum(stride("cp"), stride("dp"))  # the cp·dp block starts at the inner of the two
    if axis == "dp_cp":
        return block, d["cp"] * d["dp"]
    if axis == "edp":
        return _expert_dp(d, order, block)
    if axis == "ep":
        own = _own_expert_tp(d, order)
        inner = order.index("ep") < order.index("dp")
        stride = block if inner else block * d["cp"] * d["dp"] // d["ep"]
        return where(own, d.get("etp", d["tp"]), stride), d["ep"]
    raise LayoutError(f"unknown axis '{axis}' (known: {', '.join(AXES)})")


def _own_expert_tp(d: Mapping[str, Any], order: tuple[str, ...]) -> Any:
    """Where etp ≠ tp (element-wise for the search's arrays): Megatron-Core's expert rank order
    etp-ep-edp-pp over the tp·cp·dp block, ep groups of consecutive etp-strided ranks, which
    needs tp innermost and pp outermost (torchtitan's sparse mesh at ep > 1, etp 1, is the
    same: ``("pp", "dp_replicate", "efsdp", "ep")`` over its world order ending in tp)."""
    own = d.get("etp", d["tp"]) != d["tp"]
    dense = _dense(order)
    if (own.any() if is_array(own) else own) and (dense[0] != "tp" or dense[-1] != "pp"):
        raise LayoutError(
            f"rank_order: {'-'.join(order)} with etp ≠ tp needs tp innermost and pp "
            "outermost (Megatron-Core's expert groups are carved out of the tp·cp·dp block)"
        )
    return own


def _dense(order: Sequence[str]) -> list[str]:
    """The rank order's axes less ep (ep is carved out of cp·dp)."""
    return [a for a in order if a != "ep"]


def _expert_dp(d: Mapping[str, Any], order: tuple[str, ...], block: Any) -> tuple[Any, Any]:
    """(stride, size) of the expert data-parallel groups: the ranks that share an expert tp rank
    and an ep rank, ``D_e`` of them. Megatron-Core's expert rank generator orders the tp·cp·dp
    block etp-ep-edp (Megatron-LM d98e8a64dd ``parallel_state.py`` ``initialize_model_parallel``:
    ``expert_decoder_rank_generator``, ``get_ranks("dp")`` → ``_EXPERT_DATA_PARALLEL_GROUP``, the
    group ``DistributedDataParallel.__init__`` reduces expert buffers on): stride etp·ep where
    etp ≠ tp. With etp = tp the ep groups are carved out of the cp·dp block at stride ``block``
    (:func:`stride_size`): ep before dp in the order (the default), an ep group is ep
    consecutive block positions, so the edp group strides ep of them (stride block·ep, as
    DeepSpeed edaa72212 ``utils/groups.py`` ``_create_expert_and_data_parallel`` strides a dp
    group by ep, ``range(i, pp_stride, ep)``, and torchtitan b5bcd76c6 ``parallel_dims.py`` nests ``efsdp`` outside ``ep`` in its
    sparse mesh ``("pp", "dp_replicate", "efsdp", "ep")``); ep after dp, the ep groups stride
    cp·dp/ep positions, so the edp group is that many consecutive ones (stride block)."""
    etp = d.get("etp", d["tp"])
    own = _own_expert_tp(d, order)
    size = d["cp"] * d["dp"] // d["ep"]
    inner = order.index("ep") < order.index("dp")
    stride = block * d["ep"] if inner else block
    own_size = d["tp"] * d["cp"] * d["dp"] // (etp * d["ep"])
    return where(own, etp * d["ep"], stride), where(own, own_size, size)


def axis_spans(
    degrees: Mapping[str, Any], rank_order: Sequence[str], axes: Sequence[str] = AXES
) -> dict[str, Any]:
    """The span (stride × group size) of each axis: ints, or arrays of layouts that share one
    rank order (the search's tables; the degrees are not re-checked here)."""
    order = tuple(rank_order)
    out = {}
    for axis in axes:
        stride, size = stride_size(degrees, axis, order)
        out[axis] = stride * size
    return out


def in_one_domain(span: Any, total: Any, domain: int) -> Any:
    """Whether every group of an axis lies in one scale-up domain of ``domain`` consecutive
    ranks (an NVLink domain; a host node with ``gpus_per_node``): the groups of ``span``
    consecutive ranks tile the ``total`` ranks in aligned blocks, and the domains tile them too,
    so no block crosses a domain's edge iff the whole layout is one domain (``total ≤ domain``)
    or a domain holds whole blocks (``span ≤ domain`` and ``domain % span == 0``). Otherwise the
    block that holds a domain's edge has a group with ranks on both sides (a group of ≥ 2 ranks
    at stride ``s`` over a block cut at offset ``p``: the rank ``p − 1`` and its next member
    ``p − 1 + s``, or ``p`` and ``p − s``). Element-wise for arrays. Units: ranks.

    >>> in_one_domain(16, 144, 72), in_one_domain(8, 144, 72), in_one_domain(144, 144, 144)
    (False, True, True)
    """
    return (total <= domain) | ((span <= domain) & (domain % span == 0))


def windows(span: int, total: int, period: int) -> list[range]:
    """The ranges of ranks whose groups (blocks of ``span``) stand for all: the placement of
    blocks and domains (or pods, rails) repeats every ``period`` ranks (a common multiple of
    them), so the first ``period`` ranks and the last, partial, window hold every case
    (a domain or pod the cluster's end cuts short). Units: ranks.

    >>> windows(16, 288, 144), windows(16, 160, 144)
    ([range(0, 144)], [range(0, 144), range(144, 160)])
    """
    first = range(0, min(total, period))
    last = range(period * ((total - 1) // period), total)
    return [first] if last.start == 0 or total % period == 0 else [first, last]


@lru_cache(maxsize=4096)
def fewest_in_domain(stride: int, size: int, total: int, domain: int) -> int:
    """Members of the slowest group of an axis in one domain: the fewest ranks any group of
    ``size`` ranks at ``stride`` (blocks of ``stride·size`` over ``total`` ranks) has in any
    domain of ``domain`` consecutive ranks it touches — ``size`` where every group lies in one
    domain (:func:`in_one_domain`); for a group across domains, how many NICs its ring (or its
    all-to-all's off-domain share) leaves one domain through (:func:`model.step_time.
    rings_bandwidth`). Aligned layouts in closed form (``domain // stride`` members, at least 1);
    others by counting the groups of :func:`windows`. Units: ranks.

    >>> fewest_in_domain(8, 2, 144, 72)  # cp 2 after tp 8 on GB200 NVL72: ranks 64 and 72
    1
    >>> fewest_in_domain(8, 18, 144, 72), fewest_in_domain(1, 2, 12, 3)  # dp 18; tp 2 on 3s
    (9, 1)
    """
    span = stride * size
    if in_one_domain(span, total, domain):
        return size
    if span % domain == 0 and (domain % stride == 0 or stride % domain == 0):
        return max(1, domain // stride)
    return min(min(counts) for counts in _group_counts(stride, size, total, domain))


@lru_cache(maxsize=4096)
def domain_placements(
    stride: int, size: int, total: int, domain: int
) -> tuple[tuple[int, int], ...]:
    """The distinct ``(fewest members in one domain, domains touched)`` over an axis's groups
    of ``size`` ranks at ``stride`` (blocks of ``stride·size`` over the ``total`` ranks of the
    layout, a multiple of ``stride·size``; only groups that exist), ascending:
    what a communicator's channel count reads where the domains are host nodes of
    ``gpus_per_node`` ranks (:func:`model.nccl_channels.group_placements`; NCCL's count across
    nodes grows with a communicator's GPUs on a node and every rank takes the fewest). Groups
    that line up with the domains are all alike: ``((size, 1),)`` in one domain, else ``domain
    // stride`` members (at least 1) on ``size`` ÷ that many domains; others by counting the
    groups of :func:`windows` (the first repeat of blocks and domains, ``lcm(span, domain)``
    ranks, or the whole world where it is shorter, and the world's last partial repeat).
    Units: ranks, domains.

    >>> domain_placements(1, 6, 24, 8)  # 0–5 on node 0; 6–11 2 + 4; 12–17 4 + 2; 18–23 on 2
    ((2, 2), (6, 1))
    >>> domain_placements(1, 6, 6, 8), domain_placements(1, 10, 10, 8)  # 0–5; 0–9 8 + 2
    (((6, 1),), ((2, 2),))
    >>> domain_placements(1, 12, 24, 8), domain_placements(8, 2, 16, 4)  # 8 + 4, 4 + 8; 0 and 8
    (((4, 2),), ((1, 2),))
    """
    span = stride * size
    if in_one_domain(span, total, domain):
        return ((size, 1),)
    if span % domain == 0 and (domain % stride == 0 or stride % domain == 0):
        local = max(1, domain // stride)
        return ((local, size // local),)
    return tuple(sorted({(min(c), len(c)) for c in _group_counts(stride, size, total, domain)}))


@lru_cache(maxsize=4096)
def node_placements(
    stride: int, size: int, total: int, domain: int, node: int = 0
) -> tuple[tuple[int, int], ...]:
    """The distinct ``(fewest members in one NVLink domain of ``domain`` ranks, NCCL nodes of
    ``node`` ranks touched)`` over an axis's groups, ascending: :func:`domain_placements` where
    NCCL's node is the NVLink domain (``node`` 0 or ``domain``: HGX boards, NVL72 cliques);
    where a host holds several NVLink domains (two NVLink-bridged PCIe cards of an 8-GPU host:
    ``node`` 8, ``domain`` 2, :func:`nccl_node_size`) each group's members by domain and its
    nodes by host. Units: ranks, nodes.

    >>> node_placements(1, 8, 16, 2, 8), node_placements(2, 4, 16, 2, 8)  # 2s on one host; 1s
    (((2, 1),), ((1, 1),))
    """
    if node in (0, domain):
        return domain_placements(stride, size, total, domain)
    places = {
        (min(domain_counts(m, domain)), len(domain_counts(m, node)))
        for m in group_members(stride, size, total, math.lcm(domain, node))
    }
    return tuple(sorted(places))


@lru_cache(maxsize=4096)
def nccl_nodes(stride: int, size: int, total: int, domain: int, node: int = 0) -> int:
    """The domains NCCL counts for the communicator of an axis's slowest group (its
    ``comm->nNodes``): the distinct domains of ``domain`` consecutive ranks its ranks lie on, of
    the group with the fewest members in one domain (:func:`fewest_in_domain`, whose NICs set
    the ring's bandwidth), the most among such groups. NCCL counts a communicator's nodes as
    the distinct first ranks of its ranks' intra-node rings, one per host, or per NVLink clique
    where a multi-node NVLink domain is one node (NVIDIA/nccl 5067397c ``src/init.cc``
    ``initTransportsRank``: ``comm->nNodes++`` for each new ``topoRanks.ringRecv[0]``;
    ``nvlDomainInfo.nNvlDomains = comm->nNodes``), however many of the communicator's ranks
    each holds, so a group split 8 + 4 over two 8-GPU nodes is 2 nodes, not
    ⌈12 ∕ 4⌉ = 3; NCCL's node of ``node`` ranks (:func:`nccl_node_size`; 0: the domain, an
    HGX board or an NVL72 clique), the slowest group the fewest members in one NVLink domain
    (:func:`node_placements`); its tuner's ring crosses the network ``nNodes − 1`` times a round and its tree
    climbs ``log2i(nNodes)`` levels (``src/graph/tuning.cc`` ``ncclTopoTuneModel``:
    ``nInterSteps``, ``log2i(nNodes)``, ``nRanks / nNodes``). 1 where every group lies in one
    domain. Units: domains.

    >>> nccl_nodes(1, 12, 24, 8), nccl_nodes(1, 6, 24, 8)  # 8 + 4; 2 + 4 (the slowest) on 2
    (2, 2)
    >>> nccl_nodes(1, 64, 256, 72), nccl_nodes(8, 2, 16, 8)  # 64; 8 + 56, …; ranks 0 and 8
    (2, 2)
    >>> nccl_nodes(1, 8, 16, 2), nccl_nodes(1, 8, 16, 2, 8)  # 8 H100 PCIe: 4 pairs, one host
    (4, 1)
    """
    places = node_placements(stride, size, total, domain, node)
    fewest = places[0][0]
    return max(nodes for members, nodes in places if members == fewest)


def nccl_node_size(gpus_per_node: int, domain: int | None) -> int:
    """GPUs of consecutive ranks NCCL takes for one node of a communicator (its ``localRanks``
    are the communicator's ranks on it, ``comm->nNodes`` the distinct ones): the host node of
    ``gpus_per_node`` GPUs, or, on a multi-node NVLink domain (``domain`` > ``gpus_per_node``:
    the placement's domain, :attr:`model.hardware.DeviceSpec.placement_domain`, the NVL72 rack
    or the job's Slurm segment), the NVLink clique. NVIDIA/nccl 5067397c: ``src/init.cc``
    ``initTransportsRank`` turns ``comm->MNNVL`` on across hosts (``ncclMnnvlCheck``: every
    rank in one fabric clique) and then fuses every clique rank's topology into one system
    (``src/graph/topo.cc`` ``ncclTopoGetSystem``: under ``comm->MNNVL`` ``nLocalRanks =
    comm->clique.size``, ``xmlAlloc(nLocalRanks * NCCL_TOPO_XML_MAX_NODES)``,
    ``ncclTopoFuseXml``), so the ring and tree searches (``src/graph/search.cc``
    ``ncclTopoCompute``: the clique's GPUs and NICs in one system) and ``nNodes`` (one per
    ``topoRanks.ringRecv[0]``) count the clique as the node. Every reader of NCCL's node calls
    this: the channels and the blocks a collective holds (:func:`model.nccl_channels.
    group_channels`, :mod:`model.terms.sm_shares`), the communicators' buffers
    (:mod:`model.terms.comm_memory`, :mod:`model.terms.nvls_memory`), and each group's node count
    ``comm->nNodes`` (:func:`nccl_nodes`' ``node``: :class:`model.hardware.ClusterLinks`'
    ``nccl_node``, read by the placement, the search's link columns, the hybrid context
    parallelism's groups and the rollout engines). A domain under the host (two NVLink-bridged
    PCIe cards of an 8-GPU host: H100 PCIe, H100 NVL) leaves the host the node: its ring's
    steps between the pairs are steps inside a node, not over the network. Units: GPUs.

    >>> nccl_node_size(8, 8), nccl_node_size(4, 72), nccl_node_size(4, 64), nccl_node_size(8, 2)
    (8, 72, 64, 8)
    >>> nccl_node_size(8, None)
    8
    """
    return max(int(gpus_per_node), int(domain or 0))


def nodes_in_domain(stride: Any, size: Any, total: Any, domain: int, node: int = 0) -> Any:
    """:func:`nccl_nodes`, element-wise for the search's arrays (int64 there)."""
    return _per_layout(lambda *a: nccl_nodes(*a, node), stride, size, total, domain)


@lru_cache(maxsize=4096)
def other_placement(
    stride: int, size: int, total: int, domain: int, node: int = 0
) -> tuple[int, int]:
    """``(fewest members in one domain, domains)`` of the slowest of an axis's groups that lie
    on another number of domains than :func:`nccl_nodes`' group (the slowest group, ``(f, n)``:
    the fewest members :func:`fewest_in_domain`, the most domains among such groups); ``(0, 0)``
    where every group lies on ``n`` domains. Groups of ranks at one stride touch at most two
    numbers of domains (``k`` or ``k + 1``), and the other's groups have no fewer members and
    fewer domains (``m ≥ f``, ``N < n``: counted for strides 1–79, sizes 2–99 and worlds of 1,
    2, 3 and 5 blocks up to 3,000 ranks on domains of 2 to 72; ``tests/model/
    test_group_latency.py`` checks both on drawn cases, group by group), so with
    ``(f, n)`` these two stand for every group: a group on ``n`` domains with more members has
    ``(f, n)``'s latency and more NICs, and likewise on ``N``. A ring's steps and an
    all-to-all's hop never make the other slower (fewer network steps, more NICs); NCCL's tree
    all-reduce can (its ``2·((nRanks/nNodes − 1)·intraLat + log2i(nNodes)·interLat)``, nccl
    5067397c ``src/graph/tuning.cc`` ``ncclTopoTuneModel``, falls as ``nNodes`` grows at a
    fixed ``log2i``), so each collective takes the slower of the two, each at its own latency
    and NICs (:func:`model.roofline.collective_time`'s ``other``). ``N`` is 1 for a group
    inside one domain (on NVLink). Units: ranks, domains.

    >>> other_placement(1, 13, 26, 8)  # 0–12 8 + 5 on 2; 13–25 3 + 8 + 2 on 3 (the slowest)
    (5, 2)
    >>> other_placement(1, 10, 80, 72), other_placement(1, 12, 24, 8)  # 70–79 2 + 8; 8 + 4
    ((10, 1), (0, 0))
    """
    places = node_placements(stride, size, total, domain, node)
    nodes = nccl_nodes(stride, size, total, domain, node)
    others = [(m, n) for m, n in places if n != nodes]
    if not others:
        return 0, 0
    fewest = min(m for m, _ in others)
    return fewest, max(n for m, n in others if m == fewest)


def other_in_domain(
    stride: Any, size: Any, total: Any, domain: int, node: int = 0
) -> tuple[Any, Any]:
    """:func:`other_placement`, element-wise for the search's arrays (two int64 arrays there)."""
    members = _per_layout(
        lambda *a: other_placement(*a, node)[0], stride, size, total, domain
    )  # fmt: skip
    nodes = _per_layout(lambda *a: other_placement(*a, node)[1], stride, size, total, domain)
    return members, nodes


def _group_counts(stride: int, size: int, total: int, domain: int) -> list[list[int]]:
    """Members in each domain it touches, of every group of :func:`group_members`."""
    return [domain_counts(m, domain) for m in group_members(stride, size, total, domain)]


def domain_counts(members: tuple[int, ...], domain: int) -> list[int]:
    """Members of one group (its ranks, ascending) in each domain of ``domain`` consecutive
    ranks it touches, in rank order. Units: ranks.

    >>> domain_counts((6, 7, 8, 9, 10, 11), 8)
    [2, 4]
    """
    counts: dict[int, int] = {}
    for rank in members:
        counts[rank // domain] = counts.get(rank // domain, 0) + 1
    return list(counts.values())


def group_members(stride: int, size: int, total: int, domain: int) -> list[tuple[int, ...]]:
    """The ranks of every group of :func:`windows` (blocks of ``stride·size`` over the
    ``total`` ranks, each ``stride`` groups of ``size`` ranks at ``stride``), each in member
    order (ascending): the groups that stand for all where domains of ``domain`` ranks repeat.
    Units: ranks.

    >>> group_members(1, 6, 12, 8)  # 0–5, 6–11
    [(0, 1, 2, 3, 4, 5), (6, 7, 8, 9, 10, 11)]
    >>> group_members(2, 2, 4, 8)
    [(0, 2), (1, 3)]
    """
    span = stride * size
    out = []
    for window in windows(span, total, math.lcm(span, domain)):
        for base in range(window.start, window.stop, span):
            for offset in range(stride):
                out.append(tuple(base + offset + k * stride for k in range(size)))
    return out


def members_in_domain(stride: Any, size: Any, total: Any, domain: int) -> Any:
    """:func:`fewest_in_domain`, element-wise for the search's arrays (int64 there)."""
    return _per_layout(fewest_in_domain, stride, size, total, domain)


def _per_layout(
    fn: Callable[[int, int, int, int], int], stride: Any, size: Any, total: Any, domain: int
) -> Any:
    """``fn(stride, size, total, domain)`` of one layout's ints, or of each layout of the
    search's arrays (int64, the arrays' broadcast shape)."""
    ns = namespace(stride, size, total)
    if ns is None:
        return fn(int(stride), int(size), int(total), int(domain))
    s, n, t = ns.broadcast_arrays(ns.asarray(stride), ns.asarray(size), ns.asarray(total))
    flat = zip(ns.reshape(s, (-1,)), ns.reshape(n, (-1,)), ns.reshape(t, (-1,)), strict=True)
    out = [fn(int(a), int(b), int(c), domain) for a, b, c in flat]
    return ns.reshape(ns.asarray(out, dtype=ns.int64), s.shape)


def members_per_domain_of(group_size: Any, span: Any, domain: int, per_domain: Any = 0) -> Any:
    """Ranks of an axis's slowest group in one domain: the placement's ``per_domain``
    (:func:`fewest_in_domain`) where given (> 0), else the closed form for groups that line up
    with the domains, ``max(1, min(n, domain·n // span))`` for ``n`` ranks over ``span``
    consecutive ones (a link built without a placement). Element-wise for arrays. Units: ranks.

    >>> members_per_domain_of(32, 256, 8), members_per_domain_of(2, 16, 72, 1)
    (1, 1)
    """
    closed = maximum(1, minimum(group_size, domain * group_size // span))
    return where(per_domain > 0, per_domain, closed)
