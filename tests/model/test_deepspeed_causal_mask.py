"""Megatron-DeepSpeed's causal-mask tensors under DeepSpeed's pipeline engine (pp > 1), derived
by hand from Megatron-DeepSpeed 4efb479d ``pretrain_gpt.py`` (``model_provider``: the bool
``args.attn_mask``; ``get_batch_pipe`` → ``megatron/utils.py``
``get_ltor_masks_and_position_ids`` without ``skip_mask``: FP32 ones and their lower triangle,
then a bool mask) and DeepSpeed edaa72212 ``deepspeed/runtime/pipe/engine.py``
(``_exec_load_micro_batch`` keeps a clone of each input in ``pipe_buffers['inputs']`` on the
first stage, cleared only by ``_exec_send_grads``) and ``schedule.py``
(``TrainSchedule.num_pipe_buffers``): model/terms/pipeline_buffers.py
(``deepspeed_mask_bytes``, ``deepspeed_load_transient``)."""

from __future__ import annotations

from dataclasses import replace

from tests.model.test_persistent_buffers import H100
from trainplan.model.estimate import stage_memory
from trainplan.model.layout import Layout, Recompute
from trainplan.model.model_spec import ModelSpec
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.scenarios.catalogue import get_model

TINY = ModelSpec(
    name="tiny",
    arch=Architecture(
        num_layers=4, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
        vocab_size=256, mlp="swiglu", norm="rmsnorm",
    ),
)  # fmt: skip
"""Four layers (h 64, V 256): at s 1,024 the FP32 mask being built, 8·s² = 8,388,608 B, is
more than everything else a micro-batch holds."""
TINY_TRAINING = TrainingSpec(seq_len=1024, global_batch_size=8)
TINY_LAYOUT = Layout(
    dp=1, tp=1, pp=2, micro_batch_size=1, zero_stage=1, recompute=Recompute.FULL,
    sequence_parallel=False, framework="deepspeed",
)  # fmt: skip


def _persistent(model: ModelSpec, training: TrainingSpec, layout: Layout) -> list[int]:
    return [
        int(st.persistent_buffers_bytes)
        for st in stage_memory(model, training, layout, device=H100)
    ]


def test_llama3_70b_s16384_pp8_by_hand():
    """Llama 3 70B, s 16,384, b 1, dp 1, tp 8 with SP, pp 8, ZeRO-1, m 2,048: the bool mask is
    s² = 268,435,456 B. Stage 0 keeps ``args.attn_mask`` and min(pp 8, m) = 8 clones in its
    input buffers (``num_pipe_buffers`` = max(2, min(8 − 0, 2,048)) = 8): 9 × 268,435,456 =
    2,415,919,104 B; every other stage ``args.attn_mask`` alone.

    Beside it the persistent buffers as before: the "mpu" buffer 2·16,384·8,192 =
    268,435,456 B on every stage (each runs transformer layers); the engine's buffers, each
    the boundary tensor 2·16,384·8,192/8 = 33,554,432 B partitioned over tp: 4,194,304 B, one
    on the end stages, two on the others.

    * stage 0: 268,435,456 + 4,194,304 + 2,415,919,104 = 2,688,548,864;
    * stages 1-6: 268,435,456 + 8,388,608 + 268,435,456 = 545,259,520;
    * stage 7: 268,435,456 + 4,194,304 + 268,435,456 = 541,065,216, and as the last stage the
      fp32 logits of two micro-batches its output buffers keep (model.loss_memory.
      deepspeed_pipe_logits_bytes), 2·4·16,384·16,032 (V 128,256 over tp 8) = 2,101,346,304:
      2,642,411,520."""
    model = get_model("llama3-70b").model
    training = TrainingSpec(seq_len=16384, global_batch_size=2048)
    layout = Layout(
        dp=1, tp=8, pp=8, micro_batch_size=1, zero_stage=1, recompute=Recompute.NONE,
        sequence_parallel=True, framework="deepspeed",
    )  # fmt: skip
    mask = 16384 * 16384
    assert mask == 268_435_456 and 9 * mask == 2_415_919_104
    got = _persistent(model, training, layout)
    logits = 2 * 4 * 16384 * 16_032
    assert logits == 2_101_346_304
    assert got == [2_688_548_864] + [545_259_520] * 6 + [541_065_216 + logits]
    assert got[-1] == 2_642_411_520


def test_stage0_clones_follow_the_filled_buffers_by_hand():
    """The tiny model (s 1,024: mask 1,048,576 B) at pp 2 with m micro-batches: stage 0 fills
    min(pp, m) of its max(2, min(pp, m)) input buffers, stage 1 keeps ``args.attn_mask`` only.
    The engine's buffers, the whole boundary tensor 2·1,024·64 = 131,072 B (tp 1): stage 0's
    gradient buffer, stage 1's receive buffer.

    Stage 1, the last, also keeps the fp32 logits of min(m, 2) micro-batches in its output
    buffers: 4·1,024·256 = 1,048,576 B each.

    * m 8: stage 0 (1 + 2) × 1,048,576 + 131,072 = 3,276,800; stage 1 1,179,648 + 2 × 1,048,576
      = 3,276,800;
    * m 1 (one buffer filled of two): stage 0 2 × 1,048,576 + 131,072 = 2,228,224; stage 1
      1,179,648 + 1,048,576 = 2,228,224."""
    assert _persistent(TINY, TINY_TRAINING, TINY_LAYOUT) == [3_276_800, 3_276_800]
    one = replace(TINY_TRAINING, global_batch_size=1)
    assert _persistent(TINY, one, TINY_LAYOUT) == [2_228_224, 2_228_224]


def test_no_mask_without_the_pipeline_engine():
    """pp 1 under ``deepspeed`` (the profile's ``GPTModel``, ``--no-pipeline-parallel``) and
    pp 2 under ``megatron`` (Megatron-Core builds no such mask) hold none."""
    flat = replace(TINY_LAYOUT, pp=1)
    assert _persistent(TINY, TINY_TRAINING, flat) == [0]
    for st in stage_memory(TINY, TINY_TRAINING, flat, device=H100):
        assert st.activations.batch_load_bytes == 0
    mega = replace(TINY_LAYOUT, framework="megatron")
    for st in stage_memory(TINY, TINY_TRAINING, mega, device=H100):
        assert st.activations.batch_load_bytes == 0


def test_mask_being_built_sets_the_peak_by_hand():
    """The tiny model at pp 2, m 8, full recomputation: 8·s² = 8,388,608 B (FP32 ones and
    their lower triangle) while a micro-batch is loaded, one micro-batch fewer held.

    * stage 0 (2 layers, 1F1B holds 2 micro-batches): one micro-batch keeps 2 checkpoints of
      2·1,024·64 = 131,072 B and its output in the engine's buffer, 131,072 B: 393,216 B. The
      load: 8,388,608 − 393,216 = 7,995,392 B beyond the kept bytes; the activations at the
      peak: 1 × 393,216 + 8,388,608 = 8,781,824 B.
    * stage 1 (the last, 1 in flight): one micro-batch keeps 2 checkpoints 262,144, the
      received copy 131,072 and the output layer's final-norm input 131,072, output-projection
      input 131,072 and FP32 logits 4·1,024·256 = 1,048,576: 1,703,936 B; the load:
      8,388,608 − 1,703,936 = 6,684,672 B; at the peak nothing else held: 8,388,608 B."""
    acts = [st.activations for st in stage_memory(TINY, TINY_TRAINING, TINY_LAYOUT, device=H100)]
    assert [a.batch_load_bytes for a in acts] == [7_995_392, 6_684_672]
    assert [a.total_bytes for a in acts] == [8_781_824, 8_388_608]
