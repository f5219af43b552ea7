"""What autograd saves of a layer's elementwise passes when torchtitan runs them eagerly.

The paper's rows (:mod:`model.activation_rows`) are what fused kernels keep: a norm its input,
the projections their inputs, a fused SwiGLU its gate and up inputs. torchtitan without
``torch.compile`` (``fsdp2`` with ``compile`` false, :func:`model.elementwise.elementwise_mode`)
runs its model code op by op, and autograd keeps what each operator's backward formula reads
(PyTorch ``tools/autograd/derivatives.yaml``: ``pow.Tensor_Scalar`` saves ``self``;
``mean.dim`` sizes only; ``rsqrt`` ``result``; ``mul.Tensor`` ``other`` for ``self``'s gradient
and ``self`` for ``other``'s, each only where the other operand needs a gradient;
``_to_copy``, ``view``, ``view_as_complex``, ``view_as_real``, ``expand``, ``reshape`` nothing;
``silu`` ``self``; ``_scaled_dot_product_flash_attention`` its query, key, value, output and
log-sum-exp). Per GPU per micro-batch, ``S`` tokens, β bytes per 16-bit element, torchtitan at
9dec370:

* ``RMSNorm`` (``torchtitan/models/norms.py``: ``self._norm(x.float()).type_as(x) * weight``,
  ``_norm`` = ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)``): ``pow`` and ``x·r``
  keep the FP32 copy ``4·S·h`` (one storage), ``rsqrt`` its result ``4·S`` (FP32), ``· weight``
  the normalised BF16 tensor ``β·S·h``; the BF16 input itself is kept by no operator
  (``x.float()`` saves nothing). In place of the paper's norm input ``β·S·h``: the two rows
  below, per norm (*sp*: torchtitan's norms are ``SequenceParallel``).
* ``apply_rotary_emb`` (``torchtitan/models/llama/model.py``): the complex product with
  ``freqs_cis`` (no gradient) keeps ``freqs_cis`` only, a view of the model's buffer: nothing
  new. SDPA keeps the rotated q and k it is given, as the paper's Q and K.
* ``repeat_kv`` (GQA, ``n_rep = a/g > 1``): ``expand`` then ``reshape`` copies k and v to ``a``
  heads, and SDPA keeps the copies: K and V hold ``a·d`` per token, not ``g·d``:
  ``2·β·S·(a − g)·d`` more (*tp*).
* the attention output: SDPA keeps its output and its FP32 log-sum-exp ``4·a·S`` (*tp*), eager
  or compiled: not a row of this module but the ``fsdp2`` profile's
  :attr:`model.activations.ActivationContext.saves_softmax_lse` (Inductor's partitioner never
  recomputes SDPA, below). The flash kernels write the output ``[b, s, a, d]``
  in memory and return a ``[b, a, s, d]`` view, so ``output.transpose(1, 2).contiguous()`` is
  that storage and ``wo`` keeps no copy: the paper's output-projection input.
* SwiGLU (``self.w2(F.silu(self.w1(x)) * self.w3(x))``): ``silu`` keeps w1's output, the
  product keeps SiLU's output and w3's output, ``w2`` the product: the paper's ``3·β·S·f``
  plus SiLU's output ``β·S·f`` (*tp*; listed by the ``pytorch`` convention already). A GeGLU
  (torchtitan has no Gemma: the same ``FeedForward`` with ``F.gelu(…, approximate="tanh")``)
  keeps GELU's output the same way (``gelu`` saves ``self``; measured on the CPU, torch 2.13).

The model's final norm is never compiled: torchtitan compiles each ``TransformerBlock``
(``torchtitan/parallelisms/parallelize_llama.py`` ``apply_compile`` at 9dec370:
``torch.compile(transformer_block, fullgraph=True)`` per entry of ``model.layers``), and
``model.norm`` runs outside every block and outside activation checkpointing, so under ``fsdp2``
it keeps the eager RMSNorm's tensors whatever ``compile`` says: :func:`final_norm_extra_bytes`.

Rows the ``pytorch`` convention already adds (the norms' rstd, SiLU's output) are not added
twice. Under ``torch.compile`` (Inductor) the count is the paper's with SDPA's log-sum-exp: the
partitioner (``torch/_functorch/partitioners.py`` ``min_cut_rematerialization_partition``)
saves a minimum cut of the joint graph and recomputes the pointwise and view operators
(``pow``, ``mul``, ``rsqrt``, the casts, the rotation, ``repeat_kv``'s copy, SiLU) in backward
from the fused kernels' inputs, so none of the rows above is saved; the paper's count is kept
there rather than a lower one that no measurement supports. SDPA itself is never recomputed
(``should_ban_recomputation``: ``get_default_op_list``'s ``compute_intensive_ops`` lists
``aten._scaled_dot_product_flash_attention`` and ``_efficient_attention``, torch 2.13), and its
backward reads the output and the log-sum-exp (``derivatives.yaml``
``_scaled_dot_product_flash_attention``: ``_scaled_dot_product_flash_attention_backward(grad,
query, key, value, output, logsumexp, …)``), so the compiled block saves the FP32
``[b, a, s]`` log-sum-exp as the eager one does: ``4·a·S`` (÷ tp) a layer and micro-batch.

Where recomputation re-runs the layer these rows are held only while it runs: under full
recomputation and under torchtitan's op-level selective policy (:mod:`model.op_checkpoint`,
which keeps matmul and SDPA outputs only) they enter the recompute transient (a layer's full
bytes), not the bytes kept per layer. MLA attention runs its own code and keeps the paper's
rows; MoE experts and gpt-oss's attention sinks keep more than the paper's rows, read from
torchtitan b5bcd76c6 in :mod:`model.eager_moe` and added here (whatever the norm); memory-efficient
norms (an Apex kernel) are not torchtitan's RMSNorm.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

from trainplan.model.activation_rows import NORM_INPUTS
from trainplan.model.eager_moe import eager_expert_rows, eager_sink_rows
from trainplan.model.frameworks import Framework
from trainplan.model.specs import Architecture, AttentionKind, Mlp, Norm, TrainingSpec

if TYPE_CHECKING:
    from trainplan.model.activations import ActivationContext

__all__ = ["eager_rows", "final_norm_eager", "final_norm_extra_bytes"]

Row = tuple[str, Fraction, str]


def _norm_rows(prefix: str, S: Fraction, h: int, beta: int, stats: bool) -> list[Row]:
    """One eager RMSNorm's saved tensors in place of its input (the module docstring)."""
    rows = [
        (f"{prefix} FP32 input copy (eager RMSNorm)", 4 * S * h, "sp"),
        (f"{prefix} normalised output before the weight (eager RMSNorm)", beta * S * h, "sp"),
    ]
    if stats:
        rows.append((f"{prefix} statistics (fp32 rstd)", 4 * S, "sp"))
    return rows


def eager_rows(rows: list[Row], arch: Architecture, moe: bool, ctx: ActivationContext) -> list[Row]:
    """``rows`` (:func:`model.activation_rows.attention_rows` + ``mlp_rows``) as autograd keeps
    them when torchtitan runs the layer's elementwise passes eagerly (the module docstring):
    each RMSNorm's input replaced by its FP32 copy and normalised output (and rstd under the
    ``paper`` convention), the repeated K and V (flash attention, not MLA), SiLU's output (a
    dense SwiGLU MLP; ``paper`` convention); a MoE layer's experts' and the attention sinks' rows
    (:func:`model.eager_moe.eager_expert_rows`, ``eager_sink_rows``). Rows in bytes before
    sharding, as ``rows``.

    Examples
    --------
    Llama 3 8B dimensions, S = 4 tokens, bf16, tp 1: the attention norm's input 2·4·4096 gives way
    to two norms' 4·4·4096 + 2·4·4096 + 4·4 each; K and V 2·2·4·(32 − 8)·128 more; SiLU's output
    2·4·14,336 (SDPA's log-sum-exp is :data:`model.activation_rows.SOFTMAX_LSE`, counted by
    ``attention_rows`` for ``fsdp2`` eager and compiled alike).

    >>> from trainplan.model.activations import ActivationContext
    >>> llama = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...     num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu", norm="rmsnorm")
    >>> ctx = ActivationContext(seq_len=4, cp=1, micro_batch_size=1, tp=1,
    ...     sequence_parallel=False, flash_attention=True)
    >>> before = [("attention norm input", Fraction(2 * 4 * 4096), "sp")]
    >>> after = eager_rows(before, llama, False, ctx)
    >>> sum(b for _, b, _ in after) == (
    ...     2 * (4 * 4 * 4096 + 2 * 4 * 4096 + 4 * 4) + 2 * 2 * 4 * 24 * 128 + 2 * 4 * 14336)
    True
    """
    if moe:  # the experts' and the sinks' operators, whatever the norm (model.eager_moe)
        rows = eager_expert_rows(rows, arch, ctx)
    rows = rows + eager_sink_rows(arch, ctx)
    if ctx.memory_efficient_norm or arch.norm is not Norm.RMSNORM:
        return rows
    S, beta, h, paper = (
        ctx.tokens,
        ctx.activation_bytes,
        arch.hidden_size,
        ctx.convention == "paper",
    )
    out = [r for r in rows if r[0] not in NORM_INPUTS]
    out += _norm_rows("attention norm", S, h, beta, paper) + _norm_rows(
        "MLP norm", S, h, beta, paper
    )
    if arch.attention is not AttentionKind.MLA and ctx.flash_attention:
        a, g, d = arch.num_attention_heads, arch.kv_heads, arch.dim_per_head
        if a > g:
            out.append(
                (
                    "K and V repeated to every head (eager repeat_kv)",
                    2 * beta * S * (a - g) * d,
                    "tp",
                )
            )
    if not moe and arch.mlp.gated and paper:  # GeGLU: F.gelu keeps its input as silu does
        act = (
            "SiLU output (eager SwiGLU)" if arch.mlp is Mlp.SWIGLU else "GELU output (eager GeGLU)"
        )
        out.append((f"MLP {act}", beta * S * arch.ffn_hidden_size, "tp"))
    return out


def final_norm_eager(arch: Architecture, training: TrainingSpec, framework: Any) -> bool:
    """Whether the output layer's norm keeps the eager RMSNorm's tensors (the module docstring):
    under ``fsdp2`` (torchtitan compiles the blocks only, ``compile`` or not) for an RMSNorm
    that is not a memory-efficient kernel; False for the other profiles (their final norm is a
    fused kernel keeping its input, :func:`model.end_stage_bytes.embedding_bytes`).

    >>> from trainplan.model.specs import TrainingSpec
    >>> llama = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                      ffn_hidden_size=32, vocab_size=16, norm="rmsnorm")
    >>> t = TrainingSpec(seq_len=4, global_batch_size=1)
    >>> final_norm_eager(llama, t, "fsdp2"), final_norm_eager(llama, t, "megatron")
    (True, False)
    """
    return (
        Framework(framework) is Framework.FSDP2
        and arch.norm is Norm.RMSNORM
        and not training.memory_efficient_norm
    )


def final_norm_extra_bytes(arch: Architecture, tokens: Any, sp_div: Any) -> Any:
    """Bytes the eager final RMSNorm keeps beyond the BF16 input
    :func:`model.end_stage_bytes.embedding_bytes` counts for it, per micro-batch on the last stage:
    its FP32 input copy ``4·S·h`` (saved by ``pow`` and by ``x · rsqrt``, one storage) and the
    FP32 ``rsqrt`` result ``4·S`` in place of nothing, the normalised BF16 tensor before the
    weight (``· weight`` saves it) in place of the input it replaces (``x.float()`` saves
    nothing): ``(4·h + 4)·S``, ÷ ``sp_div`` (the tensor-parallel degree where the norm is
    sequence-parallel, torchtitan's ``"norm": SequenceParallel()``). S = tokens of one
    micro-batch on this rank. Exact for Fractions, element-wise for arrays.

    Llama 3 70B, 16 × 8,192 tokens, tp 8: (4·8,192 + 4)·131,072 / 8 = 536,936,448 B.

    >>> llama = Architecture(num_layers=80, hidden_size=8192, num_attention_heads=64,
    ...     num_kv_heads=8, ffn_hidden_size=28672, vocab_size=128256, norm="rmsnorm")
    >>> final_norm_extra_bytes(llama, Fraction(131072), 8)
    Fraction(536936448, 1)
    """
    return (4 * arch.hidden_size + 4) * tokens / sp_div
