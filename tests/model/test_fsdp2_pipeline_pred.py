"""fsdp2 with pp > 1: PyTorch's pipeline stage keeps the last stage's output, the BF16 logits, in
``fwd_cache`` until that micro-batch's backward ends (pytorch 0138610331
``torch/distributed/pipelining/stage.py``: ``forward_one_chunk`` stores ``output_tuple``,
``backward_one_chunk`` pops it and runs the whole backward before returning), so torchtitan's
``del pred`` does not apply: β·S·V/tp more at the loss and beside every layer's backward
(model.loss_memory.pipeline_pred_bytes)."""

import trainplan

LLAMA = dict(
    model="llama3-8b", gpu="H100-SXM", framework="fsdp2", dp=4, pp=2, zero_stage=3,
    global_batch_size=32, seq_len=8192,
)  # fmt: skip


def test_llama3_8b_last_stage_by_hand():
    """Llama 3 8B, s 8,192, b 1, tp 1: S·V = 8,192 × 128,256 = 1,050,673,152 local logits; the
    held BF16 logits 2·S·V = 2,101,346,304 B. The loss beyond the kept 4 B: (12 − 4 + 2)·S·V =
    10,506,731,520 B. With ``pipeline_keeps_outputs`` the output chunks already hold them: the
    loss stays at (12 − 4)·S·V = 8,405,385,216 B and the layers' backward holds nothing more."""
    logits = 8192 * 128_256
    e = trainplan.evaluate(**LLAMA)
    k = trainplan.evaluate(**LLAMA, pipeline_keeps_outputs=True)
    a, ak = e.stages[1].activations, k.stages[1].activations
    assert a.loss_transient_bytes == 10 * logits == 10_506_731_520
    assert ak.loss_transient_bytes == 8 * logits == 8_405_385_216
    assert a.backward_working_bytes - ak.backward_working_bytes == 2 * logits == 2_101_346_304
    assert (
        e.stages[0].activations.backward_working_bytes
        == k.stages[0].activations.backward_working_bytes
    )


def test_not_without_a_pipeline():
    flat = trainplan.evaluate(**{**LLAMA, "pp": 1, "dp": 8})
    assert flat.stages[0].activations.loss_transient_bytes == 8 * 8192 * 128_256
