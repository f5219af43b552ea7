"""The working set of a scoring role's forward under ``torch.no_grad()``: what one transformer
layer holds at its peak when nothing is saved for backward (a reward model's or critic's
scoring, which computes no logits, holds this beside its weights).

A scoring forward (verl ``compute_log_prob`` / ``compute_ref_log_prob`` / ``compute_values`` /
``compute_rm_score``, run under ``torch.no_grad()``) keeps no layer's tensors: each layer's
temporaries are freed when the layer returns. At any moment the GPU holds the current layer's
live tensors only, so the forward's activation peak is one layer's largest step. Notation, per
GPU and micro-batch: ``S = b·s`` tokens, β bytes per activation element (2, BF16),
``n = β·S·h``/tp with sequence
parallelism (a hidden-state shard), ``H = β·S·h`` (the whole one), ``Q, KV, O``
(:func:`model.context_parallel.attention_dims`) and the FFN width ``f``, each ÷ tp.

Where the tensors come from (HF transformers ``models/llama/modeling_llama.py``, the model verl's
FSDP workers and OpenRLHF's DeepSpeed roles run; Megatron-LM d98e8a64dd
``megatron/core/transformer/transformer_block.py`` / ``transformer_layer.py`` / ``mlp.py``, the
model verl's Megatron workers run):

* the layer's input: the caller's loop (``LlamaModel.forward``: ``hidden_states =
  decoder_layer(hidden_states, ...)``; ``TransformerBlock.forward`` the same) holds it until the
  layer returns — ``n`` through the whole layer;
* the block's normalised input, whole where the block gathers the sequence shard (Transformer
  Engine's ``LayerNormLinear`` holds ``ln_out_total`` through the QKV / FC1 GEMM; torchtitan's
  plan replicates it, ``fsdp2``): counted ``H`` for every profile, an upper bound by ``H − n`` at
  Megatron-Core's SwiGLU step, where the gathered copy is already freed;
* attention (``LlamaAttention.forward``): Q, K, V, then ``apply_rotary_pos_emb``'s
  ``(q * cos) + (rotate_half(q) * sin)``, three Q-sized temporaries alive at once; or at the
  output projection the attention output and the projection's whole output ``H`` (before the
  tensor-parallel reduction): ``n + H + Q + KV + max(3·Q, O + H)``;
* the MLP (``LlamaMLP.forward``: ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``; Megatron-Core
  ``MLP.forward``: ``linear_fc1`` [S, 2f] then ``bias_swiglu_impl`` [S, f]): the attention
  block's residual sum ``n`` beside the layer input, the normalised input, and three f-wide
  tensors at the product (act(gate), up, product; fc1's output and the SwiGLU's), two for a
  GELU MLP (fc1's output and the activation): ``2·n + H + 3·β·S·f`` (gated);
* a MoE layer: ``2·n + H`` and the routed tokens' copies alive at the combine,
  :func:`model.moe_working_set.moe_forward_working_set` (ep 1: the RLHF layouts have no expert
  parallelism), one cost model for the training and the scoring forward.

The reward model's and critic's head (verl ``AutoModelForTokenClassification`` with one label;
``compute_values`` and ``compute_rm_score`` under ``torch.no_grad()``, ``verl/workers/critic/
dp_critic.py``, ``fsdp_workers.py``) writes ``[S, 1]``: nothing beside the layer's step. The
actor's and reference's logits and their log-prob transient (:mod:`model.rlhf.logits`) follow the
last layer on the last stage:
the scoring figure there is the larger of the two (``model.rlhf.network._scoring``; under
``--logits fused`` one 2,048-token chunk, often below the layer's step).

The RMSNorm's FP32 temporaries (``hidden_states.to(torch.float32)`` and its normalised copy,
``8·S·h`` beside ``2·n``) stay below the MLP step for every FFN at least ~1.5·h wide; the
attention kernel's own workspace (FlashAttention's logsumexp, ``4·a·S``) and shared experts'
outputs are not counted.
"""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.context_parallel import attention_dims
from trainplan.model.frameworks import Framework
from trainplan.model.moe_working_set import moe_forward_working_set
from trainplan.model.specs import Architecture

__all__ = ["scoring_forward_bytes"]


def scoring_forward_bytes(
    arch: Architecture,
    framework: Framework,
    tokens: int,
    tp: int,
    sequence_parallel: bool,
    beta: int = 2,
) -> Fraction:
    """Bytes one layer of ``arch`` holds at the peak of a no-grad forward over ``tokens``
    tokens (``b·s``) on a rank of ``tp``, ``beta`` bytes per activation element (module
    docstring): the largest of its attention step, its dense MLP step (if any layer is dense)
    and its MoE step (if any layer is MoE). A scalar of bytes on one GPU.

    Examples
    --------
    llama3-70b (h 8,192, 64 heads, 8 KV heads, f 28,672) at b 3 × s 5,120 = 15,360 tokens, tp 1:
    attention ``n + H + Q + KV + max(3·Q, O + H)`` = 2·15,360·(8,192·(1 + 1 + 1 + 3) + 2,048)
    = 1.573 GB; MLP ``2·n + H + 3·β·S·f`` = 2·15,360·(3·8,192 + 3·28,672) = 3.397 GB.

    >>> from trainplan.model.arch_parts import Mlp
    >>> from trainplan.model.specs import Architecture
    >>> llama = Architecture(num_layers=80, hidden_size=8192, num_attention_heads=64,
    ...     num_kv_heads=8, ffn_hidden_size=28672, vocab_size=128256, mlp=Mlp.SWIGLU)
    >>> scoring_forward_bytes(llama, Framework.DEEPSPEED, 15360, 1, False)
    Fraction(3397386240, 1)
    """
    S, h = Fraction(tokens), arch.hidden_size
    H = beta * S * h
    n = H / tp if sequence_parallel else H
    q, kv, o = attention_dims(arch)
    Q, KV, Ob = (beta * S * x / tp for x in (q, kv, o))
    steps = [n + H + Q + KV + max(3 * Q, Ob + H)]
    if arch.num_moe_layers < arch.num_layers:
        steps.append(
            2 * n + H + (3 if arch.mlp.gated else 2) * beta * S * arch.ffn_hidden_size / tp
        )
    if arch.num_moe_layers:
        # the routed rows: the sequence shard, or the gathered tokens where torchtitan's plan
        # routes them at ep 1 (model.terms.moe_working.moe_forward_figure)
        routed = S / tp if sequence_parallel and framework is not Framework.FSDP2 else S
        steps.append(2 * n + H + moe_forward_working_set(arch, framework, routed, beta, 1, 1,
                                                         False, False))  # fmt: skip
    return max(steps)
