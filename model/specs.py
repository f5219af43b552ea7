"""What is trained (:class:`ModelSpec`, :class:`Architecture`) and how (:class:`TrainingSpec`).

Symbols follow SPEC.md: L layers, h hidden size, a attention heads, g KV heads, d head dim,
f FFN hidden size, V vocabulary, s sequence length, B global batch (sequences).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from pathlib import Path
from typing import Any

from trainplan.model.errors import InputError, ScenarioError
from trainplan.model.units import check_limit

__all__ = [
    "DECLARED_SIZE_TOLERANCE",
    "Mlp",
    "Norm",
    "AttentionKind",
    "PositionEmbedding",
    "MoESpec",
    "MLASpec",
    "Architecture",
    "ModelSpec",
    "TrainingSpec",
]


class Mlp(StrEnum):
    """Feed-forward kind: ``gelu`` (two matrices h×f, f×h) or ``swiglu`` (three: gate, up, down)."""

    GELU = "gelu"
    SWIGLU = "swiglu"


class Norm(StrEnum):
    """``layernorm`` (weight and bias, 2h parameters) or ``rmsnorm`` (weight only, h)."""

    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class AttentionKind(StrEnum):
    """``mha`` (multi-head, GQA/MQA through ``num_kv_heads``) or ``mla`` (DeepSeek-V2/V3)."""

    MHA = "mha"
    MLA = "mla"


class PositionEmbedding(StrEnum):
    """``learned`` (a table of ``max_position_embeddings × h`` parameters, GPT) or ``rope``."""

    LEARNED = "learned"
    ROPE = "rope"


def _positive(owner: str, **values: int | None) -> None:
    """Each value given is a whole number >= 1 and within its size limit (model.units.LIMITS)."""
    for name, value in values.items():
        if value is not None and (not isinstance(value, int) or value < 1):
            raise InputError(f"{owner}.{name}: {value!r} must be a whole number >= 1")
        if value is not None:
            check_limit(f"{owner}.{name}", value)


@dataclass(frozen=True, slots=True, kw_only=True)
class MoESpec:
    """Mixture-of-experts FFN (Fedus et al. 2021; Mixtral; DeepSeek-V3 §2.1.2)."""

    num_experts: int
    """Routed experts per MoE layer (E)."""
    experts_per_token: int
    """Routed experts each token is sent to (top-k)."""
    expert_ffn_hidden_size: int
    """FFN hidden size of one routed expert (f_e)."""
    num_shared_experts: int = 0
    """Experts every token passes through (DeepSeek); 0 for Mixtral."""
    shared_expert_ffn_hidden_size: int | None = None
    """FFN hidden size of one shared expert; None means ``expert_ffn_hidden_size``."""
    first_k_dense_layers: int = 0
    """The first k layers use a dense FFN of ``Architecture.ffn_hidden_size`` (DeepSeek-V3: 3)."""
    router_bias: bool = False
    """A learned per-expert bias on the router (DeepSeek-V3's ``e_score_correction_bias``)."""

    def __post_init__(self) -> None:
        _positive(
            "moe",
            num_experts=self.num_experts,
            experts_per_token=self.experts_per_token,
            expert_ffn_hidden_size=self.expert_ffn_hidden_size,
            shared_expert_ffn_hidden_size=self.shared_expert_ffn_hidden_size,
        )
        if self.experts_per_token > self.num_experts:
            raise InputError(
                f"moe.experts_per_token: {self.experts_per_token} must be at most "
                f"num_experts = {self.num_experts}"
            )

    @property
    def shared_ffn(self) -> int:
        """FFN hidden size of one shared expert."""
        return self.shared_expert_ffn_hidden_size or self.expert_ffn_hidden_size


@dataclass(frozen=True, slots=True, kw_only=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2 §2.1, DeepSeek-V3 §2.1.1)."""

    q_lora_rank: int | None
    """Rank of the query down-projection (1536 in V3); None = queries not compressed."""
    kv_lora_rank: int
    """Rank of the joint key-value latent (512 in V3)."""
    qk_nope_head_dim: int
    """Per-head query/key dims without RoPE (128 in V3)."""
    qk_rope_head_dim: int
    """Per-head decoupled RoPE dims (64 in V3); the key's RoPE part is shared by all heads."""
    v_head_dim: int
    """Per-head value dims (128 in V3)."""

    def __post_init__(self) -> None:
        _positive(
            "mla",
            q_lora_rank=self.q_lora_rank,
            kv_lora_rank=self.kv_lora_rank,
            qk_nope_head_dim=self.qk_nope_head_dim,
            qk_rope_head_dim=self.qk_rope_head_dim,
            v_head_dim=self.v_head_dim,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Architecture:
    """Dimensions of a decoder-only transformer (GPT, Llama, Mixtral, DeepSeek-V3 families)."""

    num_layers: int
    """L, transformer layers."""
    hidden_size: int
    """h, model width."""
    num_attention_heads: int
    """a, query heads."""
    ffn_hidden_size: int
    """f, FFN hidden size of a dense layer (4h for GPT)."""
    vocab_size: int
    """V, vocabulary (before any padding)."""
    num_kv_heads: int | None = None
    """g, key/value heads (GQA); None means ``num_attention_heads`` (MHA)."""
    head_dim: int | None = None
    """d, per-head dims; None means ``hidden_size / num_attention_heads``."""
    mlp: Mlp = Mlp.GELU
    norm: Norm = Norm.LAYERNORM
    attention: AttentionKind = AttentionKind.MHA
    position_embedding: PositionEmbedding = PositionEmbedding.ROPE
    max_position_embeddings: int | None = None
    """Rows of a learned position table (GPT: the training sequence length)."""
    linear_bias: bool = False
    """Biases on every linear layer (GPT-2/3, Megatron GPT); none in Llama."""
    qkv_bias: bool = False
    """Biases on the query, key and value projections only (Qwen2 and Qwen2.5: hard-coded
    ``bias=True`` on q/k/v in transformers' ``Qwen2Attention``); ``a·d + 2·g·d`` per layer, split
    over tp with their column-parallel projections. Ignored when ``linear_bias`` already counts
    them."""
    tie_embeddings: bool = False
    """Output layer shares the input embedding matrix."""
    dropout: bool = False
    """Dropout after attention probabilities, attention output and MLP output (GPT); none in Llama."""
    moe: MoESpec | None = None
    mla: MLASpec | None = None

    def __post_init__(self) -> None:
        for name, kind in (
            ("mlp", Mlp),
            ("norm", Norm),
            ("attention", AttentionKind),
            ("position_embedding", PositionEmbedding),
        ):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, kind(str(value).lower()))
            except ValueError:
                allowed = ", ".join(k.value for k in kind)
                raise InputError(f"model.{name}: {value!r} is not one of {allowed}") from None
        _positive(
            "model",
            num_layers=self.num_layers,
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            ffn_hidden_size=self.ffn_hidden_size,
            vocab_size=self.vocab_size,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            max_position_embeddings=self.max_position_embeddings,
        )
        if self.num_attention_heads % self.kv_heads:
            raise InputError(
                f"model.num_kv_heads: {self.kv_heads} must divide num_attention_heads = "
                f"{self.num_attention_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise InputError(
                f"model.hidden_size: {self.hidden_size} is not divisible by num_attention_heads = "
                f"{self.num_attention_heads}; give head_dim"
            )
        if (self.attention is AttentionKind.MLA) != (self.mla is not None):
            raise InputError("model.attention: 'mla' needs an [mla] table, and only it")
        if (
            self.position_embedding is PositionEmbedding.LEARNED
            and not self.max_position_embeddings
        ):
            raise InputError("model.max_position_embeddings: required with learned positions")
        if self.moe and self.moe.first_k_dense_layers > self.num_layers:
            raise InputError("moe.first_k_dense_layers: more than num_layers")
        fields = (f for f in self.__dataclass_fields__ if f != "_hash")
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f) for f in fields)))

    _hash: int = field(default=0, init=False, repr=False, compare=False)
    """Cached hash (architectures key every cached cost term)."""

    def __hash__(self) -> int:
        return self._hash

    @property
    def kv_heads(self) -> int:
        """g: key/value heads (a for MHA)."""
        return self.num_kv_heads or self.num_attention_heads

    @property
    def dim_per_head(self) -> int:
        """d: per-head dims."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def num_moe_layers(self) -> int:
        """Layers whose FFN is a mixture of experts."""
        return 0 if self.moe is None else self.num_layers - self.moe.first_k_dense_layers

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) has a MoE FFN."""
        return self.moe is not None and index >= self.moe.first_k_dense_layers


DECLARED_SIZE_TOLERANCE = Fraction(1, 10)
"""How far a declared size (``--params``) may lie from the count of the dimensions given with it,
as a fraction of that count. Published sizes are rounded (Llama 2 "70B" has 68.98·10^9
parameters, GPT-3 "175B" 174.6·10^9: within 2%); 10% leaves room for details dimensions given on
the command line leave out (biases, norms, a vocabulary guess), and refuses ``--params 7B`` with
80 layers of hidden 8,192 (about 65·10^9)."""


def _check_declared_size(declared: int, arch: Architecture) -> None:
    """Refuse a declared size that the dimensions' own count contradicts (see
    :data:`DECLARED_SIZE_TOLERANCE`)."""
    from trainplan.model.params import count_params  # local: params imports this module

    counted = count_params(arch).total
    if abs(declared - counted) > DECLARED_SIZE_TOLERANCE * counted:
        raise InputError(
            f"params: {declared:,} declared, but the dimensions given ({arch.num_layers} layers, "
            f"hidden {arch.hidden_size:,}, ffn {arch.ffn_hidden_size:,}, vocab {arch.vocab_size:,}) "
            f"count {counted:,} ({(declared - counted) / counted:+.0%}); the two must agree within "
            f"{float(DECLARED_SIZE_TOLERANCE):.0%} — correct the dimensions, or leave out --params to "
            "use their count"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A model: its name, source and either an architecture, a declared size, or both.

    With only ``num_params_declared`` (``--params 70B``) the model is *size-only*: model state
    is computed and divided evenly over tp·pp (the seed's convention); activations are
    unavailable. With both, the declared size is used for model state and the architecture for
    activations, traffic and FLOPs; the two must agree within :data:`DECLARED_SIZE_TOLERANCE`
    (an InputError otherwise).
    """

    name: str
    source: str = ""
    arch: Architecture | None = None
    num_params_declared: int | None = None
    """Parameter count as given by the user; None means counted from ``arch``."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """Published facts kept for display (e.g. {"params_total": 671e9}); never used in formulas."""

    def __post_init__(self) -> None:
        if self.arch is None and self.num_params_declared is None:
            raise InputError(f"model {self.name}: give dimensions or a parameter count")
        if self.num_params_declared is not None:
            n = self.num_params_declared
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise InputError(f"params: {n!r} must be a whole number >= 1")
            check_limit("params", n)
            if self.arch is not None:
                _check_declared_size(n, self.arch)

    @property
    def size_only(self) -> bool:
        """True when the model has no dimensions (activations unavailable)."""
        return self.arch is None

    @classmethod
    def from_hf_config(cls, path: str | Path, name: str | None = None) -> ModelSpec:
        """Read a Hugging Face ``config.json`` from disk (nothing is downloaded).

        Understands Llama, Mistral, Mixtral, Qwen2 and DeepSeek-V3 keys
        (``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``,
        ``head_dim``, ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings``,
        ``attention_bias``, ``num_local_experts``/``n_routed_experts``,
        ``num_experts_per_tok``, ``moe_intermediate_size``, ``n_shared_experts``,
        ``first_k_dense_replace``, ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
        ``qk_rope_head_dim``, ``v_head_dim``).

        Raises
        ------
        ScenarioError
            When the file cannot be read or a required key is missing.
        """
        from trainplan.model.hf_config import architecture_from_hf  # local: keeps this module small

        p = Path(path)
        try:
            config = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ScenarioError(f"model: cannot read {p}: {err}") from None
        arch = architecture_from_hf(config, str(p))
        return cls(
            name=name or p.parent.name or p.stem, source=f"Hugging Face config {p}", arch=arch
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSpec:
    """The workload and numerics of one training step.

    Defaults: BF16 weights and gradients, mixed-precision Adam (16 B/param; Rajbhandari et al.
    2019, §3.1), 16-bit activations, FlashAttention on.
    """

    seq_len: int
    """s, tokens per sequence."""
    global_batch_size: int
    """B, sequences per optimizer step."""
    flash_attention: bool = True
    """FlashAttention: no s×s score, softmax or dropout tensors are stored (drops 5·a·s·s·b)."""
    weight_bytes: int = 2
    """Bytes per parameter of the working weights (BF16)."""
    gradient_bytes: int | None = None
    """Bytes per gradient element as accumulated and reduced: 2 (BF16) or 4 (FP32). None = the
    framework's own default with bf16 parameters (:func:`model.frameworks.mechanism`: FP32
    ``main_grad`` in Megatron-Core, FP32 reduction in FSDP2 as torchtitan sets it, the parameter
    dtype in DeepSpeed ZeRO and in the textbook's 16 B/param)."""
    optimizer_bytes: int = 12
    """Bytes per parameter of optimizer state (FP32 master 4 + Adam moments 4 + 4)."""
    activation_bytes: int = 2
    """Bytes per activation element (16-bit)."""
    activation_convention: str = "paper"
    """``paper`` (Korthikanti et al.'s count; the default) or ``pytorch`` (also what PyTorch
    kernels keep: fp32 norm statistics, FlashAttention's logsumexp, eager SwiGLU's SiLU output,
    rotary tables, MoE routing indices; see :mod:`model.activations`, measured in
    ``tests/fidelity``)."""

    memory_efficient_norm: bool = False
    """LayerNorm / RMSNorm keep their output (which the next projection keeps anyway) and fp32
    rstd instead of their input: Apex ``FusedLayerNorm`` / ``FusedRMSNorm(memory_efficient=True)``,
    Megatron-LM ``--memory-efficient-layer-norm``. Drops the two ``β·S·h`` norm inputs of every
    layer (so a pipeline stage's input tensor is needed by nothing and can be freed, as Llama 3
    §3.3.2 does); measured in ``tests/fidelity``."""

    def __post_init__(self) -> None:
        _positive("training", seq_len=self.seq_len, global_batch_size=self.global_batch_size)
        if self.activation_convention not in ("paper", "pytorch"):
            raise InputError(
                f"training.activation_convention: {self.activation_convention!r} is not one of "
                "paper, pytorch"
            )
        for name in ("weight_bytes", "gradient_bytes", "optimizer_bytes", "activation_bytes"):
            value = getattr(self, name)
            if name == "gradient_bytes" and value is None:
                continue
            if not isinstance(value, int) or value < 0:
                raise InputError(f"training.{name}: {value!r} must be a whole number >= 0")

    @property
    def state_bytes_per_param(self) -> int:
        """Bytes of model state per parameter in the textbook's steady state (16 for
        mixed-precision Adam; gradients of 2 bytes unless given)."""
        return self.weight_bytes + (self.gradient_bytes or 2) + self.optimizer_bytes
