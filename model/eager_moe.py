"""What autograd saves of torchtitan's MoE experts and gpt-oss's attention sinks when they run
eagerly (``fsdp2`` with ``compile`` false, :func:`model.elementwise.elementwise_mode`), beyond
the paper's rows (:func:`model.activation_rows.mlp_rows`, ``attention_rows``).

Read from pytorch/torchtitan b5bcd76c6, each operator's saved tensors from PyTorch's
``tools/autograd/derivatives.yaml`` (``clamp`` saves ``self``; ``mul`` by a scalar nothing;
``sigmoid`` its ``result``; ``mul.Tensor`` each operand where the other needs a gradient;
``addcmul`` ``tensor1`` and ``tensor2``; ``silu`` ``self``; ``add``, ``slice``, ``view`` nothing;
``_grouped_mm`` its two operands, the weight a parameter). Per GPU per micro-batch, ``S``
tokens, ``k`` experts a token, ``R = k·S`` routed tokens, ``f`` an expert's hidden size, β bytes
per 16-bit element; every row *tp* (the experts' hidden dimension) unless named:

* gpt-oss's ``GptOssGroupedExperts.forward`` (``torchtitan/models/gpt_oss/moe.py``): ``h_RG``,
  the first grouped GEMM's output plus its bias ``[R, 2f]``, goes to ``swiglu``, which takes the
  gate and linear halves as strided views (``x[..., ::2]``, ``x[..., 1::2]``) and clamps each:
  both clamps save their view, so ``h_RG`` stays whole (``2·β·R·f``, the paper's "SwiGLU input
  (gate, up)"). ``sigmoid(alpha · x_glu)`` keeps its output (``β·R·f``); ``x_glu · sigmoid``
  keeps the clamped gate and that output (the clamped gate ``β·R·f``); ``addcmul(out_glu,
  out_glu, x_linear)`` keeps ``out_glu`` and the clamped linear half (``β·R·f`` each); the
  second grouped GEMM keeps the ``addcmul`` result (``β·R·f``, the paper's "down projection
  input"). Seven ``β·R·f`` where the paper counts three: the clamped gate, the sigmoid output,
  the clamped linear half and the gated output are four more. Both biases reach the tokens
  through ``repeat_interleave`` over the per-expert counts (an ``index_select``, which keeps
  its int64 index ``[R]``): ``16·R`` bytes (*sp*).
* the generic ``GroupedExperts.forward`` (``torchtitan/models/common/moe.py``:
  ``F.silu(mm(x, w1)) * mm(x, w3)``, then ``mm(·, w2)``): ``silu`` keeps w1's output, the product
  keeps SiLU's output and w3's output, the last GEMM the product: the paper's three plus SiLU's
  output ``β·R·f``. The shared expert is a ``FeedForward`` (``common/feed_forward.py``:
  ``w2(F.silu(w1(x)) * w3(x))``), as the dense eager rule counts it: SiLU's output ``β·S·f_s``.
* gpt-oss's attention sinks (``torchtitan/models/gpt_oss/model.py``
  ``apply_attention_sink_rescale``, the ``out_transform`` of the attention kernel):
  ``out · sigmoid(lse − sinks).to(out.dtype)``. The product keeps the kernel's output
  ``[S, a/tp, d]`` (which the kernel keeps too, one storage) and the BF16 scale ``β·S·a``;
  ``sigmoid`` its FP32 result ``4·S·a``; ``wo`` keeps the product (``reshape`` of a
  contiguous tensor, no copy), the paper's "output projection input". The kernel output is
  the row the paper does not have: ``β·S·a·d`` (*tp*), with the two scales.

Rows the ``pytorch`` convention already lists (SiLU's output) are not added twice; under that
convention the gpt-oss row "routed expert SiLU output" is one of the four above and gives way to
them. Measured on the CPU through ``saved_tensors_hooks`` (``tests/fidelity/test_eager_moe.py``).

Under ``torch.compile`` none of this is added: :mod:`model.eager_saved`'s rule for the compiled
blocks (Inductor's partitioner recomputes the pointwise operators from the GEMMs' and the
attention kernel's outputs, and the paper's count is kept rather than a lower one no measurement
supports) applies to the experts' and the sinks' pointwise operators alike.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from trainplan.model.specs import Architecture, AttentionKind, Mlp

if TYPE_CHECKING:
    from trainplan.model.activations import ActivationContext

__all__ = ["eager_expert_rows", "eager_sink_rows"]

Row = tuple[str, Fraction, str]

_CLAMPED = (
    "routed expert clamped gate (eager clamped SwiGLU)",
    "routed expert sigmoid output (eager clamped SwiGLU)",
    "routed expert clamped linear half (eager clamped SwiGLU)",
    "routed expert gated output (eager clamped SwiGLU)",
)


def eager_expert_rows(rows: list[Row], arch: Architecture, ctx: ActivationContext) -> list[Row]:
    """``rows`` of a MoE layer with what torchtitan's eager experts keep besides (the module
    docstring): for a clamped SwiGLU (``glu_clamp``, gpt-oss) four ``β·k·S·f`` rows in place of
    a "routed expert SiLU output" row and the biases' int64 gather indices ``16·k·S``; for
    another SwiGLU the routed and shared experts' SiLU outputs, where not listed already.
    ``k·S``: the busiest rank's experts' rows (:meth:`model.activations.ActivationContext.
    routed_row_factors`), ``k·S`` dropless and balanced.
    Bytes before sharding, as ``rows``; ``rows`` unchanged for a non-SwiGLU MLP.

    Examples
    --------
    gpt-oss-20b's MoE layer (k 4, f 2880), S = 4,096 tokens, bf16: four ``2·4·4,096·2,880``
    rows and the indices ``16·4·4,096``.

    >>> from trainplan.model.activations import ActivationContext
    >>> from trainplan.model.arch_parts import MoESpec
    >>> oss = Architecture(num_layers=24, hidden_size=2880, num_attention_heads=64,
    ...     num_kv_heads=8, head_dim=64, ffn_hidden_size=2880, vocab_size=201088,
    ...     mlp="swiglu", norm="rmsnorm", glu_clamp=True, linear_bias=True,
    ...     moe=MoESpec(num_experts=32, experts_per_token=4, expert_ffn_hidden_size=2880))
    >>> ctx = ActivationContext(seq_len=4096, cp=1, micro_batch_size=1, tp=1,
    ...     sequence_parallel=False, flash_attention=True)
    >>> sum(b for _, b, _ in eager_expert_rows([], oss, ctx)) == (
    ...     4 * 2 * 4 * 4096 * 2880 + 16 * 4 * 4096)
    True
    """
    moe = arch.moe
    if moe is None or arch.mlp is not Mlp.SWIGLU:
        return rows
    S, beta, f = ctx.tokens, ctx.activation_bytes, moe.expert_ffn_hidden_size
    # the busiest rank's experts' rows ÷ S (k dropless and balanced; model.moe_rows.row_factors)
    k = moe.experts_per_token * ctx.routed_row_factors(moe.num_experts, moe.experts_per_token)[1]
    routed_silu = "routed expert SiLU output (eager SwiGLU)"
    if arch.glu_clamp:
        out = [r for r in rows if r[0] != routed_silu]
        out += [(name, beta * k * S * f, "tp") for name in _CLAMPED]
        out.append(("routed expert bias gather indices (int64, two)", 16 * k * S, "sp"))
        return out
    names = {r[0] for r in rows}
    out = list(rows)
    if routed_silu not in names:
        out.append((routed_silu, beta * k * S * f, "tp"))
    shared_silu = "shared expert SiLU output (eager SwiGLU)"
    if moe.num_shared_experts and shared_silu not in names:
        out.append((shared_silu, beta * S * moe.num_shared_experts * moe.shared_ffn, "tp"))
    return out


def eager_sink_rows(arch: Architecture, ctx: ActivationContext) -> list[Row]:
    """What gpt-oss's sink rescale keeps besides the paper's rows (the module docstring): the
    attention kernel's output ``β·S·a·d``, the BF16 scale ``β·S·a`` and the FP32 sigmoid output
    ``4·S·a``, all *tp*; none without ``attention_sinks``, with MLA or without a fused attention
    kernel (the eager softmax takes the sink as a column of its own, ``attention_rows``).

    gpt-oss-20b (a 64, d 64), S = 4,096, bf16: 2·4,096·64·64 + 2·4,096·64 + 4·4,096·64.

    >>> from trainplan.model.activations import ActivationContext
    >>> oss = Architecture(num_layers=24, hidden_size=2880, num_attention_heads=64,
    ...     num_kv_heads=8, head_dim=64, ffn_hidden_size=2880, vocab_size=201088,
    ...     attention_sinks=True)
    >>> ctx = ActivationContext(seq_len=4096, cp=1, micro_batch_size=1, tp=1,
    ...     sequence_parallel=False, flash_attention=True)
    >>> sum(b for _, b, _ in eager_sink_rows(oss, ctx))
    Fraction(35127296, 1)
    """
    if not arch.attention_sinks or not ctx.flash_attention or arch.attention is AttentionKind.MLA:
        return []
    S, beta, a, d = ctx.tokens, ctx.activation_bytes, arch.num_attention_heads, arch.dim_per_head
    return [
        ("attention kernel output before the sink rescale (eager)", beta * S * a * d, "tp"),
        ("sink scale (BF16, kept by the rescale)", beta * S * a, "tp"),
        ("sink scale (fp32 sigmoid output)", 4 * S * a, "tp"),
    ]
