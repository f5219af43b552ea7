"""Collectives at published rates: NCCL's own latency model by algorithm and protocol, nccl-tests
bus bandwidth by message size, and DeepEP's expert-parallel dispatch/combine bandwidth
(``scenarios/kernels/collectives.toml``).

The step time reads the bus-bandwidth curves through :func:`model.nvlink_rates.busbw_curve_for` and
:func:`model.roofline.collective_time` (collectives inside an NVLink domain at their message
sizes), and NCCL's latency and bandwidth by protocol through :mod:`model.nccl_tuner`, which
reads the ring's rules here (:func:`ring_steps_us`, :func:`ring_busbw_gbps`,
:func:`ll_max_gbps`); the other functions look the tables up for reports and tests
(``docs/time-model-sources.md`` §4).

Bus bandwidth (nccl-tests ``doc/PERFORMANCE.md``): for a collective on ``n`` ranks of an
``S``-byte buffer taking ``t`` seconds, ``algbw = S/t`` and ``busbw = algbw × factor``, factor
``2(n − 1)/n`` for all-reduce and ``(n − 1)/n`` for all-gather, reduce-scatter and all-to-all —
so ``t = S·factor / busbw`` (:func:`busbw_factor`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from trainplan.model.errors import InputError
from trainplan.model.kernel_tables import BusBwCurve, BusBwPeak, ExpertAllToAll, NcclLatency
from trainplan.model.kernels import Interpolated, interpolate_log2
from trainplan.model.nccl_latency import steps_latency, tree_latency
from trainplan.model.xp import maximum, minimum, namespace, where

__all__ = [
    "busbw_factor",
    "nccl_latency_us",
    "ring_latency_us",
    "ring_busbw_gbps",
    "ll_max_gbps",
    "node_column",
    "ring_steps_us",
    "busbw_at",
    "published_collective_seconds",
    "busbw_peak",
    "expert_bandwidth",
]


def busbw_factor(collective: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor (``doc/PERFORMANCE.md``): ``2(n − 1)/n`` for an
    all-reduce, ``(n − 1)/n`` for all-gather, reduce-scatter and all-to-all.

    Raises
    ------
    InputError
        An unknown collective or fewer than one rank.

    Examples
    --------
    >>> busbw_factor("all-reduce", 8), busbw_factor("all-gather", 8)
    (1.75, 0.875)
    """
    if ranks < 1:
        raise InputError(f"ranks: {ranks} must be at least 1")
    share = (ranks - 1) / ranks
    if collective == "all-reduce":
        return 2 * share
    if collective in ("all-gather", "reduce-scatter", "all-to-all"):
        return share
    raise InputError(
        f"collective: {collective!r} is not one of all-reduce, all-gather, reduce-scatter, all-to-all"
    )


def _hw(lat: NcclLatency, link: str, algorithm: str, p: int) -> float:
    try:
        return lat.hw_us[link][algorithm][p]
    except KeyError:
        raise InputError(f"nccl: no {algorithm} latency over {link} in NCCL's model") from None


def nccl_latency_us(
    lat: NcclLatency,
    collective: str,
    algorithm: str,
    protocol: str,
    ranks: int,
    nodes: int = 1,
    intra_link: str = "nvlink",
    cpu: str = "other",
) -> float:
    """NCCL's latency (µs) of one collective, re-stated from ``ncclTopoTuneModel``
    (``src/graph/tuning.cc``) with the constants of ``[nccl_latency]``; ``ranks`` spread evenly
    over ``nodes``; the topology's extra inter-node latency (``graph->latencyInter``) taken as 0:

    * ``ring`` — steps ``2(n − 1)`` for all-reduce, ``n − 1`` otherwise (:func:`ring_steps_us`); the
      net hop is the tree's when one rank sits on each node;
    * ``tree`` (all-reduce) — base + 2·((n/nodes − 1)·intra + ⌊log2 nodes⌋·net)
      (:func:`model.nccl_latency.tree_latency`, the step time's rule);
    * ``nvls`` — the NVLink SHARP hop alone (no base), plus the net hop across nodes;
    * ``nvls_tree`` (all-reduce) — intra + 2·⌊log2 nodes⌋·net;
    * ``pat`` (all-gather, reduce-scatter) — base + ⌊log2 nodes⌋·net/3.5 + 2.8·n.

    Raises
    ------
    InputError
        An unknown protocol, a collective the algorithm does not run, or ranks not divisible
        by nodes.

    Examples
    --------
    A ring all-gather over 8 NVLink GPUs in Simple: 8.4 + 7 × 3.4 µs.

    >>> from trainplan.scenarios.kernel_data import collective_data
    >>> lat = collective_data().nccl_latency
    >>> round(nccl_latency_us(lat, "all-gather", "ring", "Simple", 8), 6)
    32.2
    >>> round(nccl_latency_us(lat, "all-reduce", "tree", "Simple", 1024, 128), 6)  # 8.4 + 2(7·4 + 7·14)
    260.4
    """
    if protocol not in lat.protocols:
        raise InputError(f"protocol: {protocol!r} is not one of {', '.join(lat.protocols)}")
    if ranks % nodes:
        raise InputError(f"ranks: {ranks} do not spread evenly over {nodes} nodes")
    p, ppn, log_nodes = lat.protocols.index(protocol), ranks // nodes, int(math.log2(nodes))
    net_algo = "tree" if ppn == 1 and algorithm == "ring" else algorithm
    net = _hw(lat, "net", net_algo, p) if nodes > 1 else 0.0
    intra = _hw(lat, intra_link, algorithm, p)
    if algorithm == "ring":
        return float(ring_steps_us(lat, collective, protocol, ranks, ppn, intra, net, cpu))
    if algorithm == "tree" and collective == "all-reduce":
        return lat.base_us["tree"][p] + float(tree_latency(ranks, nodes, intra, net))
    if algorithm == "nvls" and protocol == "Simple":
        return intra + net
    if algorithm == "nvls_tree" and collective == "all-reduce" and protocol == "Simple":
        return intra + 2 * log_nodes * net
    if algorithm == "pat" and collective in ("all-gather", "reduce-scatter"):
        return _pat_us(lat, p, ranks, nodes)
    raise InputError(f"nccl: {collective} does not run as {algorithm} with {protocol}")


def _pat_us(lat: NcclLatency, p: int, ranks: int, nodes: int) -> float:
    """:func:`nccl_latency_us` of PAT: base + ⌊log2 nodes⌋·net/3.5 + 2.8·n."""
    net = _hw(lat, "net", "pat", p) if nodes > 1 else 0.0
    logs = int(math.log2(nodes))
    return lat.base_us["pat"][p] + logs * net / lat.pat_inter_divisor + ranks * lat.pat_rank_us


def ring_latency_us(
    lat: NcclLatency,
    collective: str,
    protocol: str,
    ranks: int,
    per_domain: int,
    domains: int = 0,
) -> float:
    """NCCL's latency (µs) of one ring all-gather, reduce-scatter or all-reduce over ``ranks``
    with ``per_domain`` of them in each NVLink domain (:func:`nccl_latency_us`'s ring, whose
    nodes need not hold equal shares: ``domains``, NCCL's node count where the placement gave
    it, else ⌈ranks ∕ per_domain⌉, :func:`model.nccl_latency.steps_latency`), on an x86 host of neither vendor's overhead
    (``cpu`` ``other``: 1 µs, Intel's too). Units: µs, ranks.

    Raises
    ------
    InputError
        An unknown protocol.

    Examples
    --------
    A 64-rank all-gather in LL, 8 ranks a node: 7 steps over the network at 2.7 µs, 56 on
    NVLink at the network overhead's 1 µs (above NVLink's 0.6), after the 6.6 µs base:

    >>> from trainplan.scenarios.kernel_data import collective_data
    >>> round(ring_latency_us(collective_data().nccl_latency, "all-gather", "LL", 64, 8), 6)
    81.5
    """
    if protocol not in lat.protocols:
        raise InputError(f"protocol: {protocol!r} is not one of {', '.join(lat.protocols)}")
    p, local = lat.protocols.index(protocol), max(1, min(per_domain, ranks))
    net = _hw(lat, "net", "tree" if local == 1 else "ring", p) if local < ranks else 0.0
    intra = _hw(lat, "nvlink", "ring", p)
    return float(
        ring_steps_us(lat, collective, protocol, ranks, local, intra, net, "other", domains)
    )


_LL_ROWS = {"volta": "volta_or_intel", "ampere": "ampere_or_amd"}
"""``llMaxBws``' rows on one node by generation (NCCL's comments: ``Volta-N1/Intel-N2``,
``Ampere-N1/AMD-N2``); Hopper and Blackwell are rows of their own."""


def node_column(values: tuple[float, ...], nodes: Any) -> Any:
    """The entry of a per-node-count row of NCCL's tuner constants (``llMaxBws``,
    ``perChMax*Bws``: columns N1, N2, N4) for ``nodes`` nodes: ``values[index2]``, ``index2 =
    nNodes <= 2 ? nNodes - 1 : 2`` (``ncclTopoTuneModel``). Element-wise in ``nodes``.

    >>> [node_column((36.7, 36.7, 29.0), n) for n in (1, 2, 8)]
    [36.7, 36.7, 29.0]
    """
    index = where(nodes <= 2, nodes - 1, 2)
    ns = namespace(index)
    if ns is None:
        return values[int(index)]
    return ns.take(ns.asarray(values), ns.astype(index, ns.int64))


def ll_max_gbps(lat: NcclLatency, generation: str, nodes: Any, cpu: str = "other") -> Any:
    """``llMaxBw`` (GB/s) of ``ncclTopoTuneModel`` (nccl 5067397c ``src/graph/tuning.cc``):
    ``llMaxBws[index1][index2]``, ``index2`` the column N1, N2 or N4 (``nNodes <= 2 ? nNodes - 1
    : 2``) and ``index1`` the generation's row on one node, across nodes the CPU's
    (``x86_amd``: AMD's row, else Intel's). Element-wise in ``nodes``.

    >>> from trainplan.scenarios.kernel_data import collective_data
    >>> lat = collective_data().nccl_latency
    >>> [ll_max_gbps(lat, "hopper", n) for n in (1, 2, 4)], ll_max_gbps(lat, "hopper", 4, "x86_amd")
    ([141.0, 39.0, 20.4], 19.0)
    """
    across = "ampere_or_amd" if cpu == "x86_amd" else "volta_or_intel"
    one = lat.ll_max_bw_gbps[_LL_ROWS.get(generation, generation)][0]
    return where(nodes == 1, one, node_column(lat.ll_max_bw_gbps[across], nodes))


def ring_busbw_gbps(
    lat: NcclLatency,
    protocol: str,
    channels: Any,
    speed_gbps: Any,
    nodes: Any,
    generation: str,
    cpu: str = "other",
) -> Any:
    """NCCL's bus bandwidth (GB/s) of a ring collective in ``protocol``, as its tuner models it
    (nccl 5067397c ``src/graph/tuning.cc`` ``ncclTopoTuneModel``) for a ring graph of
    ``channels`` channels at ``speed_gbps`` each over ``nodes`` nodes of GPUs of
    ``generation`` (volta, ampere, hopper, blackwell):

    * ``bw = nNodes <= 2 ? bwIntra : bwInter`` — for a ring graph the two are one figure:
      ``ncclTopoCompute`` (``src/graph/search.cc``) sets ``bwIntra = bwInter`` at every speed
      it tries (``tmpGraph.bwIntra = tmpGraph.bwInter = speedArray[...]``, pass 2's "increase
      bw for Ring" too), ``ncclTopoDupChannels`` divides both by the same factor and
      ``src/init.cc`` takes each's least over the ranks (they differ for the tree and NVLS
      alone): Simple's bus bandwidth is ``channels × speed`` at any node count;
    * LL: ``min(llMaxBw, busBw × 0.5)`` (:func:`ll_max_gbps`);
    * LL128: ``min(busBw × 0.92, channels × perChMaxRingLL128Bws[cc][index2])``.

    What nodes ≤ 2 change for a ring is these caps alone. The step time's tuner
    (:mod:`model.nccl_tuner`) reads this rule with the model's Simple bus bandwidth.
    Element-wise. Units: GB/s.

    Raises ``InputError`` on an unknown protocol or generation.

    Examples
    --------
    8 H100s in a node (12 channels at 30 GB/s: 360), 16 over two nodes (8 at 48 GB/s: 384) and
    32 over four: LL's cap 141, 39 and 20.4 GB/s; LL128 0.92 × 360, 8 × 36.7, 8 × 36.7:

    >>> from trainplan.scenarios.kernel_data import collective_data
    >>> lat = collective_data().nccl_latency
    >>> [ring_busbw_gbps(lat, "LL", c, s, n, "hopper") for c, s, n in ((12, 30, 1), (8, 48, 2),
    ...  (8, 48, 4))]
    [141.0, 39.0, 20.4]
    >>> [round(ring_busbw_gbps(lat, "LL128", c, s, n, "hopper"), 2) for c, s, n in ((12, 30, 1),
    ...  (8, 48, 2), (8, 48, 4))]
    [331.2, 293.6, 293.6]
    """
    if protocol not in lat.protocols:
        raise InputError(f"protocol: {protocol!r} is not one of {', '.join(lat.protocols)}")
    if generation not in lat.ring_ll128_channel_gbps:
        known = ", ".join(lat.ring_ll128_channel_gbps)
        raise InputError(f"generation: {generation!r} is not one of {known}")
    busbw = channels * speed_gbps
    if protocol == "LL":
        return minimum(ll_max_gbps(lat, generation, nodes, cpu), busbw * 0.5)
    if protocol == "LL128":
        cap = channels * node_column(lat.ring_ll128_channel_gbps[generation], nodes)
        return minimum(busbw * 0.92, cap)
    return busbw


def ring_steps_us(
    lat: NcclLatency,
    collective: str,
    protocol: str,
    ranks: Any,
    per_domain: Any,
    intra: Any,
    net: Any,
    cpu: str = "other",
    domains: Any = 0,
) -> Any:
    """NCCL's latency (µs) of a ring in ``protocol`` (``ncclTopoTuneModel``): base +
    (steps − s_net)·intra + s_net·net (:func:`model.nccl_latency.steps_latency`), the
    intra-node hop at least the CPU's network overhead (``getNetOverhead``, ×3 for Simple)
    where the ring leaves a node (``per_domain`` under ``ranks`` and ``domains`` not 1);
    ``domains``: NCCL's node count, 0: ``⌈ranks ∕ per_domain⌉``. The ×1.4 plateau of a
    multi-node Simple all-reduce (``ncclTopoGetAlgoTime``) needs the channel count: the step
    time's tuner applies it (:mod:`model.nccl_tuner`). Element-wise.

    >>> from trainplan.scenarios.kernel_data import collective_data
    >>> round(ring_steps_us(collective_data().nccl_latency, "all-gather", "LL", 64, 8, 0.6, 2.7), 6)
    81.5
    """
    inside = (per_domain >= ranks) | (domains == 1)
    over = lat.net_overhead_us[cpu] * (3 if protocol == "Simple" else 1)
    intra = where(inside, intra, maximum(intra, over))
    rounds = 2 if collective == "all-reduce" else 1
    hops = steps_latency(
        ranks, inside, intra, net, rounds=rounds, per_domain=per_domain, domains=domains
    )
    return lat.base_us["ring"][lat.protocols.index(protocol)] + hops


def _curve(curves: Sequence[BusBwCurve], part: str, collective: str, ranks: int) -> BusBwCurve:
    for c in curves:
        if (c.part, c.collective, c.ranks) == (part, collective, ranks):
            return c
    have = sorted({f"{c.part}/{c.collective}/{c.ranks} ranks" for c in curves})
    raise InputError(
        f"busbw: no published {collective} on {ranks} {part}; published: {', '.join(have)}"
    )


def busbw_at(
    curves: Sequence[BusBwCurve], part: str, collective: str, ranks: int, nbytes: float
) -> Interpolated:
    """The published bus bandwidth (GB/s) at an ``nbytes`` buffer, interpolated in log2(bytes)
    between nccl-tests' sizes (:func:`model.kernels.interpolate_log2`; held at the ends, flagged).

    Examples
    --------
    >>> from trainplan.scenarios.kernel_data import collective_data
    >>> busbw_at(collective_data().busbw, "H100-SXM", "all-reduce", 8, 2 ** 30).value
    466.35
    """
    c = _curve(curves, part, collective, ranks)
    return interpolate_log2(c.bytes, c.busbw_gbps, nbytes)


def published_collective_seconds(
    curves: Sequence[BusBwCurve], part: str, collective: str, ranks: int, nbytes: float
) -> Interpolated:
    """Seconds of one collective of an ``nbytes`` buffer at the published bus bandwidth:
    ``nbytes · factor / busbw`` (:func:`busbw_factor`). Below the smallest published size the
    time of the smallest (a latency floor: small messages take the same few microseconds);
    above the largest, the largest size's bandwidth (the plateau). Either is flagged.

    Examples
    --------
    An 8-GPU H100 all-reduce of 1 GiB: 2^30 · 1.75 / 466.35e9 s.

    >>> from trainplan.scenarios.kernel_data import collective_data
    >>> t = published_collective_seconds(collective_data().busbw, "H100-SXM", "all-reduce", 8, 2 ** 30)
    >>> round(t.value * 1e3, 4)  # ms
    4.0293
    """
    c = _curve(curves, part, collective, ranks)
    factor = busbw_factor(collective, ranks)
    if nbytes < c.bytes[0]:
        return Interpolated(c.bytes[0] * factor / (c.busbw_gbps[0] * 1e9), "below")
    bw = interpolate_log2(c.bytes, c.busbw_gbps, nbytes)
    return Interpolated(nbytes * factor / (bw.value * 1e9), bw.clamped)


def busbw_peak(rows: Sequence[BusBwPeak], part: str, collective: str, algorithm: str) -> float:
    """A vendor engineer's stated peak bus bandwidth (GB/s) of a collective.

    Examples
    --------
    >>> from trainplan.scenarios.kernel_data import collective_data
    >>> busbw_peak(collective_data().busbw_peaks, "H100-SXM", "all-reduce", "NVLS")
    480
    """
    for r in rows:
        if (r.part, r.collective, r.algorithm) == (part, collective, algorithm):
            return r.busbw_gbps
    have = sorted({f"{r.part}/{r.collective}/{r.algorithm}" for r in rows})
    raise InputError(
        f"busbw: no stated peak for {collective} ({algorithm}) on {part}; have {', '.join(have)}"
    )


def expert_bandwidth(
    rows: Sequence[ExpertAllToAll], library: str, part: str, link: str, ep: int, which: str
) -> Interpolated:
    """DeepEP's published bottleneck bandwidth (GB/s) of ``which`` (dispatch or combine) at
    expert-parallel size ``ep``, interpolated in log2(ep) between published sizes (held at the
    ends, flagged). The bandwidth is DeepEP's: the bytes a rank sends over the bottleneck link
    (NVLink inside a node, RDMA across) per second, FP8 dispatch and BF16 combine.

    Raises
    ------
    InputError
        No table for the library, part and link, or ``which`` not dispatch or combine.

    Examples
    --------
    >>> from trainplan.scenarios.kernel_data import collective_data
    >>> rows = collective_data().expert_all_to_all
    >>> expert_bandwidth(rows, "deepep-v1-normal", "H800", "rdma", 32, "combine").value
    57
    """
    if which not in ("dispatch", "combine"):
        raise InputError(f"which: {which!r} is not one of dispatch, combine")
    for r in rows:
        if (r.library, r.part, r.link) == (library, part, link):
            return interpolate_log2(
                r.ep, r.dispatch_gbps if which == "dispatch" else r.combine_gbps, ep
            )
    have = sorted({f"{r.library}/{r.part}/{r.link}" for r in rows})
    raise InputError(
        f"expert all-to-all: no {library} table on {part} over {link}; published: {', '.join(have)}"
    )
