"""The parts of an :class:`~model.specs.Architecture`: its layer kinds (MLP, norm, attention,
positions) and the mixture-of-experts and multi-head-latent-attention tables.

Re-exported by :mod:`model.specs`, where the rest of a model's description lives.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from trainplan.model.errors import InputError
from trainplan.model.units import check_limit

__all__ = ["Mlp", "Norm", "AttentionKind", "PositionEmbedding", "MoESpec", "MLASpec", "positive"]


class Mlp(StrEnum):
    """Feed-forward kind: ``gelu`` (two matrices h×f, f×h), or a gated unit of three (gate, up,
    down): ``swiglu`` (SiLU gate; Llama, Qwen, Mistral, DeepSeek, gpt-oss) or ``geglu`` (GELU
    gate; Gemma 2/3, ``hidden_activation = "gelu_pytorch_tanh"``). The two gated kinds have the
    same shapes, parameters, FLOPs and stored tensors (Shazeer 2020, arXiv 2002.05202)."""

    GELU = "gelu"
    SWIGLU = "swiglu"
    GEGLU = "geglu"

    @property
    def gated(self) -> bool:
        """Three matrices (gate, up, down): ``swiglu`` and ``geglu``."""
        return self is not Mlp.GELU


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


def positive(owner: str, **values: int | None) -> None:
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
    """A learned per-expert bias on the router (DeepSeek-V3's ``e_score_correction_bias``;
    gpt-oss's router bias)."""
    bias_balancing: bool = False
    """The router bias balances the experts' load from the token counts, not by gradient
    (DeepSeek-V3's auxiliary-loss-free balancing, §2.1.2; Megatron-Core
    ``--moe-router-enable-expert-bias``); gpt-oss's router bias is a learned one."""
    moe_layer_step: int = 1
    """A MoE FFN on every k-th layer: layer i (0-based) is MoE when (i + 1) is a multiple of k
    (Llama 4 Maverick ``interleave_moe_layer_step`` = 2: layers 1, 3, 5, …; Qwen3-MoE
    ``decoder_sparse_step``); 1 = every layer past ``first_k_dense_layers``."""
    dense_layers: tuple[int, ...] = ()
    """Layers (0-based) that keep a dense FFN besides the two rules above (Qwen3-MoE
    ``mlp_only_layers``)."""
    group_limit: int | None = None
    """Group-limited routing: a token's experts come from at most this many expert groups
    (DeepSeek-V3 §2.1.2, "each token will be sent to at most M nodes", M = 4 with its groups the
    nodes; config.json ``topk_group`` of ``n_group`` groups; Megatron-Core
    ``--moe-router-group-topk`` of ``--moe-router-num-groups``); None when the router is not
    group-limited (``n_group`` 1 or absent). Routing only: it changes no cost counted (the
    expert all-to-all is timed node-limited under ``moe_node_limit``); the ep traffic note cites
    it (:func:`interface.render.moe_text.bound_notes`)."""
    stacked_experts: bool = False
    """The Hugging Face model holds each MoE layer's routed experts stacked, one 3-D tensor per
    projection for all E experts, not one tensor per expert: gpt-oss's ``GptOssExperts``
    (``gate_up_proj`` ``[E, h, 2f]``, ``down_proj`` ``[E, f, h]`` and their biases ``[E, 2f]``,
    ``[E, h]``; Megatron-Bridge 067f987d ``src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py``
    ``GPTOSSBridge.mapping_registry``: ``model.layers.*.mlp.experts.gate_up_proj`` and the
    other three, each one HF tensor gathered from every expert's Megatron parameter). Counts no
    parameter; only the tensors a weight sync sends (:func:`model.rlhf.sync_time.
    parameter_tensors`)."""

    def __post_init__(self) -> None:
        positive(
            "moe",
            num_experts=self.num_experts,
            experts_per_token=self.experts_per_token,
            expert_ffn_hidden_size=self.expert_ffn_hidden_size,
            shared_expert_ffn_hidden_size=self.shared_expert_ffn_hidden_size,
            moe_layer_step=self.moe_layer_step,
            group_limit=self.group_limit,
        )
        layers = tuple(self.dense_layers)
        if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in layers):
            raise InputError(
                f"moe.dense_layers: {list(layers)!r} must be layer indices (whole numbers >= 0)"
            )
        object.__setattr__(self, "dense_layers", tuple(sorted(set(layers))))
        if self.experts_per_token > self.num_experts:
            raise InputError(
                f"moe.experts_per_token: {self.experts_per_token} must be at most "
                f"num_experts = {self.num_experts}"
            )

    def check_layers(self, num_layers: int) -> None:
        """Refuse ``first_k_dense_layers`` past the model's ``num_layers``, naming both.

        Raises
        ------
        InputError
            ``moe.first_k_dense_layers: 70 is more than num_layers = 61``.
        """
        if self.first_k_dense_layers > num_layers:
            raise InputError(
                f"moe.first_k_dense_layers: {self.first_k_dense_layers} is more than "
                f"num_layers = {num_layers}"
            )

    @property
    def shared_ffn(self) -> int:
        """FFN hidden size of one shared expert."""
        return self.shared_expert_ffn_hidden_size or self.expert_ffn_hidden_size

    def is_moe(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) has the MoE FFN under the three rules."""
        return (
            index >= self.first_k_dense_layers
            and (index + 1) % self.moe_layer_step == 0
            and index not in self.dense_layers
        )


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
        positive(
            "mla",
            q_lora_rank=self.q_lora_rank,
            kv_lora_rank=self.kv_lora_rank,
            qk_nope_head_dim=self.qk_nope_head_dim,
            qk_rope_head_dim=self.qk_rope_head_dim,
            v_head_dim=self.v_head_dim,
        )
