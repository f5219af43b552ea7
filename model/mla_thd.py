"""MLA over packed documents under Megatron-Core: the value padded to the query's head dimension,
and the attention kernel's output kept apart from the output projection's input.

Megatron-LM runs packed batches in Transformer Engine's ``thd`` format: ``pretrain_gpt.py``
``forward_step`` builds ``PackedSeqParams(qkv_format="thd", …)`` whenever the batch carries
``cu_seqlens`` (Megatron-LM d98e8a64dd), the document masking of :mod:`model.packing`. Read from
the code (d98e8a64dd ``megatron/core/transformer/multi_latent_attention.py``):

* ``MultiLatentAttention._run_core_attention`` (which ``_checkpointed_attention_forward`` runs
  inside its checkpoint too) calls ``_prepare_mla_core_attention_value``: with ``thd`` and a
  query head dimension ``d_q = qk_nope_head_dim + qk_rope_head_dim`` other than the value's
  ``d_v``, ``F.pad(value, [0, d_q − d_v])``, a new ``[T, a/tp, d_q]`` tensor. Transformer Engine
  d0067d0da ``attention/dot_product_attention/backends.py`` ``FusedAttnFunc.forward`` saves
  ``q, k, v, out_f16``: the padded value in place of the ``d_v``-wide one (``pad``'s backward
  is a slice and keeps nothing, so that one is freed), and the kernel's ``d_q``-wide output.
* ``_trim_mla_core_attention_output`` slices that output's first ``d_v`` columns (a view) and
  ``MultiLatentAttention.forward`` reshapes it, ``core_attn_out.reshape(core_attn_out.size(0),
  1, -1)``: a copy, the slice not being contiguous, which ``linear_proj`` keeps as its input.

So, per MLA layer and micro-batch on one GPU, beyond the paper's rows (S tokens, a heads, β
bytes, each ÷ tp): the value's padding ``β·S·a·(d_q − d_v)``, and the kernel's output, which
the output projection's input no longer is: ``β·S·a·d_q`` where that input stays 16-bit, and
its padding ``β·S·a·(d_q − d_v)`` under FP8 where the projection keeps an FP8 copy and the
kernel's ``d_v`` columns are already :data:`model.activation_rows.FP8_KEPT_ATTENTION_OUTPUT`.
Both are *score* rows: the checkpoint of selective recomputation (``core_attn``) holds neither.
Not counted: the backward's padded output gradient (the slice's backward writes the padded
shape) and value gradient before the pad's backward slices it; under the ``mla_up_proj``
recompute module the padded value's first ``d_v`` columns (its discard frees the
up-projection's outputs, not the padded copy).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from trainplan.model.specs import Architecture

if TYPE_CHECKING:
    from trainplan.model.activations import ActivationContext

__all__ = ["VALUE_PADDING", "KERNEL_OUTPUT", "mla_thd_rows"]

VALUE_PADDING = "V padding to the query head dim (MLA, thd)"
"""The row of the padded value's extra columns the attention kernel keeps."""
KERNEL_OUTPUT = "attention kernel output, padded (MLA, thd)"
"""The row of the kernel's padded output, kept apart from the output projection's input."""


def mla_thd_rows(arch: Architecture, ctx: ActivationContext) -> list[tuple[str, Fraction, str]]:
    """The *score* rows (name, bytes before ÷ tp, ``"score"``) the module docstring derives,
    for an MLA layer where :attr:`model.activations.ActivationContext.mla_value_padded` (and
    FlashAttention) and ``d_q > d_v``; none otherwise.

    DeepSeek-V3's heads (d_q 192, d_v 128), S 4, a 2, β 2: the padding 2·4·2·64 = 1,024 B and
    the 16-bit output 2·4·2·192 = 3,072 B; under FP8 (the projection's FP8 copy) its padding
    1,024 B.

    >>> from trainplan.model.activations import ActivationContext
    >>> from trainplan.model.specs import Architecture, AttentionKind, MLASpec
    >>> mla = MLASpec(q_lora_rank=8, kv_lora_rank=8, qk_nope_head_dim=128, qk_rope_head_dim=64,
    ...           v_head_dim=128)
    >>> arch = Architecture(num_layers=1, hidden_size=16, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16, attention=AttentionKind.MLA, mla=mla)
    >>> ctx = ActivationContext(seq_len=4, cp=1, micro_batch_size=1, tp=1,
    ...     sequence_parallel=False, flash_attention=True, mla_value_padded=True)
    >>> [(n[:5], int(v)) for n, v, _ in mla_thd_rows(arch, ctx)]
    [('V pad', 1024), ('atten', 3072)]
    >>> from dataclasses import replace
    >>> [int(v) for _, v, _ in mla_thd_rows(arch, replace(ctx, fp8_linear_inputs=True))]
    [1024, 1024]
    """
    m = arch.mla
    if m is None or not (ctx.mla_value_padded and ctx.flash_attention):
        return []
    d_q, d_v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    if d_q <= d_v:
        return []
    per_column = ctx.activation_bytes * ctx.tokens * arch.num_attention_heads
    fp8_copy = ctx.fp8_linear_inputs and not ctx.fp8_proj_saves_original
    output = d_q - d_v if fp8_copy else d_q
    return [(VALUE_PADDING, per_column * (d_q - d_v), "score"),
            (KERNEL_OUTPUT, per_column * output, "score")]  # fmt: skip
