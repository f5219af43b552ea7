"""Megatron-DeepSpeed (6acc370a ``megatron/model/transformer.py`` ``ParallelAttention.forward``)
calls FlashAttention on ``[b, s, h, d]`` tensors, which saves its output, then
``rearrange(context_layer, 'b s h d -> s b (h d)').contiguous()``: a copy once b > 1, which
the ``dense`` projection saves as its input. At b = 1 the rearrange is a view
(model.activations.ActivationContext.attention_output_copy)."""

import trainplan


def _layers(b: int) -> int:
    e = trainplan.evaluate(model="gpt3-175b", framework="deepspeed", dp=32, tp=4, zero_stage=3,
                           micro_batch_size=b, seq_len=2048, global_batch_size=128 * b)  # fmt: skip
    return e.peak.activations.per_microbatch_bytes


def test_gpt3_175b_at_b3_holds_the_output_twice():
    """GPT-3 175B (96 layers, a·d = 12,288), tp 4, s 2,048: at b 3 every layer holds the kernel's
    output beside the projection's copy, 2 B × 3·2,048 × 12,288 / 4 = 37,748,736 B; 96 layers:
    3,623,878,656 B beyond three times the b = 1 figure."""
    one, three = _layers(1), _layers(3)
    assert 2 * 3 * 2048 * 12288 // 4 == 37_748_736
    assert three - 3 * one == 96 * 37_748_736 == 3_623_878_656


def test_other_profiles_and_b1_hold_it_once():
    e = trainplan.evaluate(model="gpt3-175b", framework="megatron", dp=32, tp=4, zero_stage=1,
                           micro_batch_size=3, seq_len=2048, global_batch_size=384)  # fmt: skip
    one = trainplan.evaluate(model="gpt3-175b", framework="megatron", dp=32, tp=4, zero_stage=1,
                             micro_batch_size=1, seq_len=2048, global_batch_size=128)  # fmt: skip
    assert e.peak.activations.per_microbatch_bytes == 3 * one.peak.activations.per_microbatch_bytes
