"""Architectures the tests build by hand: one Llama-like shape (SwiGLU MLP, RMSNorm, RoPE; Touvron
et al. 2023, §2.2) at whatever size a test needs, so each test states only its dimensions."""

from __future__ import annotations

from typing import Any

from trainplan.model.model_spec import ModelSpec
from trainplan.model.specs import Architecture, Mlp, MoESpec, Norm, PositionEmbedding


def llama_like(
    num_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    ffn_hidden_size: int,
    vocab_size: int,
    **extra: Any,
) -> Architecture:
    """A Llama-like :class:`~trainplan.model.specs.Architecture` of these dimensions; ``extra``:
    further fields (``moe``, ``mtp_layers``…)."""
    return Architecture(
        num_layers=num_layers,
        hidden_size=hidden_size,
        num_attention_heads=num_attention_heads,
        ffn_hidden_size=ffn_hidden_size,
        vocab_size=vocab_size,
        mlp=Mlp.SWIGLU,
        norm=Norm.RMSNORM,
        position_embedding=PositionEmbedding.ROPE,
        **extra,
    )


TINY_GQA = ModelSpec(name="tiny", arch=llama_like(8, 1024, 16, 4096, 32000, num_kv_heads=4))
"""Eight Llama-like layers (h 1,024, 16 query and 4 K/V heads, FFN 4,096, V 32,000): the small
model the RLHF placement tests plan, small enough for the exhaustive oracle."""


def one_moe_layer(experts: int) -> Architecture:
    """One MoE layer of DeepSeek-V3's widths (h 7,168: 14,336-byte BF16 rows; top-8 of
    ``experts``, expert FFN 2,048): what the tests of the expert all-to-all's time route."""
    moe = MoESpec(num_experts=experts, experts_per_token=8, expert_ffn_hidden_size=2048)
    return Architecture(
        num_layers=1, hidden_size=7168, num_attention_heads=8, ffn_hidden_size=18432,
        vocab_size=1024, moe=moe,
    )  # fmt: skip
