"""The link the expert dispatch and combine ride: the expert-parallel axis's link as the
topology placed it (:func:`topology.placement.axis_links`), except where the dispatcher's
kernels leave NVLink inside the domain — DeepEP's group of more than 8 ranks, whose internode
kernels cross between runs of 8 ranks by RDMA through the GPU's NIC even where every rank
shares one NVLink domain (a GB200 or GB300 NVL72: :attr:`model.moe_run.Dispatcher.
nvlink_ranks`, :func:`model.moe_dispatch.kernel_members`). There the all-to-all link rule
(:func:`model.step_time.all_to_all_bandwidth`) times the scale-out share of the bytes on the
NIC, ``g`` = the members of each run of 8, as it times a group across 8-GPU nodes.

The roofline clock (:func:`model.terms.roofline.ep_dispatch_fields` and the layer clock), the
single time model (:func:`model.terms.traffic.single_axis_seconds`) and the traffic table's link
column (:mod:`model.estimate`) read it. Units: bytes/s per GPU per direction. Exact for one
layout, element-wise over the search's columns.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.step_time import all_to_all_bandwidth, link_time_of
from trainplan.model.terms.dispatch_buffers import ep_members_per_domain
from trainplan.model.terms.fields import Context, Fields, axis_members
from trainplan.model.xp import as_float, logical_not, maximum, where

__all__ = ["ep_rdma", "ep_dispatch_link", "ep_dispatch_members"]


def ep_rdma(c: Context, f: Fields) -> tuple[Any, Any]:
    """(whether the dispatch's hop between the dispatcher's NVLink runs leaves an NVLink domain
    that holds the whole group — DeepEP's RDMA hop inside one domain —, the NIC's bytes/s it
    rides: the accelerator's scale-out figure, ``scaleout_gbps`` where the run gives it).
    (False, 0) for every other dispatcher and for a group already across domains (whose link
    is the NIC's as placed), or where the part has no scale-out figure (no NIC to time: the
    NVLink figure stands, an upper bound on the speed)."""
    run, d = c.training.moe_run, c.gpu
    nic = d.scaleout_bytes_per_s
    if c.arch.moe is None or run.dispatcher.nvlink_ranks is None or not nic:
        return False, 0.0
    link = f.link("ep")
    if link.bandwidth is None:
        return False, 0.0
    g = ep_members_per_domain(c, f)
    rdma = link.nvlink & (g > 0) & (g < link.group_size)
    return rdma, where(rdma, nic, 0.0)


def ep_dispatch_link(c: Context, f: Fields) -> tuple[Any, Any]:
    """(bandwidth per GPU, scale-up tier) of the expert all-to-all: the placed link by the
    all-to-all rule (:func:`model.step_time.link_time_of`), or inside an NVLink domain where the
    dispatcher crosses by RDMA (:func:`ep_rdma`) the NIC by the same rule for ``g`` members per
    run of 8 (:func:`model.terms.dispatch_buffers.ep_members_per_domain`), scale-out; across
    domains the placed NIC with that ``g`` too (DeepEP's runs of 8, not the domain's members).
    (0, False) at degree 1 or on an unknown link.

    Examples
    --------
    DeepSeek-V3's EP 64 under DeepEP in one GB200 NVL72 domain (one ConnectX-7, 50 GB/s, a GPU):
    56 of the 63 peers lie outside the sender's run of 8, so the whole message moves at
    50 × 63/56 = 56.25 GB/s, scale-out (:func:`model.step_time.all_to_all_bandwidth`); HybridEP
    keeps NVLink's 900 GB/s (tests/model/test_deepep_nvl72.py).
    """
    link, d = f.link("ep"), c.gpu
    known = link.bandwidth is not None
    bandwidth = as_float(link.bandwidth) if known else 0.0
    size = link.group_size if known else 1
    placed = link_time_of(
        bandwidth, link.nvlink, link.span, size, d.nvlink_bytes_per_s, d.placement_domain, True,
        None, link.per_domain,
    )  # fmt: skip
    runs, g = _runs(c, f)
    if runs is False:
        return placed
    rdma, nic = ep_rdma(c, f)
    span = where(link.span > 0, link.span, size)
    out = where(rdma, nic, bandwidth)
    gpus = maximum(1, g * span // maximum(size, 1))
    timed = all_to_all_bandwidth(out, size, span, gpus, d.nvlink_bytes_per_s)
    return where(runs, timed, placed[0]), where(runs, False, placed[1])


def _runs(c: Context, f: Fields) -> tuple[Any, Any]:
    """(whether the dispatch rides the NIC between the dispatcher's NVLink runs,
    :func:`model.terms.dispatch_buffers.ep_members_per_domain`'s members of each run); (False,
    0) for a dispatcher without runs (NCCL's all-to-all, HybridEP) or an unknown link."""
    link = f.link("ep")
    run = c.training.moe_run
    if c.arch.moe is None or run.dispatcher.nvlink_ranks is None or link.bandwidth is None:
        return False, 0
    rdma, _ = ep_rdma(c, f)
    g = ep_members_per_domain(c, f)
    return (g > 0) & (g < link.group_size) & (rdma | logical_not(link.nvlink)), g


def ep_dispatch_members(c: Context, f: Fields) -> Any:
    """Ranks of the expert-parallel group the dispatch reaches over NVLink from each rank, as
    the all-to-all's latency reads them (:attr:`model.roofline.LinkTime.per_domain`: one
    NVLink hop where they are the whole group, else one network hop,
    :func:`model.nccl_latency.steps_latency`; the token counts' ring all-gather,
    :func:`model.moe_kernels.counts_gather_seconds`): the placed group's members in one domain
    (:func:`model.terms.fields.axis_members`), or where the dispatcher crosses between its runs
    of 8 by the NIC (:func:`ep_dispatch_link`) the members of one run. An int, or ``[n, 1]``
    columns; 1 on an unknown link. Units: ranks."""
    if f.link("ep").bandwidth is None:
        return 1
    runs, g = _runs(c, f)
    placed = axis_members(c, f, "ep")
    return placed if runs is False else where(runs, g, placed)
