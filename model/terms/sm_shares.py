"""The ``φ`` of the communication kernels that run beside computation, per process group as
the topology placed it (:mod:`model.comm_sms` has the measured rule and the sources): NCCL's
collectives by the blocks of the algorithm NCCL runs them as
(:func:`model.nccl_channels.group_blocks`), and the expert dispatcher's. Read by the
data-parallel term (:func:`model.terms.dp_time.dp_group_times`), the layers' clocks
(:func:`model.terms.roofline.stage_parts_term`: the tensor-parallel collectives and the expert
all-to-all) and DualPipe's block (:func:`model.terms.step.pipeline_term`)."""

from __future__ import annotations

from typing import Any

from trainplan.model.comm_sms import NCCL_DISPATCHERS, collective_sm_share, dispatcher_sm_share
from trainplan.model.moe_run import Dispatcher
from trainplan.model.nccl_channels import NcclKernel
from trainplan.model.nccl_search import nvlink_node
from trainplan.model.rank_groups import nccl_node_size
from trainplan.model.terms.fields import Context, Fields, world_ranks
from trainplan.model.terms.traffic import dp_mechanism
from trainplan.model.xp import where

__all__ = ["group_sm_share", "dp_kind", "tp_sm_share_of", "ep_sm_share", "layout_sm_shares"]


def group_sm_share(c: Context, f: Fields, axis: str, kind: NcclKernel) -> Any:
    """:func:`model.comm_sms.collective_sm_share` of an NCCL collective of ``kind`` over
    ``axis``'s group as the topology placed it (its size, span and whether it lies in one
    NVLink domain; one NIC's bandwidth across domains; NCCL's node,
    :func:`model.rank_groups.nccl_node_size`: the NVLink clique on a multi-node NVLink domain;
    the layout's dp·tp·pp·cp ranks, so only groups that exist are placed): ``φ`` by the blocks of the algorithm NCCL
    runs it as (:func:`model.nccl_channels.group_blocks`). 0 at degree 1 or with
    ``nccl_sm_charge`` off. Element-wise over the search's columns.

    Scope: ``axis``'s link (and the context's accelerator and cost options)."""
    link, d, o = f.link(axis), c.gpu, c.options
    nic = where(link.nvlink, 0.0, link.bandwidth if link.bandwidth is not None else 0.0)
    node = nvlink_node(d.part, d.nvlink_bytes_per_s)
    args = (str(kind), d.part, o.nccl_sm_charge, o.nccl_nvls)
    return f.lookup_values(
        collective_sm_share, args, link.group_size, link.span,
        nccl_node_size(d.gpus_per_node, d.placement_domain), world_ranks(f), link.nvlink, nic,
        node,
    )  # fmt: skip


def dp_kind(mech: Any) -> NcclKernel:
    """What NCCL runs a data-parallel mechanism's collectives as: its gradient all-reduce (DDP,
    ``Mechanism.all_reduce``: no gathers beside it) as an all-reduce; reduce-scatters,
    all-gathers and per-rank reduces as rings."""
    return NcclKernel.ALL_REDUCE if getattr(mech, "all_reduce", False) else NcclKernel.RING


def tp_sm_share_of(c: Context, f: Fields) -> Any:
    """``φ`` of the tensor-parallel group's NCCL collectives (the layer clock's
    :attr:`model.op_time.Clock.nccl_sm_share`): reduce-scatters and all-gathers on the ring's
    blocks under sequence parallelism, all-reduces (NVLS where the group has it) without
    (:func:`group_sm_share`). Scope: tp, sp and the tp link."""
    ring = group_sm_share(c, f, "tp", NcclKernel.RING)
    reduce = group_sm_share(c, f, "tp", NcclKernel.ALL_REDUCE)
    return where(f.sp, ring, reduce)


def ep_sm_share(c: Context, f: Fields) -> Any:
    """``φ`` of the run's dispatcher on its part: the SMs an overlapped expert all-to-all takes
    from the computation beside it (0 without MoE). DeepEP's and HybridEP's own kernels
    (:func:`model.comm_sms.dispatcher_sm_share`; HybridEP's by whether the expert-parallel
    group's link is NVLink: the group in one NVLink domain, 24 SMs, else 8); NCCL's all-to-all
    its send/recv blocks over the expert-parallel group (:func:`group_sm_share`, under
    :class:`model.timing.CostOptions` ``nccl_sm_charge`` only).

    Scope: the context (the recipe's dispatcher, the accelerator and the cost options) and,
    under HybridEP and NCCL's all-to-all, the ep link."""
    if c.arch.moe is None:
        return 0.0
    run = c.training.moe_run
    if str(run.dispatcher) in NCCL_DISPATCHERS:
        return group_sm_share(c, f, "ep", NcclKernel.SEND_RECV)
    if run.dispatcher is not Dispatcher.HYBRIDEP:
        return dispatcher_sm_share(str(run.dispatcher), c.gpu.part)
    one = dispatcher_sm_share(str(run.dispatcher), c.gpu.part, True)
    several = dispatcher_sm_share(str(run.dispatcher), c.gpu.part, False)
    return where(f.link("ep").nvlink, one, several)


def layout_sm_shares(c: Context, f: Fields) -> tuple[tuple[str, float], ...]:
    """``(group, φ)`` of each group of one layout whose overlapped NCCL collectives the step
    charges (the dense dp·cp group, tp, NCCL's all-to-all over ep), those above 0: what the
    assumptions line reports (:class:`model.estimate.TimeTerms`)."""
    shares = [("dp", group_sm_share(c, f, "dp", dp_kind(dp_mechanism(c, f))))]
    shares.append(("tp", tp_sm_share_of(c, f)))
    if c.arch.moe is not None and str(c.training.moe_run.dispatcher) in NCCL_DISPATCHERS:
        shares.append(("ep", ep_sm_share(c, f)))
    return tuple((group, float(phi)) for group, phi in shares if phi)
