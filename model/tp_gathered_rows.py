"""The rows of a layer that stay whole on every tp rank under torchtitan's tensor-parallel plan
with ``gathered_block_inputs`` (:func:`gathered_rows`: the QKV and FC1 inputs, MLA's latents, and
at ep = 1 the MoE routing rows), the sources per name. Split from :mod:`model.activation_rows`,
which re-exports these names.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from trainplan.model.specs import Architecture

if TYPE_CHECKING:
    from trainplan.model.activations import ActivationContext

__all__ = ["GATHERED_INPUTS", "MOE_ROUTING_ROWS", "gathered_rows"]


GATHERED_INPUTS = frozenset(
    {
        "QKV projection input",
        "FC1 input",
        "attention projection input",
        "query latent",
        "query latent norm output",
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
        "router input (FP32 copy, autocast)",
        "shared experts' input",
    }
)
"""A MoE layer's routing rows: whole on every tp rank under ``gathered_block_inputs`` with
ep = 1 (torchtitan ``moe_sharding.py``: "EP off, SP on" redistributes the MoE input from
``Shard(1)`` to ``Replicate``, the router and the tensor-parallel experts run on every token;
so the router's FP32 autocast copy of its input and the BF16 input the shared experts' first
GEMM saves, :func:`model.moe_working_set.torchtitan_router_rows`, are whole too);
with ep > 1 the tokens stay sequence-sharded ("EP on": ``Shard(1)`` → ``Shard(1)``)."""


def gathered_rows(
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
