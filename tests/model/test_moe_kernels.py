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
    assert expert_passes_of("textbook", "fp8") == NO_EXPERT_PASSES
    # DeepSpeed: none of the passes, but its E·C-row buffers (model.moe_rows.row_factors padded)
    ds = expert_passes_of("deepspeed", "fp8")
    assert ds == ExpertPasses(deepspeed=True) and not (ds.megatron or ds.fp8_padding)
    # torchtitan: none of Megatron-Core's passes, its dispatcher's counts and host wait
    # (tests/model/test_torchtitan_experts.py)
    assert expert_passes_of("fsdp2", "fp8") == ExpertPasses(torchtitan=True)


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


def test_the_alltoall_dispatchers_small_collectives_by_hand():
    """Megatron-Core 0d8e0714 ``MoEAlltoAllTokenDispatcher``: ``token_dispatch`` sends the
    permuted probabilities in an ``all_to_all`` of their own (and autograd its transpose in the
    backward); ``preprocess`` all-gathers ``num_local_tokens_per_expert`` over the etp × ep group
    (forward only, the counts carry no gradient). NCCL's LL ring all-gather latency
    (``tuning.cc``: base 6.6 µs, NVLink hop 0.6, network hop 2.7): 8 ranks in one NVLink
    domain 6.6 + 7·0.6 = 10.8 µs; 64 ranks 8 a node (GPT OSS 120B at EP 64 on B200), the ring
    crossing a node 7 times, its 56 NVLink steps at NCCL's network overhead (1 µs, over
    NVLink's 0.6 once the ring leaves the node): 6.6 + 7·2.7 + 56·1 = 81.5 µs, where every
    step over the network gave 6.6 + 63·2.7 = 176.7 µs. Neither runs under the flex dispatcher
    or outside Megatron-Core."""
    from trainplan.model.moe_kernels import (
        DispatchMetadata,
        counts_gather_seconds,
        dispatch_metadata,
    )

    assert dispatch_metadata(ExpertPasses(True), "alltoall") == DispatchMetadata((1, 1), 1)
    assert dispatch_metadata(ExpertPasses(True), "deepep") == DispatchMetadata()
    assert dispatch_metadata(NO_EXPERT_PASSES, "alltoall") == DispatchMetadata()
    assert abs(counts_gather_seconds(8, True) - 10.8e-6) < 1e-12
    assert abs(counts_gather_seconds(64, False, 8) - 81.5e-6) < 1e-12
    assert counts_gather_seconds(1, True) == 0.0


def test_the_layers_expert_collectives_add_them():
    """One MoE layer's expert collectives on 2 NVLink ranks: the tokens' dispatch and combine
    each way, plus under Megatron-Core's alltoall dispatcher one probabilities all-to-all each
    way (16 tokens × top-2 rows of 2 bytes, half of them sent) and the forward's counts
    all-gather (6.6 + 0.6 µs)."""
    from trainplan.model.layer_time import ep_all_to_all_seconds
    from trainplan.model.op_time import Clock
    from trainplan.model.roofline import Collective, LinkTime, RooflineParams, collective_seconds

    arch = Architecture(
        num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128,
        vocab_size=256, moe=MoESpec(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=32),
    )  # fmt: skip
    p = RooflineParams(gemm_efficiency=0.7)
    link = LinkTime(450e9, True)
    c = Clock(989e12, 3.35e12, p, ep_link=link)
    plain = LayerShape(arch, True, 16, 1, 1, ep=2)
    megatron = LayerShape(arch, True, 16, 1, 1, ep=2, expert_passes=ExpertPasses(True))
    f0, b0 = ep_all_to_all_seconds(plain, c, False)
    f1, b1 = ep_all_to_all_seconds(megatron, c, False)
    tokens = collective_seconds(Collective.ALL_TO_ALL, 2, 16 * 2 * 64 * 2 / 2, link, p)
    probs = collective_seconds(Collective.ALL_TO_ALL, 2, 16 * 2 * 2 / 2, link, p)
    assert abs(f0 - 2 * tokens) < 1e-15 and abs(b0 - 2 * tokens) < 1e-15
    assert abs(f1 - (2 * tokens + probs + 7.2e-6)) < 1e-12
    assert abs(b1 - (2 * tokens + probs)) < 1e-15
    # the counts gather over expert-tensor × expert ranks (tp_ep), not the attention's tp
    # (2 ranks: 7.2 µs; tp × ep = 4 ranks would be 6.6 + 3·0.6 = 8.4 µs)
    tp2 = LayerShape(arch, True, 32, 2, 1, ep=2, expert_passes=ExpertPasses(True))
    f2, b2 = ep_all_to_all_seconds(tp2, c, False)
    assert abs((f2 - b2) - 7.2e-6) < 1e-12  # forward less backward: the counts' all-gather
