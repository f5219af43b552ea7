"""Legality of the cost options that Megatron's own optimizer step alone reads
(``grad_clip_scaling``, ``loss_scaling``): one rule for a layout evaluated and for a search over
several frameworks, which keeps the frameworks that do not read them
(:func:`check_megatron_step_settings`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import Framework

__all__ = ["MEGATRON_STEP_SETTINGS", "megatron_step_settings_given", "check_megatron_step_settings"]

MEGATRON_STEP_SETTINGS: Mapping[str, str] = {
    "grad_clip_scaling": "Megatron-LM's clip before 3d87bfc1b7 of 2026-04, which scaled the "
    "gradients only above --clip-grad",
    "loss_scaling": "its FP16 optimizer's _unscale_main_grads_and_check_for_nan every step",
}
"""The cost options (:class:`model.timing.CostOptions` fields, whose defaults they are
compared with) read by Megatron's optimizer step alone (:func:`model.step_passes.step_pass_bytes`),
each with the code that reads it: ``grad_clip_scaling`` (:data:`model.step_passes.GRAD_CLIP_SCALINGS`; Megatron-LM
``megatron/core/optimizer/clip_grads.py`` ``clip_grad_norm_fp32`` before 3d87bfc1b7) and
``loss_scaling`` (:data:`model.step_passes.UNSCALE_BYTES`; Megatron-LM d98e8a64dd
``megatron/core/optimizer/optimizer.py`` ``MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan``).
The other profiles' clips and FP16 paths are their own code: PyTorch's ``clip_grads_with_norm_``
under torchtitan and DeepSpeed's ``unscale_and_clip_grads`` scale every step, DeepSpeed's
``BF16_Optimizer`` only above the limit whatever the key. Checked by
:func:`check_megatron_step_settings`."""


def megatron_step_settings_given(options: Any) -> tuple[tuple[str, str], ...]:
    """The settings of :data:`MEGATRON_STEP_SETTINGS` that ``options`` (a
    :class:`model.timing.CostOptions`) sets away from their defaults, as (name, value as the
    refusals show it) pairs: a string quoted, a flag ``true``.

    >>> from trainplan.model.timing import CostOptions
    >>> megatron_step_settings_given(CostOptions(grad_clip_scaling="above_limit", loss_scaling=True))
    (('grad_clip_scaling', "'above_limit'"), ('loss_scaling', 'true'))
    """
    defaults = {f.name: f.default for f in fields(options)}
    given = []
    for key in MEGATRON_STEP_SETTINGS:
        value = getattr(options, key)
        if value != defaults[key]:
            given.append((key, str(value).lower() if isinstance(value, bool) else repr(value)))
    return tuple(given)


def check_megatron_step_settings(
    options: Any, frameworks: Iterable[Any], what: str, distributed_optimizer: Any = None
) -> None:
    """Refuse a setting of :data:`MEGATRON_STEP_SETTINGS` given in ``options`` (a
    :class:`model.timing.CostOptions`) where nothing reads it: no framework of ``frameworks``
    (the one evaluated, or those a search covers) is ``megatron``, or the optimizer is Apex's
    ``DistributedFusedAdam`` (``distributed_optimizer`` ``distributed_fused_adam``, legal at
    ``megatron`` ZeRO-1 alone, :func:`model.frameworks.check_distributed_optimizer`), whose
    ``clip_grad_norm`` folds the clip coefficient and whose ``step`` folds the inverse loss scale
    into the step kernel's ``_grad_scale`` (Apex ``apex/contrib/optimizers/distributed_fused_adam.py``
    at 810ffae3, :data:`model.mechanisms.APEX_SOURCE`): no pass of its own for either
    (:func:`model.step_passes.step_pass_bytes` under ``apex``). One rule for an evaluated layout
    and a search: where some framework searched is ``megatron`` the others stay candidates (the
    setting describes the code the run uses; a layout that does not read it is not changed by
    it). ``what`` names the layouts in the message.

    Raises
    ------
    LayoutError
        One line naming the key, its value and the rule.

    >>> from trainplan.model.timing import CostOptions
    >>> clip = CostOptions(grad_clip_scaling="above_limit")
    >>> check_megatron_step_settings(clip, ["megatron", "fsdp2"], "megatron, fsdp2")
    >>> check_megatron_step_settings(clip, ["fsdp2"], "fsdp2")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: grad_clip_scaling: 'above_limit' is read by megatron only ...
    """
    frameworks = [str(fw) for fw in frameworks]
    apex = str(distributed_optimizer) == "distributed_fused_adam"
    for key, shown in megatron_step_settings_given(options):
        if Framework.MEGATRON not in frameworks:
            raise LayoutError(
                f"{key}: {shown} is read by megatron only ({MEGATRON_STEP_SETTINGS[key]}), "
                f"not {what}"
            )
        if apex:
            raise LayoutError(
                f"{key}: {shown} is not read under distributed_optimizer distributed_fused_adam "
                "(Apex's DistributedFusedAdam folds the clip coefficient and the loss scale into "
                "its step kernel's _grad_scale: no pass of its own); drop the setting"
            )
