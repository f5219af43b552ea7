"""The tensor-parallel overlap mechanisms (:class:`TpOverlap`), which framework profile runs
which (:data:`TP_OVERLAP_FRAMEWORKS`), the default a layout runs (:func:`tp_overlap_for`) and the
rule that refuses one a framework or FP8 recipe cannot run (:func:`check_tp_overlap`); what each
does to a layer's collectives is :mod:`model.layer_time`'s, what it does to the GEMMs
:mod:`model.op_time`'s and :mod:`model.userbuffers_gemm`'s."""

from __future__ import annotations

from enum import StrEnum

from trainplan.model.errors import InputError

__all__ = ["TpOverlap", "TP_OVERLAP_FRAMEWORKS", "tp_overlap_for", "check_tp_overlap"]


class TpOverlap(StrEnum):
    """How tensor-parallel collectives overlap GEMMs (see the module docstring)."""

    NONE = "none"
    ASYNC = "async"
    FULL = "full"
    ASYNC_TP = "async-tp"


TP_OVERLAP_FRAMEWORKS: dict[TpOverlap, tuple[str, ...]] = {
    TpOverlap.FULL: ("megatron", "textbook"),
    TpOverlap.ASYNC_TP: ("fsdp2",),
}
"""The framework profiles that run a tensor-parallel overlap mechanism (the others run under
every profile): Transformer Engine's userbuffers (``full``) under Megatron-Core
(``--tp-comm-overlap``, :mod:`model.terms.userbuffers`), not under ``deepspeed``:
Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed f4157bea) has no ``--tp-comm-overlap``
argument (``megatron/arguments.py``) and never calls Transformer Engine's ``initialize_ub``, so
its TE layers run without userbuffers; torchtitan's async TP (``async-tp``) only in torchtitan, the
``fsdp2`` profile (``torchtitan/distributed/compile.py`` ``_maybe_enable_async_tp``)."""


def tp_overlap_for(
    framework: str, overlap: TpOverlap | str | None, gathered_inputs: bool = True
) -> TpOverlap:
    """The tensor-parallel overlap a layout runs: ``overlap`` when given, else the framework's
    default — ``none`` under ``fsdp2`` with torchtitan's tensor-parallel plan
    (``gathered_inputs``, :func:`model.memory.keeps_gathered_inputs`: torchtitan's collectives
    wait unless ``enable_async_tensor_parallel``, default False in torchtitan
    ``config/configs.py``, which is ``async-tp``), ``async`` elsewhere (Megatron-Core's
    backward collectives beside the weight-gradient GEMMs, Megatron-DeepSpeed's ``layers.py``
    the same, and the Megatron-style sequence-parallel plan ``tp_block_inputs = sharded``
    stands for).

    >>> str(tp_overlap_for("fsdp2", None)), str(tp_overlap_for("megatron", None))
    ('none', 'async')
    >>> str(tp_overlap_for("fsdp2", None, False)), str(tp_overlap_for("fsdp2", "async-tp"))
    ('async', 'async-tp')
    """
    if overlap is not None:
        return TpOverlap(str(overlap).lower())
    torchtitan_plan = str(framework) == "fsdp2" and gathered_inputs
    return TpOverlap.NONE if torchtitan_plan else TpOverlap.ASYNC


def check_tp_overlap(overlap: TpOverlap, framework: str, fp8_recipe: str | None = None) -> None:
    """Refuse a tensor-parallel overlap mechanism the framework does not have, or that does not
    run with the FP8 recipe ``fp8_recipe`` (:class:`model.precision.Fp8Recipe`'s value; None
    outside FP8): Transformer Engine's userbuffers fill their all-gather buffer through
    ``fill_userbuffers_buffer_for_all_gather`` (``transformer_engine/pytorch/module/base.py``),
    which takes FP8 delayed and current (tensorwise) scaling and MXFP8 quantizers only and
    raises ``Unsupported quantizer for Userbuffers`` for the blockwise one, and Megatron-Core
    turns the all-gather overlap on with ``tp_comm_overlap`` (``tp_comm_overlap_ag`` default
    True, ``TELayerNormColumnParallelLinear``).

    Raises
    ------
    InputError
        ``async-tp`` outside torchtitan (``fsdp2``), ``full`` under ``fsdp2`` or ``deepspeed``,
        ``full`` with the ``blockwise`` FP8 recipe.

    Examples
    --------
    >>> try:
    ...     check_tp_overlap(TpOverlap.ASYNC_TP, "megatron")
    ... except InputError as err:
    ...     print(err)
    tp_comm_overlap: async-tp (torchtitan's enable_async_tensor_parallel) needs framework fsdp2, not megatron
    """
    allowed = TP_OVERLAP_FRAMEWORKS.get(overlap)
    if allowed is not None and str(framework) not in allowed:
        name = {
            TpOverlap.ASYNC_TP: "torchtitan's enable_async_tensor_parallel",
            TpOverlap.FULL: "Transformer Engine's userbuffers",
        }[overlap]
        raise InputError(
            f"tp_comm_overlap: {overlap} ({name}) needs framework {' or '.join(allowed)}, "
            f"not {framework}"
        )
    if overlap is TpOverlap.FULL and str(fp8_recipe) == "blockwise":
        raise InputError(
            "tp_comm_overlap: full (Transformer Engine's userbuffers) does not run with "
            "fp8_recipe blockwise (fill_userbuffers_buffer_for_all_gather takes delayed, "
            "tensorwise and mxfp8 quantizers only); use another recipe or tp_comm_overlap async"
        )
