"""The expert dispatcher's resident buffers on one GPU of a pipeline stage (DeepEP's normal
``Buffer`` and its workspace, across nodes its RDMA part as the NVSHMEM heap granules that hold
it and NVSHMEM's IBGDA queue pairs, :func:`model.nvshmem_heap.nvshmem_gpu_bytes`; HybridEP's
``HybridEPBuffer``, :func:`model.dispatch_buffers.hybridep_buffer_bytes`), a part of the
model-state term (:func:`model.terms.state.model_state_term`); and what the de-duplicating
dispatchers read of the layout besides (:func:`dispatch_tokens`,
:func:`ep_members_per_domain`), which the expert all-to-all's clocks read too.

Units: bytes on one GPU; tokens; ranks. Exact for one layout; element-wise over the search's
columns.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.dispatch_buffers import deepep_group_ranks, dispatch_buffer_bytes
from trainplan.model.frameworks import Framework
from trainplan.model.moe import DEEPEP_DISPATCH_CONFIGS
from trainplan.model.moe_dispatch import group_domain_ranks, kernel_members
from trainplan.model.moe_run import Dispatcher, MoERun, members_per_domain
from trainplan.model.pipeline import Schedule
from trainplan.model.terms.activation_fields import (
    LAYER_FIELDS,
    mirror_layer_counts,
    stage_layer_counts,
)
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.stage_params import any_dualpipe
from trainplan.model.xp import as_float, exact, where

__all__ = ["dispatch_buffer_term", "dispatch_tokens", "ep_members_per_domain"]


def dispatch_tokens(c: Context, f: Fields) -> Any:
    """Tokens one rank dispatches a micro-batch, ``(s/cp)·b``, ``/tp`` under sequence
    parallelism (the MoE layer's input rows on the rank: Megatron-Core's flex dispatcher
    flattens ``hidden_states`` to ``[-1, h]``, ``token_dispatcher.py`` ``dispatch_preprocess``)."""
    return exact(c.training.seq_len) / f.cp * f.micro_batch_size / where(f.sp, f.tp, 1)


def ep_members_per_domain(c: Context, f: Fields) -> Any:
    """Members of the expert-parallel group in each NVLink domain
    (:func:`model.moe_run.members_per_domain` of the ep link on the accelerator's domain) for a
    dispatcher that sends a token once per rank and once per remote domain
    (:attr:`model.moe_run.Dispatcher.deduplicates`, :func:`model.moe_dispatch.dispatch_copies`);
    0 otherwise (no distinct clocks added to the search's tables). Where the dispatcher's kernels
    reach fewer ranks over NVLink than the domain holds, the members of each run they do reach
    (:func:`model.moe_dispatch.kernel_members`: DeepEP's runs of 8 ranks of its group)."""
    run = c.training.moe_run
    if not run.dispatcher.deduplicates:
        return 0
    link = f.link("ep")
    domain = c.device.placement_domain if c.device is not None else None
    g = members_per_domain(link.nvlink, link.span, link.group_size, domain, link.per_domain)
    if run.dispatcher.nvlink_ranks is None:
        return g
    ranks = f.lookup_values(deepep_group_ranks, (), f.framework, f.ep, f.expert_tp)
    return f.lookup_values(kernel_members, (run,), g, f.ep, ranks)


def _dispatch_buffers(
    run: MoERun,
    hidden: int,
    ep: int,
    expert_tp: int,
    framework: str,
    experts: int = 0,
    tokens: float = 0.0,
    per_domain: int = 0,
) -> int:
    """:func:`model.dispatch_buffers.dispatch_buffer_bytes` of the framework's group
    (:func:`model.dispatch_buffers.deepep_group_ranks`, etp·ep ranks under Megatron-Core, whose
    members per domain are ``etp·per_domain`` of the ep group's, at most the group); 0 for a
    group DeepEP has no config for, which the legality rule ``moe_layout`` refuses (the
    search's columns of candidates not yet masked stay defined). DeepEP's workspace, the
    NVSHMEM heap's granules and its queue pairs under a physical profile only (``textbook``
    counts no library's own allocations or rounding: :attr:`model.frameworks.Framework.
    physical`)."""
    ranks = deepep_group_ranks(framework, ep, expert_tp)
    if run.dispatcher is Dispatcher.DEEPEP and ranks not in DEEPEP_DISPATCH_CONFIGS:
        return 0
    in_domain = group_domain_ranks(ranks, ep, int(per_domain))
    heap = Framework(framework).physical
    return dispatch_buffer_bytes(run, hidden, ranks, heap, tokens, experts // ep, in_domain)


def dispatch_buffer_term(c: Context, f: Fields) -> Any:
    """Bytes of the expert dispatcher's resident buffers on one GPU of stage ``f.stage``:
    :func:`model.dispatch_buffers.dispatch_buffer_bytes` (DeepEP's normal ``Buffer`` under
    ``moe_dispatcher = deepep``, HybridEP's ``HybridEPBuffer`` under ``hybridep``, for
    :func:`dispatch_tokens` a rank and :func:`ep_members_per_domain`, a group of more than one
    rank) where the stage holds MoE layers (the buffer is made on the first dispatch:
    Megatron-Core ``moe/fused_a2a.py`` ``get_buffer``, ``HybridEPDispatch.forward``), under
    DualPipe where either of the rank's two stages does; 0 otherwise."""
    arch, run = c.model.arch, c.training.moe_run
    if arch is None or arch.moe is None or run.dispatcher is Dispatcher.ALLTOALL:
        return 0
    _, moe = f.per_stage(stage_layer_counts, (arch,), *LAYER_FIELDS)
    if any_dualpipe(f):
        _, mirror = f.per_stage(mirror_layer_counts, (arch,), *LAYER_FIELDS)
        moe = moe + where(f.schedule == Schedule.DUALPIPE, mirror, 0)
    tokens: Any = 0.0
    g: Any = 0
    if run.dispatcher is Dispatcher.HYBRIDEP:
        tokens = as_float(dispatch_tokens(c, f))
        g = ep_members_per_domain(c, f)
    experts = arch.moe.num_experts
    args = (run, arch.hidden_size)
    buffers = f.lookup_values(
        _dispatch_buffers, args, f.ep, f.expert_tp, f.framework, experts, tokens, g
    )
    return where(moe > 0, buffers, 0)
