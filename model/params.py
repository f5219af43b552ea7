"""Parameter counts by component, in total, active, and per pipeline stage.

Counts are exact integers from the architecture (Megatron-LM's Eq. 2 is the GPT case; see
:func:`megatron_eq2_params`). Placement: the first stage holds the input embedding (and learned
positions), the last stage the final norm and the output layer; with tied embeddings and pp > 1 the
last stage keeps its own copy of the embedding for the output layer (Megatron-LM does, and
all-reduces the two copies' gradients), which counts in that stage's memory but not in the model's
total. Uneven splits put one layer fewer on the end stages first (Llama 3 405B: 126 layers over
16 stages = 7, 8 × 14, 7; The Llama 3 Herd of Models §3.3.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.specs import Architecture, AttentionKind, Mlp, Norm, PositionEmbedding

__all__ = [
    "MAX_EMPTY_CHUNKS",
    "check_chunks",
    "LayerParams",
    "ParamCounts",
    "StageParams",
    "padded_vocab",
    "attention_params",
    "mlp_params",
    "layer_params",
    "count_params",
    "split_layers",
    "stage_params",
    "megatron_eq2_params",
]


def padded_vocab(vocab_size: int, multiple: int = 0, tp: Any = 1) -> Any:
    """V padded up to a multiple of ``multiple · tp`` (Megatron-LM's
    ``make_vocab_size_divisible_by``, default 128, times the tensor-parallel degree); 0 = no padding.

    Examples
    --------
    >>> padded_vocab(50257, 128, 8)
    51200
    >>> padded_vocab(128256)
    128256
    """
    if multiple <= 0:
        return vocab_size
    step = multiple * tp
    return -(-vocab_size // step) * step


def _norm_params(arch: Architecture, width: int) -> int:
    return 2 * width if arch.norm is Norm.LAYERNORM else width


def attention_params(arch: Architecture) -> int:
    """Parameters of one attention block (projections and their biases; not the norm).

    MHA/GQA: ``h·a·d + 2·h·g·d + a·d·h`` (+ biases ``a·d + 2·g·d + h``; Qwen2's q/k/v biases
    alone, ``qkv_bias``: ``a·d + 2·g·d``); for MHA with d = h/a
    this is 4h² (+ 4h), as in Megatron-LM Eq. 2. MLA (DeepSeek-V3 §2.1.1): query down/up
    projections with the latent's RMSNorm, the joint KV down-projection with the shared RoPE key,
    its RMSNorm, the KV up-projection and the output projection.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> attention_params(Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                               ffn_hidden_size=32, vocab_size=16, linear_bias=True))
    288
    """
    h, a = arch.hidden_size, arch.num_attention_heads
    if arch.attention is AttentionKind.MLA:
        assert arch.mla is not None
        m = arch.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (
            h * a * qk
            if m.q_lora_rank is None
            else h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * qk
        )
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
        kv += m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + a * m.v_head_dim * h
    d, g = arch.dim_per_head, arch.kv_heads
    weights = h * a * d + 2 * h * g * d + a * d * h
    if arch.linear_bias:
        return weights + a * d + 2 * g * d + h
    return weights + ((a * d + 2 * g * d) if arch.qkv_bias else 0)


def mlp_params(arch: Architecture, ffn: int) -> int:
    """Parameters of one feed-forward network of hidden size ``ffn``.

    GeLU: ``2·h·f`` (+ biases ``f + h``); SwiGLU: ``3·h·f`` (+ ``2f + h``).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16, mlp="swiglu")
    >>> mlp_params(arch, 32)
    768
    """
    h = arch.hidden_size
    if arch.mlp is Mlp.SWIGLU:
        return 3 * h * ffn + ((2 * ffn + h) if arch.linear_bias else 0)
    return 2 * h * ffn + ((ffn + h) if arch.linear_bias else 0)


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameters of one transformer layer, by component (counts)."""

    attention: int
    norms: int
    """The two pre-norms (attention and FFN)."""
    ffn_dense: int
    """Dense FFN, or on a MoE layer the router and shared experts (sharded like dense weights)."""
    experts: int
    """Routed experts (sharded over ep); 0 on a dense layer."""
    experts_active: int
    """Routed-expert parameters one token uses (top-k of them)."""
    tp_replicated: int = 0
    """Of ``dense``, the parameters every tensor-parallel rank holds whole: the norms, a MoE
    router, MLA's down-projections and their norms, and the biases of row-parallel layers
    (attention output, FFN output), which Megatron-Core adds after the reduction
    (``RowParallelLinear``; MLA ``linear_q_down_proj``/``linear_kv_down_proj`` are
    ``parallel_mode="duplicated"``)."""

    @property
    def dense(self) -> int:
        """Everything but the routed experts."""
        return self.attention + self.norms + self.ffn_dense

    @property
    def total(self) -> int:
        return self.dense + self.experts


@cache
def layer_params(arch: Architecture, index: int) -> LayerParams:
    """Parameters of layer ``index`` (0-based); MoE layers from ``moe.first_k_dense_layers`` on.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16, linear_bias=True)
    >>> layer_params(gpt, 0).total == 12 * 8**2 + 13 * 8
    True
    """
    attention = attention_params(arch)
    norms = 2 * _norm_params(arch, arch.hidden_size)
    h = arch.hidden_size
    row_bias = h if arch.linear_bias else 0  # attention output / FFN output bias
    replicated = norms + _attention_replicated(arch) + row_bias
    if not arch.is_moe_layer(index):
        ffn = mlp_params(arch, arch.ffn_hidden_size)
        return LayerParams(attention, norms, ffn, 0, 0, replicated + row_bias)
    moe = arch.moe
    assert moe is not None
    router = h * moe.num_experts + (moe.num_experts if moe.router_bias else 0)
    shared = moe.num_shared_experts * mlp_params(arch, moe.shared_ffn)
    expert = mlp_params(arch, moe.expert_ffn_hidden_size)
    shared_bias = row_bias if moe.num_shared_experts else 0
    return LayerParams(
        attention,
        norms,
        router + shared,
        moe.num_experts * expert,
        moe.experts_per_token * expert,
        replicated + router + shared_bias,
    )


def _attention_replicated(arch: Architecture) -> int:
    """MLA's down-projections and their RMSNorms, which every tensor-parallel rank holds whole
    (Megatron-Core ``MLASelfAttention``: ``linear_q_down_proj`` and ``linear_kv_down_proj`` are
    duplicated); 0 for MHA/GQA, whose projections are all split (biases aside)."""
    if arch.attention is not AttentionKind.MLA:
        return 0
    assert arch.mla is not None
    m, h = arch.mla, arch.hidden_size
    q = 0 if m.q_lora_rank is None else h * m.q_lora_rank + m.q_lora_rank
    return q + h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank


@dataclass(frozen=True, slots=True)
class ParamCounts:
    """Parameter counts of a whole model, by component."""

    embedding: int
    """Input embedding V·h plus learned positions (if any)."""
    layers_dense: int
    """All layers' parameters other than routed experts."""
    layers_experts: int
    """All routed experts."""
    layers_experts_active: int
    """Routed-expert parameters one token uses, over all layers."""
    final_norm: int
    output: int
    """Output layer V·h; 0 when tied to the input embedding."""

    @property
    def total(self) -> int:
        """Every parameter (N)."""
        return (
            self.embedding + self.layers_dense + self.layers_experts + self.final_norm + self.output
        )

    @property
    def active(self) -> int:
        """Parameters one token uses (N_active; = total for a dense model)."""
        return self.total - self.layers_experts + self.layers_experts_active


@cache
def count_params(arch: Architecture, vocab_size: int | None = None) -> ParamCounts:
    """Count every parameter of ``arch`` (``vocab_size`` overrides V, e.g. when padded).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> llama3_8b = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...     num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu",
    ...     norm="rmsnorm")
    >>> count_params(llama3_8b).total
    8030261248
    """
    v = vocab_size or arch.vocab_size
    h = arch.hidden_size
    embedding = v * h
    if arch.position_embedding is PositionEmbedding.LEARNED:
        assert arch.max_position_embeddings is not None
        embedding += arch.max_position_embeddings * h
    layers = [layer_params(arch, i) for i in range(arch.num_layers)]
    return ParamCounts(
        embedding=embedding,
        layers_dense=sum(p.dense for p in layers),
        layers_experts=sum(p.experts for p in layers),
        layers_experts_active=sum(p.experts_active for p in layers),
        final_norm=_norm_params(arch, h),
        output=0 if arch.tie_embeddings else v * h,
    )


MAX_EMPTY_CHUNKS = 2
"""Model chunks that may hold no transformer layer: the first (embedding only) and the last
(output layer only), Llama 3 §3.3.2."""


def check_chunks(num_layers: int, pp: int, v: int = 1, uneven: bool = True) -> None:
    """Check that ``pp·v`` model chunks can hold ``num_layers`` layers.

    Raises
    ------
    LayoutError
        When more than :data:`MAX_EMPTY_CHUNKS` chunks would hold no layer (only the first
        chunk, embedding only, and the last, output layer only, may be empty), or any chunk
        would be empty with uneven stages off.
    """
    chunks = pp * v
    spare = 0 if not uneven else MAX_EMPTY_CHUNKS
    if chunks > num_layers + spare:
        rule = (
            f"at most num_layers + {MAX_EMPTY_CHUNKS}: only the first chunk (embedding only) and "
            "the last (output layer only) may hold no layer"
            if uneven
            else "at most num_layers with uneven stages off"
        )
        raise LayoutError(
            f"pp: {pp} × virtual_stages {v} = {chunks} model chunks for num_layers = "
            f"{num_layers}; {rule}"
        )


@cache
def split_layers(
    num_layers: int, pp: int, v: int = 1, uneven: bool = True
) -> tuple[tuple[int, ...], ...]:
    """Layer indices held by each of the ``pp`` pipeline ranks (0-based layers).

    The model is cut into ``pp·v`` consecutive chunks; rank i holds chunks i, i + pp, …
    (Narayanan et al. 2021 §2.2.2). When ``pp·v`` does not divide L, every chunk gets
    ceil(L/(pp·v)) layers and the chunks at the ends give one back first (first, last, second,
    second-to-last, …), so the stages that also hold the embedding and the output layer get fewer
    layers — Llama 3 405B's 126 layers over 16 stages are 7, 8 × 14, 7. With L + 1 or L + 2
    chunks the very first chunk holds only the embedding and the very last only the output
    layer (Llama 3, Dubey et al. 2024 §3.3.2: "the first model chunk on the first stage has only
    the embedding, and the last model chunk on the last stage has only output projection and
    loss calculation" — 126 layers in 16 × 8 chunks of one layer).

    Raises
    ------
    LayoutError
        See :func:`check_chunks`; or the split is uneven and ``uneven`` is False.

    Examples
    --------
    >>> [len(s) for s in split_layers(126, 16)]
    [7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7]
    >>> [len(s) for s in split_layers(126, 16, v=8)]
    [7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7]
    >>> split_layers(126, 16, v=8)[0][:2]
    (15, 31)
    >>> split_layers(4, 2, v=2)
    ((0, 2), (1, 3))
    """
    chunks = pp * v
    check_chunks(num_layers, pp, v, uneven)
    if num_layers % chunks and not uneven:
        raise LayoutError(
            f"pp: {pp} × virtual_stages {v} = {chunks} does not divide num_layers = {num_layers} "
            "(allow uneven stages, or pick a divisor)"
        )
    size = -(-num_layers // chunks)
    sizes = [size] * chunks
    deficit = chunks * size - num_layers
    order = [j for k in range(chunks) for j in (k, chunks - 1 - k)]
    for j in list(dict.fromkeys(order))[:deficit]:
        sizes[j] -= 1
    starts = [sum(sizes[:j]) for j in range(chunks)]
    ranks: list[list[int]] = [[] for _ in range(pp)]
    for j in range(chunks):
        ranks[j % pp].extend(range(starts[j], starts[j] + sizes[j]))
    return tuple(tuple(r) for r in ranks)


@dataclass(frozen=True, slots=True)
class StageParams:
    """Parameters held by one pipeline stage (all its tensor-parallel shards together)."""

    stage: int
    layers: tuple[int, ...]
    """Indices of the layers on this stage."""
    dense: int
    """Non-expert parameters (layers, plus embedding / final norm / output on the end stages)."""
    experts: int
    """Routed-expert parameters of the stage's layers."""
    tp_replicated: int = 0
    """Of ``dense``, what every tensor-parallel rank holds whole (:attr:`LayerParams.tp_replicated`,
    learned position embeddings and the final norm)."""


@cache
def stage_params(
    arch: Architecture, pp: int, v: int = 1, vocab_size: int | None = None, uneven: bool = True
) -> tuple[StageParams, ...]:
    """Parameters on each pipeline stage; see the module docstring for placement.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=4, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> [s.dense for s in stage_params(arch, 2)] == [128 + 2 * 800, 2 * 800 + 16 + 128]
    True
    """
    counts = count_params(arch, vocab_size)
    split = split_layers(arch.num_layers, pp, v, uneven)
    out = []
    positions = counts.embedding - (vocab_size or arch.vocab_size) * arch.hidden_size
    for i, layers in enumerate(split):
        dense = sum(layer_params(arch, j).dense for j in layers)
        replicated = sum(layer_params(arch, j).tp_replicated for j in layers)
        if i == 0:
            dense += counts.embedding
            replicated += positions  # learned positions: a plain table on every tp rank
        if i == pp - 1:
            tied_copy = (vocab_size or arch.vocab_size) * arch.hidden_size if pp > 1 else 0
            dense += counts.final_norm + (counts.output or tied_copy)
            replicated += counts.final_norm
        experts = sum(layer_params(arch, j).experts for j in layers)
        out.append(StageParams(i, layers, dense, experts, replicated))
    return tuple(out)


def megatron_eq2_params(num_layers: int, hidden_size: int, vocab_size: int, seq_len: int) -> int:
    """Megatron-LM Eq. 2: ``P = 12·L·h²·(1 + 13/(12h) + (V + s)/(12·L·h))``, as an integer.

    = 12·L·h² + 13·L·h + (V + s)·h: GPT layers with biases and LayerNorms, tied embeddings and
    learned positions; it leaves out the final LayerNorm (2h), which :func:`count_params` counts.
    Narayanan et al. 2021, arXiv 2104.04473, §5.1, Eq. 2.

    Examples
    --------
    >>> megatron_eq2_params(128, 25600, 51200, 2048)
    1008038707200
    """
    return (
        12 * num_layers * hidden_size**2
        + 13 * num_layers * hidden_size
        + (vocab_size + seq_len) * hidden_size
    )
