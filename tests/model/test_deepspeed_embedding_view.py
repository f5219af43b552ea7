"""The input embedding's output under the ``deepspeed`` profile with tp > 1 and sequence
parallelism, derived by hand from Megatron-DeepSpeed 4efb479d
``megatron/model/language_model.py`` ``Embedding.forward`` and
``megatron/core/tensor_parallel/mappings.py`` ``_split_along_first_dim``: the scatter returns a
view of the whole all-reduced ``[s, b, h]`` tensor, which a model without dropout passes on as
the first layer's input, so stage 0 keeps ``2·b·s·h`` per micro-batch in flight where the first
layer counts ``2·b·s·h/tp`` (model/deepspeed_layers.py ``keeps_embedding_view``,
model/terms/activations.py ``_end_bytes``)."""

from __future__ import annotations

from dataclasses import replace

from tests.model.test_persistent_buffers import H100
from trainplan.model.estimate import stage_memory
from trainplan.model.layout import Layout, Recompute
from trainplan.model.specs import TrainingSpec
from trainplan.scenarios.catalogue import get_model

TRAINING = TrainingSpec(seq_len=8192, global_batch_size=2048)


def _layout(**kw) -> Layout:
    base = dict(
        dp=1, tp=8, pp=16, micro_batch_size=4, zero_stage=1, recompute=Recompute.FULL,
        sequence_parallel=True, framework="deepspeed",
    )  # fmt: skip
    base.update(kw)
    return Layout(**base)


def _embedding(model, layout: Layout) -> list[int]:
    return [
        int(st.activations.embedding_bytes)
        for st in stage_memory(model, TRAINING, layout, device=H100)
    ]


def test_llama3_405b_tp8_pp16_by_hand():
    """Llama 3 405B (h 16,384, no dropout), s 8,192, b 4, tp 8 with SP, pp 16, 1F1B: stage 0
    holds min(pp 16, m 512) = 16 micro-batches. The whole embedding output is
    2·4·8,192·16,384 = 1,073,741,824 B; the first layer's checkpoint counts 1/8 of it, the rest
    is 7/8 = 939,524,096 B a micro-batch: 16 × 939,524,096 = 15,032,385,536 B on stage 0, none
    on the middle stages (the earlier search answer, 82.90 GB, moves to 97.93 GB: out of
    memory on an H100)."""
    model = get_model("llama3-405b").model
    whole = 2 * 4 * 8192 * 16384
    assert whole == 1_073_741_824 and whole * 7 // 8 == 939_524_096
    got = _embedding(model, _layout())
    assert got[0] == 16 * 939_524_096 == 15_032_385_536
    assert got[1:-1] == [0] * 14


def test_only_deepspeed_sp_without_dropout():
    """The mechanism needs the scatter (tp > 1 with SP), no embedding dropout and
    Megatron-DeepSpeed's code: without SP the first layer already counts the whole tensor; with
    tp 1 there is no scatter; Megatron-LM clones after the scatter
    (``clone_scatter_output_in_embedding``); with dropout its output is a new tensor. Stage 0's
    embedding bytes are then the same as Megatron-LM's (0 for Llama; with dropout the 1-byte
    mask)."""
    llama = get_model("llama3-405b").model
    assert _embedding(llama, _layout(sequence_parallel=False))[0] == 0
    assert _embedding(llama, _layout(tp=1, pp=16, dp=8, sequence_parallel=False))[0] == 0
    assert _embedding(llama, _layout(framework="megatron"))[0] == 0
    dropout = replace(llama, arch=replace(llama.arch, dropout=True))
    mask = 16 * 4 * 8192 * 16384 // 8  # 1-byte dropout mask, S·h/tp, 16 micro-batches
    assert _embedding(dropout, _layout())[0] == mask == 1_073_741_824
    assert _embedding(dropout, _layout(framework="megatron"))[0] == mask
