"""NCCL's latency model of a collective's steps, by where the group's ranks lie: each ring step
between two ranks of one NVLink domain at NVLink's hop latency, each step between domains at the
network's; a tree all-reduce ``⌊log₂ N⌋`` network hops up and down over ``N`` domains; a message
posted to every peer at once (an all-to-all, a send) one hop (NVIDIA/nccl 5067397c
``src/graph/tuning.cc`` ``ncclTopoTuneModel``). The per-hop figures are
:class:`model.roofline.RooflineParams`'; :func:`collective_latency` adds the base latency, the
step time's one rule (and :func:`model.collective_rates.nccl_latency_us`, the tuner's table
restated by algorithm and protocol, reads the same ring and tree rules). Every parallel axis's collectives
read it with the group's members per domain (:func:`model.terms.fields.axis_members`: tp, cp,
ep; :mod:`model.terms.dp_time`: dp, edp). Element-wise for arrays (:mod:`model.xp`). Units:
seconds, ranks.

An all-to-all or a send has no latency in NCCL's tuner (``ncclFuncSendRecv`` and
``ncclFuncAlltoAll`` lie beyond ``NCCL_NUM_FUNCTIONS`` in ``src/include/nccl_common.h``;
``src/enqueue.cc`` turns ``ncclAlltoAll`` into one ``p2pTaskAppend`` send and receive a peer,
all in one group): the model charges one hop, the slowest peer's link's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainplan.model.xp import floor, log2, maximum, minimum, where

if TYPE_CHECKING:
    from trainplan.model.roofline import RooflineParams

__all__ = ["broadcast_latency", "steps_latency", "tree_latency", "collective_latency"]

_RINGS = {"all-reduce": 2, "all-gather": 1, "reduce-scatter": 1}
"""Ring rounds of each collective (``nsteps`` ÷ (n − 1) in ``ncclTopoTuneModel``); an
all-to-all and a send are none (one hop)."""


def tree_latency(group_size: Any, domains: Any, intra_s: float, inter_s: float) -> Any:
    """Seconds of the hops of NCCL's tree all-reduce (``Simple`` latency less its base) over
    ``group_size`` ranks in ``domains`` domains: ``2·((n ∕ N − 1)·intra_s + log2i(N)·inter_s)``,
    up the chain inside each domain and the tree across them, then down again
    (``ncclTopoTuneModel``, the ``NCCL_ALGO_TREE`` branch: ``2 * ((nRanks / nNodes - 1) *
    intraLat + log2i(nNodes) * interLat)``): ``n ∕ N`` C's integer division, ``log2i`` the
    whole part of the base-2 logarithm (``src/include/utils.h``: ``log2Down``). ``intra_s``:
    the tree's own NVLink hop (``hwLatencies[NVLINK][TREE][SIMPLE]``, 4 µs), ``inter_s`` the
    network's (``hwLatencies[NET][TREE][SIMPLE]``, 14 µs, plus twice the graph's
    ``latencyInter``: NCCL's own InfiniBand and socket transports report 0,
    ``src/transport/net_ib/init.cc`` ``props->latency = 0; // Not set``, so 14 µs stands).
    Element-wise.

    Examples
    --------
    1,024 ranks, 8 in each of 128 nodes: 2 × (7 × 4 + 7 × 14) µs; over 12 nodes of 8,
    ⌊log₂ 12⌋ = 3 network hops each way, 2 × (7 × 4 + 3 × 14):

    >>> [round(tree_latency(n, d, 4e-6, 14e-6) * 1e6, 1) for n, d in ((1024, 128), (96, 12))]
    [252.0, 140.0]
    """
    whole = maximum(domains, 1)
    local = floor(group_size / whole)
    return 2 * ((local - 1) * intra_s + floor(log2(whole)) * inter_s)


def steps_latency(
    group_size: Any,
    scaleup: Any,
    intra_s: float,
    inter_s: float,
    *,
    rounds: int,
    tree: bool = False,
    per_domain: Any = 1,
    tree_intra_s: float | None = None,
    domains: Any = 0,
) -> Any:
    """Seconds of the steps of one collective over ``group_size`` ranks, NCCL's ``Simple``
    latency less its base: a ring of ``rounds`` × (n − 1) steps (1: an all-gather or
    reduce-scatter, 2: an all-reduce; ``nsteps`` in ``ncclTopoTuneModel``), of which, across
    ``N`` domains, ``nInterSteps`` = ``rounds`` × (N − 1) cross the network at ``inter_s``
    (``hwLat[NCCL_HW_NET]``) and the rest ride NVLink at ``intra_s`` (``hwLat[NCCL_HW_NVLINK]``;
    NCCL takes the larger of it and 3 × its per-step network overhead, ``getNetOverhead``: 1 µs
    on Intel hosts, so NVLink's 3.4 µs stands). ``N`` is NCCL's ``nNodes``, hosts or fused NVLink
    cliques (``src/init.cc``): ``domains`` where placed (:func:`model.rank_groups.nccl_nodes`,
    the distinct domains of the group's ranks: 2 for 12 split 8 + 4, an all-gather's 1 step
    over the network and 10 over NVLink), else ``⌈n / per_domain⌉`` (``per_domain`` 1, the
    default: every step over the network). ``tree``: over the network an all-reduce takes
    NCCL's tree where quicker (:func:`tree_latency`, its NVLink hop ``tree_intra_s``, 4 µs in
    NCCL's table; ``intra_s`` where not given). ``rounds`` 0: a message to every peer at once
    (an all-to-all, a send), one hop — NVLink's where every peer shares the sender's domain
    (``scaleup``, or ``per_domain`` ≥ ``group_size``), else the network's (NCCL's tuner has
    none for them: the module's note). Inside one domain (``scaleup``) every step is NVLink's.

    Examples
    --------
    An all-gather over 1,024 ranks, 18 in each of 57 NVL72 domains: 56 steps over the network,
    1,023 − 56 = 967 over NVLink, 56 × 14 + 967 × 3.4 µs; with one rank a domain all 1,023
    over the network; a tree all-reduce over 1,024 nodes, 2 × 10 network hops:

    >>> [round(steps_latency(1024, False, 3.4e-6, 14e-6, rounds=1, per_domain=g) * 1e6, 1)
    ...  for g in (18, 1)]
    [4071.8, 14322.0]
    >>> round(steps_latency(1024, False, 3.4e-6, 14e-6, rounds=2, tree=True) * 1e6, 1)
    280.0

    An all-to-all over 4 ranks of one domain whose link is the network's (the hybrid context
    parallelism's inner group), one NVLink hop; over 8 ranks 4 a domain, one network hop:

    >>> [round(steps_latency(n, False, 3.4e-6, 14e-6, rounds=0, per_domain=4) * 1e6, 1)
    ...  for n in (4, 8)]
    [3.4, 14.0]
    """
    if not rounds:
        inside = scaleup | (per_domain >= group_size)
        return where(inside, intra_s, inter_s) * 1.0
    local = maximum(minimum(per_domain, group_size), 1)
    counted = where(domains > 0, domains, -floor(-group_size / local))
    domains = where(scaleup, 1, counted) * 1.0
    steps, crossing = rounds * (group_size - 1) * 1.0, rounds * (domains - 1)
    ring = (steps - crossing) * intra_s + crossing * inter_s
    if not tree:
        return ring
    up = intra_s if tree_intra_s is None else tree_intra_s
    return where(scaleup, ring, minimum(ring, tree_latency(group_size, domains, up, inter_s)))


def collective_latency(
    kind: str,
    group_size: Any,
    scaleup: Any,
    p: RooflineParams,
    per_domain: Any = 1,
    domains: Any = 0,
) -> Any:
    """The latency part of :func:`model.roofline.collective_seconds` of a ``kind``
    (:class:`model.roofline.Collective`) over ``group_size`` ranks: NCCL's base latency
    (:attr:`~model.roofline.RooflineParams.collective_base_latency_s`) plus its steps, each at
    its link's hop latency (:func:`steps_latency`; ``per_domain``: the group's members in each
    NVLink domain, 1 = every step over the network; ``domains``: NCCL's node count of the group,
    :func:`model.rank_groups.nccl_nodes`, 0 = ``⌈n ∕ per_domain⌉``; an all-reduce's tree at
    :attr:`~model.roofline.RooflineParams.scaleup_tree_hop_latency_s` inside a domain; a send
    between neighbours of a group that leaves its domain, the pair that straddles the domain's
    edge, which the ring waits on: the network's hop). Element-wise. Units: seconds.

    >>> from trainplan.model.roofline import Collective, RooflineParams
    >>> p = RooflineParams(gemm_efficiency=0.7)
    >>> round(collective_latency(Collective.ALL_REDUCE, 1024, False, p) * 1e6, 1)  # tree: 2·10 hops
    288.4
    """
    steps = steps_latency(
        group_size, scaleup, p.scaleup_hop_latency_s, p.scaleout_hop_latency_s,
        rounds=_RINGS.get(kind, 0), tree=kind == "all-reduce",
        per_domain=1 if kind == "send-recv" else per_domain,
        tree_intra_s=p.scaleup_tree_hop_latency_s,
        domains=0 if kind == "send-recv" else domains,
    )  # fmt: skip
    return p.collective_base_latency_s + steps


def broadcast_latency(group_size: int, nodes: int, p: RooflineParams) -> float:
    """Seconds of NCCL's latency of one ring broadcast over ``group_size`` ranks on ``nodes``
    hosts (NCCL's ``nNodes``), ``Simple`` protocol. NCCL models Broadcast and Reduce apart from
    the other ring collectives (NVIDIA/nccl 5067397c, ``src/graph/tuning.cc``
    ``ncclTopoTuneModel``; re-read there): Broadcast runs on the ring only (``a !=
    NCCL_ALGO_RING`` is skipped), its ``nsteps`` is ``nRanks`` (neither all-reduce's ``2·(nRanks −
    1)`` nor all-gather's ``nRanks − 1``), its latency starts at ``baseLatencies[RING][SIMPLE]``
    = 8.4 µs and adds one hop where the ring graph's intra- and inter-node steps use the same
    channels (``graph->sameChannels``), else ``nsteps`` hops, each at the tree's ``Simple``
    latency of the ring's hardware (``lat = hwLatencies[hw[a]][NCCL_ALGO_TREE][p]``, "Add some
    chunk latency, waiting for proper chunk modeling"): NVLink's 4.0 µs on one node, the
    network's 14 µs on several (``hw[a]`` is ``NCCL_HW_NET`` where ``nNodes`` > 1); the graph's
    ``latencyInter`` and the network overhead of the other rings are not added on this branch.
    Which branch holds depends on the ring NCCL's graph search finds (``src/graph/search.cc``
    ``ncclTopoCompute`` tries ``sameChannels`` 1 first and drops to 0 when no such ring
    reaches the bandwidth it seeks), which this model does not know, so the many-hop branch is
    taken: an upper bound (the one-hop branch gives 8.4 + 14 µs across nodes). Units: seconds.
    A group of one rank sends nothing: 0.

    Examples
    --------
    Rank 0 of the actor and 16 engine GPUs on 2 other nodes: 8.4 + 17 × 14 µs; all 9 ranks in
    one node: 8.4 + 9 × 4.0 µs.

    >>> from trainplan.model.roofline import RooflineParams
    >>> p = RooflineParams(gemm_efficiency=0.7)
    >>> [round(broadcast_latency(n, d, p) * 1e6, 1) for n, d in ((17, 3), (9, 1))]
    [246.4, 44.4]
    """
    if group_size <= 1:
        return 0.0
    hop = p.scaleout_hop_latency_s if nodes > 1 else p.scaleup_tree_hop_latency_s
    return p.collective_base_latency_s + group_size * hop
