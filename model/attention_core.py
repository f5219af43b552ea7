"""The attention core's step of a layer's backward: the gradients the attention kernel returns
and the workspace it allocates beside them, per GPU, for one micro-batch
(:func:`attention_core_step`, one of :func:`model.backward_working.backward_working_bytes`'
steps; the context-parallel exchange's backward buffers are live at it,
:func:`model.context_parallel.cp_phase_bytes`); and MLA's down-projections' step
(:func:`mla_down_step`)."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.activations import ActivationContext
from trainplan.model.context_parallel import attention_dims
from trainplan.model.specs import Architecture
from trainplan.model.te_fp8_backward import TeFp8Backward

__all__ = [
    "FLASH_ATTENTION_2",
    "FLASH_ATTENTION_3",
    "attention_backward_workspace",
    "attention_core_step",
    "kernel_kv_repeat",
    "mla_down_step",
]

FLASH_ATTENTION_2 = "flash-attention-2"
FLASH_ATTENTION_3 = "flash-attention-3"


def attention_backward_workspace(
    kernel: str | None, tokens: Fraction, heads: Fraction, kv_heads: Fraction, head_dim: int,
    beta: int,
) -> Fraction:  # fmt: skip
    """Bytes the attention kernel's backward allocates beside dQ, dK, dV, for ``tokens`` queries
    and keys, ``heads`` query heads and ``kv_heads`` key/value heads on this rank of
    ``head_dim`` each (rounded to the kernel's tiles: 128 tokens, 8 of the head dimension at
    most, left out):

    * ``flash-attention-2`` (Dao-AILab/flash-attention ``csrc/flash_attn/flash_api.cpp``
      ``mha_bwd``, non-deterministic): ``dq_accum`` fp32 ``[b, s, heads, d]``, ``softmax_d`` fp32
      ``[b, heads, s]`` and, with fewer K/V heads than query heads, ``dk_expanded`` and
      ``dv_expanded`` ``[b, s, heads, d]`` in the input's dtype, summed over each group after;
    * ``flash-attention-3`` (``hopper/flash_api.cpp`` ``mha_bwd``): ``dq_accum`` fp32, the
      softmax's ``softmax_d`` and ``softmax_lse_log2`` fp32 ``[b, heads, s]`` and, with fewer K/V
      heads, ``dk_accum`` and ``dv_accum`` fp32 ``[b, kv_heads, s, d]``;
    * cuDNN (Transformer Engine's fused attention, PyTorch SDPA's cuDNN backend) and any other
      kernel: 0, the workspace being the cuDNN graph's (:mod:`model.backward_working`).

    Examples
    --------
    Llama 3 70B at tp 8, s 8,192: 8 query heads and 1 K/V head of 128 on a rank; FlashAttention-2
    holds ``4·8,192·8·128`` (dq_accum, 33.6 MB) + ``4·8·8,192`` (softmax_d) + ``2·2·8,192·8·128``
    (dK, dV expanded to 8 heads, 33.6 MB).

    >>> attention_backward_workspace("flash-attention-2", Fraction(8192), Fraction(8), Fraction(1), 128, 2)
    Fraction(67371008, 1)
    >>> attention_backward_workspace("cudnn", Fraction(8192), Fraction(8), Fraction(1), 128, 2)
    Fraction(0, 1)
    """
    if kernel == FLASH_ATTENTION_2:
        expanded = 2 * beta * tokens * heads * head_dim if kv_heads != heads else 0
        return 4 * tokens * heads * head_dim + 4 * heads * tokens + expanded
    if kernel == FLASH_ATTENTION_3:
        accum = 2 * 4 * tokens * kv_heads * head_dim if kv_heads != heads else 0
        return 4 * tokens * heads * head_dim + 2 * 4 * heads * tokens + accum
    return Fraction(0)


def kernel_kv_repeat(ctx: ActivationContext, arch: Architecture) -> int:
    """Times each K/V head reaches the attention kernel: ``a/g`` where the framework repeats
    them to every query head first (:attr:`model.activations.ActivationContext.
    kernel_kv_repeated` on a grouped-query model), else 1 (MLA: ``a`` heads already).

    torchtitan 9dec370 ``torchtitan/models/llama/model.py`` and 820504e
    ``torchtitan/models/llama3/model.py`` ``Attention.forward``: ``keys = repeat_kv(xk,
    self.n_rep)`` (``expand`` then ``reshape``, a copy), then SDPA on ``a/tp`` heads; from
    ff0829c10 (2026-01-27, "GQA without kv repeats") it calls SDPA with ``enable_gqa``
    instead (b5bcd76c6 ``models/common/attention.py``), which this count over-states.
    Megatron-DeepSpeed 6acc370a ``ParallelAttention.forward``: ``repeat_kv`` before
    ``FlashSelfAttention``."""
    a, g = arch.num_attention_heads, arch.kv_heads
    repeated = ctx.kernel_kv_repeated and arch.mla is None and a > g
    return a // g if repeated else 1


def attention_core_step(ctx: ActivationContext, arch: Architecture, kernel: str | None) -> Fraction:
    """The attention core's step of one layer's backward (module docstring): the layer's output
    gradient ``n``, dO, dQ, dK, dV and the kernel's workspace (:func:`attention_backward_workspace`;
    without a fused kernel the gradients of the probabilities and of the scores, ``[b, a/tp,
    s/cp, s]`` each). The context-parallel exchange's backward buffers are live at this step
    (:func:`model.context_parallel.cp_phase_bytes`).

    Where K and V reach the kernel repeated (:func:`kernel_kv_repeat`, ``r = a/g``) the kernel
    sees ``a`` K/V heads: its dK and dV are ``r·KV`` (``repeat_kv``'s backward, ``expand``'s
    sum, makes the grouped ``KV`` only after it returns, with dO freed: less) and no grouped
    workspace. Where the repeated K and V are not kept (``fsdp2`` compiled: Inductor's
    partitioner recomputes ``repeat_kv``'s copy in backward, :mod:`model.eager_saved`), that
    rebuilt copy, the kernel's input, is live beside them: ``r·KV`` more.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> ctx = ActivationContext(seq_len=8192, cp=1, micro_batch_size=1, tp=8,
    ...     sequence_parallel=True, flash_attention=True)
    >>> int(attention_core_step(ctx, get_model("llama3-70b").model.arch, "cudnn"))  # 2·16.8 + 21.0 MB
    54525952
    """
    beta, S, tp, h = ctx.activation_bytes, ctx.tokens, ctx.tp, arch.hidden_size
    n = beta * S * h / (tp if ctx.sequence_parallel and tp > 1 else 1)
    q, kv, o = (beta * S * Fraction(x, tp) for x in attention_dims(arch))
    heads = Fraction(arch.num_attention_heads, tp)
    rep = kernel_kv_repeat(ctx, arch)
    rebuilt = rep * kv if rep > 1 and not (ctx.repeats_kv or ctx.eager_elementwise) else 0
    grads = n + o + q + rep * kv + rebuilt
    if not ctx.flash_attention:
        return grads + 2 * beta * heads * S * ctx.seq_len
    grouped = arch.kv_heads < arch.num_attention_heads and rep == 1
    kv_heads = Fraction(arch.kv_heads, tp) if grouped else heads
    d = q / (beta * S * heads)
    return grads + attention_backward_workspace(kernel, S, heads, kv_heads, int(d), beta)


def mla_down_step(
    ctx: ActivationContext, arch: Architecture, te: TeFp8Backward | None, released: Fraction
) -> Fraction:
    """MLA's down-projections' step of a layer's backward under Megatron-Core (0 for other
    attention and under torchtitan's gathered plan, whose QKV step holds the whole input
    gradients), less the layer's ``released`` rows by then. ``linear_q_down_proj`` and
    ``linear_kv_down_proj`` (Megatron-LM d98e8a64dd ``multi_latent_attention.py``, ``TELinear``
    ``parallel_mode='duplicated'``: the sequence shard, no gather) both read the attention
    norm's output, so autograd holds the first's input gradient while the second's is made:
    ``n + 2·x`` (``x = β·S·h``, ÷ tp with sequence parallelism) beside the larger latent's
    gradient ``β·S·L`` (``L = max(q_lora, kv_lora + rope)``). Under Transformer Engine's FP8
    (``te``) that gradient quantised for both usages, ``both·S·L``; and where the projections
    save their BF16 input (``ActivationContext.fp8_mla_down_saves_original``: the ``layernorm``
    recompute module, ``set_for_recompute_input_layernorm``, l. 1114–1118) that input quantised
    again for the weight gradient, ``saved_input·S·h`` (÷ tp with SP; TE d0067d0da
    ``module/linear.py`` ``_Linear.backward``: both usages tensorwise, column-wise block-scaled,
    no gather). The recomputed norm output is the recompute's, counted beside the working set.
    """
    mla = arch.mla
    if mla is None or ctx.gathered_block_inputs:
        return Fraction(0)
    beta, S, h = ctx.activation_bytes, ctx.tokens, arch.hidden_size
    div = ctx.tp if ctx.sequence_parallel and ctx.tp > 1 else 1
    x = beta * S * h / div
    latent = S * max(mla.q_lora_rank or 0, mla.kv_lora_rank + mla.qk_rope_head_dim) / div
    grads = x + 2 * x + beta * latent
    if te is None:
        return grads - released
    requant = te.saved_input * S * h / div if ctx.fp8_mla_down_saves_original else 0
    return grads + te.both * latent + requant - released
