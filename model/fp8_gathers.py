"""What Transformer Engine and Megatron-Core all-gather in FP8, and so at 1 B an element: the
activations sequence parallelism gathers over tp (:func:`tp_gather_bytes`, read by
:mod:`model.layer_time` and the tp traffic, :func:`model.comm_layers.tp_bytes`) and FP8 primary
weights gathered over the data-parallel group (:func:`fp8_param_gathers`; the bytes they take
off :func:`model.comm.dp_bytes`, :func:`fp8_gather_saving`, read by the dp traffic and time,
:mod:`model.terms.traffic` and :mod:`model.terms.dp_time`)."""

from __future__ import annotations

from typing import Any

from trainplan.model.comm import ring_share
from trainplan.model.frameworks import Framework
from trainplan.model.mechanisms import Mechanism
from trainplan.model.memory import FP8_PARAM_BYTES
from trainplan.model.precision import (
    FP8_ACTIVATION_BYTES,
    PER_TENSOR_RECIPES,
    Fp8Recipe,
    Precision,
    fp8_recipe_of,
)

__all__ = ["tp_gather_bytes", "fp8_param_gathers", "fp8_gather_saving"]


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


def fp8_param_gathers(
    framework: str, precision: Precision | str, recipe: Fp8Recipe | str | None, fp8_params: bool
) -> bool:
    """Whether the linear layers' weights are all-gathered over the data-parallel group at 1 B
    an element (:data:`model.memory.FP8_PARAM_BYTES`) rather than the mechanism's weight bytes:
    FP8 primary weights (``fp8_params``: :attr:`model.specs.TrainingSpec.fp8_param_gather`,
    Megatron-Core's ``--fp8-param-gather``) under ``megatron`` with a per-tensor recipe
    (``delayed``, ``tensorwise``). The linear elements are those the memory narrows
    (:func:`model.terms.stage_params.busiest_linear`); the embedding, output layer, norms and
    router stay in the working dtype.

    Sources (Megatron-LM 92c8482e6d, the NeMo 25.11 container's):

    * the distributed optimizer: ``distributed/distributed_data_parallel.py``
      ``DistributedDataParallel.__init__`` gives a ``Float8Tensor`` parameter the buffer dtype
      ``torch.uint8`` ("when creating the param buffer for fp8 params, it is necessary to use
      torch.uint8"), and ``param_and_grad_buffer.py`` ``_ParamAndGradBuffer.__init__`` maps the
      parameter onto that buffer (``modify_underlying_storage``), which ``start_param_sync``
      all-gathers;
    * Megatron-FSDP: ``megatron_fsdp/param_and_grad_buffer.py`` ``ParamAndGradBuffer.
      _init_each_parameter_group_buffers`` gives a group of FP8 parameters a ``torch.uint8``
      ``model_weight_buffer``, sharded and all-gathered as such.

    Not here (the weight bytes stay): MXFP8, whose parameters the distributed optimizer gathers
    in BF16 through a buffer shared with the gradients (``param_and_grad_buffer.py``: "For
    MXFP8 param: Create a shared buffer for param AG and grad RS", ``param_data`` a bfloat16
    view) and Megatron-FSDP gathers with their column-wise copy; blockwise.

    >>> fp8_param_gathers("megatron", "fp8", "tensorwise", True)
    True
    >>> fp8_param_gathers("megatron", "fp8", "mxfp8", True), fp8_param_gathers("megatron", "fp8", None, False)
    (False, False)
    """
    if not fp8_params or Precision(str(precision)) is not Precision.FP8:
        return False
    if Framework(str(framework)) is not Framework.MEGATRON:
        return False
    return fp8_recipe_of(str(framework), recipe) in PER_TENSOR_RECIPES


def fp8_gather_saving(
    mech: Mechanism, fp8: tuple[Any, Any], shard: Any, expert_shard: Any, m: Any
) -> tuple[Any, Any]:
    """(bytes per step, bytes per micro-batch) that FP8 primary weights take off
    :func:`model.comm.dp_bytes`: ``fp8`` = (dense, routed-expert) parameters on one GPU
    all-gathered at :data:`model.memory.FP8_PARAM_BYTES` (:func:`fp8_param_gathers`), each
    sending its ring share ``(D − 1)/D`` a byte less than the mechanism's weight bytes at every
    all-gather, once per step and per micro-batch. Element-wise for arrays of layouts.

    >>> from trainplan.model.mechanisms import Framework, mechanism
    >>> fp8_gather_saving(mechanism(Framework.MEGATRON, 1), (8, 0), 2, 1, 4)  # 8 · 1/2 · (2 − 1)
    (Fraction(4, 1), Fraction(0, 1))
    """
    narrowed = ring_share(shard) * fp8[0] + ring_share(expert_shard) * fp8[1]
    saved = (mech.weight_bytes - FP8_PARAM_BYTES) * narrowed
    each = saved * mech.gathers_per_microbatch
    return saved * mech.gathers_per_step + m * each, each
