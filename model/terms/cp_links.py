"""The links the context-parallel clock reads (:attr:`model.op_time.Clock.cp_link` and
:attr:`~model.op_time.Clock.cp_a2a_link`): the cp group's own for a ring, an all-gather or
Ulysses, and, for the hybrid (``a2a+p2p``), each of its two groups placed on its own.

Megatron-Core builds the hybrid's groups out of each cp group's ranks with
``create_hierarchical_groups`` (NVIDIA/Megatron-LM d98e8a64dd ``megatron/core/parallel_state.py``,
called from ``initialize_model_parallel`` with ``hierarchical_context_parallel_sizes``): level
``k`` rearranges the group's ranks ``"(l s u) -> (l u) s"`` with ``s`` the level's size and
``u`` the product of the sizes before it, so the first level (the all-to-all's, the first of
``--hierarchical-context-parallel-sizes``: ``model_parallel_config.py``) is ``u`` consecutive
cp ranks, and the second (the ring's, Transformer Engine's ``cp_group[1]``) every ``u``-th:
over global ranks, the inner group strides the cp group's stride ``s`` with ``u`` members, the
ring strides ``s·u`` with ``r = cp ∕ u``. Each is then placed as every axis is
(:func:`model.rank_groups.fewest_in_domain` and :func:`model.rank_groups.nccl_nodes` over the
layout's ranks) and timed on its own link (:func:`model.step_time.link_time_of`): an inner
group inside one NVLink domain all-to-alls over NVLink whatever the ring crosses.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.rank_groups import members_in_domain, nccl_node_size, nodes_in_domain
from trainplan.model.step_time import link_time_of
from trainplan.model.terms.fields import (
    Context,
    Fields,
    axis_domains,
    axis_members,
    link_members,
    world_ranks,
)
from trainplan.model.xp import as_float, is_array, where

__all__ = ["cp_clock_links", "hybrid_cp_groups"]


def hybrid_cp_groups(stride: Any, cp: Any, u: Any) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """((stride, size) of the hybrid's inner all-to-all groups, (stride, size) of its rings),
    for cp groups of ``cp`` ranks at ``stride`` and the inner degree ``u``: ``(stride, u)`` and
    ``(stride·u, cp ∕ u)`` (the module docstring: Megatron-Core's ``create_hierarchical_groups``).
    Element-wise for arrays. Units: ranks.

    >>> hybrid_cp_groups(2, 8, 4)  # tp 2, cp 8 as 4 × 2: ranks 0 2 4 6 all-to-all, 0 8 ring
    ((2, 4), (8, 2))
    """
    return (stride, u), (stride * u, cp // where(u > 0, u, 1))


def cp_clock_links(c: Context, f: Fields, r: Any, u: Any, bw: Any, up: Any) -> tuple[Any, ...]:
    """(bandwidth, scale-up tier, members a domain, NCCL's domains) of the K/V exchange's link and
    (bandwidth, scale-up tier, members a domain) of the head all-to-all's, for the cp flavour of
    ``r`` ring and ``u`` all-to-all ranks (:func:`model.context_parallel.cp_degrees`): the cp
    group's link (``bw``, ``up``: :func:`model.terms.roofline.axis_link`, an all-to-all's where
    the flavour is Ulysses) for both unless the flavour is the hybrid (``r``, ``u`` > 1); the
    hybrid's ring and inner group each on the link of its own groups (the module docstring): a
    group inside one NVLink domain at the domain's figure (the cp link's where the whole cp
    group is inside), one across domains at the cp link's scale-out tier, ``g`` of its members a
    domain in parallel (:func:`model.step_time.rings_bandwidth`,
    :func:`model.step_time.all_to_all_bandwidth`). Members and domains are 1 on a scale-up link
    (:func:`model.terms.fields.link_members`). Scalars, or ``[n, 1]`` columns. Units: bytes/s,
    ranks, domains."""
    g = link_members(bw, up, axis_members(c, f, "cp"))
    n = link_members(bw, up, axis_domains(c, f, "cp"))
    hybrid = (r > 1) & (u > 1) & (bw > 0)
    if not (hybrid.any() if is_array(hybrid) else hybrid):
        return bw, up, g, n, bw, up, g
    link, d = f.link("cp"), c.gpu
    domain, fast = d.placement_domain or d.gpus_per_node, d.nvlink_bytes_per_s
    node = nccl_node_size(d.gpus_per_node, d.placement_domain)
    tier = as_float(link.bandwidth if link.bandwidth is not None else 0.0)
    inside_bw = where(link.nvlink, tier, fast)
    size = where(link.group_size > 1, link.group_size, 2)
    stride = where(hybrid, link.span // size, 1)
    total = world_ranks(f)
    placed = []
    inner, ring = hybrid_cp_groups(stride, size, u)
    for all_to_all, (s, k) in ((False, ring), (True, inner)):
        k = where(hybrid, k, 1)
        members = members_in_domain(s, k, total, domain)
        one = nodes_in_domain(s, k, total, domain) == 1
        nodes = where(one, 1, nodes_in_domain(s, k, total, domain, node))
        rate, scaleup = link_time_of(
            where(one, inside_bw, tier), one, s * k, k, fast, domain, all_to_all, None, members
        )
        placed.append((rate, scaleup, link_members(rate, scaleup, members), nodes))
    (ring_bw, ring_up, ring_g, ring_n), (a2a_bw, a2a_up, a2a_g, _) = placed
    ring_n = link_members(ring_bw, ring_up, ring_n)
    return (
        where(hybrid, ring_bw, bw), where(hybrid, ring_up, up), where(hybrid, ring_g, g),
        where(hybrid, ring_n, n), where(hybrid, a2a_bw, bw), where(hybrid, a2a_up, up),
        where(hybrid, a2a_g, g),
    )  # fmt: skip
