"""The actor's side of the weight sync's seconds (:mod:`model.rlhf.sync_time` has the rules and
their sources): :func:`actor_sync_seconds` times the actor's gather and its whole sync to an
engine on its pool under its option; :func:`with_actor_sync` puts them, and their terms, on its
cost (:func:`model.rlhf.costs.role_cost`, after :func:`model.rlhf.network.network_cost`)."""

from __future__ import annotations

from dataclasses import replace

from trainplan.model.frameworks import Framework
from trainplan.model.hardware import ClusterLinks, DeviceSpec
from trainplan.model.op_rates import deployed_params
from trainplan.model.rlhf.engine import sync_weights_bytes
from trainplan.model.rlhf.roles import RoleCost, RoleOption, Term
from trainplan.model.rlhf.spec import RLHFSpec, Role, RoleSpec
from trainplan.model.rlhf.sync_time import (
    SYNC_SOURCE,
    gather_seconds,
    parameter_tensors,
    shared_sync_seconds,
)

__all__ = ["actor_sync_seconds", "with_actor_sync"]


def actor_sync_seconds(
    spec: RLHFSpec, rs: RoleSpec, opt: RoleOption, device: DeviceSpec, links: ClusterLinks | None
) -> tuple[float, float]:
    """The actor's :attr:`~model.rlhf.roles.RoleCost.sync_gather_s` and
    :attr:`~model.rlhf.roles.RoleCost.sync_shared_s` under ``opt`` over ``links``
    (:func:`model.rlhf.sync_time.gather_seconds`, :func:`model.rlhf.sync_time.
    shared_sync_seconds`, of the policy's parameters, :func:`model.rlhf.engine.
    sync_weights_bytes` ÷ 2, and tensors: :func:`model.rlhf.sync_time.parameter_tensors`, each
    routed expert's apart for Megatron's gather); ``(0, 0)`` for the other roles or without
    links."""
    if links is None or rs.role is not Role.ACTOR:
        return 0.0, 0.0
    arch = rs.model.arch
    assert arch is not None
    params, tensors = int(sync_weights_bytes(rs) / 2), parameter_tensors(arch)
    p = deployed_params(device.part)
    zero = spec.zero_stage or 1
    fw = spec.framework
    # Megatron's export gathers each routed expert's parameter apart, stacked or not
    exported = parameter_tensors(arch, per_expert=True) if fw is Framework.MEGATRON else tensors
    gather = gather_seconds(fw, params, exported, opt.dp, opt.tp, opt.pp, zero, links, p)
    hbm = device.hbm_bytes_per_s
    assert hbm is not None
    return gather, shared_sync_seconds(fw, gather, params, tensors, opt.gpus, links, p, hbm)


def _sync_time_terms(gather_s: float, shared_s: float) -> tuple[Term, ...]:
    """The actor's weight-sync seconds as terms, each listed on the pools that count it
    (:func:`model.rlhf.split.counted_terms`): the whole sync beside the engine (``ipc``), the
    gather before the broadcast on a pool without it (``send``)."""
    return (
        Term("weight sync to the engine on its pool (gather + hand-over, one tensor at a time)",
             "rollout", shared_s, "s", SYNC_SOURCE, "ipc"),
        Term("weight gather before the broadcast to an engine apart (one tensor at a time)",
             "rollout", gather_s, "s", SYNC_SOURCE, "send"),
    )  # fmt: skip


def with_actor_sync(
    spec: RLHFSpec,
    rs: RoleSpec,
    opt: RoleOption,
    device: DeviceSpec,
    links: ClusterLinks | None,
    cost: RoleCost,
) -> RoleCost:
    """``cost`` with the actor's :func:`actor_sync_seconds` and their terms (:func:`_sync_time_terms`);
    ``cost`` itself for the other roles or without links."""
    gather_s, shared_s = actor_sync_seconds(spec, rs, opt, device, links)
    if not (gather_s or shared_s):
        return cost
    terms = cost.terms + _sync_time_terms(gather_s, shared_s)
    return replace(cost, sync_gather_s=gather_s, sync_shared_s=shared_s, terms=terms)
