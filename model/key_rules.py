"""Legality of recipe keys that only some frameworks, ZeRO stages or pipeline layouts read.

A key given where nothing reads it is refused (one line naming the key, the value and the rule)
rather than silently dropped. The rules are per framework and ZeRO stage, so a search over a
space some of whose frameworks cannot take the key keeps the others
(:data:`model.legality.RULES`, ``optimizer/tables.py`` ``_legal``). The pipeline send options
(:class:`model.timing.CostOptions` ``p2p_*``) are read only by Megatron-Core's interleaved
schedule (:func:`model.comm.p2p_overlapped`, :func:`model.comm.p2p_waiting_sends`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.loss_memory import check_cross_entropy_fusion
from trainplan.model.moe_rules import check_deepspeed_moe
from trainplan.model.precision import check_framework_fp8_recipe

__all__ = [
    "P2P_DEFAULTS",
    "p2p_given",
    "check_stage_keys",
    "check_p2p_options",
    "check_framework_recipe",
]

P2P_DEFAULTS: Mapping[str, bool] = {
    "p2p_overlap": True,
    "p2p_warmup_flush": False,
    "p2p_forward_send_wait": True,
}
"""The pipeline send options' defaults (:class:`model.timing.CostOptions` fields)."""


def p2p_given(options: Any) -> tuple[tuple[str, bool], ...]:
    """The pipeline send options of ``options`` (a :class:`model.timing.CostOptions`, or None)
    set away from their defaults, as (name, value) pairs: what :func:`check_p2p_options` reads.

    >>> from trainplan.model.timing import CostOptions
    >>> p2p_given(CostOptions(p2p_overlap=False)), p2p_given(None)
    ((('p2p_overlap', False),), ())
    """
    if options is None:
        return ()
    values = ((k, bool(getattr(options, k))) for k in P2P_DEFAULTS)
    return tuple((k, v) for k, v in values if v != P2P_DEFAULTS[k])


def check_stage_keys(framework: Any, zero_stage: int, training: Any) -> None:
    """Refuse ``fsdp_double_buffer`` outside ``megatron`` ZeRO-3 (Megatron-FSDP's
    ``FixedPoolAllocator``, Megatron-LM ``megatron_fsdp/param_and_grad_buffer.py``) and
    ``deepspeed_overlap_comm`` outside ``deepspeed`` ZeRO-1/2 (DeepSpeed ``zero/config.py``
    ``overlap_comm_valid``: ZeRO-3 turns it on itself; the other profiles have no such key).

    Raises
    ------
    LayoutError
        One line naming the key, its value and where it is read.

    Examples
    --------
    >>> from trainplan.model.specs import TrainingSpec
    >>> t = TrainingSpec(seq_len=8, global_batch_size=8, fsdp_double_buffer=True)
    >>> check_stage_keys("megatron", 3, t)
    """
    fw = str(framework)
    if training.fsdp_double_buffer and not (fw == "megatron" and zero_stage == 3):
        raise LayoutError(
            "fsdp_double_buffer: true is read by Megatron-FSDP only (`framework` megatron with "
            f"zero_stage 3), not {fw} zero_stage {zero_stage}"
        )
    if training.deepspeed_overlap_comm and not (fw == "deepspeed" and zero_stage in (1, 2)):
        raise LayoutError(
            "deepspeed_overlap_comm: true is read by DeepSpeed ZeRO-1/2 only (`framework` "
            f"deepspeed with zero_stage 1 or 2), not {fw} zero_stage {zero_stage}"
        )


def check_p2p_options(given: tuple[tuple[str, bool], ...], framework: Any, pp: int, v: int) -> None:
    """Refuse pipeline send options (``given``: :func:`p2p_given`) that nothing reads or that
    Megatron-LM refuses: any of them off its default under a profile other than ``megatron``
    (only Megatron-Core's interleaved schedule reads them, :func:`model.comm.p2p_overlapped`);
    ``p2p_overlap`` false with virtual stages at pp 2 (Megatron-LM
    ``megatron/training/arguments.py`` ``validate_args``: interleaving without
    ``overlap_p2p_comm`` asserts ``pipeline_model_parallel_size > 2``, since at pp 2 both
    neighbours are one rank and its batched sends would pair wrongly).

    Raises
    ------
    LayoutError
        One line naming the key, its value and the rule.

    Examples
    --------
    >>> off = (("p2p_overlap", False),)
    >>> check_p2p_options(off, "megatron", 4, 2)
    """
    for key, value in given:
        if str(framework) != "megatron":
            raise LayoutError(
                f"{key}: {str(value).lower()} is read by Megatron-Core's interleaved schedule "
                f"only (`framework` megatron), not {framework}"
            )
    if ("p2p_overlap", False) in given and v > 1 and pp == 2:
        raise LayoutError(
            f"p2p_overlap: false with virtual stages (v {v}) needs pp > 2, not pp {pp} "
            "(Megatron-LM validate_args); use p2p_overlap true or pp ≥ 3"
        )


def check_framework_recipe(framework: Any, zero_stage: int, training: Any, arch: Any) -> None:
    """The recipe's choices that one framework and ZeRO stage can or cannot run, each its
    own rule: Megatron-Core's fused loss (:func:`model.loss_memory.check_cross_entropy_fusion`),
    the stage-only keys (:func:`check_stage_keys`), torchao's FP8 recipes under fsdp2
    (:func:`model.precision.check_framework_fp8_recipe`) and DeepSpeed's native MoE below ZeRO-3
    (:func:`model.moe_rules.check_deepspeed_moe`; ``arch`` None: a size-only model).

    Raises
    ------
    LayoutError
        The first rule broken, one line.
    """
    check_cross_entropy_fusion(framework, training.cross_entropy_fusion_impl)
    check_stage_keys(framework, zero_stage, training)
    check_framework_fp8_recipe(framework, training.fp8_recipe)
    check_deepspeed_moe(framework, zero_stage, arch is not None and arch.moe is not None)
