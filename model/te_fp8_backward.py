"""The FP8 copies Transformer Engine's linear layers make in their backward, per element, under
each FP8 recipe (Megatron-Core's ``TELinear``/``TELayerNormColumnParallelLinear``/
``TEGroupedLinear``; Transformer Engine d0067d0da, ``transformer_engine/pytorch``):

* ``module/linear.py`` ``_linear_backward`` and ``module/layernorm_linear.py``
  ``_LayerNormLinear.backward`` set the ``grad_output`` quantizer to both usages
  (``set_usage(rowwise=True, columnwise=True)``: the dgrad GEMM reads the row-wise copy, the
  wgrad GEMM the column-wise one) and quantise the BF16 ``grad_output`` in
  ``module/base.py`` ``grad_output_preprocess``, while the BF16 tensor autograd handed in stays
  alive until the function returns; ``module/grouped_linear.py`` ``_GroupedLinear.backward``
  quantises the routed experts' ``grad_output`` with ``_split_quantize`` and quantizers built
  with both usages (``Float8Quantizer``, ``MXFP8Quantizer``, ``Float8BlockQuantizer``:
  ``rowwise=True, columnwise=True`` by default). A row-parallel layer under sequence
  parallelism gathers ``grad_output`` in FP8 (``distributed.py`` ``gather_along_first_dim``
  with the quantizer): the local shard quantised, the whole ``[S, h]`` gathered.
* Per-tensor recipes (delayed, tensorwise): ``_all_gather_fp8`` quantises the shard row-wise
  only and gathers the row-wise data; the column-wise use is a transpose
  (``_create_transpose``) only where the part's FP8 GEMMs take no non-TN layout
  (:func:`model.precision.keeps_fp8_transpose`; Blackwell reads the row-wise data for both).
* Block-scaled recipes (MXFP8, blockwise): the row-wise and column-wise copies are separate
  data, each with its scales (:data:`model.precision.SCALE_BYTES`, 1/32 B per element both);
  ``_start_all_gather_fp8_blockwise`` gathers the column-wise data into a temporary
  ``interleaved_columnwise_data`` (and the row-wise scales into ``interleaved_rowwise_scale_inv``,
  FP32 per 128 elements) that ``_finish_all_gather_fp8_blockwise`` copies into place: on an
  asynchronous gather (a column-parallel layer's saved input, ``async_op=True``) only when the
  handle is waited on, before the weight gradient, after the dgrad GEMM.
* The column-parallel layer's saved input under sequence parallelism is gathered again for
  the weight gradient (``set_quantizer_usage_for_wgrad_all_gather`` in ``module/_common.py``):
  per-tensor recipes gather the row-wise data (the forward saved it row-wise because only
  row-wise FP8 can be gathered, ``supports_only_rowwise_all_gather``) and make its transpose
  with ``update_usage(columnwise_usage=True)`` at the weight gradient, while the dgrad and its
  reduce-scatter are still live (``dgrad_work.wait()`` comes after the wgrad GEMM); the
  block-scaled recipes gather the column-wise copy only.

:func:`te_fp8_backward` gives these per-element figures for a recipe on a part;
:mod:`model.backward_working` places them in the projections' steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from trainplan.model.precision import (
    FP8_ACTIVATION_BYTES,
    PER_TENSOR_RECIPES,
    SCALE_BYTES,
    Fp8Recipe,
)

__all__ = ["BLOCK_GATHER_SCALE_BYTES", "TeFp8Backward", "te_fp8_backward"]

BLOCK_GATHER_SCALE_BYTES = Fraction(4, 128)
"""Bytes per element of the row-wise scales a blockwise gather interleaves (one FP32 per 1×128
tile, ``interleaved_rowwise_scale_inv`` of ``_start_all_gather_fp8_blockwise``)."""


@dataclass(frozen=True)
class TeFp8Backward:
    """Bytes per element of the FP8 tensors a Transformer Engine linear layer's backward holds
    under one recipe on one part (module docstring). Every field in bytes per element of the
    tensor's BF16 shape; exact (scale padding left out)."""

    both: Fraction
    """A tensor quantised for both GEMM usages (``grad_output``; a per-tensor recipe's gathered
    row-wise data and its transpose): 2 per-tensor with a transpose, 1 without, 2 + 2/32
    block-scaled."""
    shard: Fraction
    """The local shard a row-parallel layer quantises before gathering ``grad_output``: 1
    per-tensor (row-wise only), ``both`` block-scaled."""
    saved_input: Fraction
    """The column-parallel layer's input gathered again for the weight gradient: ``both``
    per-tensor (row-wise data and the transpose made at the wgrad), 1 + 1/32 block-scaled (the
    column-wise copy)."""
    interleaved: Fraction
    """The blockwise gather's temporary column-wise data (1 B per element; 0 for the other
    recipes), live with the gathered tensor until the gather is finished."""
    interleaved_scales: Fraction
    """The blockwise gather's temporary row-wise scales (:data:`BLOCK_GATHER_SCALE_BYTES`; 0
    for the other recipes): only where the row-wise copy is gathered (``grad_output``)."""


def te_fp8_backward(recipe: Fp8Recipe | str, transpose: bool) -> TeFp8Backward:
    """The per-element figures of :class:`TeFp8Backward` for ``recipe``; ``transpose``: the
    part keeps a per-tensor FP8 transpose (:func:`model.precision.keeps_fp8_transpose`; ignored
    for the block-scaled recipes, which keep both copies on every part).

    Examples
    --------
    >>> te_fp8_backward("delayed", True).both, te_fp8_backward("tensorwise", False).both
    (Fraction(2, 1), Fraction(1, 1))
    >>> b = te_fp8_backward("blockwise", True)
    >>> b.both, b.saved_input, b.interleaved, b.interleaved_scales
    (Fraction(33, 16), Fraction(33, 32), Fraction(1, 1), Fraction(1, 32))
    >>> te_fp8_backward("mxfp8", False).interleaved
    Fraction(0, 1)
    """
    r = Fp8Recipe(str(recipe))
    one = Fraction(FP8_ACTIVATION_BYTES)
    if r in PER_TENSOR_RECIPES:
        both = 2 * one if transpose else one
        return TeFp8Backward(both, one, both, Fraction(0), Fraction(0))
    copy = one + SCALE_BYTES[r.value][1]
    block = r is Fp8Recipe.BLOCKWISE
    return TeFp8Backward(
        2 * copy,
        2 * copy,
        copy,
        one if block else Fraction(0),
        BLOCK_GATHER_SCALE_BYTES if block else Fraction(0),
    )
