"""A MoE layer's routing tensors and forward working set, derived by hand from the frameworks'
code (model/moe_working_set.py): DeepSpeed's gate (sharded_moe.py TopKGate.forward,
top1/top2/topkgating, _sparse_encode/_sparse_decode), Megatron-Core's MoELayer.forward and
MoEAlltoAllTokenDispatcher / MoEFlexTokenDispatcher, torchtitan's combine."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from trainplan.model.activations import ActivationContext, layer_activations
from trainplan.model.errors import LayoutError
from trainplan.model.layout import Layout
from trainplan.model.moe_working_set import megatron_forward_working_set, moe_forward_working_set
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


U = 2 * 8 * 4096 * 4096  # Qwen3-235B-A22B: β·k·S·h, k 8, h 4096, S 4096


@pytest.mark.parametrize(
    ("ep", "etp", "local", "fp8", "flex", "copies"),
    [
        # alltoall, 32 local experts: permuted + all-to-all output + experts' output + un-sorted
        # (the sorted input saved by FC1 in BF16); under FP8 its BF16 copy too
        (4, 1, 32, False, False, 4),
        (4, 1, 32, True, False, 5),
        # one local expert: no sort; the experts read the all-to-all output (saved in BF16):
        # permuted + experts' output + the combine's all-to-all output
        (128, 1, 1, False, False, 3),
        (128, 1, 1, True, False, 4),
        # ep 1: _AllToAll returns its input; permuted + experts' output + un-sorted
        (1, 1, 128, False, False, 3),
        # flex: dispatch output + experts' output + un-permuted (+ BF16 input under FP8)
        (4, 1, 32, False, True, 3),
        (4, 1, 32, True, True, 4),
    ],
)
def test_megatron_copies(ep, etp, local, fp8, flex, copies):
    got = megatron_forward_working_set(4096, 8, Fraction(4096), 2, ep, etp, local, fp8, flex)
    assert got == copies * U


def test_megatron_expert_tp_reduce_scatter():
    """etp 2 (sequence parallel): the expert side holds 2U per copy; combine_preprocess casts
    the un-sorted output to FP32 (probs' dtype) for the reduce-scatter: 4·k·S·h·2 + 4·k·S·h."""
    got = megatron_forward_working_set(4096, 8, Fraction(4096), 2, 4, 2, 32, False, False)
    assert got == U + U + 2 * U + 2 * U + 4 * 8 * 4096 * 4096 * 2 + 4 * 8 * 4096 * 4096


def _stage(model, framework, **lay):
    case = Case.of(model, "H100-SXM", Layout(framework=framework, **lay), precision=lay_fp8(model))
    return case.evaluate().stages


def lay_fp8(model):
    return "fp8" if model.startswith("qwen3") else "bf16"


def test_deepspeed_decode_working_set_and_gpt_oss_refused():
    """DeepSpeed's decode working set of a MoE layer at gpt-oss-120b's dimensions (k 4): the
    BF16 norm output 2·S·h, the experts' output and its padded copy 2·2·k·S·h, the FP32 product
    4·k·S·h and its FP32 sum 4·S·h = 38·S·h. gpt-oss itself (sliding window, sinks, YaRN, a
    clamped GLU) is refused under deepspeed: Megatron-DeepSpeed builds none of them
    (model.deepspeed_layers), so its former deepspeed answer (dp 32 pp 2 ep 8) is no answer."""
    arch = Case.of("gpt-oss-120b", "H100-SXM", Layout(dp=8)).model.arch
    got = moe_forward_working_set(arch, "deepspeed", Fraction(S), 2, 8, 1, False, False)
    assert got == 38 * S * H == 448_266_240
    with pytest.raises(LayoutError, match="has no local attention"):
        _stage("gpt-oss-120b", "deepspeed", dp=32, pp=2, ep=8, zero_stage=1)


def test_megatron_qwen3_old_answer_does_not_fit():
    """The former answer for Qwen3-235B-A22B FP8 on 64 H100 (dp 4 pp 16 ep 4, interleaved v3,
    √n; 82.85 of 83.21 GB): 32 local experts under FP8, on top of the √n recompute transient
    (backward replays the forward). The caller holds 3U (permuted, all-to-all output, the sorted
    input's BF16 copy); the experts pad every local expert's rows to 16 (R = 8·4,096 + 32·15 =
    33,248 rows) and the largest point is Fp8Unpadding's: the padded input 2·R·h, the BF16
    activation output 2·R·f_e (f_e 1,536), FC2's padded output 2·R·h and the unpadded copy U:
    4U + 2·R·(2h + f_e) = 1,720,614,912 B (the combine's 5U = 1,342,177,280 B before the expert
    MLP's own copies were counted)."""
    stages = _stage(
        "qwen3-235b-a22b", "megatron", dp=4, pp=16, ep=4, schedule="interleaved",
        virtual_stages=3, recompute="sqrt",
    )  # fmt: skip
    acts = stages[1].activations
    R = 8 * 4096 + 32 * 15
    working = 4 * U + 2 * R * (2 * 4096 + 1536)
    assert working == 1_720_614_912
    assert acts.moe_forward_bytes == acts.recompute_transient_bytes + working
    # the layers' backward phase holds the same transient and one layer's backward working set
    assert acts.moe_over_bytes == working - acts.backward_working_bytes
    assert stages[1].total_bytes > 83.21e9


def test_fsdp2_router_saves_fp32_copies_under_autocast():
    """torchtitan's ``TokenChoiceTopKRouter.forward`` runs the gate under an FP32 autocast
    (torchtitan b5bcd76c6 ``models/common/moe.py``): each MoE layer and micro-batch keeps the
    FP32 input 4·S·h and the FP32 gate weight 4·E·h in place of the BF16 input β·S·h (gpt-oss-120b
    has no shared experts). The search's former answer for gpt-oss-120b on 64 H100 under fsdp2
    (dp 64 ep 8 ZeRO-3, no recompute, b 1, 0.20 GB under the fit) keeps one micro-batch of its
    36 MoE layers: 36 × ((4 − 2)·S·h + 4·E·h) more than the BF16 router row counted."""
    stages = _stage("gpt-oss-120b", "fsdp2", dp=64, ep=8, zero_stage=3)
    per_layer = (4 - 2) * S * H + 4 * 128 * H
    acts = stages[0].activations
    assert per_layer == 2 * 4096 * 2880 + 4 * 128 * 2880 == 25_067_520
    # the 36 MoE layers keep one micro-batch each (pp 1): 36 × 25,067,520 = 902,430,720 B more
    # than the BF16 router row: 33,027,784,704 against 32,125,353,984 B; and, eager (compile
    # false, model.eager_moe), the clamped SwiGLU's four more 2·4·S·f (f 2,880) with the biases'
    # gather indices 16·4·S, and the sink rescale's kernel output 2·S·64·64 with its scales
    # 2·S·64 + 4·S·64: 377,749,504 + 35,127,296 B a layer
    eager = 4 * 2 * 4 * S * 2880 + 16 * 4 * S + 2 * S * 64 * 64 + 6 * S * 64
    assert eager == 412_876_800
    assert acts.layers_bytes - 36 * eager - 32_125_353_984 == 36 * per_layer == 902_430_720
