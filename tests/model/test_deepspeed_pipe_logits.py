"""DeepSpeed's pipeline engine (pp > 1) keeps the last stage's fp32 logits: Megatron-DeepSpeed
4efb479d ``GPTModelPipe`` ends with ``float16_to_fp32``, DeepSpeed edaa72212
``PipelineEngine._exec_forward_pass`` stores the output in ``pipe_buffers['outputs']`` and the
last stage's ``_exec_backward_pass`` returns before clearing it; two buffers there
(``TrainSchedule.num_pipe_buffers``), so ``4·min(m, 2)·S·V/tp`` is held in both phases, and the
loss adds 6 B per local logit beyond it (model.loss_memory)."""

import trainplan
from trainplan.model.loss_memory import deepspeed_pipe_logits_bytes, loss_peak_bytes_per_element

MIXTRAL = dict(
    model="mixtral-8x7b", gpu="H100-SXM", framework="deepspeed", dp=8, pp=2, ep=8,
    zero_stage=1, micro_batch_size=1, global_batch_size=128, recompute="full",
)  # fmt: skip


def test_bytes_per_logit():
    assert loss_peak_bytes_per_element("deepspeed", 1, pp=2) == 6  # 2 BF16 + 4 beside the held
    assert loss_peak_bytes_per_element("deepspeed", 8, pp=1) == 10  # GPTModel: no pipe buffers
    assert deepspeed_pipe_logits_bytes(1, 16, 8192, 32_000, 1) == 0


def test_mixtral_last_stage_by_hand():
    """Mixtral 8x7B, s 32,768, b 1, tp 1, V 32,000, m 16: S·V = 1,048,576,000 local logits.
    The last stage's persistent buffers: the engine's receive buffer β·S·h = 2·32,768·4,096 =
    268,435,456 B plus the fp32 logits of two micro-batches, 2·4·1,048,576,000 =
    8,388,608,000 B, and the bool causal mask every pipeline stage keeps, ``args.attn_mask``,
    32,768² = 1,073,741,824 B (tests/model/test_deepspeed_causal_mask.py): 9,730,785,280 B.
    The loss beyond the kept 4 B: (6 − 4)·S·V = 2,097,152,000 B. Stage 0 keeps no logits: its
    two engine buffers (receive none, gradient one) are the β·S·h gradient buffer, beside its
    causal masks."""
    logits = 32768 * 32_000
    e = trainplan.evaluate(**MIXTRAL)
    last, first = e.stages[1], e.stages[0]
    mask = 32768**2
    assert last.persistent_buffers_bytes == 268_435_456 + 8 * logits + mask == 9_730_785_280
    assert last.activations.loss_transient_bytes == 2 * logits == 2_097_152_000
    # stage 0: its gradient buffer and the masks, args.attn_mask and min(pp 2, m 16) = 2 clones
    assert first.persistent_buffers_bytes == 268_435_456 + 3 * mask == 3_489_660_928


def test_one_microbatch_one_buffer():
    """m = 1 (B 8 = dp 8 × b 1): only buffer 0 is used, one micro-batch's fp32 logits held."""
    logits = 32768 * 32_000
    e = trainplan.evaluate(**{**MIXTRAL, "global_batch_size": 8})
    assert e.stages[1].persistent_buffers_bytes == 268_435_456 + 4 * logits + 32768**2
