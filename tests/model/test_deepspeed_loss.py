"""Megatron-DeepSpeed's loss (4efb479d): ``post_language_model_processing`` calls it on
``output.float()`` while the BF16 logits are referenced, and the older
``_VocabParallelCrossEntropy.forward`` subtracts the maximum out of place: 2 + 4 + 4 = 10 B per
local logit at its peak; under Ulysses ``_VocabSequenceParallelCrossEntropy`` adds the softmax's
log: 14 B (model.loss_memory)."""

import trainplan
from trainplan.model.loss_memory import loss_kept_bytes_per_element, loss_peak_bytes_per_element


def test_bytes_per_logit():
    assert [loss_peak_bytes_per_element("deepspeed", tp) for tp in (1, 8)] == [10, 10]
    assert loss_peak_bytes_per_element("deepspeed", 1, cp=4) == 14
    assert loss_kept_bytes_per_element("deepspeed") == 4  # the saved fp32 softmax
    assert loss_peak_bytes_per_element("megatron", 1, cp=4) == 6  # Megatron-LM's in-place one


def test_llama3_8b_loss_working_set_by_hand():
    """Llama 3 8B, s 8,192, b 1: S·V = 8,192 × 128,256 = 1,050,673,152 local logits; beyond the
    kept 4 B, (10 − 4) × that = 6,304,038,912 B. Ulysses at cp 4, s 32,768: 8,192 tokens a
    rank, (14 − 4) × 1,050,673,152 = 10,506,731,520 B."""
    logits = 8192 * 128_256
    assert logits == 1_050_673_152
    e = trainplan.evaluate(model="llama3-8b", framework="deepspeed", dp=8)
    assert e.peak.activations.loss_transient_bytes == 6 * logits == 6_304_038_912
    u = trainplan.evaluate(model="llama3-8b", framework="deepspeed", dp=2, cp=4,
                           cp_kind="ulysses", seq_len=32768, global_batch_size=16)  # fmt: skip
    assert u.peak.activations.loss_transient_bytes == 10 * logits == 10_506_731_520
