"""The refusals of the one FP8 weight all-gather key, :attr:`model.specs.TrainingSpec.
fp8_param_gather` (:func:`check_fp8_param_gather`), read by :mod:`model.legality`; what the key
changes is :mod:`model.fp8_gathers`'."""

from __future__ import annotations

from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.precision import Fp8Recipe, fp8_recipe_of

__all__ = ["check_fp8_param_gather", "fp8_param_gather_rule"]


def check_fp8_param_gather(
    framework: str,
    fp8_param_gather: bool,
    recipe: Fp8Recipe | str | None = None,
    moe: bool = False,
    flat_parameters: bool = False,
    dp: int | None = None,
) -> None:
    """Refuse an FP8 weight all-gather (:attr:`model.specs.TrainingSpec.fp8_param_gather`) the
    profile does not run. ``megatron``: FP8 primary weights (Megatron-Core
    ``--fp8-param-gather``). ``fsdp2``: torchao's FP8 all-gather (:func:`model.fp8_gathers.
    fp8_param_gathers`) under ``tensorwise`` only (torchao ``Float8LinearConfig.__post_init__``:
    "enable_fsdp_float8_all_gather only supports tensorwise scaling granularity"; torchtitan
    6348d93d1^ ``Float8LinearConverter.__init__`` asserts it with a ``recipe_name``), at dp > 1
    (torchtitan turns it on only with ``parallel_dims.dp_shard_enabled``: at dp 1 it would
    silently gather nothing), not with ``flat_parameters`` (FSDP1 has no ``fsdp_pre_all_gather``
    hook) and, in this plan, for dense models only (``moe``: the experts would gather in BF16
    beside the FP8 linears, a split the memory does not make). DeepSpeed and the textbook keep
    BF16 working weights.

    Raises
    ------
    LayoutError
        ``fp8_param_gather`` with another profile; under ``fsdp2`` with another recipe, a MoE
        model, ``flat_parameters`` or dp 1.

    >>> check_fp8_param_gather("megatron", True), check_fp8_param_gather("fsdp2", True, "tensorwise")
    (None, None)
    """
    if not fp8_param_gather or str(framework) == "megatron":
        return
    used = fp8_recipe_of("fsdp2", recipe) if str(framework) == "fsdp2" else None
    if str(framework) != "fsdp2":
        problem = (
            f"FP8 weight all-gathers are Megatron-Core's (--fp8-param-gather) or torchao's under "
            f"fsdp2; {framework} gathers BF16 weights (use `framework` megatron or fsdp2)"
        )
    elif used is not Fp8Recipe.TENSORWISE:
        problem = (
            f"fsdp2 gathers FP8 weights (torchao enable_fsdp_float8_all_gather) under "
            f"fp8_recipe tensorwise only, not {used}"
        )
    elif dp is not None and dp <= 1:
        problem = (
            f"torchtitan gathers FP8 weights only where FSDP shards over dp (dp_shard_enabled), "
            f"not at dp {dp}"
        )
    elif flat_parameters:
        problem = (
            "torchao's FP8 all-gather is an FSDP2 (fully_shard) hook; flat_parameters (FSDP1) "
            "gathers BF16 weights"
        )
    elif moe:
        problem = (
            "under fsdp2 only dense models are modelled (torchao gathers the Float8Linear "
            "weights in FP8 and a MoE layer's experts in BF16)"
        )
    else:
        return
    raise LayoutError(f"fp8_param_gather: {problem}")


def fp8_param_gather_rule(s: Any, framework: Any, dp: int) -> None:
    """:func:`check_fp8_param_gather` of a :class:`model.legality.Setting` ``s`` (its training
    spec and architecture) at ``framework`` and ``dp``: the legality rule."""
    t, arch = s.training, s.model.arch
    moe = arch is not None and arch.moe is not None
    check_fp8_param_gather(framework, t.fp8_param_gather, t.fp8_recipe, moe, t.flat_parameters, dp)
