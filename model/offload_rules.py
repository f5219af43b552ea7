"""The offload rules of a layout (:func:`check_offload_rules`, the legality rule ``offload``):
each framework's mechanism (:func:`model.offload.check_offload`) and where Megatron-LM runs its
optimizer offload (``--optimizer-cpu-offload``), the layouts and recipes it refuses, read from
NVIDIA/Megatron-LM d98e8a6:

* ``megatron/training/arguments.py`` ``validate_args``: "The optimizer cpu offload must be used
  in conjunction with `--use-precision-aware-optimizer`" (``HybridDeviceOptimizer`` reuses that
  path), and with ``--fp8-param-gather`` it "must be used in conjunction with `--fp8-recipe
  delayed`".
* ``megatron/core/optimizer/__init__.py`` ``get_megatron_optimizer``: outside Megatron-FSDP,
  ``--use-precision-aware-optimizer`` without the distributed optimizer raises "only supported
  with distributed optimizer" — so ZeRO-0 (DDP) cannot offload; ZeRO-1 is the distributed
  optimizer (Megatron-FSDP, ZeRO-3, is refused by :func:`model.offload.check_offload`).
* ``megatron/core/optimizer/optimizer_config.py`` ``OptimizerConfig.__post_init__``:
  ``--use-precision-aware-optimizer`` asserts ``optimizer == 'adam'`` ("only supported with
  adam"): Lion, Muon and SOAP do not offload.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import Framework
from trainplan.model.offload import check_offload
from trainplan.model.precision import Fp8Recipe, fp8_recipe_of
from trainplan.model.specs import TrainingSpec

__all__ = ["check_offload_rules", "check_megatron_optimizer_offload"]


def check_offload_rules(
    framework: Any, zero_stage: int, optimizer: Any, training: TrainingSpec
) -> None:
    """The recipe's offload (``training.offload``) runs under ``framework`` at ``zero_stage``
    with ``optimizer`` (:func:`model.offload.check_offload`, then
    :func:`check_megatron_optimizer_offload` with the recipe's FP8 primary weights and recipe).

    Raises
    ------
    LayoutError
        The first rule broken, one line naming the parameter, its value and the rule.
    """
    check_offload(framework, zero_stage, training.offload)
    fp8 = (training.fp8_param_gather, training.fp8_recipe)
    check_megatron_optimizer_offload(
        framework, zero_stage, optimizer, training.offload.optimizer, *fp8
    )


def check_megatron_optimizer_offload(
    framework: Any,
    zero_stage: int,
    optimizer: Any,
    fraction: Fraction | float,
    fp8_param_gather: bool = False,
    fp8_recipe: Any = None,
) -> None:
    """Refuse an optimizer offload (``fraction`` > 0 of the state, 0-1) Megatron-LM cannot run
    under ``framework`` megatron: with an optimizer other than Adam, with FP8 primary weights
    (``fp8_param_gather``) under an FP8 recipe other than delayed (``fp8_recipe``; None:
    Megatron-Core's default, delayed), or at ZeRO-0 — in that order, the rules of every stage
    first. Other frameworks: nothing checked.

    Raises
    ------
    LayoutError
        One line naming ``offload_optimizer``, its value and the rule (module docstring).

    Examples
    --------
    >>> check_megatron_optimizer_offload("megatron", 1, "adam", 1)
    >>> check_megatron_optimizer_offload("megatron", 0, "adam", 0)
    >>> try:
    ...     check_megatron_optimizer_offload("megatron", 0, "adam", 1)
    ... except LayoutError as err:
    ...     print(str(err)[:72])
    offload_optimizer: 1 under framework megatron needs zero_stage 1 (the di
    """
    if Framework(str(framework)) is not Framework.MEGATRON or not fraction:
        return
    head = f"offload_optimizer: {float(fraction):g} under framework megatron"
    # the rules that hold at every ZeRO stage first: a search that finds no legal layout tells
    # the first stage's reason (optimizer.tables.illegal_reason), ZeRO-0's for megatron
    if str(optimizer) != "adam":
        raise LayoutError(
            f"{head} needs optimizer adam, not {optimizer}: --optimizer-cpu-offload needs "
            "--use-precision-aware-optimizer, which OptimizerConfig allows with adam only"
        )
    recipe = fp8_recipe_of("megatron", fp8_recipe)
    if fp8_param_gather and recipe is not Fp8Recipe.DELAYED:
        raise LayoutError(
            f"{head} with fp8_param_gather needs fp8_recipe delayed, not {recipe} "
            "(Megatron-LM validate_args)"
        )
    if zero_stage == 0:
        raise LayoutError(
            f"{head} needs zero_stage 1 (the distributed optimizer), not 0: "
            "--optimizer-cpu-offload needs --use-precision-aware-optimizer (validate_args), "
            "which runs only with the distributed optimizer (get_megatron_optimizer)"
        )
