"""The tensors one transformer layer keeps for backward, row by row: (name, bytes before
sharding, how the row shards — ``tp``, ``sp``, ``score``, ``rep``, ``gathered``), for the
attention block (:func:`attention_rows`), the MLP or MoE block (:func:`mlp_rows`), and the
variants a recipe or a tensor-parallel plan makes of them (:func:`fp8_rows`,
:func:`model.tp_gathered_rows.gathered_rows`). :func:`model.activations.kind_activations` divides and sums them; the
tensors, their shapes and their sources are in :mod:`model.activations`' docstring."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from trainplan.model.context_parallel import CpKind, kv_repeat
from trainplan.model.mla_thd import mla_thd_rows
from trainplan.model.moe_working_set import deepspeed_gate_rows, torchtitan_router_rows
from trainplan.model.precision import E5M6_ACTIVATION_BYTES, FP8_LINEAR_INPUTS
from trainplan.model.specs import Architecture, AttentionKind, Mlp, Norm, PositionEmbedding
from trainplan.model.tp_gathered_rows import GATHERED_INPUTS, MOE_ROUTING_ROWS, gathered_rows
from trainplan.model.unfused_glu import unfused_glu_rows

if TYPE_CHECKING:
    from trainplan.model.activations import ActivationContext

__all__ = [
    "BIAS_DROPOUT_MASKS",
    "CLAMPED_GLU_COPY",
    "FP8_KEPT_ATTENTION_OUTPUT",
    "GATHERED_INPUTS",
    "HEAD_ALL_TO_ALL",
    "PRE_A2A_OUTPUT",
    "REPEATED_KV",
    "SOFTMAX_LSE",
    "MOE_ROUTING_ROWS",
    "NORM_INPUTS",
    "NORM_OUTPUTS",
    "attention_rows",
    "mlp_rows",
    "fp8_rows",
    "gathered_rows",
]


HEAD_ALL_TO_ALL = (CpKind.ULYSSES, CpKind.ULYSSES_KV_REPEAT, CpKind.HYBRID)
"""The flavours whose attention output crosses a head all-to-all back to the sequence shard,
which keeps the output twice (:data:`PRE_A2A_OUTPUT`)."""

PRE_A2A_OUTPUT = "attention output before the all-to-all back (head all-to-all CP)"
"""The row of the attention output the attention core keeps before the all-to-all back: a
head all-to-all flavour (:data:`HEAD_ALL_TO_ALL`) keeps the output twice, the core's copy
``[b, s, a/(tp·u), d]`` (the same bytes as ``[S, a·d/tp]``) and the all-to-all's new tensor,
which the output projection keeps ("output projection input"). Read from the code:
Transformer Engine d0067d0da
``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``
``AttnFuncWithCPAndQKVOA2A.forward`` saves ``out_part`` (the kernel's output) and returns the
tensor ``flash_attn_a2a_communicate`` builds (``torch.empty_like`` receive buffer, reordered);
``AttnFuncWithCPAndKVP2P.forward`` with ``cp_size_a2a > 1`` (a2a+p2p) saves
``out_part = out.to(dtype)`` and returns ``flash_attn_a2a_communicate(out, …)``; DeepSpeed
edaa72212 ``deepspeed/sequence/layer.py`` ``DistributedAttention.forward``:
``context_layer = self.local_attn(…)`` (FlashAttention saves its output) then
``_SeqAllToAll.apply`` (``single_all_to_all``: a new ``torch.empty_like`` buffer), which
Megatron-DeepSpeed's ``ParallelAttention`` rearranges into the ``dense`` projection's input;
verl b178a3cd5 ``verl/models/transformers/monkey_patch.py`` ``_ulysses_flash_attention_forward``:
``_flash_attention_forward`` then ``gather_heads_scatter_seq``. A *score* row: Megatron-Core's
selective recomputation (``core_attn``) checkpoints the attention module whole, the
all-to-all inside, and the checkpoint keeps only its output, the projection's input."""


REPEATED_KV = "K and V repeated to every head (Megatron-DeepSpeed repeat_kv)"
"""The row of the K and V heads Megatron-DeepSpeed's GQA attention repeats before its kernel
(:attr:`model.activations.ActivationContext.repeats_kv`): ``2·β·S·(a − g)·d`` beyond the
g-head K and V (*tp*: ``(a − g)/tp`` heads a rank). Read from the code,
deepspeedai/Megatron-DeepSpeed 6acc370a ``megatron/model/transformer.py``
``ParallelAttention.forward``: ``split_tensor`` takes q, k and v from the fused QKV output,
then ``repeat_kv`` (``expand`` then ``reshape``, a copy) gives K and V ``a/tp`` heads;
RoPE (``apply_rotary_pos_emb``: products with the cos and sin tables, which keep only the
tables) and FlashAttention (``FlashSelfAttention``, which saves its q, k, v) or the core
attention's ``baddbmm``/``bmm`` then keep the repeated tensors; DeepSpeed's Ulysses
(``DistributedAttention``) moves them over its all-to-all as they are, a/tp heads of s/cp
tokens, the same bytes."""


SOFTMAX_LSE = "softmax statistics (fp32 logsumexp)"
"""The row of FlashAttention's per-row softmax statistics, FP32 ``[b, a, s/cp]``: ``4·a·S``, a
*score* row (recomputed with the attention core under selective recomputation). Kept where the
profile's kernel keeps it (:attr:`model.activations.ActivationContext.saves_softmax_lse`), under
the ``pytorch`` convention and by torchtitan's eager SDPA (:mod:`model.eager_saved`)."""


BIAS_DROPOUT_MASKS = ("attention output dropout mask", "MLP dropout mask")
"""The rows of the bool masks the residual adds' dropouts keep, ``S·h`` bytes each (*sp*): where
the model has dropout (Korthikanti's count), and at any rate, p 0 included, where the
profile's bias-dropout-add is TorchScript's
(:attr:`model.activations.ActivationContext.bias_dropout_masks`). Read from the code,
deepspeedai/Megatron-DeepSpeed 6acc370a ``megatron/model/transformer.py``
``ParallelTransformerLayer.forward``: with ``bias_dropout_fusion`` (on unless
``--no-bias-dropout-fusion``, ``megatron/arguments.py``) both residual adds call
``bias_dropout_add_fused_train``, a ``@torch.jit.script`` function running
``torch.nn.functional.dropout(x, p=prob, training=True)`` then ``residual + out`` (bias None
under ``--disable-bias-linear``; the MoE path's ``torch.tensor(0.0)``); ``megatron/initialize.py``
``set_jit_fusion_options`` (torch ≥ 1.10) turns the profiling executor on and autodiff subgraph
inlining off, and ``_warmup_jit_function`` runs the function first, so TorchScript differentiates
it as a ``prim::DifferentiableGraph`` whose dropout is its symbolic script's (PyTorch
``torch/csrc/jit/runtime/symbolic_script.cpp`` ``dropout``: ``res, mask =
torch.native_dropout(input, p, train)``, ``mask`` kept for ``native_dropout_backward``);
``native_dropout_cuda`` (``aten/src/ATen/native/cuda/Dropout.cu``) short-cuts only ``train``
false and p = 1, so at p = 0 it writes a bool mask of the residual's shape, ``[s/tp, b, h]``
under sequence parallelism. Eager ``F.dropout`` at p 0 (Megatron-Core, torchtitan, Hugging Face
models) returns its input and keeps nothing. Checked on CPU with torch 2.13 and these flags:
one ``bool [s, b, h]`` saved per call at p 0, none eagerly."""


def _residual_mask(
    arch: Architecture, ctx: ActivationContext, name: str
) -> list[tuple[str, Fraction, str]]:
    """The residual add's dropout mask row ``name`` (:data:`BIAS_DROPOUT_MASKS`), or none."""
    keeps = arch.dropout or ctx.bias_dropout_masks
    return [(name, ctx.tokens * arch.hidden_size, "sp")] if keeps else []


def _mla_rows(arch: Architecture, S: Fraction, beta: int) -> list[tuple[str, Fraction, str]]:
    """MLA's attention rows (DeepSeek-V3): the norm input and its output, the query latent and
    its norm output (the q up-projection's input), the KV latent with the RoPE key and its norm
    output, Q, K, V and the output projection's input."""
    assert arch.mla is not None
    m, a, h = arch.mla, arch.num_attention_heads, arch.hidden_size
    qk = a * (m.qk_nope_head_dim + m.qk_rope_head_dim)
    rows = [
        ("attention norm input", beta * S * h, "sp"),
        ("attention projection input", beta * S * h, "sp"),
    ]
    if m.q_lora_rank is not None:
        rows += [
            ("query latent", beta * S * m.q_lora_rank, "sp"),
            ("query latent norm output", beta * S * m.q_lora_rank, "sp"),
        ]
    return rows + [
        ("kv latent with rope key", beta * S * (m.kv_lora_rank + m.qk_rope_head_dim), "sp"),
        ("kv latent norm output", beta * S * m.kv_lora_rank, "sp"),
        ("Q", beta * S * qk, "tp"),
        ("K", beta * S * qk, "tp"),
        ("V", beta * S * a * m.v_head_dim, "tp"),
        ("output projection input", beta * S * a * m.v_head_dim, "tp"),
    ]


def attention_rows(arch: Architecture, ctx: ActivationContext) -> list[tuple[str, Fraction, str]]:
    S, beta, a, s_cp = ctx.tokens, ctx.activation_bytes, arch.num_attention_heads, ctx.tokens
    h = arch.hidden_size
    if arch.attention is AttentionKind.MLA:
        rows = _mla_rows(arch, S, beta)
    else:
        d, g = arch.dim_per_head, arch.kv_heads
        rows = [
            ("attention norm input", beta * S * h, "sp"),
            ("QKV projection input", beta * S * h, "sp"),
            ("Q", beta * S * a * d, "tp"),
            ("K", beta * S * g * d, "tp"),
            ("V", beta * S * g * d, "tp"),
            ("output projection input", beta * S * a * d, "tp"),
        ]
        if arch.qk_norm:
            rows.append(("Q and K before QK-norm", beta * S * (a + g) * d, "tp"))
        if ctx.repeats_kv and a > g:  # the attention kernel keeps a-head copies of K and V
            rows.append((REPEATED_KV, 2 * beta * S * (a - g) * d, "tp"))
    scores = a * s_cp * ctx.seq_len  # elements of [b, a, s/cp, s]
    if not ctx.flash_attention:
        # eager attention: the whole [b, a, s/cp, s] score matrix with the mask added, whatever
        # the mask (a window or chunks store no less); a sink adds one column to the softmax
        sinks = a * s_cp if arch.attention_sinks else 0
        rows.append(("softmax output", beta * (scores + sinks), "score"))
        if arch.attention_softcapping:
            rows.append(("soft-capped scores (tanh output)", beta * scores, "score"))
        if arch.dropout:
            rows.append(("attention dropout mask", Fraction(scores), "score"))
            rows.append(("attention dropout output", beta * scores, "score"))
    elif ctx.saves_softmax_lse:  # the flash kernel's statistics, counted by its profile
        rows.append((SOFTMAX_LSE, 4 * a * S, "score"))
    out = a * (arch.mla.v_head_dim if arch.mla is not None else arch.dim_per_head)
    if ctx.cp > 1 and ctx.cp_kind is CpKind.ALL_GATHER:
        rows.append(("attention output per query chunk (all-gather CP)", beta * S * out, "score"))
    if ctx.cp > 1 and ctx.cp_kind in HEAD_ALL_TO_ALL:
        rows.append((PRE_A2A_OUTPUT, beta * S * out, "score"))
    copies = ctx.attention_output_copy and ctx.flash_attention and not ctx.fp8_linear_inputs
    if copies and ctx.micro_batch_size > 1:  # FlashAttention's output beside the [s, b] copy
        rows.append(("attention kernel output ([b, s] layout, kept)", beta * S * out, "tp"))
    rows += mla_thd_rows(arch, ctx)  # Megatron-Core's padded MLA value over packed documents
    rep = kv_repeat(ctx.cp_kind, ctx.cp, ctx.tp, arch) if ctx.cp > 1 else 1
    if rep > 1:  # verl's Ulysses: the core keeps the repeated K/V heads it received
        d, g = arch.dim_per_head, arch.kv_heads
        rows.append(
            ("repeated K and V (ulysses-kv-repeat)", (rep - 1) * 2 * beta * S * g * d, "tp")
        )
    rows += _residual_mask(arch, ctx, BIAS_DROPOUT_MASKS[0])
    if arch.post_norms:
        rows.append(("attention post-norm input", beta * S * h, "sp"))
    if ctx.convention == "pytorch":
        rows += _pytorch_attention_terms(arch, ctx)
    return rows


NORM_INPUTS = frozenset({"attention norm input", "MLP norm input"})
"""The rows a memory-efficient norm does not keep.

Memory-efficient norms (``ActivationContext.memory_efficient_norm``, from
``TrainingSpec.memory_efficient_norm``; Apex ``FusedLayerNorm`` / ``FusedRMSNorm`` with
``memory_efficient=True``, Megatron-LM ``--memory-efficient-layer-norm``): the layer's two norms
keep their output, which the next projection keeps anyway, and recover x̂ = (y − bias)/weight in
backward, so the "attention norm input" and "MLP norm input" rows (``2·β·S·h``, *sp*) go, and a
LayerNorm's statistics are fp32 rstd only (``4·S``). With it nothing keeps a layer's input, so a
pipeline stage's received input can be freed after the forward (Llama 3 §3.3.2). MLA's latent
norms are not affected. Measured in ``tests/fidelity``.
"""


def _norm_stats(
    arch: Architecture, name: str, S: Fraction, keeps_output: bool = False
) -> tuple[str, Fraction, str]:
    """fp32 per-token statistics a norm kernel keeps: LayerNorm mean and rstd, RMSNorm rstd; a
    memory-efficient LayerNorm (Apex) keeps rstd only (x̂ = (y − bias)/weight needs no mean)."""
    if arch.norm is Norm.LAYERNORM and not keeps_output:
        return (f"{name} statistics (fp32 mean, rstd)", 8 * S, "sp")
    return (f"{name} statistics (fp32 rstd)", 4 * S, "sp")


def _pytorch_attention_terms(
    arch: Architecture, ctx: ActivationContext
) -> list[tuple[str, Fraction, str]]:
    """What PyTorch's kernels keep besides the paper's tensors, attention half."""
    S, beta, a = ctx.tokens, ctx.activation_bytes, arch.num_attention_heads
    rows = [_norm_stats(arch, "attention norm", S, ctx.memory_efficient_norm)]
    if arch.attention is AttentionKind.MLA:
        assert arch.mla is not None
        if arch.mla.q_lora_rank is not None:
            rows.append(("query latent norm statistics (fp32 rstd)", 4 * S, "sp"))
        rows.append(("kv latent norm statistics (fp32 rstd)", 4 * S, "sp"))
    if arch.qk_norm:
        rows.append(("QK-norm statistics (fp32 rstd)", 4 * S * (a + arch.kv_heads), "tp"))
    if arch.post_norms:
        rows.append(_norm_stats(arch, "attention post-norm", S))
    if ctx.flash_attention and not ctx.saves_softmax_lse:  # else attention_rows lists it
        # FlashAttention's per-row softmax statistics [b, a, s/cp] in fp32; recomputed with the
        # attention core under selective recomputation, so listed with the score tensors.
        rows.append((SOFTMAX_LSE, 4 * a * S, "score"))
    if arch.position_embedding is PositionEmbedding.ROPE:
        rope = arch.mla.qk_rope_head_dim if arch.mla is not None else arch.dim_per_head
        # cos and sin [s/cp, d] kept by the rotation's multiplications; one pair per layer,
        # the same on every tp rank, independent of b.
        rows.append(
            ("rotary cos and sin tables", 2 * beta * Fraction(ctx.seq_len, ctx.cp) * rope, "rep")
        )
    return rows


def _swiglu_or_gelu(
    prefix: str, arch: Architecture, S: Fraction, ffn: int, ctx: ActivationContext
) -> list[tuple[str, Fraction, str]]:
    """A gated or GeLU MLP's rows; eager (:attr:`model.activations.ActivationContext.
    eager_swiglu`, or the ``pytorch`` convention): the gated activation runs op by op and keeps
    the activation's output too; Megatron-Core's unfused GeGLU (:attr:`~model.activations.
    ActivationContext.unfused_glu`) keeps that output and ``up + glu_linear_offset``."""
    beta = ctx.activation_bytes
    if arch.mlp.gated:
        unit, act = ("SwiGLU", "SiLU") if arch.mlp is Mlp.SWIGLU else ("GeGLU", "GELU")
        rows = [
            (f"{prefix} {unit} input (gate, up)", 2 * beta * S * ffn, "tp"),
            (f"{prefix} down projection input", beta * S * ffn, "tp"),
        ]
        eager = ctx.convention == "pytorch" or ctx.eager_swiglu
        if eager:
            # eager act(gate) * up: the product keeps the activation's output as well as up
            rows.append((f"{prefix} {act} output (eager {unit})", beta * S * ffn, "tp"))
        if ctx.unfused_glu and arch.mlp is Mlp.GEGLU:  # GELU's output not twice
            rows += unfused_glu_rows(prefix, S, ffn, beta, prefix == "routed expert")[eager:]
        return rows
    return [
        (f"{prefix} GeLU input", beta * S * ffn, "tp"),
        (f"{prefix} FC2 input", beta * S * ffn, "tp"),
    ]


CLAMPED_GLU_COPY = "routed expert clamped GLU input (the concatenated copy)"
"""The row of the second ``[k·S, 2·f_e]`` tensor a clamped gated activation keeps under
Megatron-Core (:attr:`model.activations.ActivationContext.clamp_copies_glu_input`): the
routed experts' activation input is kept twice, FC1's output and the clamped copy. Read from
the code, Megatron-LM d98e8a64dd ``megatron/core/fusions/fused_bias_geglu.py``
``weighted_bias_quick_geglu_impl`` with ``clamp_value`` (gpt-oss: Megatron Bridge 067f987d
``GPTOSSBridge`` sets ``activation_func = quick_gelu``, ``activation_func_clamp_value = 7.0``,
``bias_activation_fusion = True``; ``TEGroupedMLP.forward`` in ``moe/experts.py`` calls it
from ``bias_act_func``): ``input.chunk(2, -1)`` gives two views of FC1's output, each
``clamp`` saves its input for ``clamp_backward`` (PyTorch ``derivatives.yaml``:
``clamp: self``), so the whole ``[k·S, 2·f_e]`` storage stays; ``torch.cat`` of the clamped
halves makes a new ``[k·S, 2·f_e]`` tensor, which ``WeightedQuickGeGLUFunction.forward``
(``WeightedBiasQuickGeGLUFunction`` with a bias) saves with ``save_for_backward`` (BF16;
``activation_func_fp8_input_store`` is off by default). Sharded as the activation input
(*tp*: ``[k·S·etp/tp, 2·f_e/etp]`` on a rank). Under the recompute module ``moe_act``
(``CheckpointWithoutOutput`` runs ``bias_act_func`` without autograd) the layer keeps FC1's
output only, the checkpoint's input; the copy is made again in backward
(:func:`model.recompute_modules.recomputed_rows`)."""


# The router's saved [S, E] tensors: ctx.router_score_bytes per element, per MoE layer and micro-
# batch (model.moe_working_set.MEGATRON_ROUTER_SCORE_BYTES under megatron, one FP32 elsewhere).
def mlp_rows(
    arch: Architecture, index: int, ctx: ActivationContext
) -> list[tuple[str, Fraction, str]]:
    S, beta, h, conv = ctx.tokens, ctx.activation_bytes, arch.hidden_size, ctx.convention
    rows = [("MLP norm input", beta * S * h, "sp")]
    if not arch.is_moe_layer(index):
        rows.append(("FC1 input", beta * S * h, "sp"))
        rows += _swiglu_or_gelu("MLP", arch, S, arch.ffn_hidden_size, ctx)
    else:
        moe = arch.moe
        assert moe is not None
        k = moe.experts_per_token
        gathered = ctx.expert_tp if ctx.sequence_parallel else 1  # etp ranks' routed tokens
        ks, kr = (k * f for f in ctx.routed_row_factors(moe.num_experts, k))  # sent, received
        router = [("router and dispatch input", beta * S * h, "sp")]
        if ctx.deepspeed_gate:  # DeepSpeed's gate saves its FP32 input and routing tensors
            router = deepspeed_gate_rows(arch, S, beta, ks)
        elif ctx.fp32_router_autocast:  # torchtitan's gate runs under an FP32 autocast
            router = torchtitan_router_rows(arch, S, beta)
        # the router's FP32 [S, E] copies: one counted (see the note above this function)
        rows += router + [
            ("router probabilities (fp32)", ctx.router_score_bytes * S * moe.num_experts, "sp"),
            ("routed expert inputs (top-k copies)", kr * beta * S * h * gathered, "sp"),
        ]
        if ctx.permute_map_bytes:  # TE's fused permutation's int32 row map, [S, 2E + 1]
            map_bytes = ctx.permute_map_bytes * S * (2 * moe.num_experts + 1)
            rows.append(("token permutation row map (int32, fused)", map_bytes, "sp"))
        ffn_e = moe.expert_ffn_hidden_size
        rows += _swiglu_or_gelu("routed expert", arch, kr * S, ffn_e, ctx)
        if ctx.clamp_copies_glu_input and arch.glu_clamp and arch.mlp.gated:
            rows.append((CLAMPED_GLU_COPY, 2 * beta * kr * S * ffn_e, "tp"))
        combine = beta if ctx.combine_output_bytes is None else ctx.combine_output_bytes
        if combine:  # back on the source side, un-permuted after the combine's all-to-all
            kc = k if ctx.deepspeed_gate else ks  # DeepSpeed's [k, S] routes (moe_working_set)
            rows.append(("routed expert outputs for the combine", kc * combine * S * h, "sp"))
        else:  # the weighted activation keeps the fp32 weights of the routed tokens it sees
            rows.append(
                ("routing weights in the expert activation (fp32)", 4 * kr * S * gathered, "sp")
            )
        if moe.num_shared_experts:
            ffn = moe.num_shared_experts * moe.shared_ffn
            rows += _swiglu_or_gelu("shared expert", arch, S, ffn, ctx)
        if conv == "pytorch" and not ctx.deepspeed_gate:
            rows += [
                # topk keeps its int64 indices; permuting the k·S routed copies by expert and back
                # keeps two int64 index vectors (dispatch and combine gathers); the weights (β).
                ("router top-k indices (int64)", 8 * k * S, "sp"),
                ("token permutation indices (int64, dispatch and combine)", 16 * ks * S, "sp"),
                ("routing weights for the combine", beta * k * S, "sp"),
            ]
    if conv == "pytorch":
        rows.append(_norm_stats(arch, "MLP norm", S, ctx.memory_efficient_norm))
        if arch.post_norms:
            rows.append(_norm_stats(arch, "MLP post-norm", S))
    rows += _residual_mask(arch, ctx, BIAS_DROPOUT_MASKS[1])
    if arch.post_norms:
        rows.append(("MLP post-norm input", beta * S * h, "sp"))
    return rows


NORM_OUTPUTS = frozenset({"QKV projection input", "attention projection input", "FC1 input"})
"""The projection inputs that are a norm's output (shared with a memory-efficient norm)."""


_DEEPSEEK_SWIGLU_INPUTS = frozenset(
    {"routed expert SwiGLU input (gate, up)", "shared expert SwiGLU input (gate, up)"}
)
"""The SwiGLU operators "in MoE" whose inputs DeepSeek-V3 caches in FP8 and whose outputs it
recomputes (arXiv 2412.19437 §3.3.3, "Low-Precision Activation" (2): "Inputs of the SwiGLU
operator in MoE. To further reduce the memory cost, we cache the inputs of the SwiGLU operator
and recompute its output in the backward pass. These activations are also stored in FP8"): the
routed experts' and the shared expert's, both of the MoE module (deepseek-ai/DeepSeek-V3
``inference/model.py``: ``MoE.__init__`` builds ``self.experts`` and ``self.shared_experts``;
a dense layer's ``MLP`` is not in it). The routed experts' output is recomputed by the recompute
module ``moe_act``; the shared expert's by the storage itself (Megatron-Core's ``moe_act``
covers the grouped experts only)."""


FP8_KEPT_ATTENTION_OUTPUT = "attention output (BF16, kept by the attention kernel)"
"""The row :func:`fp8_rows` gives the BF16 attention output the attention kernel keeps beside
the output projection's FP8 input."""


MLA_SECOND_DOWN_PROJECTION = "attention projection input (FP8, the second down-projection's copy)"
"""Under FP8, MLA's second linear on the attention norm's output keeps its own quantised copy:
Megatron-Core's MLA layer spec (``megatron/core/models/gpt/gpt_layer_specs.py``, the MLA branch
without ``mla_down_proj_fusion``, False by default in ``transformer_config.py``) builds
``linear_q_down_proj`` (``linear_q_proj`` without a query latent) and ``linear_kv_down_proj`` as
two Transformer Engine linears, and ``MLASelfAttention._qkv_down_projection``
(``multi_latent_attention.py``) calls both on the same ``hidden_states``; each ``_Linear.forward``
(``transformer_engine/pytorch/module/linear.py``) quantises its input with its own quantizer and
saves that copy. In BF16 both save the one tensor (one row). Its base name is the projection
input's, so recomputing the norm (``layernorm``) drops it with the first copy. Counted where the
linears are Transformer Engine's (:attr:`model.activations.ActivationContext.te_linears`), not
for the ``textbook`` profile: DeepSeek-V3's report (§3.3.3) caches a linear's input in FP8 and
says nothing of two copies of one input."""


def fp8_rows(
    rows: list[tuple[str, Fraction, str]], ctx: ActivationContext
) -> list[tuple[str, Fraction, str]]:
    """The rows under ``precision = fp8``: each linear layer's saved input at
    :data:`model.precision.FP8_ACTIVATION_BYTES` per element instead of β (Transformer Engine
    ``transformer_engine/pytorch/module/linear.py`` ``_Linear.forward`` saves the quantized
    ``inputmat``); with memory-efficient norms the norm's BF16 output stays and the FP8 copy is
    added. The attention output stays BF16 where the fused/flash attention kernel keeps it for
    its own backward (``attention/dot_product_attention/backends.py`` ``FusedAttnFunc.forward``
    saves ``q, k, v, out_f16`` unless FP8 attention is on, which Megatron-Core's default recipe
    leaves off): the output projection keeps its FP8 copy beside it, and the BF16 output is
    recomputed with the attention core under selective recomputation (a score term); under
    Megatron-Core's recipes other than ``delayed`` the projection saves that BF16 output itself
    and no FP8 copy (:attr:`model.activations.ActivationContext.fp8_proj_saves_original`), so it
    stays a BF16 row; so does the routed experts' FC1 input under the ``expert_fc1`` offload
    other than MXFP8 (:attr:`~model.activations.ActivationContext.fp8_expert_fc1_saves_original`).
    MLA's norm output is quantised twice (:data:`MLA_SECOND_DOWN_PROJECTION`). The shared
    experts' FC1 keeps an FP8 copy of the router's BF16 input only where it does not save that
    input itself (:attr:`~model.activations.ActivationContext.fp8_shared_fc1_saves_original`)."""
    scale = Fraction(ctx.fp8_input_bytes) / ctx.activation_bytes
    deepseek = ctx.fp8_activation_storage == "deepseek_v3"
    out = []
    for name, value, kind in rows:
        if deepseek and name == "output projection input":
            # §3.3.3 (1): one E5M6 copy serves the attention core's and the projection's backward
            e5m6 = value * E5M6_ACTIVATION_BYTES / ctx.activation_bytes
            out.append((f"{name} (E5M6, the attention output)", e5m6, kind))
        elif deepseek and name in _DEEPSEEK_SWIGLU_INPUTS:
            out.append((f"{name} (FP8)", value * scale, kind))  # §3.3.3 (2)
        elif deepseek and name == "shared expert down projection input":
            continue  # §3.3.3 (2): the SwiGLU output recomputed from its cached input
        elif name not in FP8_LINEAR_INPUTS:
            out.append((name, value, kind))
        elif name == "output projection input" and ctx.fp8_proj_saves_original:
            out.append((name, value, kind))  # the BF16 output the attention kernel keeps too
        elif name == "routed expert inputs (top-k copies)" and ctx.fp8_expert_fc1_saves_original:
            out.append((name, value, kind))  # FC1 saves its BF16 input (the expert_fc1 offload)
        elif ctx.memory_efficient_norm and name in NORM_OUTPUTS:
            out += [(name, value, kind), (f"{name} (FP8 copy)", value * scale, kind)]
        elif name == "output projection input" and ctx.flash_attention:
            out += [
                (FP8_KEPT_ATTENTION_OUTPUT, value, "score"),
                (f"{name} (FP8)", value * scale, kind),
            ]
        else:
            out.append((f"{name} (FP8)", value * scale, kind))
    names = {r[0] for r in rows}
    if "attention projection input" in names and ctx.te_linears:
        # MLA: two linears read the norm's output, each saving its own quantised copy
        value = dict((r[0], r[1]) for r in rows)["attention projection input"]
        out.append((MLA_SECOND_DOWN_PROJECTION, value * scale, "sp"))
    shared = any(n.startswith("shared expert") for n in names)
    if "router and dispatch input" in names and shared and not ctx.fp8_shared_fc1_saves_original:
        # the router keeps the BF16 input; the shared experts' FC1 saves its own FP8 copy
        value = dict((r[0], r[1]) for r in rows)["router and dispatch input"]
        out.append(("shared expert FC1 input (FP8)", value * scale, "sp"))
    return out
