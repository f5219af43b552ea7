"""Rank order → the rank groups of each parallel axis → the link each axis rides.

Rank order (docs/concepts/conventions.md "Layout"; Megatron-LM's default ``tp-cp-ep-dp-pp``), inner to
outer: ``tp, cp, ep, dp, pp``. The dense layout uses the order without ``ep``: rank
``r = t + tp·(c + cp·(d + dp·p))`` for the default order, so ``G = dp·tp·pp·cp``. EP does not
multiply G: the expert-parallel group is carved out of the ``cp·dp`` positions (the block of
``cp·dp`` consecutive positions at stride ``tp``), as Megatron-LM's expert rank generator does
(order ``tp-ep-edp-pp`` with ``edp = dp·cp/ep``): ``ep`` consecutive positions of that block when
``ep`` comes before ``dp`` in the order (the default), else positions at stride ``cp·dp/ep``.

Axes: ``tp cp ep dp pp`` and the pseudo-axes ``dp_cp``, the ``dp·cp`` ranks a dense gradient is
reduced over (the conventions' ``D = dp·cp``; Megatron's data-parallel group with context parallelism),
and ``edp``, the expert data-parallel group an expert's gradient is reduced over (``D_e`` ranks: the
positions of the cp·dp block, or of the tp·cp·dp block where etp ≠ tp, that share an ep rank).
The ``dp`` axis alone is ``dp`` ranks at stride ``tp·cp`` (one per cp position) — the group a
parameter is replicated over for a fixed cp rank; use ``dp_cp`` for the gradient reduction.

*Span* = how many consecutive ranks contain one group: the group's stride times its size (for
the default order tp→tp, cp→tp·cp, ep→tp·ep, dp→tp·cp·dp, dp_cp→tp·cp·dp, pp→G).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainplan.model.errors import LayoutError
from trainplan.model.hardware import ClusterLinks
from trainplan.model.rank_groups import (
    AXES,
    axis_spans,
    fewest_in_domain,
    in_one_domain,
    nccl_nodes,
    other_placement,
    stride_size,
    windows,
)
from trainplan.model.xp import is_array, where
from trainplan.topology.graph import bottleneck_bandwidth

if TYPE_CHECKING:  # networkx is imported only when a graph is given (it is slow to import)
    import networkx as nx

__all__ = [
    "DEFAULT_RANK_ORDER",
    "AXES",
    "AxisLink",
    "world_size",
    "axis_groups",
    "axis_span",
    "fits_in_domain",
    "axis_links",
    "axis_spans",
    "two_tier_bandwidth",
]

DEFAULT_RANK_ORDER: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
"""Inner to outer; Megatron-LM's default ``order="tp-cp-ep-dp-pp"``."""

# AXES (the axes :func:`axis_groups` knows) and axis_spans are model.rank_groups', re-exported


@dataclass(frozen=True, slots=True)
class AxisLink:
    """The link one parallel axis's collective rides.

    ``link`` is ``"nvlink"``, ``"scale-out"`` or ``"none"`` (degree 1: no traffic, and then
    ``bandwidth_bytes_per_s`` is None so that JSON stays valid; callers send 0 bytes).
    """

    axis: str
    """Axis name (``tp cp ep dp dp_cp pp``)."""
    group_size: int
    """Ranks in one group of the axis (its degree; dp·cp for ``dp_cp``)."""
    span: int
    """Consecutive ranks that contain one group (see :func:`axis_span`)."""
    link: str
    """``nvlink``, ``scale-out`` or ``none``."""
    bandwidth_bytes_per_s: float | None
    """Bandwidth per GPU per direction for the axis's ring, bytes/s; None for link ``none``."""
    per_domain: int = 0
    """Ranks the axis's slowest group has in one NVLink domain (:func:`model.rank_groups.
    fewest_in_domain`): ``group_size`` on ``nvlink``; on ``scale-out``, the NICs its ring leaves
    a domain through (:func:`model.step_time.rings_bandwidth`); 0 for ``none`` (and for a bare
    link built without a placement: the span's closed form then)."""
    domains: int = 0
    """NCCL's nodes the slowest group's ranks lie on (``comm->nNodes``,
    :func:`model.rank_groups.nccl_nodes` over :attr:`model.hardware.ClusterLinks.nccl_node`:
    the NVLink domains, or the hosts where a host holds several): 1 on ``nvlink``; what its
    ring's network steps read (:func:`model.nccl_latency.steps_latency`); 0 for ``none`` and a
    bare link (``⌈group_size ∕ per_domain⌉`` then)."""
    other_per_domain: int = 0
    """Of the axis's groups on another number of domains than ``domains``, the fewest members
    in one domain (:func:`model.rank_groups.other_placement`); 0 where every group lies on
    ``domains`` domains (and for ``none``, a bare link)."""
    other_domains: int = 0
    """NCCL's nodes those groups lie on (1: inside one domain, on NVLink); 0 as above. Each
    collective takes the slower of the two groups (:func:`model.roofline.collective_time`)."""


def _degrees(degrees: Mapping[str, int]) -> dict[str, int]:
    unknown = sorted(set(degrees) - {"tp", "cp", "ep", "dp", "pp", "etp"})
    if unknown:
        raise LayoutError(f"unknown parallel axis '{unknown[0]}' (known: tp, cp, ep, dp, pp, etp)")
    out = {axis: degrees.get(axis, 1) for axis in ("tp", "cp", "ep", "dp", "pp")}
    out["etp"] = degrees.get("etp") or out["tp"]
    for axis, value in out.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LayoutError(f"{axis}: {value!r} must be a whole number >= 1")
    if out["etp"] == out["tp"] and (out["dp"] * out["cp"]) % out["ep"]:
        raise LayoutError(
            f"ep: {out['ep']} must divide dp·cp = {out['dp']}·{out['cp']} = {out['dp'] * out['cp']}"
        )
    ranks = out["tp"] * out["dp"] * out["cp"]
    if out["etp"] != out["tp"] and ranks % (out["etp"] * out["ep"]):
        raise LayoutError(f"ep: etp {out['etp']} × ep {out['ep']} must divide tp·dp·cp = {ranks}")
    return out


def _order(rank_order: Sequence[str]) -> tuple[str, ...]:
    order = tuple(rank_order)
    if sorted(order) != sorted(DEFAULT_RANK_ORDER):
        raise LayoutError(
            f"rank_order: {'-'.join(order)} must order each of tp, cp, ep, dp, pp once"
        )
    dense = [a for a in order if a != "ep"]
    if abs(dense.index("cp") - dense.index("dp")) != 1:
        raise LayoutError(
            f"rank_order: {'-'.join(order)} must keep cp and dp adjacent "
            "(ep is carved out of cp·dp)"
        )
    return order


def world_size(degrees: Mapping[str, int]) -> int:
    """``G = dp · tp · pp · cp`` (ep does not multiply it).

    Raises
    ------
    LayoutError
        Unknown axis, a degree below 1, or ep not dividing dp·cp.

    Examples
    --------
    >>> world_size({"tp": 8, "pp": 16, "dp": 128})
    16384
    """
    d = _degrees(degrees)
    return d["dp"] * d["tp"] * d["pp"] * d["cp"]


def two_tier_bandwidth(span: Any, links: ClusterLinks, total: Any) -> Any:
    """Ring bandwidth of an axis whose groups span ``span`` consecutive ranks of ``total`` on a
    two-tier cluster: NVLink's when every group lies in one NVLink domain
    (:func:`model.rank_groups.in_one_domain`: the span fits a domain *and* the blocks line up
    with the domains), else the scale-out NIC's (docs/concepts/conventions.md "Layout").
    Element-wise for arrays. Units: bytes/s per GPU per direction.

    A group whose ranks straddle two domains (a block of ``span`` over a domain's edge: cp 2
    after tp 8 on 72-GPU NVL72 domains, ranks 64–79) rides the scale-out fabric too: a ring
    moves each step's bytes over every hop, so it runs at its slowest hop, and the hops that
    leave the domain go through the NICs (NVIDIA/nccl ``src/graph/rings.cc`` and
    ``src/graph/search.cc`` ``ncclTopoCompute``: an inter-node ring enters and leaves each
    node through a NET device, one per channel); the NCCL collectives of the step wait for
    their slowest group, so the axis is charged that group's rate. How many NICs carry it is
    :func:`model.rank_groups.fewest_in_domain` (the placed link's ``per_domain``).

    Raises
    ------
    InputError
        A group beyond one domain on a part without a scale-out figure (``ClusterLinks.across_domains``).

    >>> cl = ClusterLinks(nvlink_domain=72, nvlink_bytes_per_s=900e9, scaleout_bytes_per_s=100e9)
    >>> two_tier_bandwidth(16, cl, 144) / 1e9, two_tier_bandwidth(8, cl, 144) / 1e9
    (100.0, 900.0)
    """
    inside = in_one_domain(span, total, links.nvlink_domain)
    if links.scaleout_bytes_per_s is None and not (
        bool(inside.all()) if is_array(inside) else bool(inside)
    ):
        links.across_domains()
    return where(inside, links.nvlink_bytes_per_s, links.scaleout_bytes_per_s or 0.0)


def axis_groups(
    degrees: Mapping[str, int], axis: str, rank_order: Sequence[str] = DEFAULT_RANK_ORDER
) -> list[list[int]]:
    """The rank groups of ``axis``: every rank in exactly one group, each group sorted.

    ``ep``: ``ep`` consecutive positions of the cp·dp block at stride tp (default order);
    ``dp``: dp ranks at stride tp·cp; ``dp_cp``: the dp·cp ranks at stride tp (module docstring).

    Raises
    ------
    LayoutError
        Unknown axis, bad degrees (ep must divide dp·cp) or rank order.

    Examples
    --------
    >>> axis_groups({"tp": 2, "dp": 2}, "tp")
    [[0, 1], [2, 3]]
    >>> axis_groups({"tp": 2, "cp": 2, "dp": 2}, "dp")
    [[0, 4], [1, 5], [2, 6], [3, 7]]
    >>> axis_groups({"tp": 1, "dp": 4, "ep": 2}, "ep")
    [[0, 1], [2, 3]]
    """
    d, order = _degrees(degrees), _order(rank_order)
    stride, size = stride_size(d, axis, order)
    total = d["dp"] * d["tp"] * d["pp"] * d["cp"]
    span = stride * size
    groups = []
    for base in range(0, total, span):
        for offset in range(stride):
            groups.append([base + offset + k * stride for k in range(size)])
    return groups


def axis_span(
    degrees: Mapping[str, int], axis: str, rank_order: Sequence[str] = DEFAULT_RANK_ORDER
) -> int:
    """Consecutive ranks containing one group of ``axis`` = stride × group size.

    Default order: tp→tp, cp→tp·cp, ep→tp·ep, dp→tp·cp·dp, dp_cp→tp·cp·dp, pp→G.

    Raises
    ------
    LayoutError
        As :func:`axis_groups`.

    Examples
    --------
    >>> [axis_span({"tp": 8, "pp": 16, "dp": 128}, a) for a in ("tp", "dp", "pp")]
    [8, 1024, 16384]
    """
    stride, size = stride_size(_degrees(degrees), axis, _order(rank_order))
    return stride * size


def fits_in_domain(
    degrees: Mapping[str, int],
    axis: str,
    nvlink_domain: int,
    rank_order: Sequence[str] = DEFAULT_RANK_ORDER,
) -> bool:
    """Whether every group of ``axis`` lies in one NVLink domain of ``nvlink_domain`` GPUs
    (:func:`model.rank_groups.in_one_domain`): its span is at most the domain and divides it,
    or the whole layout is one domain.

    docs/concepts/conventions.md "Layout": "An axis fits in the NVLink domain when its degree
    times the degrees of every axis inside it is at most the number of GPUs per NVLink domain"
    and its groups line up with the domains (a span that does not divide the domain leaves a
    group across two: cp 2 after tp 8 on 72-GPU domains, ranks 64–79 of 144).

    Raises
    ------
    LayoutError
        As :func:`axis_groups`, or ``nvlink_domain`` < 1.

    Examples
    --------
    >>> fits_in_domain({"tp": 8, "pp": 16, "dp": 128}, "tp", 8)
    True
    >>> fits_in_domain({"pp": 16, "dp": 128, "ep": 64}, "ep", 8)
    False
    >>> fits_in_domain({"tp": 8, "cp": 2, "dp": 9}, "cp", 72)
    False
    """
    if isinstance(nvlink_domain, bool) or not isinstance(nvlink_domain, int) or nvlink_domain < 1:
        raise LayoutError(f"nvlink_domain: {nvlink_domain!r} must be a whole number >= 1")
    span = axis_span(degrees, axis, rank_order)
    return bool(in_one_domain(span, world_size(degrees), nvlink_domain))


def axis_links(
    degrees: Mapping[str, int],
    links: ClusterLinks | nx.Graph,
    rank_order: Sequence[str] = DEFAULT_RANK_ORDER,
    axes: Sequence[str] = AXES,
) -> dict[str, AxisLink]:
    """The link and ring bandwidth of each axis, keyed by axis.

    With :class:`ClusterLinks` (two tiers): NVLink bandwidth when :func:`fits_in_domain` (every
    group in one domain), else scale-out (:func:`two_tier_bandwidth`), with the slowest group's
    members per domain (``per_domain``). With a cluster graph (:mod:`topology.graph`): the
    slowest group's ring, the least :func:`topology.graph.bottleneck_bandwidth` over every group
    of the axis (those of :func:`model.rank_groups.windows` stand for all: the graph repeats
    every domain, pod and block), and ``nvlink`` when every group lies in one NVLink domain.
    Degree-1 axes (group size 1): link ``none``, bandwidth None.

    Raises
    ------
    LayoutError
        As :func:`axis_groups`; or a graph with fewer GPUs than ``G``.

    Examples
    --------
    >>> cl = ClusterLinks(nvlink_domain=8, nvlink_bytes_per_s=450e9, scaleout_bytes_per_s=50e9)
    >>> out = axis_links({"tp": 8, "pp": 16, "dp": 128}, cl)
    >>> out["tp"].link, out["dp"].link, out["cp"].link
    ('nvlink', 'scale-out', 'none')
    """
    d, order = _degrees(degrees), _order(rank_order)
    total = d["dp"] * d["tp"] * d["pp"] * d["cp"]
    graph = None if isinstance(links, ClusterLinks) else links
    if graph is not None and graph.graph.get("num_gpus", 0) < total:
        raise LayoutError(
            f"the cluster graph has {graph.graph.get('num_gpus')} GPUs; "
            f"the layout needs G = {total}"
        )
    domain = links.nvlink_domain if graph is None else graph.graph["nvlink_domain"]
    node = links.nccl_node if graph is None else 0
    out: dict[str, AxisLink] = {}
    for axis in axes:
        stride, size = stride_size(d, axis, order)
        span = stride * size
        if size == 1:
            out[axis] = AxisLink(axis, 1, span, "none", None)
            continue
        inside = bool(in_one_domain(span, total, domain))
        link = "nvlink" if inside else "scale-out"
        if graph is not None:
            bandwidth = _slowest_ring(graph, stride, size, total)
        else:
            assert isinstance(links, ClusterLinks)
            bandwidth = two_tier_bandwidth(span, links, total)
        per_domain = fewest_in_domain(stride, size, total, domain)
        nodes = nccl_nodes(stride, size, total, domain, node)
        other = other_placement(stride, size, total, domain, node)
        out[axis] = AxisLink(axis, size, span, link, bandwidth, per_domain, nodes, *other)
    return out


def _slowest_ring(graph: nx.Graph, stride: int, size: int, total: int) -> float:
    """The least :func:`topology.graph.bottleneck_bandwidth` over the groups of ``size`` ranks
    at ``stride`` that stand for all (:func:`model.rank_groups.windows` of the period of blocks,
    domains and pods), bytes/s per GPU per direction."""
    span = stride * size
    g = graph.graph
    period = math.lcm(span, g["nvlink_domain"], g.get("pod_size") or g["nvlink_domain"])
    return min(
        bottleneck_bandwidth(graph, [base + offset + k * stride for k in range(size)])
        for window in windows(span, total, period)
        for base in range(window.start, window.stop, span)
        for offset in range(stride)
    )
