"""A MoE layer's routing tensors and forward working set, derived by hand from the frameworks'
code (model/moe_working_set.py): DeepSpeed's gate (sharded_moe.py TopKGate.forward,
top1/top2/topkgating, _sparse_encode/_sparse_decode), Megatron-Core's MoELayer.forward and
MoEAlltoAllTokenDispatcher / MoEFlexTokenDispatcher, torchtitan's combine."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from trainplan.model.activations import ActivationContext, layer_activations
from trainplan.model.layout import Layout
from trainplan.optimizer.case import Case

H, K, E, S = 2880, 4, 128, 4096  # gpt-oss-120b, s 4096, b 1


def _moe_layer(framework_gate: bool) -> dict[str, Fraction]:
    case = Case.of("gpt-oss-120b", "H100-SXM", Layout(dp=8))
    ctx = ActivationContext(
        seq_len=S, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
        flash_attention=True, deepspeed_gate=framework_gate,
    )  # fmt: skip
    return dict(layer_activations(case.model.arch, 0, ctx).terms)


def test_deepspeed_gate_rows_gpt_oss():
    """TopKGate.forward: F.linear(input.float(), wg.weight.float()) saves the FP32 input
    4·S·h and the FP32 weight 4·E·h, in place of the BF16 2·S·h; topkgating (k = 4) saves the
    masked gates the division keeps (4·S·E), the bool mask of gates * mask (S·E) and topk's
    int64 indices (8·k·S); the encode/decode index_selects their int64 slots (2 × 8·k·S); the
    decode's product the FP32 gates [k, S] (4·k·S)."""
    textbook, ds = _moe_layer(False), _moe_layer(True)
    assert "router and dispatch input" in textbook and "router and dispatch input" not in ds
    extra = sum(ds.values()) - sum(textbook.values())
    assert extra == (
        4 * S * H - 2 * S * H + 4 * E * H + 5 * S * E + 8 * K * S + 16 * K * S + 4 * K * S
    )
    assert extra == 28_147_712  # 23,592,960 + 1,474,560 + 2,621,440 + 131,072 + 262,144 + 65,536


def test_gate_rows_by_k():
    """top2gating (Mixtral, k = 2) keeps two FP32 one-hot masks [S, E] (einsum "se,se->s"):
    8·S·E; top1gating the int64 one-hot of gates * mask1: 8·S·E."""
    case = Case.of("mixtral-8x7b", "H100-SXM", Layout(dp=8))
    arch = case.model.arch
    ctx = ActivationContext(
        seq_len=4096, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
        flash_attention=True, deepspeed_gate=True,
    )  # fmt: skip
    rows = dict(layer_activations(arch, 0, ctx).terms)
    assert rows["top-2 gating: one-hot masks (FP32)"] == 8 * 4096 * 8
    top1 = replace(arch, moe=replace(arch.moe, experts_per_token=1))
    rows = dict(layer_activations(top1, 0, ctx).terms)
    assert rows["top-1 gating: one-hot mask (int64)"] == 8 * 4096 * 8
