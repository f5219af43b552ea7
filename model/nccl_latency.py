"""NCCL's latency model of a collective's steps, by where the group's ranks lie: each ring step
between two ranks of one NVLink domain at NVLink's hop latency, each step between domains at the
network's (NVIDIA/nccl 5067397c ``src/graph/tuning.cc`` ``ncclTopoTuneModel``). The per-hop
figures are :class:`model.roofline.RooflineParams`'; :func:`model.roofline.collective_latency`
adds the base latency (and :func:`model.collective_rates.nccl_latency_us`, the tuner's table
restated by algorithm and protocol, reads the same ring rule). Element-wise for arrays (:mod:`model.xp`). Units: seconds, ranks.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.xp import floor, log2, maximum, minimum, where

__all__ = ["steps_latency"]


def steps_latency(
    group_size: Any,
    scaleup: Any,
    intra_s: float,
    inter_s: float,
    *,
    rounds: int,
    tree: bool = False,
    per_domain: Any = 1,
) -> Any:
    """Seconds of the steps of one collective over ``group_size`` ranks, NCCL's ``Simple``
    latency less its base: a ring of ``rounds`` × (n − 1) steps (1: an all-gather or
    reduce-scatter, 2: an all-reduce; ``nsteps`` in ``ncclTopoTuneModel``), of which, across
    ``N`` domains, ``nInterSteps`` = ``rounds`` × (N − 1) cross the network at ``inter_s``
    (``hwLat[NCCL_HW_NET]``) and the rest ride NVLink at ``intra_s`` (``hwLat[NCCL_HW_NVLINK]``;
    NCCL takes the larger of it and 3 × its per-step network overhead, ``getNetOverhead``: 1 µs
    on Intel hosts, so NVLink's 3.4 µs stands). ``N`` is NCCL's ``nNodes``: host nodes, or NVLink
    domains where NCCL fuses a multi-node NVLink clique into one (``src/init.cc``:
    ``nvlDomainInfo.nNvlDomains = comm->nNodes``), ``⌈n / per_domain⌉`` for ``per_domain``
    members in each (1, the default: each rank a domain of its own, every step over the
    network). ``tree``: over the network an all-reduce takes NCCL's tree where that is quicker,
    ``2((n/N − 1)·intra_s + log₂ N · inter_s)``. ``rounds`` 0: a message posted at once (an
    all-to-all, a send), one hop. Inside one domain (``scaleup``) every step is NVLink's.

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
    """
    if not rounds:
        return where(scaleup, intra_s, inter_s) * 1.0
    local = maximum(minimum(per_domain, group_size), 1)
    domains = where(scaleup, 1, -floor(-group_size / local)) * 1.0
    steps, crossing = rounds * (group_size - 1) * 1.0, rounds * (domains - 1)
    ring = (steps - crossing) * intra_s + crossing * inter_s
    if not tree:
        return ring
    spread = 2 * ((group_size / domains - 1) * intra_s + log2(maximum(domains, 1)) * inter_s)
    return where(scaleup, ring, minimum(ring, spread))
