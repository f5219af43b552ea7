"""Clusters as networkx graphs, and the bandwidth a ring over some GPUs gets from them.

A cluster is ``num_gpus`` GPUs in NVLink domains of ``nvlink_domain`` GPUs (one NVSwitch node per
domain), joined by a scale-out fabric: a leaf switch per pod and one spine (fat tree), or, with
``rail_optimized=True``, one rail switch per local GPU index per pod (GPU ``i`` of every domain of
a pod on rail ``i``) and one spine. Nodes are strings (``"gpu12"``, ``"nvswitch1"``, ``"leaf0"``,
``"rail0.3"``, ``"spine"``) with a ``kind`` attribute; GPUs also carry ``rank``, ``domain``,
``pod`` and ``local`` (index inside the domain).

Edge ``bandwidth_bytes_per_s`` is the bandwidth **per GPU per direction** the link offers when
every GPU below it sends at once (its capacity divided by the GPUs that share it); a link that
leaves a pod of ``pod_size`` GPUs offers ``scaleout_bytes_per_s / oversubscription``. Edges also
carry ``tier`` (``nvlink``, ``scale-out``, ``spine``) and ``capacity_bytes_per_s`` (aggregate).
The per-GPU convention makes the bottleneck of a path directly comparable with the
conventions' "bandwidth in GB/s per GPU, one direction" (docs/concepts/conventions.md).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from trainplan.model.errors import InputError
from trainplan.model.hardware import ClusterLinks, DeviceSpec

if TYPE_CHECKING:  # networkx is imported where a graph is built or read (it is slow to import)
    import networkx as nx

__all__ = [
    "build_cluster",
    "nvlink_graph",
    "add_scaleout_tier",
    "cluster_for_device",
    "gpu_node",
    "widest_path_bandwidth",
    "bottleneck_bandwidth",
]


def gpu_node(rank: int) -> str:
    """The node id of GPU ``rank``.

    >>> gpu_node(12)
    'gpu12'
    """
    return f"gpu{rank}"


def _check_args(
    num_gpus: int,
    nvlink_domain: int,
    nvlink_bytes_per_s: float,
    scaleout_bytes_per_s: float,
    pod_size: int | None,
    oversubscription: float,
) -> int:
    for name, value in (("num_gpus", num_gpus), ("nvlink_domain", nvlink_domain)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name}: {value!r} must be a whole number >= 1")
    for name, rate in (
        ("nvlink_bytes_per_s", nvlink_bytes_per_s),
        ("scaleout_bytes_per_s", scaleout_bytes_per_s),
    ):
        if not (isinstance(rate, int | float) and rate > 0 and math.isfinite(rate)):
            raise InputError(f"{name}: {rate!r} must be a positive finite bandwidth in bytes/s")
    if not (isinstance(oversubscription, int | float) and oversubscription >= 1):
        raise InputError(f"oversubscription: {oversubscription!r} must be >= 1 (1 = non-blocking)")
    pod = num_gpus if pod_size is None else pod_size
    if (
        isinstance(pod, bool)
        or not isinstance(pod, int)
        or pod < 1
        or pod % min(nvlink_domain, pod)
    ):
        raise InputError(
            f"pod_size: {pod_size!r} must be a whole number of NVLink domains of {nvlink_domain}"
        )
    if pod < nvlink_domain and pod < num_gpus:
        raise InputError(f"pod_size: {pod} must be at least the NVLink domain ({nvlink_domain})")
    return pod


@lru_cache(maxsize=16)
def build_cluster(
    num_gpus: int,
    nvlink_domain: int,
    nvlink_bytes_per_s: float,
    scaleout_bytes_per_s: float,
    *,
    rail_optimized: bool = False,
    pod_size: int | None = None,
    oversubscription: float = 1.0,
) -> nx.Graph:
    """A cluster graph: GPUs, one NVSwitch per domain, leaf/spine or rail switches (cached).

    Parameters
    ----------
    num_gpus : int
        GPUs in the cluster (G); rank ``r`` sits in domain ``r // nvlink_domain``.
    nvlink_domain : int
        GPUs per NVLink domain (8 for HGX, 72 for NVL72).
    nvlink_bytes_per_s, scaleout_bytes_per_s : float
        NVLink and NIC bandwidth, bytes/s per GPU per direction.
    rail_optimized : bool
        Rail switches (GPU ``i`` of each domain on rail ``i``) instead of one leaf per pod.
    pod_size : int or None
        GPUs below one leaf/rail group (a whole number of domains); None = the whole cluster.
    oversubscription : float
        Ratio of downlink to uplink bandwidth of a pod (>= 1): links that leave a pod offer
        ``scaleout_bytes_per_s / oversubscription`` per GPU.

    Returns
    -------
    networkx.Graph
        Frozen (``nx.freeze``): it is shared by the cache; copy with ``nx.Graph(g)`` to edit.
        Building 16,384 GPUs takes well under a second (no all-pairs paths are computed).

    Raises
    ------
    InputError
        A non-positive count or bandwidth, oversubscription < 1, or a pod that is not a whole
        number of NVLink domains.

    Examples
    --------
    >>> g = build_cluster(16, 8, 450e9, 50e9)
    >>> g.nodes["gpu9"]["domain"], g.edges["gpu9", "nvswitch1"]["bandwidth_bytes_per_s"]
    (1, 450000000000.0)
    """
    pod = _check_args(
        num_gpus,
        nvlink_domain,
        nvlink_bytes_per_s,
        scaleout_bytes_per_s,
        pod_size,
        oversubscription,
    )
    g = nvlink_graph(num_gpus, nvlink_domain, float(nvlink_bytes_per_s), pod)
    add_scaleout_tier(g, float(scaleout_bytes_per_s), rail_optimized, float(oversubscription))
    import networkx as nx

    return nx.freeze(g)


def nvlink_graph(num_gpus: int, nvlink_domain: int, nvlink: float, pod: int) -> nx.Graph:
    """The NVLink tier of :func:`build_cluster`'s graph: one NVSwitch node per domain of
    ``nvlink_domain`` GPUs, the GPU nodes (``rank``, ``domain``, ``pod`` of ``pod`` GPUs,
    ``local`` index in the domain) and each GPU's edge to its NVSwitch at ``nvlink`` bytes/s
    per GPU per direction (tier ``nvlink``). Not frozen: the scale-out tier is added to it.

    >>> g = nvlink_graph(16, 8, 450e9, 16)
    >>> g.number_of_nodes(), g.number_of_edges(), g.nodes["gpu9"]["local"]
    (18, 16, 1)
    """
    import networkx as nx

    g = nx.Graph(num_gpus=num_gpus, nvlink_domain=nvlink_domain, nvlink_bytes_per_s=nvlink)
    g.graph["pod_size"] = pod
    num_domains = -(-num_gpus // nvlink_domain)
    g.add_nodes_from(
        (f"nvswitch{d}", {"kind": "nvswitch", "domain": d}) for d in range(num_domains)
    )
    g.add_nodes_from(
        (
            gpu_node(r),
            {
                "kind": "gpu",
                "rank": r,
                "domain": r // nvlink_domain,
                "pod": r // pod,
                "local": r % nvlink_domain,
            },
        )
        for r in range(num_gpus)
    )
    nvl = {"bandwidth_bytes_per_s": nvlink, "capacity_bytes_per_s": nvlink, "tier": "nvlink"}
    g.add_edges_from((gpu_node(r), f"nvswitch{r // nvlink_domain}", nvl) for r in range(num_gpus))
    return g


def add_scaleout_tier(g: nx.Graph, nic: float, rail: bool, oversubscription: float) -> None:
    """Add the scale-out tier to :func:`nvlink_graph`'s ``g`` (its ``num_gpus``,
    ``nvlink_domain`` and ``pod_size`` attributes), and its own attributes: where there is more
    than one NVLink domain, each GPU's NIC edge (``nic`` bytes/s per GPU per direction, tier
    ``scale-out``) to its pod's leaf or, with ``rail``, to its rail switch (GPU ``i`` of each
    domain of a pod on rail ``i``), and, across pods or rails, each switch's uplink to one spine
    at ``nic / oversubscription`` per GPU (tier ``spine``, capacity × the GPUs below).

    >>> g = nvlink_graph(32, 8, 450e9, 16)
    >>> add_scaleout_tier(g, 50e9, False, 2.0)
    >>> g.edges["leaf1", "spine"]["bandwidth_bytes_per_s"], g.graph["oversubscription"]
    (25000000000.0, 2.0)
    """
    g.graph.update(scaleout_bytes_per_s=nic, rail_optimized=rail, oversubscription=oversubscription)
    num_gpus, domain, pod = g.graph["num_gpus"], g.graph["nvlink_domain"], g.graph["pod_size"]
    if -(-num_gpus // domain) == 1:  # one NVLink domain: no scale-out
        return
    num_pods, uplink = -(-num_gpus // pod), nic / oversubscription

    def switch(r: int) -> str:
        return f"rail{r // pod}.{r % domain}" if rail else f"leaf{r // pod}"

    nic_edge = {"bandwidth_bytes_per_s": nic, "capacity_bytes_per_s": nic, "tier": "scale-out"}
    switches: dict[str, int] = {}
    for r in range(num_gpus):
        switches[switch(r)] = switches.get(switch(r), 0) + 1
    g.add_nodes_from(
        (
            s,
            {
                "kind": "rail" if rail else "leaf",
                "pod": int(s[4:].split(".")[0]) if rail else int(s[4:]),
            },
        )
        for s in switches
    )
    g.add_edges_from((gpu_node(r), switch(r), nic_edge) for r in range(num_gpus))
    if num_pods > 1 or rail:
        g.add_node("spine", kind="spine")
        g.add_edges_from(
            (
                s,
                "spine",
                {
                    "bandwidth_bytes_per_s": uplink,
                    "capacity_bytes_per_s": uplink * n,
                    "tier": "spine",
                },
            )
            for s, n in switches.items()
        )


def cluster_for_device(device: DeviceSpec, num_gpus: int, **options: Any) -> nx.Graph:
    """:func:`build_cluster` with the link figures of an accelerator-table row.

    Raises
    ------
    InputError
        When the row lacks a link figure (see ``ClusterLinks.from_device``).

    Examples
    --------
    >>> from trainplan.topology.accelerators import get_accelerator
    >>> cluster_for_device(get_accelerator("H100-SXM"), 16).graph["nvlink_domain"]
    8
    """
    links = ClusterLinks.from_device(device, num_gpus)
    return build_cluster(
        num_gpus,
        links.nvlink_domain,
        links.nvlink_bytes_per_s,
        links.scaleout_bytes_per_s,
        **options,
    )


def _widest_tree(graph: nx.Graph) -> tuple[dict[str, str], dict[str, int], dict[str, float]]:
    """Parent, depth and edge-to-parent bandwidth of a maximum spanning tree (cached in the graph).

    In a maximum spanning tree the path between two nodes is a widest (max-bottleneck) path of
    the graph, so one tree answers every pair query by climbing to the common ancestor.
    """
    cached = graph.graph.get("_widest_tree")
    if cached is not None:
        return cached
    import networkx as nx

    tree = nx.maximum_spanning_tree(graph, weight="bandwidth_bytes_per_s", algorithm="kruskal")
    parent: dict[str, str] = {}
    depth: dict[str, int] = {}
    up: dict[str, float] = {}
    for root in (min(c, key=str) for c in nx.connected_components(tree)):
        depth[root], up[root] = 0, math.inf
        queue = deque([root])
        while queue:
            node = queue.popleft()
            for nxt, attrs in tree.adj[node].items():
                if nxt not in depth:
                    parent[nxt], depth[nxt] = node, depth[node] + 1
                    up[nxt] = attrs["bandwidth_bytes_per_s"]
                    queue.append(nxt)
    graph.graph["_widest_tree"] = (parent, depth, up)
    return parent, depth, up


def widest_path_bandwidth(graph: nx.Graph, a: int, b: int) -> float:
    """Max-bottleneck bandwidth between GPUs of rank ``a`` and ``b``, bytes/s per GPU per direction.

    Returns ``math.inf`` when ``a == b`` and 0.0 when they are not connected.

    Raises
    ------
    InputError
        When a rank is not a GPU of the graph.

    Examples
    --------
    >>> g = build_cluster(16, 8, 450e9, 50e9)
    >>> widest_path_bandwidth(g, 0, 7), widest_path_bandwidth(g, 0, 8)
    (450000000000.0, 50000000000.0)
    """
    u, v = _gpu(graph, a), _gpu(graph, b)
    if u == v:
        return math.inf
    parent, depth, up = _widest_tree(graph)
    best = math.inf
    while depth[u] > depth[v]:
        best, u = min(best, up[u]), parent[u]
    while depth[v] > depth[u]:
        best, v = min(best, up[v]), parent[v]
    while u != v:
        if u not in parent or v not in parent:
            return 0.0
        best, u = min(best, up[u]), parent[u]
        best, v = min(best, up[v]), parent[v]
    return best


def _gpu(graph: nx.Graph, rank: int) -> str:
    node = gpu_node(rank)
    if node not in graph or graph.nodes[node].get("kind") != "gpu":
        raise InputError(
            f"rank {rank!r} is not a GPU of this cluster ({graph.graph.get('num_gpus')} GPUs)"
        )
    return node


def bottleneck_bandwidth(graph: nx.Graph, ranks: Sequence[int]) -> float:
    """Bandwidth per GPU per direction available to a ring over ``ranks`` (in the given order).

    The minimum over consecutive ring neighbours (the last wraps to the first) of the widest-path
    bandwidth between them, taken from a maximum spanning tree computed once per graph. Each
    neighbour pair is treated alone: contention between pairs is captured only through the
    per-GPU convention of the edges (shared links already carry a per-GPU share).

    Returns
    -------
    float
        bytes/s; ``math.inf`` for fewer than two ranks (no traffic).

    Raises
    ------
    InputError
        When a rank is not a GPU of the graph.

    Examples
    --------
    >>> g = build_cluster(32, 8, 450e9, 50e9, pod_size=16, oversubscription=2.0)
    >>> [bottleneck_bandwidth(g, ranks) / 1e9 for ranks in (range(8), [0, 8], [0, 16])]
    [450.0, 50.0, 25.0]
    """
    ring = list(ranks)
    if len(ring) < 2:
        for r in ring:
            _gpu(graph, r)
        return math.inf
    return min(widest_path_bandwidth(graph, ring[i - 1], ring[i]) for i in range(len(ring)))
