"""One RLHF role's cost under one option (:class:`~model.rlhf.roles.RoleOption`): the checks
every role shares, then the engine's (:func:`model.rlhf.engine.rollout_cost`) or a training or
scoring role's (:func:`model.rlhf.network.network_cost`). The rules and their sources are in
:mod:`model.rlhf.roles`."""

from __future__ import annotations

from trainplan.model.errors import InputError
from trainplan.model.estimate import host_rates
from trainplan.model.hardware import ClusterLinks, DeviceSpec
from trainplan.model.rlhf.actor_sync import with_actor_sync
from trainplan.model.rlhf.engine import rollout_cost
from trainplan.model.rlhf.network import network_cost
from trainplan.model.rlhf.roles import Evaluator, RoleCost, RoleOption
from trainplan.model.rlhf.spec import RLHFSpec, Role

__all__ = ["role_cost"]


def role_cost(
    spec: RLHFSpec,
    option: RoleOption,
    device: DeviceSpec,
    evaluate: Evaluator,
    links: ClusterLinks | None = None,
    cluster_gpus: int = 0,
    over_budget: bool = False,
) -> RoleCost:
    """The role's bytes per GPU, seconds per phase and host bytes under ``option``.

    ``links``, ``cluster_gpus``: the cluster's links and GPUs, which time the weight sync (the
    engine's broadcast on a pool of its own, the actor's gather and hand-over on a shared one:
    :mod:`model.rlhf.sync_time`); without links the sync takes no time.
    ``over_budget``: an engine whose budget holds no full-length sequence is returned as a cost
    that does not fit (``RoleCost.over_budget``; a tab shows why) instead of a LayoutError.

    Raises
    ------
    LayoutError
        Degrees the model does not allow (``evaluate()``'s rules; a rollout tp the KV heads do not
        allow); optimizer offload under a framework that cannot run CPU Adam alone (FSDP2,
        textbook: :func:`model.offload.check_offload`); an engine whose KV space holds no
        sequence at full length (unless ``over_budget``).
    InputError
        Offload on a frozen role; optimizer offload without the host-link and host-memory
        bandwidths (:func:`model.estimate.host_rates`), idle offload without the host link; a
        rollout without HBM bandwidth.
    """
    rs = spec.role(option.role)
    if option.offload == "optimizer" and not rs.trainable:
        raise InputError(f"offload: {rs.role} is frozen; only trainable roles have optimizer state")
    if option.offload == "idle" and rs.role is Role.ROLLOUT:
        raise InputError("offload: the engine already frees its memory after the rollout")
    if option.offload == "optimizer":
        host_rates(device)  # the one-line InputError naming the missing bandwidth
    elif option.offload == "idle" and not device.host_link_bytes_per_s:
        raise InputError(
            f"offload: {device.figures_from} has no host link figure for {device.name}"
        )
    if rs.role is Role.ROLLOUT:
        return rollout_cost(spec, rs, option, device, links, cluster_gpus, over_budget)
    cost = network_cost(spec, rs, option, device, evaluate)
    return with_actor_sync(spec, rs, option, device, links, cost)  # the actor's sync seconds
