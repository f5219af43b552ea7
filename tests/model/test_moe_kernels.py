"""Megatron-Core's MoE passes beyond the permutation (model/moe_kernels.py), derived by hand from
Megatron-Core 0d8e0714's token_dispatcher.py and experts.py."""

from __future__ import annotations

from trainplan.model.moe_kernels import (
    NO_EXPERT_PASSES,
    ExpertPasses,
    expert_passes_of,
    megatron_expert_passes,
)
from trainplan.model.moe_rules import moe_run_violation
from trainplan.model.moe_run import MoERun
from trainplan.model.ops import LayerShape, layer_ops
from trainplan.model.specs import Architecture, MoESpec


def test_which_profile_runs_which_pass():
    assert expert_passes_of("megatron", "bf16") == ExpertPasses(True, False)
    assert expert_passes_of("megatron", "fp8") == ExpertPasses(True, True)
    for other in ("fsdp2", "deepspeed", "textbook"):
        assert expert_passes_of(other, "fp8") == NO_EXPERT_PASSES


def test_qwen3_30b_on_eight_ranks_by_hand():
    # 4,096 tokens, top-8, 128 experts on EP 8: 16 local experts, R = 32,768 rows of h = 2,048.
    rows, h, beta = 32768, 2048, 2
    row_pass = 2 * beta * rows * h  # 268,435,456 bytes: read and write the rows once
    p = dict(megatron_expert_passes(ExpertPasses(True, True), rows, h, beta, 16, "alltoall", False))
    assert set(p) == {"expert chunk sort", "FP8 padding of expert rows"}
    sort = p["expert chunk sort"]  # sort_chunks_by_idxs after the dispatch, its inverse before
    assert (sort.forward_bytes, sort.backward_bytes) == (536_870_912, 536_870_912)
    assert (sort.forward_kernels, sort.backward_kernels) == (2, 2)
    pad = p["FP8 padding of expert rows"]  # Fp8Padding before FC1, Fp8Unpadding after FC2
    assert pad.forward_bytes == 2 * row_pass
    # one local expert: nothing to sort; HybridEP: in expert order and padded by its dispatch
    assert (
        dict(megatron_expert_passes(ExpertPasses(True), rows, h, beta, 1, "alltoall", False)) == {}
    )
    assert (
        megatron_expert_passes(ExpertPasses(True, True), rows, h, beta, 16, "hybridep", False) == ()
    )
    deepep = dict(
        megatron_expert_passes(ExpertPasses(True, True), rows, h, beta, 16, "deepep", False)
    )
    assert set(deepep) == {"FP8 padding of expert rows"}


def test_gpt_oss_fc2_bias_per_expert_by_hand():
    # _apply_bias: per expert b·p (write β) and t + b·p (read 2β, write β), then cat (2β): 6β;
    # backward: split's cat 2β, per expert (g·p) and (g·b) each read β, write β, summed (read β).
    rows, h, beta, experts = 16384, 2880, 2, 2
    p = dict(megatron_expert_passes(ExpertPasses(True), rows, h, beta, experts, "deepep", True))
    bias = p["FC2 bias, per expert"]
    assert bias.forward_bytes == 6 * beta * rows * h == 566_231_040
    assert bias.backward_bytes == 8 * beta * rows * h
    assert (bias.forward_kernels, bias.backward_kernels) == (2 * 2 + 1, 4 * 2 + 1)


def test_the_layer_counts_them_under_megatron_only():
    arch = Architecture(
        num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128,
        vocab_size=256, moe=MoESpec(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=32),
    )  # fmt: skip
    plain = LayerShape(arch, True, 16, 1, 1, ep=2)
    names = [o.name for o in layer_ops(plain)]
    assert "expert chunk sort" not in names
    megatron = LayerShape(arch, True, 16, 1, 1, ep=2, expert_passes=ExpertPasses(True, True))
    extra = [o for o in layer_ops(megatron) if o.name not in names]
    assert [o.name for o in extra] == ["expert chunk sort", "FP8 padding of expert rows"]
    assert extra[0].forward_bytes == 2 * 2 * 2 * (16 * 2) * 64  # two passes over T·k rows of h


def test_hybridep_is_megatron_cores():
    assert moe_run_violation(MoERun(dispatcher="hybridep"), "megatron", True, False) is None
    refused = moe_run_violation(MoERun(dispatcher="hybridep"), "fsdp2", True, False)
    assert refused == (
        "moe_dispatcher: 'hybridep' is Megatron-Core's flex dispatcher backend; fsdp2 does not run it"
    )
