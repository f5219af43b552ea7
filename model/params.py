"""Parameter counts by component, in total, active, and per pipeline stage.

Counts are exact integers from the architecture (Megatron-LM's Eq. 2 is the GPT case; see
:func:`megatron_eq2_params`). Placement: the first stage holds the input embedding (and learned
positions), the last stage the final norm and the output layer, and the multi-token-prediction
modules (DeepSeek-V3 §2.2; Megatron-Core places them on the last stage by default); with tied
embeddings or MTP and pp > 1 the last stage keeps its own copy of the embedding (Megatron-LM does,
and all-reduces the two copies' gradients), which counts in that stage's memory but not in the
model's total. Which layers each stage holds is :mod:`model.split`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from trainplan.model.arch_parts import MoESpec
from trainplan.model.specs import Architecture, AttentionKind, Norm, PositionEmbedding
from trainplan.model.split import output_rank, stage_layers
from trainplan.model.value_head import output_params, ties_output
from trainplan.model.vocab import padded_vocab

__all__ = [
    "LayerParams",
    "ParamCounts",
    "StageParams",
    "padded_vocab",
    "shares_embedding_with_last_stage",
    "mtp_extra_params",
    "attention_params",
    "mlp_params",
    "layer_params",
    "count_params",
    "stage_params",
    "megatron_eq2_params",
    "largest_parameter_bytes",
    "ACTIVE_COUNTS",
]


ACTIVE_COUNTS = (
    "the whole input embedding (V × h) and the output layer counted, with the routed experts a "
    "token uses (top-k) and any MTP modules; a source may leave the input embedding out "
    "(gpt-oss-120b's card: 5.13B active, 0.58B fewer)"
)
"""What :attr:`ParamCounts.active` counts, said where the count is shown (``trainplan models``,
the JSON's ``num_active_params``): sources differ on the input embedding (OpenAI, gpt-oss-120b
& gpt-oss-20b Model Card, arXiv 2508.10925, Table 1: 5.13B and 3.61B active, each 201,088 ×
2,880 = 579,133,440 under this count)."""


def shares_embedding_with_last_stage(arch: Architecture) -> bool:
    """Whether the last pipeline stage needs the input embedding's weights too, so that with
    pp > 1 it keeps its own copy and the two copies' gradients are all-reduced between the first
    and last stage: tied embeddings (the output layer is the embedding, Megatron-LM) or MTP
    modules, which embed the shifted tokens on the last stage (Megatron-Core ``GPTModel`` builds
    the embedding where ``pre_process or mtp_process``). A value head is never tied
    (:func:`model.value_head.ties_output`)."""
    return ties_output(arch) or arch.mtp_layers > 0


def _norm_params(arch: Architecture, width: int) -> int:
    return 2 * width if arch.norm is Norm.LAYERNORM else width


def attention_params(arch: Architecture) -> int:
    """Parameters of one attention block (projections and their biases; not the norm).

    MHA/GQA: ``h·a·d + 2·h·g·d + a·d·h`` (+ biases ``a·d + 2·g·d + h`` with ``linear_bias``,
    ``a·d + 2·g·d`` with ``qkv_bias``); for MHA with d = h/a this is 4h² (+ 4h), as in
    Megatron-LM Eq. 2. QK-norm adds its two weights of d (Qwen3 ``q_norm``/``k_norm``), sinks one
    logit per head (gpt-oss). MLA (DeepSeek-V3 §2.1.1): query down/up projections with the
    latent's RMSNorm, the joint KV down-projection with the shared RoPE key, its RMSNorm, the KV
    up-projection and the output projection.

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
        weights += a * d + 2 * g * d + h
    elif arch.qkv_bias:
        weights += a * d + 2 * g * d
    return weights + (2 * d if arch.qk_norm else 0) + (a if arch.attention_sinks else 0)


def mlp_params(arch: Architecture, ffn: int) -> int:
    """Parameters (a count, not bytes) of one feed-forward network of hidden size ``ffn``
    (elements of its intermediate activation per token).

    GeLU: ``2·h·f`` (+ biases ``f + h``); SwiGLU or GeGLU: ``3·h·f`` (+ ``2f + h``) — the weight
    shapes of Megatron-LM's ``MLP`` (``megatron/core/transformer/mlp.py``: ``linear_fc1`` of
    ``[h, f]``, ``[h, 2f]`` when gated, and ``linear_fc2`` of ``[f, h]``).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16, mlp="swiglu")
    >>> mlp_params(arch, 32)
    768
    """
    h = arch.hidden_size
    if arch.mlp.gated:
        return 3 * h * ffn + ((2 * ffn + h) if arch.linear_bias else 0)
    return 2 * h * ffn + ((ffn + h) if arch.linear_bias else 0)


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameters of one transformer layer, by component (counts)."""

    attention: int
    norms: int
    """The two pre-norms (attention and FFN), and the two post-norms with ``post_norms``."""
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
    linear: int = 0
    """Of ``dense``, the weight matrices of the linear layers a GEMM precision applies to (QKV /
    MLA projections, output projection, dense FFN or shared experts); not biases, norms or the
    MoE router (:mod:`model.precision`)."""
    linear_replicated: int = 0
    """Of ``linear``, what every tensor-parallel rank holds whole (MLA's down-projections)."""
    expert_linear: int = 0
    """The routed experts' weight matrices (``experts`` less their biases)."""

    @property
    def dense(self) -> int:
        """Everything but the routed experts."""
        return self.attention + self.norms + self.ffn_dense

    @property
    def total(self) -> int:
        return self.dense + self.experts


@lru_cache(maxsize=4096)
def layer_params(arch: Architecture, index: int) -> LayerParams:
    """Parameters of layer ``index`` (0-based; index L + k is the block of MTP module k + 1, its
    projection and norms being :func:`mtp_extra_params`); MoE or dense as
    :meth:`Architecture.is_moe_layer` says.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16, linear_bias=True)
    >>> layer_params(gpt, 0).total == 12 * 8**2 + 13 * 8
    True
    """
    attention = attention_params(arch)
    norms = (4 if arch.post_norms else 2) * _norm_params(arch, arch.hidden_size)
    h = arch.hidden_size
    row_bias = h if arch.linear_bias else 0  # attention output / FFN output bias
    replicated = norms + _attention_replicated(arch) + row_bias
    att_linear, att_replicated = _attention_linear(arch)
    if not arch.is_moe_layer(index):
        ffn = mlp_params(arch, arch.ffn_hidden_size)
        return LayerParams(
            attention,
            norms,
            ffn,
            0,
            0,
            replicated + row_bias,
            att_linear + _mlp_weights(arch, arch.ffn_hidden_size),
            att_replicated,
        )
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
        att_linear + moe.num_shared_experts * _mlp_weights(arch, moe.shared_ffn),
        att_replicated,
        moe.num_experts * _mlp_weights(arch, moe.expert_ffn_hidden_size),
    )


def _mlp_weights(arch: Architecture, ffn: int) -> int:
    """The weight matrices of one FFN (:func:`mlp_params` without biases): 3·h·f or 2·h·f."""
    return (3 if arch.mlp.gated else 2) * arch.hidden_size * ffn


def _attention_linear(arch: Architecture) -> tuple[int, int]:
    """(weight matrices of the attention block's linear layers, of which tp-replicated):
    :func:`attention_params` without biases and MLA's latent norms; MLA's down-projections are
    the replicated part."""
    h, a = arch.hidden_size, arch.num_attention_heads
    if arch.attention is AttentionKind.MLA:
        assert arch.mla is not None
        m = arch.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        down = h * (m.kv_lora_rank + m.qk_rope_head_dim)
        up = m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim) + a * m.v_head_dim * h
        if m.q_lora_rank is None:
            up += h * a * qk
        else:
            down += h * m.q_lora_rank
            up += m.q_lora_rank * a * qk
        return down + up, down
    d, g = arch.dim_per_head, arch.kv_heads
    return h * a * d + 2 * h * g * d + a * d * h, 0


def _attention_replicated(arch: Architecture) -> int:
    """MLA's down-projections and their RMSNorms, which every tensor-parallel rank holds whole
    (Megatron-Core ``MLASelfAttention``: ``linear_q_down_proj`` and ``linear_kv_down_proj`` are
    duplicated); for MHA/GQA, whose projections are all split (biases and sinks with their
    heads), QK-norm's two weights of d, applied to every head on every rank."""
    if arch.attention is not AttentionKind.MLA:
        return 2 * arch.dim_per_head if arch.qk_norm else 0
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
    """Output layer V·h; 0 when tied to the input embedding; a value head's h (+ 1 with a bias,
    :func:`model.value_head.output_params`)."""
    mtp: int = 0
    """The MTP modules' own parameters: their blocks, projections and norms (the embedding and
    output head are shared, DeepSeek-V3 §2.2); 0 without MTP."""
    mtp_active: int = 0
    """The MTP modules' own parameters one token uses: each block's active parameters, its
    projection and norms. The embedding and output head they share with the main model
    (DeepSeek-V3 §2.2) are counted once, in the main model: a count of parameters, never above
    :attr:`total` (the head's extra matmul per module is in the FLOPs, :mod:`model.flops`)."""

    @property
    def main(self) -> int:
        """Parameters of the main model, the MTP modules left out (DeepSeek-V3's 671B)."""
        return (
            self.embedding + self.layers_dense + self.layers_experts + self.final_norm + self.output
        )

    @property
    def total(self) -> int:
        """Every parameter trained (N): the main model and the MTP modules."""
        return self.main + self.mtp

    @property
    def active(self) -> int:
        """Parameters one token uses (N_active; = total for a dense model without MTP): the main
        model's, routed experts top-k only, plus :attr:`mtp_active`."""
        return self.main - self.layers_experts + self.layers_experts_active + self.mtp_active


@lru_cache(maxsize=4096)
def count_params(arch: Architecture, vocab_size: int | None = None) -> ParamCounts:
    """Count every parameter of ``arch`` (counts of elements, not bytes; ``vocab_size``, in
    tokens, overrides V, e.g. when padded to a multiple of the tensor-parallel size).

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
    blocks = [
        layer_params(arch, i) for i in range(arch.num_layers, arch.num_layers + arch.mtp_layers)
    ]
    extra = mtp_extra_params(arch)[0]
    return ParamCounts(
        embedding=embedding,
        layers_dense=sum(p.dense for p in layers),
        layers_experts=sum(p.experts for p in layers),
        layers_experts_active=sum(p.experts_active for p in layers),
        final_norm=_norm_params(arch, h),
        output=output_params(arch, v),  # a value head: h (+ bias), model.value_head
        mtp=sum(p.total for p in blocks) + extra,
        mtp_active=sum(p.dense + p.experts_active for p in blocks) + extra,
    )


def mtp_extra_params(arch: Architecture) -> tuple[int, int]:
    """(parameters, of which every tp rank holds whole) of the MTP modules besides their blocks:
    per module the projection M_k of 2h → h (``eh_proj``, no bias) and three RMSNorms of h (the
    hidden state's and the shifted embedding's before the projection, and the module's final
    norm before the shared head; DeepSeek-V3 §2.2, Megatron-Core ``MultiTokenPredictionLayer``).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...     ffn_hidden_size=32, vocab_size=16, norm="rmsnorm", mtp_layers=1)
    >>> mtp_extra_params(arch)  # 2·8·8 + 3·8
    (152, 24)
    """
    h, k = arch.hidden_size, arch.mtp_layers
    norms = 3 * _norm_params(arch, h)
    return k * (2 * h * h + norms), k * norms


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


@lru_cache(maxsize=4096)
def stage_params(
    arch: Architecture,
    pp: int,
    v: int = 1,
    vocab_size: int | None = None,
    uneven: bool = True,
    sizes: tuple[int, ...] | None = None,
    schedule: object = None,
) -> tuple[StageParams, ...]:
    """Parameters on each pipeline stage; see the module docstring for placement (the MTP
    modules, with their projections and norms, with the output layer on the rank holding the last
    model chunk, :func:`model.split.output_rank` — the last, or rank 0 under a V ``schedule`` —
    which then also keeps a copy of the embedding unless it is rank 0, where the embedding is:
    :func:`shares_embedding_with_last_stage`; DeepSeek-V3 §3.2.3, "Shared Embedding and Output
    Head for Multi-Token Prediction": on the same rank the two share it physically).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=4, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> [s.dense for s in stage_params(arch, 2)] == [128 + 2 * 800, 2 * 800 + 16 + 128]
    True
    """
    counts = count_params(arch, vocab_size)
    split = stage_layers(arch, pp, v, uneven, sizes, schedule)
    last = output_rank(pp, v, schedule)
    out = []
    positions = counts.embedding - (vocab_size or arch.vocab_size) * arch.hidden_size
    for i, layers in enumerate(split):
        dense = replicated = experts = 0
        for j in layers:
            lp = layer_params(arch, j)
            dense, replicated, experts = (
                dense + lp.dense,
                replicated + lp.tp_replicated,
                experts + lp.experts,
            )
        if i == 0:
            dense += counts.embedding
            replicated += positions  # learned positions: a plain table on every tp rank
        if i == last:
            copy = last != 0 and shares_embedding_with_last_stage(arch)
            extra, extra_replicated = mtp_extra_params(arch)
            dense += counts.final_norm + counts.output + extra
            dense += (vocab_size or arch.vocab_size) * arch.hidden_size if copy else 0
            replicated += counts.final_norm + extra_replicated
            replicated += counts.output if arch.value_head else 0  # whole on every tp rank
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


def _moe_largest(arch: Architecture, moe: MoESpec) -> int:
    """Elements of a MoE layer's largest parameter: transformers 5 keeps a layer's routed
    experts in one 3-D parameter each for ``gate_up_proj`` ``[E, 2·f_e, h]`` (gated; ``[E, f_e,
    h]`` otherwise) and ``down_proj`` ``[E, h, f_e]`` (``Qwen3MoeExperts``: "Collection of expert
    weights stored as 3D tensors"); a shared expert is an MLP of its own."""
    halves = 2 if arch.mlp.gated else 1
    routed = moe.num_experts * halves * moe.expert_ffn_hidden_size * arch.hidden_size
    shared = (moe.shared_expert_ffn_hidden_size or 0) * arch.hidden_size
    return max(routed, shared)


def largest_parameter_bytes(arch: Architecture) -> int:
    """BF16 bytes of the model's largest parameter as the HF model holds it: the unit both RLHF
    stacks' weight sync makes whole and copies (OpenRLHF's, :mod:`model.rlhf.openrlhf`; verl's,
    :mod:`model.rlhf.verl_sync`). The larger of the embedding / output matrix ``V·h``, a dense MLP
    projection ``h·f`` (HF keeps ``gate_proj``, ``up_proj``, ``down_proj`` apart), the query
    projection ``h·a·d`` and a MoE layer's fused experts (:func:`_moe_largest`).

    Examples
    --------
    Llama 3 70B: the embedding, 128,256 × 8,192 × 2 B.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> largest_parameter_bytes(get_model("llama3-70b").model.arch)
    2101346304
    """
    h = arch.hidden_size
    head_dim = arch.head_dim or h // arch.num_attention_heads
    elements = max(
        arch.vocab_size * h, h * arch.ffn_hidden_size, h * arch.num_attention_heads * head_dim
    )
    if arch.moe is not None:
        elements = max(elements, _moe_largest(arch, arch.moe))
    return 2 * elements
