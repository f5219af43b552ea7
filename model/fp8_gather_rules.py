"""The refusals of the one FP8 weight all-gather key, :attr:`model.specs.TrainingSpec.
fp8_param_gather` (:func:`check_fp8_param_gather`), read by :mod:`model.legality`; what the key
changes is :mod:`model.fp8_gathers`'."""

from __future__ import annotations

from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.precision import Fp8Recipe, fp8_recipe_of

__all__ = ["DP_SHARD_SOURCE", "check_fp8_param_gather", "fp8_param_gather_rule"]

DP_SHARD_SOURCE = (
    "torchtitan 1ea5d511f (6348d93d1^) torchtitan/components/quantization/float8.py "
    "Float8LinearConverter.__init__ (enable_fsdp_float8_all_gather = "
    "parallel_dims.dp_shard_enabled and ...); torchtitan/distributed/parallel_dims.py "
    "dp_shard_enabled (dp_shard > 1), fsdp_enabled (dp_shard_enabled or cp_enabled), the "
    '"fsdp" mesh of dp_shard * cp ranks; torchtitan/models/llama3/parallelize.py and '
    'llama4/parallelize.py apply_fsdp (fully_shard on get_mesh(["fsdp"]))'
)
"""Where torchtitan shards with FSDP2 and where it turns torchao's FP8 all-gather on."""


def check_fp8_param_gather(
    framework: str,
    fp8_param_gather: bool,
    recipe: Fp8Recipe | str | None = None,
    flat_parameters: bool = False,
    dp: int | None = None,
    cp: int = 1,
) -> None:
    """Refuse an FP8 weight all-gather (:attr:`model.specs.TrainingSpec.fp8_param_gather`) the
    profile does not run. ``megatron``: FP8 primary weights (Megatron-Core
    ``--fp8-param-gather``). ``fsdp2``: torchao's FP8 all-gather (:func:`model.fp8_gathers.
    fp8_param_gathers`) under ``tensorwise`` only (torchao ``Float8LinearConfig.__post_init__``:
    "enable_fsdp_float8_all_gather only supports tensorwise scaling granularity"; torchtitan
    6348d93d1^ ``Float8LinearConverter.__init__`` asserts it with a ``recipe_name``), at dp > 1
    and not with ``flat_parameters`` (FSDP1 has no ``fsdp_pre_all_gather`` hook). DeepSpeed and
    the textbook keep BF16 working weights.

    dp 1 (:data:`DP_SHARD_SOURCE`): torchtitan shards the parameters over its ``fsdp`` mesh,
    dp_shard × cp ranks (FSDP on whenever ``dp_shard > 1 or cp > 1``), but passes
    ``enable_fsdp_float8_all_gather`` to torchao only where ``dp_shard > 1``: at dp 1 with
    cp > 1 FSDP still gathers every weight over the cp ranks, in BF16, and the key would be
    silently dropped; at dp 1, cp 1 nothing is gathered.

    MoE models are accepted: torchtitan's ``Float8LinearConverter`` swaps the ``nn.Linear``
    modules (attention, dense FFN, shared experts; its DeepSeek-V3 float8 config filters
    ``lm_head`` and ``router.gate``), whose weights gather in FP8, while the routed experts
    (``GroupedExperts``, plain parameters in the same ``fully_shard`` unit) gather in BF16
    (:func:`model.fp8_gathers.fp8_gathered_experts`; the bytes split by
    :func:`model.terms.traffic.fp8_gathered_params` and :func:`model.terms.stage_params.
    fp8_gather_units`).

    Raises
    ------
    LayoutError
        ``fp8_param_gather`` with another profile; under ``fsdp2`` with another recipe,
        ``flat_parameters`` or dp 1 (``cp`` only names the cp ranks FSDP shards over there).

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
    else:
        problem = _fsdp2_problem(used, dp, cp, flat_parameters)
    if problem:
        raise LayoutError(f"fp8_param_gather: {problem}")


def _fsdp2_problem(used: Fp8Recipe | None, dp: int | None, cp: int, flat: bool) -> str:
    """Why ``fsdp2`` does not gather FP8 weights here, or "" (:func:`check_fp8_param_gather`)."""
    if used is not Fp8Recipe.TENSORWISE:
        return (
            f"fsdp2 gathers FP8 weights (torchao enable_fsdp_float8_all_gather) under "
            f"fp8_recipe tensorwise only, not {used}"
        )
    if dp is not None and dp <= 1:
        beside = (
            f" (FSDP shards over the {cp} cp ranks there and gathers BF16 weights)"
            if cp > 1
            else ""
        )
        return (
            f"torchtitan turns torchao's FP8 all-gather on only at dp_shard > 1 "
            f"(parallel_dims.dp_shard_enabled), not at dp {dp}{beside}"
        )
    if flat:
        return (
            "torchao's FP8 all-gather is an FSDP2 (fully_shard) hook; flat_parameters (FSDP1) "
            "gathers BF16 weights"
        )
    return ""


def fp8_param_gather_rule(s: Any, framework: Any, dp: int, cp: int) -> None:
    """:func:`check_fp8_param_gather` of a :class:`model.legality.Setting` ``s`` (its training
    spec) at ``framework``, ``dp`` and ``cp``: the legality rule."""
    t = s.training
    check_fp8_param_gather(framework, t.fp8_param_gather, t.fp8_recipe, t.flat_parameters, dp, cp)
