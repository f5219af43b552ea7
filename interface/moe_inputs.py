"""The MoE routing and dispatch inputs (``moe_*``): parsed into :class:`model.moe_run.MoERun`,
refused where they do not apply (:func:`model.moe_rules.moe_run_violation`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainplan.interface.time_inputs import bool_param
from trainplan.model.errors import InputError
from trainplan.model.model_spec import ModelSpec
from trainplan.model.moe_rules import moe_run_violation
from trainplan.model.moe_run import (
    DROPLESS,
    Dispatcher,
    EpOverlap,
    MoERun,
)
from trainplan.model.units import parse_count, parse_number

__all__ = ["MOE_KEYS", "DISPATCHERS", "EP_OVERLAPS", "moe_run_of"]

MOE_KEYS = (
    "moe_capacity_factor",
    "moe_pad_to_capacity",
    "moe_imbalance",
    "moe_node_limit",
    "moe_dispatcher",
    "moe_ep_overlap",
)
"""The parameters of :class:`model.moe_run.MoERun` (evaluate/search/frontier options, scenario
``[cluster]`` keys, API fields)."""

DISPATCHERS = tuple(d.value for d in Dispatcher)
EP_OVERLAPS = tuple(o.value for o in EpOverlap)


def _choice(params: Mapping[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = str(params.get(key, default))
    value = next((a for a in allowed if a == value.lower()), value)  # in any case, as click's
    if value not in allowed:
        raise InputError(f"{key}: {value!r} is not one of {', '.join(allowed)}")
    return value


def moe_run_of(params: Mapping[str, Any], model: ModelSpec, framework: str) -> MoERun:
    """The :class:`model.moe_run.MoERun` of ``params``' ``moe_*`` keys (:data:`DROPLESS` when
    none is given).

    Raises
    ------
    InputError
        A value of the wrong kind, or a choice that does not apply to the model or the
        framework profile (:func:`model.moe_rules.moe_run_violation`), one line naming it.
    """
    given = [k for k in MOE_KEYS if params.get(k) is not None]
    if not given:
        return DROPLESS
    cf = params.get("moe_capacity_factor")
    limit = params.get("moe_node_limit")
    run = MoERun(
        capacity_factor=None if cf is None else parse_number(cf, "moe_capacity_factor"),
        pad_to_capacity=bool_param(params, "moe_pad_to_capacity", False),
        imbalance=parse_number(params.get("moe_imbalance", 1), "moe_imbalance"),
        node_limit=None if limit is None else parse_count(limit, "moe_node_limit"),
        dispatcher=Dispatcher(_choice(params, "moe_dispatcher", DISPATCHERS, "alltoall")),
        ep_overlap=EpOverlap(_choice(params, "moe_ep_overlap", EP_OVERLAPS, "none")),
    )
    arch = model.arch
    moe = None if arch is None else arch.moe
    if moe is None:
        raise InputError(
            f"{given[0]}: routing and dispatch options apply to a model with MoE layers; "
            "this has none"
        )
    schedule = params.get("schedule")
    shared = moe.num_shared_experts > 0
    problem = moe_run_violation(run, str(framework), True, shared, schedule and str(schedule))
    if problem is not None:
        raise InputError(problem)
    return run
