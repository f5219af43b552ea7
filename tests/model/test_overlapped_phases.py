"""Phases that overlap in a stage's peak memory, derived by hand from the frameworks' code:
PyTorch's split-backward schedules (ZB-V, DualPipeV) keep the graph through the input-gradient
pass, and Megatron-Core's combined 1F1B runs one micro-batch's MoE forward beside another's
layer backward."""

from __future__ import annotations

from trainplan.model.activations import ActivationContext
from trainplan.model.backward_working import backward_working_bytes, input_pass_retains
from trainplan.model.layout import Layout
from trainplan.model.moe_run import MoERun
from trainplan.model.specs import TrainingSpec
from trainplan.model.split import stage_layers
from trainplan.model.terms.activations import StageActivations, stage_activations
from trainplan.scenarios.catalogue import get_model

LLAMA_8B = get_model("llama3-8b").model.arch

# Llama 3 8B (h 4,096, 32 heads, 8 K/V heads of 128, SwiGLU f 14,336), s 8,192, b 1, tp 1:
H = 2 * 8192 * 4096  # one [S, h] BF16 tensor: 67,108,864 (n = H without SP)
F = 2 * 8192 * 14336  # one [S, f] BF16 tensor: 234,881,024


def _ctx() -> ActivationContext:
    return ActivationContext(
        seq_len=8192, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
        flash_attention=True, gathered_block_inputs=True,
    )  # fmt: skip


def test_input_pass_keeps_the_saved_tensors_by_hand():
    """torchtitan's plan at tp 1 (c = 2: w1 and w3 separate; r = 0), cuDNN attention (no
    workspace counted).

    A full backward (autograd frees each node's saved tensors after it runs) — the SwiGLU step:
        n + f (down projection's dgrad) + 2f (the SwiGLU's [S, 2f] gradient) − f (the down
        projection's input, released) = H + 2F = 536,870,912
    PyTorch's input-gradient pass (_backward.py stage_backward_input:
    autograd.grad(retain_graph=True)) frees nothing:
        down projection: n + f = H + F = 301,989,888
        SwiGLU: n + f + 2f = H + 3F = 771,751,936 (the largest)
        w1/w3: n + 2f + 2H = 3H + 2F = 671,088,640
        QKV: n + (Q + K + V) + 2H = 4H + 2·2·8,192·1,024 = 301,989,888
    """
    plain = backward_working_bytes(LLAMA_8B, False, _ctx(), "fsdp2", "cudnn")
    kept = backward_working_bytes(LLAMA_8B, False, _ctx(), "fsdp2", "cudnn", retained=True)
    assert plain == H + 2 * F == 536_870_912
    assert kept == H + 3 * F == 771_751_936
    assert [input_pass_retains(s) for s in ("zb-v", "dualpipev", "1f1b", "interleaved")] == [
        True, True, False, False,
    ]  # fmt: skip


def test_split_schedule_stage_reads_the_retained_working_set():
    """Llama 3 8B, pp 2, fsdp2, no recomputation (the split schedules refuse any:
    model.schedule_support.split_recompute_rule; the working set is the backward's, whatever the
    forward saved): rank 1 (layers 8–24 under the V placement,
    torchtitan's split 8, 9, 8, 7; no output layer) holds the retained working set under ZB-V and DualPipeV, the released one
    under 1F1B. Under 1F1B rank 1 is the last stage: beside it PyTorch's stage holds the
    micro-batch's BF16 logits in ``fwd_cache`` until its backward ends
    (model.loss_memory.pipeline_pred_bytes), 2·8,192·128,256 = 2,101,346,304 B."""
    training = TrainingSpec(seq_len=8192, global_batch_size=64)
    pred = 2 * 8192 * 128_256
    for schedule, v, want in (("zb-v", 2, 771_751_936), ("dualpipev", 2, 771_751_936),
                              ("1f1b", 1, 536_870_912 + pred)):  # fmt: skip
        layout = Layout(
            tp=1, pp=2, dp=4, recompute="none", framework="fsdp2", schedule=schedule,
            virtual_stages=v,
        )  # fmt: skip
        own = stage_layers(LLAMA_8B, 2, v, layout.split_rule, None, schedule)[1]
        acts = stage_activations(LLAMA_8B, own, 1, layout, training)
        assert acts.backward_working_bytes == want, schedule


LLAMA2_70B = get_model("llama2-70b").model.arch


def _rank0(schedule: str, v: int) -> StageActivations:
    training = TrainingSpec(seq_len=4096, global_batch_size=64)
    layout = Layout(
        tp=8, pp=4, dp=8, recompute="none", framework="fsdp2", schedule=schedule,
        virtual_stages=v, sequence_parallel=True,
    )  # fmt: skip
    own = stage_layers(LLAMA2_70B, 4, v, layout.split_rule, None, schedule)[0]
    return stage_activations(LLAMA2_70B, own, 0, layout, training)


def test_split_schedule_keeps_the_output_layer_on_the_loss_rank():
    """Llama 2 70B (h 8,192, 64 heads, 8 K/V heads of 128, f 28,672, V 32,000), s 4,096, b 1,
    tp 8 SP, pp 4, fsdp2, no recomputation (the split schedules refuse any:
    model.schedule_support.split_recompute_rule), rank 0 under the V placement (stage 0 and the
    last stage, with the output layer and the loss). No device: no attention workspace.

    n = 2·4,096·8,192/8 = 8,388,608; H = 67,108,864; f = 2·4,096·28,672/8 = 29,360,128
    Retained working set (nothing released; r = 0, c = 2): the w1/w3 step
        n + 2f + 2H + n = 16,777,216 + 58,720,256 + 134,217,728 = 209,715,200
    (down projection n + H + f = 104,857,600; QKV n + Q + K + V + 2H + n = 161,480,704.)
    The logits' gradient kept in param_groups["grads"] until the weight pass:
        2·4,096·32,000/8 = 32,768,000
    The output layer's tensors are not released before the layers' input-gradient pass (ZB-V)
    or stage 0's backward (DualPipeV's overlapped F(last stage) + B(stage 0)): freed 0.
    The BF16 logits themselves, the last stage's output, stay in PyTorch's ``fwd_cache`` until
    that micro-batch's ``backward_one_chunk`` returns (model.loss_memory.pipeline_pred_bytes):
    another 32,768,000. Without recomputation R = 0, and the layers' phase, R + W =
    275,251,200, beats the loss phase on this rank, so the peak is
        layers + output layer + pipeline outputs + 275,251,200.
    """
    for schedule in ("zb-v", "dualpipev"):
        a = _rank0(schedule, 2)
        assert a.output_layer_freed_bytes == 0, schedule
        assert a.backward_working_bytes == 209_715_200 + 2 * 32_768_000, schedule
        assert a.recompute_transient_bytes == 0, schedule
        assert a.layer_backward_bytes == 275_251_200
        assert a.layer_backward_bytes > a.loss_transient_bytes
        rest = a.layers_bytes + a.embedding_bytes + a.pipeline_output_bytes
        assert a.total_bytes == rest + 275_251_200
    # 1F1B puts the output layer on the last rank and releases it before the layers' backward
    # (torchtitan's split of 80 layers over 4 stages is 20, 21, 20, 19: the last holds 61–79)
    training = TrainingSpec(seq_len=4096, global_batch_size=64)
    layout = Layout(tp=8, pp=4, dp=8, recompute="full", framework="fsdp2", sequence_parallel=True)
    last = stage_activations(LLAMA2_70B, tuple(range(61, 80)), 3, layout, training)
    assert last.output_layer_freed_bytes > 0
    # the full backward's w1/w3 step releases the SwiGLU's and the down projection's inputs:
    # 209,715,200 − (2·29,360,128 + 29,360,128) = 121,634,816; the down projection step,
    # 104,857,600, and QKV, 161,480,704 − (Q + K + V + O = 8,388,608·2 + 2,097,152) = 142,606,336;
    # beside it the BF16 logits PyTorch's stage holds until the backward ends, 32,768,000
    assert last.backward_working_bytes == 142_606_336 + 32_768_000


MIXTRAL = get_model("mixtral-8x7b").model.arch


def _mixtral(overlap: str, pp: int, v: int) -> StageActivations:
    training = TrainingSpec(seq_len=4096, global_batch_size=64, moe_run=MoERun(ep_overlap=overlap))
    schedule = "interleaved" if v > 1 else "1f1b"
    layout = Layout(
        dp=4, ep=4, tp=1, pp=pp, virtual_stages=v, schedule=schedule, recompute="none",
        framework="megatron",
    )  # fmt: skip
    own = stage_layers(MIXTRAL, pp, v, False, None, schedule)[0]
    return stage_activations(MIXTRAL, own, 0, layout, training)


def test_combined_1f1b_holds_the_moe_forward_beside_the_layer_backward():
    """Mixtral 8x7B (h 4,096, 8 K/V heads of 128, 8 experts, top-2, expert f 14,336, every
    layer MoE), s 4,096, b 1, tp 1, ep 4 (2 local experts), Megatron-Core's alltoall
    dispatcher, BF16, no recomputation, no device (no attention workspace).

    MoE forward working set (moemem15's Megatron alltoall rule, BF16, more than one local
    expert): 4U, U = β·k·S·h = 2·2·4,096·4,096 = 67,108,864: 268,435,456.
    Backward working set (model.backward_working, the routed experts' SwiGLU step, the largest):
        n + rf + 2·rf − rf (the down projection's input released) = n + 2·rf
        n = 2·4,096·4,096 = 33,554,432; rf = k·β·S·f_e = 2·2·4,096·14,336 = 234,881,024
        = 503,316,480 (the attention's largest step, the core's, is 3n + K + V = 117,440,512)
    Without the overlap the MoE forward and the layers' backward are separate phases: the
    peak's phase is max(503,316,480, 268,435,456). With overlap_moe_expert_parallel_comm
    (TransformerLayerSchedulePlan.run pairs one micro-batch's layer forward with another's
    layer backward) they are held together: 268,435,456 + 503,316,480 = 771,751,936, and so is
    the forward layer's pre-dispatch share, saved before its partner's attention backward frees
    the partner's (Megatron-LM d98e8a64dd model_chunk_schedule_plan.py: pre_dispatch_computation
    forward, then the partner's mlp and dispatch backward, then this layer's experts and combine,
    and only then the partner's pre_dispatch_computation backward). That share, β = 2, S 4,096:
        attention norm input, QKV input, Q, output projection input, MLP norm input,
        router input: 6·β·S·h = 6·33,554,432 = 201,326,592
        K, V: 2·β·S·(8·128) = 16,777,216; FlashAttention's FP32 log-sum-exp 4·32·S = 524,288
        router probabilities (the profile's 9 B per [S, E] element) 9·S·8 = 294,912
        TE's fused permutation row map, int32 [S, 2E + 1]: 4·S·17 = 278,528
        = 219,201,536
    (the routed experts' rows, 67,108,864 + 469,762,048 + 234,881,024 + 32,768, the partner has
    already freed), so the phase is 771,751,936 + 219,201,536 = 990,953,472.
    Stage 0 of pp 2, v 2 (interleaved, which the overlap needs at pp > 1) has no loss.
    """
    plain = _mixtral("none", 2, 2)
    paired = _mixtral("overlap_moe_expert_parallel_comm", 2, 2)
    for a in (plain, paired):
        assert a.backward_working_bytes == 503_316_480
        assert a.output_layer_freed_bytes == 0 and a.loss_transient_bytes == 0
    assert plain.moe_forward_bytes == 268_435_456 and plain.moe_over_bytes == 0
    assert paired.moe_forward_bytes == 771_751_936 + 219_201_536 == 990_953_472
    assert paired.moe_over_bytes == 990_953_472 - 503_316_480 == 487_636_992
    assert paired.total_bytes - plain.total_bytes == 487_636_992
    # pp 1: the stage holds the loss; the paired micro-batch's output layer (final-norm and
    # projection inputs 2·2·S·h + FP32 logits 4·S·V = 67,108,864 + 524,288,000 = 591,396,864)
    # is released before its layers' backward, so the paired phase is
    # 268,435,456 + 503,316,480 − 591,396,864 + 219,201,536 = 399,556,608, above the unpaired
    # forward's 268,435,456: both stand above the loss's 262,144,000, and the total moves by
    # 399,556,608 − 268,435,456 = 131,121,152
    one = _mixtral("overlap_moe_expert_parallel_comm", 1, 1)
    alone = _mixtral("none", 1, 1)
    assert one.output_layer_freed_bytes == 591_396_864
    assert one.loss_transient_bytes == alone.loss_transient_bytes == 262_144_000
    assert one.moe_forward_bytes == 399_556_608 and alone.moe_forward_bytes == 268_435_456
    assert one.total_bytes - alone.total_bytes == 131_121_152


def test_paired_forward_figure_is_the_pre_dispatch_share():
    """The forward layer's share a combined-1F1B pair adds (model.terms.moe_working.
    paired_forward_figure), Mixtral 8x7B, s 4,096, b 1, tp 1, ep 4, Megatron-Core, BF16:
    without recomputation 219,201,536 (test above: the attention's rows, the MLP norm's input,
    the router's input and probabilities, the permutation map); under selective recomputation
    of the attention core (Megatron-Core's default core_attn) FlashAttention's FP32
    log-sum-exp, 4·a·S = 4·32·4,096 = 524,288, is recomputed: 218,677,248. The routed experts'
    rows are not in it (the backward partner has freed its own by then)."""
    from trainplan.model.layout import CpKind
    from trainplan.model.terms.moe_working import paired_forward_figure

    training = TrainingSpec(seq_len=4096, global_batch_size=64)
    none, selective = paired_forward_figure(
        MIXTRAL, training, 1, 1, 1, False, CpKind.RING, 4, 1, "megatron"
    )
    assert none == 219_201_536
    assert selective == 219_201_536 - 524_288 == 218_677_248
    # a dense model has no pair
    llama = get_model("llama3-8b").model.arch
    assert paired_forward_figure(
        llama, training, 1, 1, 1, False, CpKind.RING, 1, 1, "megatron"
    ) == (
        0,
        0,
    )


def _mixtral_split(overlap: str, sizes: tuple[int, ...], batch: int) -> StageActivations:
    training = TrainingSpec(
        seq_len=4096, global_batch_size=batch, moe_run=MoERun(ep_overlap=overlap)
    )
    layout = Layout(
        dp=4, ep=4, tp=1, pp=2, virtual_stages=2, schedule="interleaved", recompute="none",
        framework="megatron", stage_layers=sizes,
    )  # fmt: skip
    own = stage_layers(MIXTRAL, 2, 2, layout.split_rule, sizes, "interleaved")[0]
    return stage_activations(MIXTRAL, own, 0, layout, training)


def test_combined_1f1b_unequal_chunks_hold_no_more_than_the_plain_peak():
    """Mixtral 8x7B as above (s 4,096, b 1, tp 1, ep 4, dp 4, B 64: m 16), pp 2, v 2, chunks of
    8, 8, 9, 7 layers: stage 0 runs chunk 0 (8 layers) and chunk 1 (9). One MoE layer's saved
    tensors are 219,201,536 + 771,784,704 = 990,986,240 B (the pre-dispatch share and the routed
    experts' rows, test above).

    Plain interleaved 1F1B (Megatron-LM d98e8a64dd schedules.py get_pp_rank_microbatches):
    W = 2·(pp − 1) + (v − 1)·pp = 4 warm-up forwards; forward j runs chunk ⌊j/2⌋ mod 2, backward
    j chunk 1 − ⌊j/2⌋ mod 2; at step k the stage holds forwards 0 … k + 4 less backwards
    0 … k − 1: in layers 8+8+9+9+8 = 42 at k = 0, then 42 − 9 + 9 = 42, 42 − 9 + 8 = 41, 41,
    42, …: at most 42 layers, 42 × 990,986,240 = 41,621,422,080 B.

    Under overlap_moe_expert_parallel_comm there are W + 1 = 5 warm-up forwards and step k
    pairs forward k + 5 with backward k. Step 2 pairs forward 7 (chunk 1, 9 layers) with
    backward 2 (chunk 0, 8 layers): before it the stage holds 8+8+9+9+8+8 − 9 − 9 = 41 layers;
    TransformerModelChunkSchedulePlan.run pairs 8 layers (41 + 8 − 8) and runs the ninth alone:
    42 layers at its combine, the plain peak's count. So the unequal chunks add nothing beyond
    the paired phase of the test above: the MoE forward figure stays 990,953,472 B."""
    plain = _mixtral_split("none", (8, 8, 9, 7), 64)
    split = _mixtral_split("overlap_moe_expert_parallel_comm", (8, 8, 9, 7), 64)
    assert plain.layers_bytes == split.layers_bytes == 42 * 990_986_240 == 41_621_422_080
    assert plain.moe_forward_bytes == 268_435_456
    assert split.moe_forward_bytes == 990_953_472
    even = _mixtral_split("overlap_moe_expert_parallel_comm", (8, 8, 8, 8), 64)
    assert even.moe_forward_bytes == 990_953_472
