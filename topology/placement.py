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
from trainplan.model.xp import is_array, minimum, where
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

AXES: tuple[str, ...] = ("tp", "cp", "ep", "dp", "dp_cp", "edp", "pp")
"""Axes :func:`axis_groups` knows: the five degrees, ``dp_cp`` (the dp·cp gradient group) and
``edp`` (the expert data-parallel group, :func:`_expert_dp`)."""


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


def _stride_size(d: Mapping[str, Any], axis: str, order: tuple[str, ...]) -> tuple[Any, Any]:
    """(stride, size) of ``axis``'s groups: rank offsets between members, and member count.
    The degrees may be ints or arrays of layouts (the search's tables: one rank order at a
    time)."""
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
    (:func:`_stride_size`): ep before dp in the order (the default), an ep group is ep
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
        stride, size = _stride_size(degrees, axis, order)
        out[axis] = stride * size
    return out


def two_tier_bandwidth(span: Any, links: ClusterLinks) -> Any:
    """Ring bandwidth of an axis whose groups span ``span`` consecutive ranks on a two-tier
    cluster: NVLink's when the span fits one NVLink domain, else the scale-out NIC's
    (docs/concepts/conventions.md "Layout"). Element-wise for arrays.

    Raises
    ------
    InputError
        A span beyond one domain on a part without a scale-out figure (``ClusterLinks.across_domains``).
    """
    inside = span <= links.nvlink_domain
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
    stride, size = _stride_size(d, axis, order)
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
    stride, size = _stride_size(_degrees(degrees), axis, _order(rank_order))
    return stride * size


def fits_in_domain(
    degrees: Mapping[str, int],
    axis: str,
    nvlink_domain: int,
    rank_order: Sequence[str] = DEFAULT_RANK_ORDER,
) -> bool:
    """Whether ``axis`` fits in one NVLink domain: its span is at most ``nvlink_domain``.

    docs/concepts/conventions.md "Layout": "An axis fits in the NVLink domain when its degree times the degrees of every axis
    inside it is at most the number of GPUs per NVLink domain". (When the span does not divide
    the domain a group can still straddle two domains; :func:`axis_links` with a graph sees that.)

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
    """
    if isinstance(nvlink_domain, bool) or not isinstance(nvlink_domain, int) or nvlink_domain < 1:
        raise LayoutError(f"nvlink_domain: {nvlink_domain!r} must be a whole number >= 1")
    return axis_span(degrees, axis, rank_order) <= nvlink_domain


def axis_links(
    degrees: Mapping[str, int],
    links: ClusterLinks | nx.Graph,
    rank_order: Sequence[str] = DEFAULT_RANK_ORDER,
    axes: Sequence[str] = AXES,
) -> dict[str, AxisLink]:
    """The link and ring bandwidth of each axis, keyed by axis.

    With :class:`ClusterLinks` (two tiers): NVLink bandwidth when :func:`fits_in_domain`, else
    scale-out. With a cluster graph (:mod:`topology.graph`): the bottleneck bandwidth of a ring
    over the **first** group of the axis (ranks 0…; groups of a regular layout are alike, except
    that oversubscribed pods may treat later groups differently), and ``nvlink`` when that group
    lies in one NVLink domain. Degree-1 axes (group size 1): link ``none``, bandwidth None.

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
    out: dict[str, AxisLink] = {}
    for axis in axes:
        stride, size = _stride_size(d, axis, order)
        span = stride * size
        if size == 1:
            out[axis] = AxisLink(axis, 1, span, "none", None)
        elif graph is not None:
            group = [k * stride for k in range(size)]
            domains = {graph.nodes[f"gpu{r}"]["domain"] for r in group}
            link = "nvlink" if len(domains) == 1 else "scale-out"
            out[axis] = AxisLink(axis, size, span, link, _bottleneck(graph, group))
        else:
            assert isinstance(links, ClusterLinks)
            fits = span <= links.nvlink_domain
            bandwidth = two_tier_bandwidth(span, links)
            out[axis] = AxisLink(axis, size, span, "nvlink" if fits else "scale-out", bandwidth)
    return out


def _bottleneck(graph: nx.Graph, group: list[int]) -> float:
    return bottleneck_bandwidth(graph, group)
