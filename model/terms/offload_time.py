"""The host-offload terms of a step: activation offload's copies (selective or whole-layer) and
the offloaded optimizer step, for the stage that finishes last. Read by
:func:`model.terms.step.pipeline_term` and :func:`model.terms.step.dp_term`."""

from __future__ import annotations

from typing import Any

from trainplan.model.activation_offload import activation_offload_seconds, layer_offload_seconds
from trainplan.model.layout import Recompute
from trainplan.model.memory import optimizer_elements
from trainplan.model.offload import host_rates, offload_seconds
from trainplan.model.terms.activation_fields import (
    CONTEXT_FIELDS,
    layer_figures,
    offload_figures,
)
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.stage_params import busiest_params
from trainplan.model.terms.traffic import (
    dp_mechanism,
    most_layers,
)
from trainplan.model.xp import as_float

__all__ = ["activation_offload_term", "offload_term"]


def activation_offload_term(c: Context, f: Fields, microbatch_s: Any) -> Any:
    """:func:`model.activation_offload.activation_offload_seconds` of the stage with the most
    layers (its dense layers the most layers less the most MoE layers of any stage), from the
    per-layer offloaded bytes (selective recomputation's figure or no recomputation's) and the
    time model's micro-batch on the slowest stage, ``microbatch_s``. 0 without activation
    offload.

    Raises
    ------
    InputError
        Activation offload on a device without a host-link figure.
    """
    if c.training.cpu_offloading_num_layers:
        return _layer_offload_term(c, f, microbatch_s)
    if not c.training.offload.activations:
        return 0.0
    link, _ = host_rates(c.gpu, need_memory=False)
    q = f.lookup(offload_figures, (c.arch, c.training), *CONTEXT_FIELDS)
    i = 1 if f.recompute is Recompute.SELECTIVE else 0
    most, most_moe = most_layers(c, f)
    return activation_offload_seconds(
        as_float(q[i]), as_float(q[4 + i]), most - most_moe, most_moe, microbatch_s, f.m, link
    )


def _layer_offload_term(c: Context, f: Fields, microbatch_s: Any) -> Any:
    """:func:`model.activation_offload.layer_offload_seconds` of whole-layer CPU offload
    (``cpu_offloading_num_layers``; pp = 1, dense layers, no recomputation), each layer moving
    its bytes without recomputation (:func:`model.stage_bytes.layer_figures`)."""
    link, _ = host_rates(c.gpu, need_memory=False)
    q = f.lookup(layer_figures, (c.arch, c.training), *CONTEXT_FIELDS)
    most, _ = most_layers(c, f)
    n = c.training.cpu_offloading_num_layers
    return layer_offload_seconds(as_float(q[0]), most, n, microbatch_s, f.m, link)


def offload_term(c: Context, f: Fields) -> Any:
    """:func:`model.offload.offload_seconds` of the stage with the most parameters (whose
    optimizer step finishes last). 0 without offload.

    Raises
    ------
    InputError
        Offload on a device without host-link or host-memory figures.
    """
    t = c.training
    if not t.offload.active:
        return 0.0
    link, memory = host_rates(c.gpu)
    dense, experts = busiest_params(c, f)
    mech = dp_mechanism(c, f)
    elements = optimizer_elements(mech, dense, experts, f.shard_degree, f.expert_shard_degree)
    return as_float(
        offload_seconds(mech, t.offload, elements, f.m, t.optimizer_bytes, link, memory)
    )
