"""The linear weights a GEMM precision applies to, for a gated GELU (GeGLU) MLP: three matrices
as for SwiGLU (Megatron-LM ``megatron/core/transformer/mlp.py``: ``linear_fc1`` of ``[h, 2f]``
when gated, ``linear_fc2`` of ``[f, h]``), dense and routed experts alike."""

from __future__ import annotations

from dataclasses import replace

from tests.archs import llama_like
from trainplan.model.arch_parts import MoESpec
from trainplan.model.params import layer_params
from trainplan.model.specs import Mlp


def test_geglu_experts_count_three_matrices_each() -> None:
    """h 64, 8 experts of f 256, no biases: each expert 3 × 64 × 256 = 49,152 weights, all of
    them linear (8 × 49,152 = 393,216), as the dense GeGLU MLP's 3 × 64 × 512 = 98,304."""
    dense = replace(llama_like(2, 64, 4, 512, 256), mlp=Mlp.GEGLU)
    moe = replace(
        dense, moe=MoESpec(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=256)
    )
    lp = layer_params(moe, 0)
    assert lp.experts == 8 * 3 * 64 * 256 == 393_216
    assert lp.expert_linear == lp.experts
    d = layer_params(dense, 0)
    assert d.ffn_dense == 3 * 64 * 512 == 98_304


def test_async_tp_leaves_a_gated_gelu_mlp_input_gradient_unfused() -> None:
    """Under async TP Inductor fuses a reduce-scatter only into the one matmul that produces
    its input (torch 2.13 ``_find_producer_matmul``); a gated MLP's input gradient is the sum
    of its two halves' (w1's and w3's), GeGLU's as SwiGLU's, so it stays a plain reduce-scatter."""
    from trainplan.model.async_tp import fused_input_scatter
    from trainplan.model.ops import LayerShape

    geglu = replace(llama_like(1, 8, 2, 32, 16), mlp=Mlp.GEGLU)
    x = LayerShape(geglu, False, 4, 1, 2, sequence_parallel=True)
    assert (fused_input_scatter(x, "attn_in"), fused_input_scatter(x, "mlp_in")) == (True, False)
