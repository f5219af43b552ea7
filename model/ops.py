"""A transformer layer as the operations one GPU runs: GEMMs by shape, the attention core, and
the memory-bound kernels between them — what :mod:`model.layer_time` times on the roofline.

Per micro-batch of ``b`` sequences on one GPU of a (tp, cp, ep) group: ``T = (s/cp)·b`` tokens
enter the tensor-parallel region, ``T_sp = T/tp`` with sequence parallelism (norms, dropout and
residual adds run on the local sequence shard; Korthikanti et al. 2022 §4.2.2) and ``T``
without it. ``β`` bytes per activation element (2). GEMM shapes are ``[m, k] × [k, n]`` per GPU
after sharding: column-parallel weights split ``n`` over tp, row-parallel ones ``k``
(Shoeybi et al. 2019, Megatron-LM §3). Bytes of a memory-bound kernel count each tensor it
reads or writes once (its own FLOPs are negligible). The backward of a GEMM is its input-gradient
GEMM ``[m, n] × [n, k]`` and its weight-gradient GEMM ``[k, m] × [m, n]``, accumulated in place
into an FP32 gradient (Megatron's gradient-accumulation fusion: 8 bytes read and written per
weight element).

What each kernel moves (forward | backward), per element of the tensor named:

* norm (LayerNorm/RMSNorm) over ``[T_sp, h]``: read x, write y: 2β | read x and dy, write dx: 3β.
* residual add (after the attention and after the MLP) over ``[T_sp, h]``: read both, write:
  3β | the gradient sum at the branch: 3β; with dropout (GPT) the fused bias-dropout-add also
  writes a 1-byte mask: 3β + 1 | + the dropout backward (read mask and dy, write dx): 2β + 1.
* rotary embedding of q and k ``[T, (a + g)·d/tp]``: 2β | 2β (a rotation: read, write).
* GeLU over ``[T, f/tp]``: 2β | 3β; SwiGLU over gate and up ``[T, 2f/tp]`` to ``[T, f/tp]``:
  3β per output element | read gate, up, dy and write both gradients: 5β.
* attention without FlashAttention, over the scores ``E = b·(a/tp)·(s/cp)·s``: scale, mask and
  softmax fused (Megatron ``FusedScaleMaskSoftmax``): 2β | read y and dy, write dx: 3β; dropout
  on the probabilities (GPT): 2β + 1 | 2β + 1. The two batched GEMMs QKᵀ and scores·V.
* FlashAttention: one fused kernel (FLOPs of :func:`model.flops.attention_core_forward_flops`
  ÷ tp·cp, 2× in backward, as the FLOP count; Q, K, V read and O written | also dO, dQ, dK, dV).
* under torchtitan without ``torch.compile`` (:attr:`LayerShape.elementwise` eager) the RMSNorms,
  the rotary embedding and SwiGLU run as PyTorch's eager kernels, and with GQA ``repeat_kv``
  copies k and v to every head (also compiled): :mod:`model.elementwise`.
* MoE: the router GEMM and its top-k over ``[T_sp, E]`` (2β | 2β), token permutation and
  un-permutation of the ``k·T_sp`` routed copies (2 × 2β·h | the same; the rows sent, or under
  DeepEP and HybridEP the rows received; HybridEP's unfused permute, Megatron-Core's default, is
  a kernel of its own: :mod:`model.ep_kernels` gives the sources), the experts as grouped
  GEMMs (``E/ep`` local experts, ``k·T_sp·etp·ep/E`` tokens each under uniform dropless
  routing; the busiest rank's received rows under imbalance at ep > 1 or a capacity factor, and
  at ep = 1 the rank's own ``k·T_sp`` whatever the imbalance: :func:`model.moe_rows.routed_rows`,
  the rows memory counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from trainplan.model.core_spans import CoreSpan, core_spans
from trainplan.model.cross_entropy_bytes import (
    CROSS_ENTROPY_BYTES_PER_LOGIT,
    CROSS_ENTROPY_EXCHANGES,
    CROSS_ENTROPY_PASSES,
)
from trainplan.model.elementwise import (
    Elementwise,
    Pass,
    eager_rmsnorm,
    eager_rope,
    eager_swiglu,
    megatron_glu_clamp,
    megatron_unfused_bias_add,
    megatron_unfused_rope,
    repeat_kv_bytes,
)
from trainplan.model.moe_kernels import NO_EXPERT_PASSES, ExpertPasses, megatron_expert_passes
from trainplan.model.moe_rows import routed_rows
from trainplan.model.moe_run import DROPLESS, MoERun
from trainplan.model.offload import adam_step_bytes
from trainplan.model.packing import Documents, kernel_length
from trainplan.model.specs import (
    Architecture,
    AttentionKind,
    Mlp,
    Norm,
    PositionEmbedding,
)
from trainplan.model.unfused_glu import unfused_glu_pass

__all__ = [
    "OpKind",
    "Op",
    "LayerShape",
    "layer_ops",
    "embedding_ops",
    "output_ops",
    "WGRAD_ACCUMULATE_BYTES",
    "CROSS_ENTROPY_BYTES_PER_LOGIT",
    "CROSS_ENTROPY_PASSES",
    "CROSS_ENTROPY_EXCHANGES",
    "OPTIMIZER_BYTES_PER_PARAM",
]

WGRAD_ACCUMULATE_BYTES = 8
"""Bytes per weight element a weight-gradient GEMM reads and writes to accumulate into the FP32
gradient (``gradient_accumulation_fusion``, Megatron-LM ``fused_weight_gradient_mlp_cuda``)."""

OPTIMIZER_BYTES_PER_PARAM = adam_step_bytes(12, 2)
"""Bytes moved per parameter the GPU updates in one mixed-precision Adam step over FP32 state,
38 (:func:`model.offload.adam_step_bytes`): read the FP32 gradient, master weight and both
moments (16), write master and moments (12) and the 16-bit working weight (2); the
gradient-norm clip reads the gradient once more (4) and zeroing the gradient buffer writes it
(4)."""


class OpKind(StrEnum):
    """How an operation is timed (:mod:`model.layer_time`)."""

    GEMM = "gemm"
    ATTENTION = "attention"
    """The fused FlashAttention core."""
    MEMORY = "memory"


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a layer's forward pass on one GPU, with what its backward moves.

    A GEMM is ``batch × [m, k] × [k, n]``; its backward is derived (input and weight gradient).
    """

    name: str
    kind: OpKind
    m: float = 0.0
    n: float = 0.0
    k: float = 0.0
    batch: float = 1.0
    flops: float = 0.0
    """Forward FLOPs of the fused attention core, the mean over the layers it stands for (GEMM
    FLOPs follow from the shape)."""
    forward_bytes: float = 0.0
    """HBM bytes of the forward kernel (memory-bound kernels and the attention core)."""
    backward_bytes: float = 0.0
    """HBM bytes of the backward kernel(s)."""
    core: bool = False
    """Part of the attention core (QKᵀ, softmax, dropout, scores·V): what selective
    recomputation runs again."""
    role: str = ""
    """For GEMMs next to a tensor-parallel collective: ``attn_in`` / ``mlp_in`` (column-parallel,
    after an all-gather) or ``attn_out`` / ``mlp_out`` (row-parallel, before a reduce-scatter or
    all-reduce)."""
    weights: bool = True
    """A GEMM with a weight (its backward has a weight gradient); False for QKᵀ and scores·V."""
    seq_len: float = 0.0
    """The fused attention core: the query (and key) length one kernel call sees, ``s/cp``
    (a ring or gathered chunk of context parallelism), what its published rate is read at;
    with packed documents the shorter :func:`model.packing.kernel_length` (the kernel runs each
    document as its own sequence)."""
    head_dims: tuple[int, int] = (0, 0)
    """The fused attention core: (d_qk, d_v) of its heads."""
    masked_flops: float = 0.0
    """The fused attention core: forward FLOPs over the (query, key) pairs its causal (or
    windowed) mask and the document mask keep, per GPU
    (:func:`model.flops.attention_core_forward_flops` with the mask; the kernel skips the masked
    blocks whatever :attr:`flops` counts); the mean over the layers it stands for."""
    spans: tuple[CoreSpan, ...] = ()
    """The fused attention core: the spans of the layers it stands for, each with its share of
    the layers, FLOPs, window and ring split (:class:`model.core_spans.CoreSpan`); its time is
    the share-weighted sum of each span's (:func:`model.op_time.op_seconds`). Empty: one span of
    :attr:`flops` and :attr:`masked_flops`, no window."""
    forward_kernels: int = 1
    """Kernels a memory-bound operation's forward launches (each adds ``t_kernel``): 1 fused,
    more as PyTorch's eager operators (:mod:`model.elementwise`)."""
    backward_kernels: int = 1
    """Kernels of its backward."""

    @property
    def gemm_flops(self) -> float:
        """Forward FLOPs of a GEMM: ``2·m·n·k·batch``."""
        return 2.0 * self.m * self.n * self.k * self.batch


@dataclass(frozen=True, slots=True)
class LayerShape:
    """What the operations of one layer read: the model, the micro-batch and the sharding."""

    arch: Architecture
    moe: bool
    """A MoE layer (routed experts) rather than a dense one."""
    seq_len: int
    micro_batch_size: int
    tp: int
    cp: int = 1
    ep: int = 1
    etp: int = 1
    sequence_parallel: bool = False
    flash_attention: bool = True
    causal: bool = False
    """Attention FLOPs halved for causal masking (FlashAttention skips masked blocks)."""
    beta: int = 2
    core_spans: tuple[tuple[int, int], ...] = ((0, 1),)
    """The attention spans of the layers this shape stands for, ``(layer, count)`` each (a
    layer standing for its span): the FlashAttention core is timed at each span's own FLOPs
    and kernel rate, weighted by its count (:attr:`Op.spans`); the clock gives one span group
    at a time, ``((layer, 1),)`` (:func:`model.core_spans.span_groups`,
    :func:`model.step_time.kind_parts`)."""
    documents: Documents | None = None
    """Each sequence packs documents under document masking (:mod:`model.packing`): the
    FlashAttention core computes their Σ P(lᵢ) pairs (its variable-length kernel skips the
    blocks between documents), not the pack's."""
    moe_run: MoERun = DROPLESS
    """How the MoE layers route and dispatch (:class:`model.moe_run.MoERun`): the rows the
    busiest expert-parallel rank's experts compute (:func:`model.moe_rows.routed_rows`)."""
    elementwise: Elementwise = Elementwise.FUSED
    """How the norms, rotary embedding and MLP activation run: fused kernels, or torchtitan's
    eager PyTorch operators, or compiled (:func:`model.elementwise.elementwise_mode`)."""
    expert_passes: ExpertPasses = NO_EXPERT_PASSES
    """The memory-bound passes the framework's MoE layer adds (Megatron-Core's chunk sort, FP8
    padding and per-expert FC2 bias; :func:`model.moe_kernels.expert_passes_of`)."""

    @property
    def tokens(self) -> float:
        """T = (s/cp)·b, tokens of a micro-batch in the tensor-parallel region on one GPU."""
        return self.seq_len / self.cp * self.micro_batch_size

    @property
    def local_tokens(self) -> float:
        """T_sp: T/tp with sequence parallelism, else T."""
        return self.tokens / self.tp if self.sequence_parallel else self.tokens


def _memory(name: str, forward: float, backward: float, core: bool = False) -> Op:
    return Op(name, OpKind.MEMORY, forward_bytes=forward, backward_bytes=backward, core=core)


def _eager(name: str, p: Pass) -> Op:
    return Op(
        name, OpKind.MEMORY, forward_bytes=p.forward_bytes, backward_bytes=p.backward_bytes,
        forward_kernels=p.forward_kernels, backward_kernels=p.backward_kernels,
    )  # fmt: skip


def _plus(op: Op, p: Pass) -> Op:
    """``op`` with the bytes and kernels of the eager pass ``p`` added to its own."""
    return Op(
        op.name, OpKind.MEMORY, forward_bytes=op.forward_bytes + p.forward_bytes,
        backward_bytes=op.backward_bytes + p.backward_bytes,
        forward_kernels=op.forward_kernels + p.forward_kernels,
        backward_kernels=op.backward_kernels + p.backward_kernels,
    )  # fmt: skip


def _gemm(name: str, m: float, n: float, k: float, role: str = "", batch: float = 1) -> Op:
    return Op(name, OpKind.GEMM, m=m, n=n, k=k, batch=batch, role=role)


def _residual(x: LayerShape, name: str) -> Op:
    beta, size = x.beta, x.local_tokens * x.arch.hidden_size
    if x.arch.dropout:
        return _memory(name, (3 * beta + 1) * size, (5 * beta + 1) * size)
    return _memory(name, 3 * beta * size, 3 * beta * size)


def _norm(x: LayerShape, name: str, width: float | None = None, tokens: float | None = None) -> Op:
    size = (x.local_tokens if tokens is None else tokens) * (width or x.arch.hidden_size)
    if x.elementwise is Elementwise.EAGER and x.arch.norm is Norm.RMSNORM:
        return _eager(name, eager_rmsnorm(size, x.beta))
    return _memory(name, 2 * x.beta * size, 3 * x.beta * size)


def _attention_projections(x: LayerShape) -> list[Op]:
    arch, T, tp, beta = x.arch, x.tokens, x.tp, x.beta
    h, a = arch.hidden_size, arch.num_attention_heads
    if arch.attention is AttentionKind.MLA:
        assert arch.mla is not None
        m = arch.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        ops = []
        if m.q_lora_rank is None:
            ops.append(_gemm("Q projection", T, a * qk / tp, h, "attn_in"))
        else:
            ops += [
                _gemm("Q down-projection", T, m.q_lora_rank, h, "attn_in"),
                _norm(x, "Q latent norm", m.q_lora_rank, T),
                _gemm("Q up-projection", T, a * qk / tp, m.q_lora_rank),
            ]
        ops += [
            _gemm("KV down-projection", T, m.kv_lora_rank + m.qk_rope_head_dim, h, "attn_in"),
            _norm(x, "KV latent norm", m.kv_lora_rank, T),
            _gemm(
                "KV up-projection", T, a * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank
            ),
        ]
        rope = 2 * beta * T * (a / tp + 1) * m.qk_rope_head_dim
        return ops + [_memory("rotary embedding", rope, rope)]
    d, g = arch.dim_per_head, arch.kv_heads
    ops = [_gemm("QKV projection", T, (a + 2 * g) * d / tp, h, "attn_in")]
    if arch.position_embedding is PositionEmbedding.ROPE:
        rope = 2 * beta * T * (a + g) * d / tp
        if x.elementwise is Elementwise.EAGER:
            ops.append(_eager("rotary embedding", eager_rope(T * (a + g) * d / tp, beta)))
        elif arch.yarn_rope and x.expert_passes.megatron:  # Megatron-Core's unfused YaRN RoPE
            ops.append(
                _eager("rotary embedding", megatron_unfused_rope(T * (a + g) * d / tp, beta))
            )
        else:
            ops.append(_memory("rotary embedding", rope, rope))
    repeat = repeat_kv_bytes(T, a / tp, g / tp, d, beta)
    if x.elementwise is not Elementwise.FUSED and repeat:
        ops.append(_memory("repeat_kv", repeat, repeat))
    return ops


def _attention_core(x: LayerShape) -> list[Op]:
    arch, tp, beta = x.arch, x.tp, x.beta
    a, b, s = arch.num_attention_heads, x.micro_batch_size, x.seq_len
    queries = s / x.cp
    if arch.attention is AttentionKind.MLA:
        assert arch.mla is not None
        d_qk = arch.mla.qk_nope_head_dim + arch.mla.qk_rope_head_dim
        d_v, kv_heads = arch.mla.v_head_dim, a
    else:
        d_qk = d_v = arch.dim_per_head
        kv_heads = arch.kv_heads
    heads = b * a / tp
    if x.flash_attention:
        q_o = b * queries * a * (d_qk + d_v) / tp
        k_v = b * s * kv_heads * (d_qk + d_v) / tp
        moved = beta * (q_o + k_v)
        call = min(queries, kernel_length(int(s), x.documents))
        spans = core_spans(arch, x.core_spans, int(s), b, tp * x.cp, x.causal, x.documents, call)
        return [
            Op(
                "attention core (FlashAttention)",
                OpKind.ATTENTION,
                flops=sum(p.share * p.flops for p in spans),
                forward_bytes=moved,
                backward_bytes=2 * moved + beta * q_o,
                core=True,
                seq_len=call,
                head_dims=(int(d_qk), int(d_v)),
                masked_flops=sum(p.share * p.masked_flops for p in spans),
                spans=spans,
            )
        ]
    scores = heads * queries * s
    ops = [
        Op(
            "attention scores QKᵀ",
            OpKind.GEMM,
            m=queries,
            n=s,
            k=d_qk,
            batch=heads,
            core=True,
            weights=False,
        ),
        _memory("scale, mask, softmax", 2 * beta * scores, 3 * beta * scores, core=True),
    ]
    if arch.dropout:
        drop = (2 * beta + 1) * scores
        ops.append(_memory("attention dropout", drop, drop, core=True))
    ops.append(
        Op("scores · V", OpKind.GEMM, m=queries, n=d_v, k=s, batch=heads, core=True, weights=False)
    )
    return ops


def _mlp(x: LayerShape, tokens: float, width: float, name: str, roles: bool = True) -> list[Op]:
    """A dense MLP of hidden width ``width`` (already ÷ its tensor-parallel split) over
    ``tokens``."""
    h, beta = x.arch.hidden_size, x.beta
    inner, outer = ("mlp_in", "mlp_out") if roles else ("", "")
    if x.arch.mlp.gated:  # SwiGLU or GeGLU: gate and up, one activation kernel fused
        unit = "SwiGLU" if x.arch.mlp is Mlp.SWIGLU else "GeGLU"
        act = _memory(f"{name} {unit}", 3 * beta * tokens * width, 5 * beta * tokens * width)
        if x.elementwise is Elementwise.EAGER:
            act = _eager(f"{name} {unit}", eager_swiglu(tokens * width, beta))
        elif x.arch.mlp is Mlp.GEGLU and x.expert_passes.megatron:  # Megatron-Core's glu
            act = _eager(f"{name} {unit}", unfused_glu_pass(tokens * width, beta))
        return [
            _gemm(f"{name} gate+up projection", tokens, 2 * width, h, inner),
            act,
            _gemm(f"{name} down projection", tokens, h, width, outer),
        ]
    return [
        _gemm(f"{name} FC1", tokens, width, h, inner),
        _memory(f"{name} GeLU", 2 * beta * tokens * width, 3 * beta * tokens * width),
        _gemm(f"{name} FC2", tokens, h, width, outer),
    ]


def _moe(x: LayerShape) -> list[Op]:
    spec = x.arch.moe
    assert spec is not None
    h, beta, local = x.arch.hidden_size, x.beta, x.local_tokens
    E, k = spec.num_experts, spec.experts_per_token
    # (sent, received): k·T_sp each dropless and balanced; the busiest rank's received rows
    # under imbalance at ep > 1, the rank's own T·k at ep = 1 (model.moe_rows.routed_rows)
    sent, rows = routed_rows(x.moe_run, local, E, k, x.ep, x.expert_passes.deepspeed)
    routing = 2 * beta * local * E
    # permute and un-permute, read and write: on the source side before the dispatch and after
    # the combine (alltoall), on the received rows after the dispatch under DeepEP and HybridEP
    permuted = rows if x.moe_run.dispatcher.deduplicates else sent
    permute = 2 * 2 * beta * permuted * h
    ops = [
        _gemm("router", local, E, h),
        _memory("top-k routing", routing, routing),
        _memory("token permutation", permute, permute),
    ]
    per_expert = rows * x.etp * x.ep / E
    width, mats = spec.expert_ffn_hidden_size / x.etp, 2 if x.arch.mlp.gated else 1
    size = beta * rows * x.etp * width
    fwd, bwd = (3 * size, 5 * size) if mats == 2 else (2 * size, 3 * size)
    act = _memory("experts activation", fwd, bwd)
    if x.arch.mlp is Mlp.GEGLU and x.expert_passes.megatron:  # the probabilities' pass untimed
        act = _eager("experts activation", unfused_glu_pass(rows * x.etp * width, beta))
    if x.arch.glu_clamp and mats == 2 and x.expert_passes.megatron:  # clamped before it
        act = _plus(act, megatron_glu_clamp(rows * x.etp * width, beta))
    ops += [
        Op("experts up", OpKind.GEMM, m=per_expert, n=mats * width, k=h, batch=E / x.ep),
        act,
        Op("experts down", OpKind.GEMM, m=per_expert, n=h, k=width, batch=E / x.ep),
    ]
    extra = megatron_expert_passes(
        x.expert_passes, rows * x.etp, h, beta, E // x.ep, x.moe_run.dispatcher,
        x.arch.linear_bias,
    )  # fmt: skip
    ops += [_eager(name, p) for name, p in extra]
    if spec.num_shared_experts:
        shared = spec.num_shared_experts * spec.shared_ffn / x.tp
        ops += _mlp(x, x.tokens, shared, "shared experts", roles=False)
    return ops


@lru_cache(maxsize=4096)
def layer_ops(x: LayerShape) -> tuple[Op, ...]:
    """The forward operations of one transformer layer on one GPU, in order (see the module
    docstring for what each moves); their backward follows from each :class:`Op`.

    The GEMM FLOPs summed over the tp ranks are the layer's matmul FLOPs of
    :func:`model.flops.layer_forward_flops` (the replicated MLA down-projections and the router
    run on every tp rank and are counted once there).

    Examples
    --------
    GPT layer (h 8, a 2, f 32, dropout) at s 4, b 1, tp 2 with sequence parallelism:

    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16, dropout=True,
    ...                    position_embedding="learned", max_position_embeddings=4)
    >>> ops = layer_ops(LayerShape(gpt, False, 4, 1, 2, sequence_parallel=True, flash_attention=False))
    >>> [o.name for o in ops][:4]
    ['input norm', 'QKV projection', 'attention scores QKᵀ', 'scale, mask, softmax']
    >>> next(o for o in ops if o.name == "QKV projection").n  # 3·h/tp
    12.0
    """
    arch = x.arch
    ops = [_norm(x, "input norm"), *_attention_projections(x), *_attention_core(x)]
    a = arch.num_attention_heads
    d_v = arch.mla.v_head_dim if arch.mla is not None else arch.dim_per_head
    ops.append(_gemm("output projection", x.tokens, arch.hidden_size, a * d_v / x.tp, "attn_out"))
    residual = _residual(x, "attention residual")
    if arch.linear_bias and arch.moe is not None and x.expert_passes.megatron:
        # the output projection's bias added unfused (elementwise.megatron_unfused_bias_add)
        residual = _plus(
            residual, megatron_unfused_bias_add(x.local_tokens * arch.hidden_size, x.beta)
        )
    ops += [residual, _norm(x, "pre-MLP norm")]
    if x.moe:
        ops += _moe(x)
    else:
        ops += _mlp(x, x.tokens, arch.ffn_hidden_size / x.tp, "MLP")
    ops.append(_residual(x, "MLP residual"))
    return tuple(ops)


def embedding_ops(x: LayerShape) -> tuple[Op, ...]:
    """The first stage's input embedding on one GPU: the vocab-parallel lookup writes
    ``[T, h]`` (read the rows, write: 2β) and its backward scatter-adds into the FP32 gradient
    rows (read dy, read and write FP32: β + 8); a learned position table adds its rows (3β | 0);
    GPT's embedding dropout (2β + 1 | 2β + 1) on ``[T_sp, h]``."""
    arch, beta, T, h = x.arch, x.beta, x.tokens, x.arch.hidden_size
    ops = [_memory("embedding lookup", 2 * beta * T * h, (beta + 8) * T * h)]
    if arch.position_embedding is PositionEmbedding.LEARNED:
        ops.append(_memory("position embedding", 3 * beta * T * h, (beta + 8) * T * h))
    if arch.dropout:
        drop = (2 * beta + 1) * x.local_tokens * h
        ops.append(_memory("embedding dropout", drop, drop))
    return tuple(ops)


def output_ops(x: LayerShape, vocab: int, loss: str = "none") -> tuple[Op, ...]:
    """The last stage's final norm, output projection ``[T, h] × [h, V/tp]`` (``vocab`` padded)
    and vocab-parallel cross-entropy (``loss``, the ``cross_entropy_fusion_impl`` run:
    :data:`CROSS_ENTROPY_PASSES` per logit, forward and backward)."""
    logits = x.tokens * vocab / x.tp
    forward, backward = CROSS_ENTROPY_PASSES[str(loss)]
    return (
        _norm(x, "final norm"),
        _gemm("output layer (logits)", x.tokens, vocab / x.tp, x.arch.hidden_size),
        _memory("cross-entropy", forward * logits, backward * logits),
    )
