"""The tensor-parallel overlap mechanisms (:class:`TpOverlap`), which framework profile runs
which (:data:`TP_OVERLAP_FRAMEWORKS`), the default a layout runs (:func:`tp_overlap_for`) and the
rule that refuses one a framework or FP8 recipe cannot run (:func:`check_tp_overlap`); what each
does to a layer's collectives is :mod:`model.layer_time`'s, what it does to the GEMMs
:mod:`model.op_time`'s and :mod:`model.userbuffers_gemm`'s. The bytes per element of the
activations sequence parallelism all-gathers, FP8 under Transformer Engine's per-tensor
recipes: :func:`tp_gather_bytes`."""

from __future__ import annotations

from enum import StrEnum

from trainplan.model.errors import InputError
from trainplan.model.frameworks import Framework
from trainplan.model.precision import (
    FP8_ACTIVATION_BYTES,
    PER_TENSOR_RECIPES,
    Fp8Recipe,
    Precision,
    fp8_recipe_of,
)

__all__ = [
    "TpOverlap",
    "TP_OVERLAP_FRAMEWORKS",
    "tp_overlap_for",
    "check_tp_overlap",
    "tp_gather_bytes",
]


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


def tp_gather_bytes(
    framework: str, precision: Precision | str, recipe: Fp8Recipe | str | None, beta: int
) -> int:
    """Bytes per element (B) of the activations a sequence-parallel transformer layer all-gathers
    over tp — the column-parallel linears' input in forward and again in backward for the weight
    gradient, the row-parallel linears' output gradient in backward — for a framework whose
    linear layers are Transformer Engine's (:attr:`model.frameworks.Framework.te_layers`) under
    FP8 with a per-tensor recipe (``delayed``, ``tensorwise``: :data:`model.precision.
    PER_TENSOR_RECIPES`): 1 (:data:`model.precision.FP8_ACTIVATION_BYTES`), the tensor being
    quantised before it is gathered; else ``beta``, the activations' bytes (``deepspeed``:
    Megatron-DeepSpeed's FP8 layer is Transformer Engine's ``TransformerLayer``, built of the same
    modules). The reduce-scatters
    (the linears' BF16 outputs and input gradients), the embedding's and the output layer's
    collectives (Megatron-Core's own BF16 modules) stay at ``beta``.

    Sources:

    * Transformer Engine 1.8 (7d576ed2, NeMo 24.07's pin), ``module/layernorm_linear.py``
      ``_LayerNormLinear.forward``: under FP8 (no returned norm output) the norm writes its output
      as ``torch.uint8`` FP8 and ``gather_along_first_dim(ln_out, tp_group)`` gathers those
      bytes; ``backward`` gathers the saved FP8 ``ln_out`` again (``async_op=True``) for the
      weight gradient; ``module/base.py`` ``grad_output_preprocess`` ("FP8 case with gather"):
      ``cast_to_fp8`` of the output gradient, then ``gather_along_first_dim`` of the FP8 copy.
      Under userbuffers the same tensors go through FP8 buffers (:mod:`model.terms.userbuffers`).
    * Transformer Engine 2.9, 2.10 and d0067d0da: ``_LayerNormLinear.forward`` and ``linear.py``
      ``_linear_forward_impl`` call ``gather_along_first_dim(..., quantizer=quantizer)`` with
      ``quantizer.set_usage(rowwise=True, columnwise=False)``, the backward gathers likewise, and
      ``distributed.py`` ``_all_gather_fp8`` (``Float8Quantizer`` — delayed —
      or ``Float8CurrentScalingQuantizer`` — tensorwise) quantises, then
      ``all_gather_into_tensor`` of the ``uint8`` data: 1 B an element.

    Not modelled here (``beta``): MXFP8, whose ``_all_gather_mxfp8`` gathers each usage's data
    and E8M0 scales (the output gradient both usages), and blockwise, whose gather depends on
    the Transformer Engine release.

    >>> tp_gather_bytes("megatron", "fp8", "delayed", 2), tp_gather_bytes("megatron", "bf16", None, 2)
    (1, 2)
    >>> tp_gather_bytes("megatron", "fp8", "mxfp8", 2), tp_gather_bytes("fsdp2", "fp8", None, 2)
    (2, 2)
    """
    if Precision(str(precision)) is not Precision.FP8 or not Framework(str(framework)).te_layers:
        return beta
    if fp8_recipe_of(str(framework), recipe) not in PER_TENSOR_RECIPES:
        return beta
    return FP8_ACTIVATION_BYTES
