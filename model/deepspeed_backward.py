"""What Megatron-DeepSpeed's layers hold in a projection's backward step beyond the BF16 count
that :mod:`model.backward_working` places: each projection's weight gradient, returned to
autograd (:func:`deepspeed_weight_grads`), and under FP8, where the layer is Transformer Engine's
``TransformerLayer`` (:mod:`model.deepspeed_fp8`), what its ``LayerNormMLP`` keeps through the
FC1 step (:func:`layernorm_mlp_held`)."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.activations import ActivationContext
from trainplan.model.context_parallel import attention_dims
from trainplan.model.frameworks import Framework
from trainplan.model.specs import Architecture
from trainplan.model.te_fp8_backward import TeFp8Backward

__all__ = ["deepspeed_weight_grads", "layernorm_mlp_held"]


def deepspeed_weight_grads(
    ctx: ActivationContext, arch: Architecture, framework: Framework, ffn: int
) -> tuple[tuple[Fraction, Fraction], tuple[Fraction, Fraction]]:
    """((output projection, QKV), (down projection, up/gate projection)): the weight gradient
    each projection's backward returns under ``deepspeed`` (BF16 GEMMs), one weight of the
    projection on this rank, ``β·in·out/tp``: Megatron-DeepSpeed f4157bea ``megatron/core/
    tensor_parallel/layers.py`` ``LinearWithGradAccumulationAndAsyncCommunication.backward``
    computes ``grad_weight = grad_output.t().matmul(total_input)`` (the fused accumulation into
    ``main_grad`` is commented out there; only ``enable_zbh1_pipeline`` defers it) after the
    input gradient and its reduce-scatter are issued, and returns it to autograd, which adds it
    into the kept ``param.grad`` (:mod:`model.backward_working`'s docstring). The fused QKV and
    the fused gate and up projections (``dense_h_to_4h``) are one weight each. Under FP8 the
    layer is Transformer Engine's, which returns the same BF16 weight gradient to autograd: its
    fused accumulation (``fuse_wgrad_accumulation``, from ``gradient_accumulation_fusion``)
    writes into ``weight.main_grad``, which only Megatron's own DDP allocates
    (``megatron/model/distributed.py``), not DeepSpeed's engine, so a DeepSpeed run turns it
    off (``--no-gradient-accumulation-fusion``) and the wgrad GEMM's output goes back to
    autograd (``module/linear.py`` ``_linear_backward``, ``module/layernorm_mlp.py``
    ``_LayerNormMLP.backward``, ``out_dtype=ctx.activation_dtype``). Zeros under the other
    profiles."""
    zero = (Fraction(0), Fraction(0))
    if framework is not Framework.DEEPSPEED:
        return zero, zero
    beta, tp, h = ctx.activation_bytes, ctx.tp, Fraction(arch.hidden_size)
    q, kv, o = (Fraction(x, tp) for x in attention_dims(arch))
    u = 2 if arch.mlp.gated else 1
    f = Fraction(ffn, tp)
    return (beta * h * o, beta * h * (q + kv)), (beta * f * h, beta * h * u * f)


def layernorm_mlp_held(
    ctx: ActivationContext, arch: Architecture, te: TeFp8Backward, ffn: int
) -> Fraction:
    """Bytes per GPU Transformer Engine's ``LayerNormMLP`` (the MLP of its ``TransformerLayer``,
    the layer Megatron-DeepSpeed trains FP8 with) still holds at its FC1 step that separate
    linear modules have freed by then: ``module/layernorm_mlp.py`` ``_LayerNormMLP.backward``
    (Transformer Engine d0067d0da) runs FC2's and FC1's backward in one function and frees
    neither FC2's quantised ``grad_output`` (``both`` per element of the whole ``[S, h]``,
    gathered under sequence parallelism; :mod:`model.te_fp8_backward`), nor its BF16 input
    gradient ``fc2_dgrad`` (``[S, f/tp]``), nor FC2's weight gradient ``fc2_wgrad``
    (``β·f·h/tp``, returned to autograd unfused, :func:`deepspeed_weight_grads`) before it
    returns: it clears only ``act_out``, ``fc1_out`` and ``dact`` (``clear_tensor_data``).

    Llama 3 8B, s 8,192, b 1, tp 1, delayed scaling on Hopper: 2·8,192·4,096 + 2·8,192·14,336
    + 2·14,336·4,096 = 67.1 + 234.9 + 117.4 MB.

    >>> from trainplan.model.te_fp8_backward import te_fp8_backward
    >>> ctx = ActivationContext(seq_len=8192, cp=1, micro_batch_size=1, tp=1,
    ...     sequence_parallel=False, flash_attention=True)
    >>> from trainplan.scenarios.catalogue import get_model
    >>> a = get_model("llama3-8b").model.arch
    >>> int(layernorm_mlp_held(ctx, a, te_fp8_backward("delayed", True), a.ffn_hidden_size))
    419430400
    """
    beta, S, h, f = ctx.activation_bytes, ctx.tokens, arch.hidden_size, Fraction(ffn, ctx.tp)
    return te.both * S * h + beta * S * f + beta * f * h
