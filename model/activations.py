"""Activation bytes one transformer layer keeps for backward, per GPU, per micro-batch.

Korthikanti et al. 2022 (arXiv 2205.05198) §4, 16-bit activations and 1-byte dropout masks. Each
stored tensor is listed by name with its shape; ``S = (s/cp)·b`` tokens on this rank. A tensor
is divided by tp either always (it has a head or FFN dim split by tp: *tp*) or only with sequence
parallelism (it has the full hidden dim and is sequence-sharded: *sp*).

GPT layer (LayerNorm, MHA, 4h GeLU MLP, dropout) — reduces exactly to Korthikanti's
``34·s·b·h + 5·a·s²·b`` (Table 2):

=============================  ==============  =====  =========================
tensor                         shape           sharded bytes (β = 2)
=============================  ==============  =====  =========================
attention LayerNorm input      [S, h]          sp     2·S·h
QKV projection input           [S, h]          sp     2·S·h
Q, K (for QKᵀ)                 [S, a·d],[S,g·d] tp    2·S·a·d + 2·S·g·d
softmax output                 [b, a, s/cp, s] tp     2·a·s_cp·s·b
attention dropout mask         [b, a, s/cp, s] tp     1·a·s_cp·s·b
attention dropout output       [b, a, s/cp, s] tp     2·a·s_cp·s·b
V (for scores·V)               [S, g·d]        tp     2·S·g·d
output projection input        [S, a·d]        tp     2·S·a·d
attention output dropout mask  [S, h]          sp     1·S·h
MLP LayerNorm input            [S, h]          sp     2·S·h
FC1 input                      [S, h]          sp     2·S·h
GeLU input                     [S, f]          tp     2·S·f
FC2 input (GeLU output)        [S, f]          tp     2·S·f
MLP dropout mask               [S, h]          sp     1·S·h
=============================  ==============  =====  =========================

With a = g, a·d = h, f = 4h: 2+2+4+2+2+1+2+2+8+8+1 = 34 S·h, and 2+1+2 = 5 a·s·S. Without
sequence parallelism the *sp* rows (10·S·h) are not divided by tp: Korthikanti's
``s·b·h·(10 + 24/t + 5·a·s/(h·t))``.

Variants, derived the same way:

* GQA (g < a): K and V are ``[S, g·d]``; Q and the output-projection input stay ``[S, a·d]``.
* SwiGLU (3 matrices, Llama): the activation saves its input, gate and up ``2·[S, f]``
  (Megatron-LM's fused ``bias_swiglu`` recomputes SiLU from it), and the down projection its
  input ``[S, f]``: ``6·S·f`` bytes instead of GeLU's ``4·S·f``. (PyTorch eager also keeps
  SiLU's output: ``8·S·f``; measured in the fidelity suite.)
* No dropout (Llama, Mixtral, DeepSeek): no masks and no dropout output; the softmax output is
  what scores·V uses: ``2·a·s_cp·s·b`` instead of ``5·…``.
* FlashAttention: no ``[b, a, s, s]`` tensor is stored (the conventions drop the 5·a term; the kernel's
  per-row softmax statistics, 4·a·S bytes in fp32, are left out by that convention).
* Without FlashAttention the score tensors are the whole ``[b, a, s/cp, s]`` whatever the mask:
  eager attention (Hugging Face's ``eager_attention_forward``, Megatron's unfused softmax) adds a
  causal, sliding-window or chunked mask to the full score matrix, so windows and chunks save no
  score memory there (windowed attention in Megatron-Core/Transformer Engine runs only in the
  flash/fused backends, which store none). Attention sinks (gpt-oss) add one column to the
  softmax, ``[b, a, s/cp, s + 1]``; logit soft-capping (Gemma 2) keeps tanh's output, one more
  ``β·a·s_cp·s``.
* QK-norm (Qwen3, Gemma 3): the norms keep their inputs, Q and K before normalisation,
  ``β·S·(a + g)·d`` (*tp*), besides the normalised Q and K.
* Post-norms (Gemma 2/3's norm after the attention and after the FFN): each keeps its input,
  ``β·S·h`` (*sp*).
* MoE FFN (top-k routing, SwiGLU experts): the norm input, the router/dispatch input ``[S, h]``,
  the router's fp32 probabilities ``[S, E]`` (4 B), and per routed copy of a token (k of them):
  the expert input ``[S, h]``, the activation input ``2·[S, f_e]``, the down-projection input
  ``[S, f_e]`` and the expert output ``[S, h]`` kept for the weighted combine
  (``combine_output_bytes`` per element: β in the paper's count, none in Megatron-Core, which
  weights inside the expert activation and keeps the fp32 weights ``4·k·S`` instead, fp32 in
  torchtitan); shared experts as
  a dense SwiGLU of ``n_shared · f_shared``. Expert tensors are counted sequence-sharded, as with
  expert tensor-parallel degree 1 or an all-to-all over tp·ep; with etp > 1 (``expert_tp``) the
  experts' input holds the tokens the etp group all-gathered, ``k·β·S·h·etp/tp`` (the
  activation's and the down projection's inputs, ``[k·S·etp/tp, f_e/etp]``, are unchanged).
* Context parallelism (:mod:`model.context_parallel`): every flavour keeps the local tensors
  above, of ``S = (s/cp)·b`` tokens — the ring keeps the last K/V chunk it received instead of
  its own (the same bytes), Ulysses its Q, K, V after the all-to-all (s tokens of a/cp heads:
  the same bytes) and the output after the all-to-all back, which is the output projection's
  input. The all-gather flavour (Transformer Engine ``AttnFuncWithCPAndKVAllGather``) also
  keeps the attention output of each of its two query chunks apart from the merged output the
  projection keeps: ``[S, a·d]`` (*tp*; recomputed with the attention core under selective
  recomputation). verl's Ulysses (``ulysses-kv-repeat``) keeps the K/V heads it repeated
  before the all-to-all: (r − 1) more copies of the local K and V, r =
  :func:`model.context_parallel.kv_repeat`. The buffers the exchange holds while a layer runs
  are a transient (:func:`model.context_parallel.cp_transient_bytes`).
* MLA (DeepSeek-V3): both norm inputs ``[S, h]`` and the shared projection input ``[S, h]``, the
  query latent before and after its RMSNorm ``2·[S, q_lora]``, the KV latent with the RoPE key
  ``[S, kv_lora + rope]`` and normalised ``[S, kv_lora]`` (all *sp*); Q and K
  ``[S, a·(nope+rope)]`` each, V and the output-projection input ``[S, a·v_head]`` (*tp*).

Tensor parallelism through PyTorch DTensor (``ActivationContext.gathered_block_inputs``; the
``fsdp2`` profile, torchtitan's plan in ``torchtitan/models/common/decoder_sharding.py``): the
norms are ``SequenceParallel`` and keep their sequence-sharded inputs (*sp*), but the attention
and MLP blocks redistribute their input from the sequence shard to ``Replicate`` before the
column-parallel projections, and autograd keeps that all-gathered tensor: the QKV and FC1 inputs
``[S, h]`` are whole on every tp rank (Megatron-Core's ``LinearWithGradAccumulationAndAsync
Communication.forward`` in ``megatron/core/tensor_parallel/layers.py`` saves the shard and
all-gathers it again in backward). MLA's latents run replicated on the gathered tokens; a MoE
layer with ep = 1 routes the gathered tokens (:data:`MOE_ROUTING_ROWS`), with ep > 1 the
sequence shard, its shared experts gathering their own input. Measured on CPU through DTensor
on a gloo group (``tests/fidelity/test_tp_dtensor.py``).

Conventions (``ActivationContext.convention``, from ``TrainingSpec.activation_convention``):
``paper`` (the default) is the count above. ``pytorch`` adds, as named terms, what PyTorch's
kernels keep besides, measured on real layers in ``tests/fidelity`` (docs/fidelity-layers.md):
norm statistics in fp32 per token (LayerNorm mean and rstd ``8·S``, RMSNorm rstd ``4·S``, per
norm, *sp*); FlashAttention's logsumexp ``4·a·S`` (*tp*; a score term, so selective
recomputation drops it); RoPE's cos and sin tables ``2·β·(s/cp)·d`` (not sharded); eager
SwiGLU's SiLU output ``β·S·f`` (*tp*); for MoE, the top-k indices ``8·k·S``, the permutation's
two int64 index vectors ``16·k·S`` and the routing weights ``β·k·S`` (*sp*).

Memory-efficient norms (``ActivationContext.memory_efficient_norm``, from
``TrainingSpec.memory_efficient_norm``; Apex ``FusedLayerNorm`` / ``FusedRMSNorm`` with
``memory_efficient=True``, Megatron-LM ``--memory-efficient-layer-norm``): the layer's two norms
keep their output, which the next projection keeps anyway, and recover x̂ = (y − bias)/weight in
backward, so the "attention norm input" and "MLP norm input" rows (``2·β·S·h``, *sp*) go, and a
LayerNorm's statistics are fp32 rstd only (``4·S``). With it nothing keeps a layer's input, so a
pipeline stage's received input can be freed after the forward (Llama 3 §3.3.2). MLA's latent
norms are not affected. Measured in ``tests/fidelity``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from trainplan.model.context_parallel import CpKind, kv_repeat
from trainplan.model.errors import InputError
from trainplan.model.op_checkpoint import op_selective_bytes
from trainplan.model.precision import (
    E5M6_ACTIVATION_BYTES,
    FP8_ACTIVATION_BYTES,
    FP8_LINEAR_INPUTS,
)
from trainplan.model.recompute_modules import recomputed_rows
from trainplan.model.specs import Architecture, AttentionKind, Mlp, Norm, PositionEmbedding

__all__ = [
    "CONVENTIONS",
    "GATHERED_INPUTS",
    "MOE_ROUTING_ROWS",
    "ActivationContext",
    "LayerActivations",
    "layer_activations",
    "kind_activations",
]

CONVENTIONS = ("paper", "pytorch")
"""Activation conventions: ``paper`` (the default) and ``pytorch``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivationContext:
    """What the per-layer activation bytes depend on besides the architecture."""

    seq_len: int
    """s, full sequence length (keys each query meets)."""
    cp: int
    """Context-parallel degree; this rank holds s/cp queries."""
    micro_batch_size: int
    """b."""
    tp: int
    sequence_parallel: bool
    flash_attention: bool
    activation_bytes: int = 2
    """β, bytes per activation element."""
    convention: str = "paper"
    """``paper`` (Korthikanti's count, fused Megatron kernels) or ``pytorch`` (adds what PyTorch
    kernels keep besides: norm statistics, FlashAttention's logsumexp, SiLU's output, rotary
    tables, MoE routing indices; measured in ``tests/fidelity``)."""
    memory_efficient_norm: bool = False
    """Norms keep their output instead of their input (Apex ``memory_efficient=True``): no
    "attention norm input" / "MLP norm input" rows; a LayerNorm keeps fp32 rstd only."""
    fp8_linear_inputs: bool = False
    """The linear layers save their inputs in FP8 (``precision = fp8``, Transformer Engine):
    the rows of :data:`model.precision.FP8_LINEAR_INPUTS` hold 1 byte per element instead of
    β. With memory-efficient norms the norm keeps its BF16 output for itself, so the QKV and
    FC1 inputs stay at β and their FP8 copies are added."""
    fp8_input_bytes: Fraction = Fraction(FP8_ACTIVATION_BYTES)
    """Bytes per element of a linear layer's FP8-saved input with its scales
    (:func:`model.precision.fp8_activation_bytes` of the recipe: 1, MXFP8 1 + 1/32)."""
    cp_kind: CpKind = CpKind.RING
    """How the cp ranks exchange attention's inputs (:mod:`model.context_parallel`); with cp > 1
    the all-gather flavour keeps one more tensor (the module docstring)."""
    offload_modules: tuple[str, ...] = ()
    """Megatron-Core modules whose saved tensors go to the host (:mod:`model.activation_offload`):
    :func:`layer_activations` still lists every tensor; :func:`model.stage_bytes.layer_quantities`
    leaves the offloaded ones off the GPU's per-layer figures."""
    gathered_block_inputs: bool = False
    """The tensor-parallel plan all-gathers the sequence-parallel shard into a tensor replicated
    over the tp ranks at the attention and MLP blocks' inputs, and the projections save that
    whole tensor (PyTorch DTensor ``PrepareModuleInput(desired_input_layouts=Replicate())``
    ahead of ``ColwiseParallel``, torchtitan's plan; the ``fsdp2`` profile): the rows of
    :func:`gathered_rows` are not divided by tp. Megatron-Core's linear layers save the shard
    and gather it again in backward (Korthikanti's count, False)."""
    expert_tp: int = 1
    """Expert tensor-parallel degree whose group all-gathers the routed tokens before the
    experts (Megatron-Core ``MoEAlltoAllTokenDispatcher.token_dispatch``: after the all-to-all
    over ep, ``gather_from_sequence_parallel_region(global_input_tokens, group=self.tp_group)``
    over the expert-TP group): with sequence parallelism the experts' first linear layer keeps
    etp ranks' routed tokens, ``k·β·S·h·etp/tp``. 1 where the profile gathers none (the
    textbook's convention; ``fsdp2``, whose routed tokens follow ``gathered_block_inputs``)."""
    combine_output_bytes: int | None = None
    """Bytes per element of the routed experts' outputs the weighted combine keeps for the
    routing weights' gradient: None = β (an eager ``output · weight`` product, the paper
    convention); 0 where the weights are applied inside the expert activation and the combine
    is a plain un-permute (Megatron-Core: ``experts.py`` ``TEGroupedMLP.forward`` calls
    ``weighted_bias_swiglu_impl(..., permuted_probs)``, ``MoEAlltoAllTokenDispatcher.
    combine_postprocess`` calls ``unpermute`` without probs), which keeps the fp32 routing
    weights instead; 4 where the combine multiplies an fp32 copy (torchtitan
    ``token_dispatcher.py`` ``combine``: ``routed_output.to(torch.float32) * scores``)."""
    ep: int = 1
    """Expert-parallel degree (with ``gathered_block_inputs``: torchtitan routes a MoE layer's
    tokens on the gathered tensor when ep = 1 and on the sequence shard when ep > 1)."""
    op_selective: bool = False
    """Selective recomputation is torchtitan's op-level policy (the ``fsdp2`` profile,
    :mod:`model.op_checkpoint`): a dense flash-attention layer keeps the block input, every other
    matmul output and the attention kernel's outputs, and ``selective_bytes`` is that sum;
    False is Korthikanti et al.'s (every tensor but the attention core's)."""
    recompute_modules: tuple[str, ...] = ("core_attn",)
    """Megatron-Core's ``--recompute-modules`` under selective recomputation
    (:mod:`model.recompute_modules`): ``selective_bytes`` leaves out the rows they drop. The
    default, the attention core, is Korthikanti's selective recomputation."""
    fp8_activation_storage: str = "linear_inputs"
    """With ``fp8_linear_inputs``: ``deepseek_v3`` keeps the attention output once in E5M6
    and the routed experts' SwiGLU input in FP8 (DeepSeek-V3 §3.3.3;
    :data:`model.precision.FP8_ACTIVATION_STORAGE`)."""
    fp8_gemms: bool = False
    """The linear layers run FP8 GEMMs (``precision = fp8``); with ``op_selective`` every GEMM
    output is kept (``aten._scaled_mm`` is in the save list, outside the every-other-mm count)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cp_kind", CpKind(self.cp_kind))
        if self.convention not in CONVENTIONS:
            raise InputError(
                f"activation_convention: {self.convention!r} is not one of {', '.join(CONVENTIONS)}"
            )

    @property
    def tokens(self) -> Fraction:
        """S = (s/cp)·b tokens on this rank per micro-batch."""
        return Fraction(self.seq_len, self.cp) * self.micro_batch_size


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Bytes of one layer, per GPU, per micro-batch, by named tensor."""

    terms: tuple[tuple[str, Fraction], ...]
    """(tensor name, bytes) for everything kept with no recomputation."""
    score_names: frozenset[str]
    """The tensors the attention core makes and selective recomputation drops: the [b, a, s, s]
    score tensors (absent with FlashAttention), FlashAttention's statistics, the all-gather
    flavour's per-chunk outputs."""
    checkpoint_bytes: Fraction
    """The layer input kept by full or √n recomputation: ``β·S·h`` (÷ tp with SP)."""
    full_bytes: Fraction
    """Everything the layer keeps without recomputation (the sum of ``terms``)."""
    selective_bytes: Fraction
    """Kept with selective recomputation (the attention-score tensors recomputed)."""
    input_bytes: Fraction
    """The layer's input among ``terms`` (the attention norm input, ``checkpoint_bytes``; 0 with
    memory-efficient norms): the storage a recomputation checkpoint shares with the layer."""


def _mask(arch: Architecture) -> int:
    return 1 if arch.dropout else 0


def _attention_terms(arch: Architecture, ctx: ActivationContext) -> list[tuple[str, Fraction, str]]:
    S, beta, a, s_cp = ctx.tokens, ctx.activation_bytes, arch.num_attention_heads, ctx.tokens
    h = arch.hidden_size
    if arch.attention is AttentionKind.MLA:
        assert arch.mla is not None
        m = arch.mla
        qk = a * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        rows = [
            ("attention norm input", beta * S * h, "sp"),
            ("attention projection input", beta * S * h, "sp"),
        ]
        if m.q_lora_rank is not None:
            rows.append(("query latent and its norm output", 2 * beta * S * m.q_lora_rank, "sp"))
        rows += [
            ("kv latent with rope key", beta * S * (m.kv_lora_rank + m.qk_rope_head_dim), "sp"),
            ("kv latent norm output", beta * S * m.kv_lora_rank, "sp"),
            ("Q", beta * S * qk, "tp"),
            ("K", beta * S * qk, "tp"),
            ("V", beta * S * a * m.v_head_dim, "tp"),
            ("output projection input", beta * S * a * m.v_head_dim, "tp"),
        ]
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
    if ctx.cp > 1 and ctx.cp_kind is CpKind.ALL_GATHER:
        out = a * (arch.mla.v_head_dim if arch.mla is not None else arch.dim_per_head)
        rows.append(("attention output per query chunk (all-gather CP)", beta * S * out, "score"))
    rep = kv_repeat(ctx.cp_kind, ctx.cp, ctx.tp, arch) if ctx.cp > 1 else 1
    if rep > 1:  # verl's Ulysses: the core keeps the repeated K/V heads it received
        d, g = arch.dim_per_head, arch.kv_heads
        rows.append(
            ("repeated K and V (ulysses-kv-repeat)", (rep - 1) * 2 * beta * S * g * d, "tp")
        )
    if arch.dropout:
        rows.append(("attention output dropout mask", _mask(arch) * S * h, "sp"))
    if arch.post_norms:
        rows.append(("attention post-norm input", beta * S * h, "sp"))
    if ctx.convention == "pytorch":
        rows += _pytorch_attention_terms(arch, ctx)
    return rows


NORM_INPUTS = frozenset({"attention norm input", "MLP norm input"})
"""The rows a memory-efficient norm does not keep."""


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
    if ctx.flash_attention:
        # FlashAttention's per-row softmax statistics [b, a, s/cp] in fp32; recomputed with the
        # attention core under selective recomputation, so listed with the score tensors.
        rows.append(("softmax statistics (fp32 logsumexp)", 4 * a * S, "score"))
    if arch.position_embedding is PositionEmbedding.ROPE:
        rope = arch.mla.qk_rope_head_dim if arch.mla is not None else arch.dim_per_head
        # cos and sin [s/cp, d] kept by the rotation's multiplications; one pair per layer,
        # the same on every tp rank, independent of b.
        rows.append(
            ("rotary cos and sin tables", 2 * beta * Fraction(ctx.seq_len, ctx.cp) * rope, "rep")
        )
    return rows


def _swiglu_or_gelu(
    prefix: str, arch: Architecture, S: Fraction, ffn: int, beta: int, convention: str = "paper"
) -> list[tuple[str, Fraction, str]]:
    if arch.mlp.gated:
        unit, act = ("SwiGLU", "SiLU") if arch.mlp is Mlp.SWIGLU else ("GeGLU", "GELU")
        rows = [
            (f"{prefix} {unit} input (gate, up)", 2 * beta * S * ffn, "tp"),
            (f"{prefix} down projection input", beta * S * ffn, "tp"),
        ]
        if convention == "pytorch":
            # eager act(gate) * up: the product keeps the activation's output as well as up
            rows.append((f"{prefix} {act} output (eager {unit})", beta * S * ffn, "tp"))
        return rows
    return [
        (f"{prefix} GeLU input", beta * S * ffn, "tp"),
        (f"{prefix} FC2 input", beta * S * ffn, "tp"),
    ]


def _mlp_terms(
    arch: Architecture, index: int, ctx: ActivationContext
) -> list[tuple[str, Fraction, str]]:
    S, beta, h, conv = ctx.tokens, ctx.activation_bytes, arch.hidden_size, ctx.convention
    rows = [("MLP norm input", beta * S * h, "sp")]
    if not arch.is_moe_layer(index):
        rows.append(("FC1 input", beta * S * h, "sp"))
        rows += _swiglu_or_gelu("MLP", arch, S, arch.ffn_hidden_size, beta, conv)
    else:
        moe = arch.moe
        assert moe is not None
        k = moe.experts_per_token
        gathered = ctx.expert_tp if ctx.sequence_parallel else 1  # etp ranks' routed tokens
        rows += [
            ("router and dispatch input", beta * S * h, "sp"),
            ("router probabilities (fp32)", 4 * S * moe.num_experts, "sp"),
            ("routed expert inputs (top-k copies)", k * beta * S * h * gathered, "sp"),
        ]
        ffn_e = moe.expert_ffn_hidden_size
        rows += _swiglu_or_gelu("routed expert", arch, k * S, ffn_e, beta, conv)
        combine = beta if ctx.combine_output_bytes is None else ctx.combine_output_bytes
        if combine:
            rows.append(("routed expert outputs for the combine", k * combine * S * h, "sp"))
        else:  # the weighted activation keeps the fp32 weights of the routed tokens it sees
            rows.append(
                ("routing weights in the expert activation (fp32)", 4 * k * S * gathered, "sp")
            )
        if moe.num_shared_experts:
            ffn = moe.num_shared_experts * moe.shared_ffn
            rows += _swiglu_or_gelu("shared expert", arch, S, ffn, beta, conv)
        if conv == "pytorch":
            rows += [
                # topk keeps its int64 indices; permuting the k·S routed copies by expert and
                # back keeps two int64 index vectors (the dispatch gather's and the combine
                # gather's); the weighted combine keeps the top-k routing weights (β).
                ("router top-k indices (int64)", 8 * k * S, "sp"),
                ("token permutation indices (int64, dispatch and combine)", 16 * k * S, "sp"),
                ("routing weights for the combine", beta * k * S, "sp"),
            ]
    if conv == "pytorch":
        rows.append(_norm_stats(arch, "MLP norm", S, ctx.memory_efficient_norm))
        if arch.post_norms:
            rows.append(_norm_stats(arch, "MLP post-norm", S))
    if arch.dropout:
        rows.append(("MLP dropout mask", S * h, "sp"))
    if arch.post_norms:
        rows.append(("MLP post-norm input", beta * S * h, "sp"))
    return rows


NORM_OUTPUTS = frozenset({"QKV projection input", "attention projection input", "FC1 input"})
"""The projection inputs that are a norm's output (shared with a memory-efficient norm)."""


def _fp8_rows(
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
    recomputed with the attention core under selective recomputation (a score term)."""
    scale = Fraction(ctx.fp8_input_bytes) / ctx.activation_bytes
    deepseek = ctx.fp8_activation_storage == "deepseek_v3"
    out = []
    for name, value, kind in rows:
        if deepseek and name == "output projection input":
            # §3.3.3 (1): one E5M6 copy serves the attention core's and the projection's backward
            e5m6 = value * E5M6_ACTIVATION_BYTES / ctx.activation_bytes
            out.append((f"{name} (E5M6, the attention output)", e5m6, kind))
        elif deepseek and name == "routed expert SwiGLU input (gate, up)":
            out.append((f"{name} (FP8)", value * scale, kind))  # §3.3.3 (2)
        elif name not in FP8_LINEAR_INPUTS:
            out.append((name, value, kind))
        elif ctx.memory_efficient_norm and name in NORM_OUTPUTS:
            out += [(name, value, kind), (f"{name} (FP8 copy)", value * scale, kind)]
        elif name == "output projection input" and ctx.flash_attention:
            out += [
                ("attention output (BF16, kept by the attention kernel)", value, "score"),
                (f"{name} (FP8)", value * scale, kind),
            ]
        else:
            out.append((f"{name} (FP8)", value * scale, kind))
    names = {r[0] for r in rows}
    if "router and dispatch input" in names and any(n.startswith("shared expert") for n in names):
        # the router keeps the BF16 input; the shared experts' FC1 saves its own FP8 copy
        value = dict((r[0], r[1]) for r in rows)["router and dispatch input"]
        out.append(("shared expert FC1 input (FP8)", value * scale, "sp"))
    return out


GATHERED_INPUTS = frozenset(
    {
        "QKV projection input",
        "FC1 input",
        "attention projection input",
        "query latent and its norm output",
        "query latent norm statistics (fp32 rstd)",
        "kv latent with rope key",
        "kv latent norm output",
        "kv latent norm statistics (fp32 rstd)",
    }
)
"""Rows that are whole on every tp rank under ``gathered_block_inputs``: the QKV and FC1 inputs
(torchtitan ``decoder_sharding.py`` ``set_gqa_attention_sharding`` / ``set_dense_ffn_sharding``:
the block's input goes from the sequence shard to ``Replicate`` before the column-parallel
``wq``/``wk``/``wv`` and ``w1``/``w3``); MLA's projection input and its latents
(``deepseek_v3/sharding.py``: the input gathered, the low-rank ``wq_a``, ``wkv_a``, ``q_norm``,
``kv_norm`` replicated, so they run on every token of the gathered tensor)."""

MOE_ROUTING_ROWS = frozenset(
    {
        "router and dispatch input",
        "router probabilities (fp32)",
        "routed expert inputs (top-k copies)",
        "routed expert outputs for the combine",
        "router top-k indices (int64)",
        "token permutation indices (int64, dispatch and combine)",
        "routing weights for the combine",
    }
)
"""A MoE layer's routing rows: whole on every tp rank under ``gathered_block_inputs`` with
ep = 1 (torchtitan ``moe_sharding.py``: "EP off, SP on" redistributes the MoE input from
``Shard(1)`` to ``Replicate``, the router and the tensor-parallel experts run on every token);
with ep > 1 the tokens stay sequence-sharded ("EP on": ``Shard(1)`` → ``Shard(1)``)."""


def _gathered(
    rows: list[tuple[str, Fraction, str]], arch: Architecture, ctx: ActivationContext
) -> list[tuple[str, Fraction, str]]:
    """``rows`` under ``gathered_block_inputs``: :data:`GATHERED_INPUTS` (and with ep = 1
    :data:`MOE_ROUTING_ROWS`) whole; with ep > 1 the shared experts' ``FeedForward`` gathers its
    own input to ``Replicate`` (``_shared_experts_sharding_configs``), one more ``β·S·h``."""
    names = GATHERED_INPUTS | (MOE_ROUTING_ROWS if ctx.ep == 1 else frozenset())
    out = [(n, v, "gathered" if n.split(" (FP8")[0] in names else k) for n, v, k in rows]
    shared = any(n.startswith("shared expert") for n, _, _ in rows)
    if shared and ctx.ep > 1 and ctx.sequence_parallel and ctx.tp > 1:
        value = ctx.activation_bytes * ctx.tokens * arch.hidden_size
        out.append(("shared expert input (tp-gathered)", value, "gathered"))
    return out


def _op_selective(arch: Architecture, moe: bool, ctx: ActivationContext) -> Fraction | None:
    """torchtitan's op-level selective bytes of a layer (:func:`model.op_checkpoint.
    op_selective_bytes`) under ``ctx.op_selective``; None otherwise, and where that policy's
    count does not apply (MoE or MLA layers, eager attention, tp without sequence parallelism):
    the caller keeps Korthikanti's count."""
    if not ctx.op_selective or (ctx.tp > 1 and not ctx.sequence_parallel):
        return None
    return op_selective_bytes(
        arch, ctx.tokens, ctx.tp, ctx.activation_bytes, ctx.fp8_gemms, moe, ctx.flash_attention
    )


def layer_activations(arch: Architecture, index: int, ctx: ActivationContext) -> LayerActivations:
    """Activation bytes layer ``index`` keeps for backward, per GPU, per micro-batch.

    See the module docstring for every tensor, its shape and its source.

    Examples
    --------
    GPT-3 175B dimensions (s 2048, b 1, h 12288, a 96), tp 8 with sequence parallelism,
    no FlashAttention: Korthikanti's ``s·b·h/t·(34 + 5·a·s/h)``.

    >>> from trainplan.model.specs import Architecture
    >>> gpt3 = Architecture(num_layers=96, hidden_size=12288, num_attention_heads=96,
    ...     ffn_hidden_size=4 * 12288, vocab_size=51200, dropout=True)
    >>> ctx = ActivationContext(seq_len=2048, cp=1, micro_batch_size=1, tp=8,
    ...     sequence_parallel=True, flash_attention=False)
    >>> layer_activations(gpt3, 0, ctx).full_bytes == Fraction(2048 * 12288, 8) * (34 + 5 * 96 * 2048 / 12288)
    True
    """
    return kind_activations(arch, arch.is_moe_layer(index), ctx)


@lru_cache(maxsize=4096)
def kind_activations(arch: Architecture, moe: bool, ctx: ActivationContext) -> LayerActivations:
    """:func:`layer_activations` of the model's first dense (``moe`` False) or MoE layer: every
    layer of a kind keeps the same tensors (cached per kind and context)."""
    index = arch.kind_index(moe)
    assert index is not None, "no layer of this kind"
    rows = _attention_terms(arch, ctx) + _mlp_terms(arch, index, ctx)
    if ctx.memory_efficient_norm:
        # the norm keeps its output, the next projection's input (the same storage)
        rows = [r for r in rows if r[0] not in NORM_INPUTS]
    if ctx.fp8_linear_inputs:
        rows = _fp8_rows(rows, ctx)
    if ctx.gathered_block_inputs:
        rows = _gathered(rows, arch, ctx)
    sp = ctx.tp if ctx.sequence_parallel else 1
    tp_div = {"tp": ctx.tp, "score": ctx.tp, "sp": sp, "rep": 1, "gathered": 1}
    terms = tuple((name, Fraction(value) / tp_div[kind]) for name, value, kind in rows)
    scores = frozenset(name for name, _, kind in rows if kind == "score")
    ckpt = Fraction(ctx.activation_bytes) * ctx.tokens * arch.hidden_size / tp_div["sp"]
    full = sum((b for _, b in terms), Fraction(0))
    selective = _op_selective(arch, moe, ctx)
    if selective is None:
        mla = arch.attention is AttentionKind.MLA
        dropped = recomputed_rows(dict(terms), scores, ctx.recompute_modules, mla, moe)
        selective = sum((b for n, b in terms if n not in dropped), Fraction(0))
    kept_input = ckpt if "attention norm input" in dict(terms) else Fraction(0)
    return LayerActivations(terms, scores, ckpt, full, selective, kept_input)
