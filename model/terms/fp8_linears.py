"""The FP8 side of one GPU's model state: which linear weights FP8 caches and FP8 primary
weights cover, and how much narrower FSDP2's largest gathered unit is under torchao's FP8
all-gather (read by :func:`model.terms.state.model_state_term` and the all-gather stream's pool,
:func:`model.terms.peak.stream_pool_term`)."""

from __future__ import annotations

from typing import Any

from trainplan.model.fp8_gathers import fp8_gathered_experts, fp8_param_gathers
from trainplan.model.frameworks import Framework
from trainplan.model.memory import fp8_unit_cut
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.stage_params import (
    fp8_gather_units_per_gpu,
    linear_per_gpu,
    linear_split_per_gpu,
)

__all__ = ["fp8_linears", "fsdp2_fp8_cut"]


def fp8_linears(c: Context, f: Fields, cache_bytes: Any) -> tuple[Any, Any]:
    """The linear weights' elements on one GPU of stage ``f.stage`` and in one layer unit that
    FP8 caches or FP8 primary weights cover (:func:`model.terms.stage_params.linear_per_gpu`;
    0, 0 without either); under torchao's FP8 all-gather the dense linears only, the routed
    experts gathering BF16 (:func:`model.fp8_gathers.fp8_gathered_experts`,
    :func:`model.terms.stage_params.linear_split_per_gpu`)."""
    t = c.training
    if not (cache_bytes or t.fp8_param_gather):
        return 0, 0
    linear, layer_linear = linear_per_gpu(c, f)
    if t.fp8_param_gather and not fp8_gathered_experts(f.framework):
        linear = linear_split_per_gpu(c, f)[0]
    return linear, layer_linear


def fsdp2_fp8_cut(c: Context, f: Fields) -> Any:
    """Under ``fsdp2`` with torchao's FP8 all-gather (:func:`model.fp8_gathers.fp8_param_gathers`)
    the bytes its largest gathered unit on one GPU of stage ``f.stage`` is narrower (:func:`model.
    memory.fp8_unit_cut` of :func:`model.terms.stage_params.fp8_gather_units_per_gpu`; routed
    experts at the weight bytes); None elsewhere. Read by the gathered weights and the
    all-gather stream's pool (:func:`model.terms.peak.stream_pool_term`)."""
    t = c.training
    if Framework(f.framework) is not Framework.FSDP2 or not fp8_param_gathers(
        f.framework, t.precision, t.fp8_recipe, t.fp8_param_gather
    ):
        return None
    return fp8_unit_cut(t.weight_bytes, *fp8_gather_units_per_gpu(c, f))
