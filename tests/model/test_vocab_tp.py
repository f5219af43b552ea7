"""Issue 11 item 7: a vocabulary tp does not divide is padded as the framework pads it (and the
estimate says so), never split into fractional rows per rank; ``vocab_multiple`` must be positive.

Sources: Megatron-LM ``_vocab_size_with_padding`` pads V to a multiple of
``make_vocab_size_divisible_by`` (default 128, ``megatron/training/arguments.py``) × tp; FSDP2 /
DTensor ``Shard(0)`` splits rows as ``torch.chunk`` (⌈V/tp⌉ on the first ranks); DeepSpeed and the
seed's textbook keep V (model/vocab.py).
"""

from __future__ import annotations

from trainplan.model.estimate import evaluate
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Layout
from trainplan.model.model_spec import ModelSpec
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.vocab import VOCAB_MULTIPLE, padded_vocab
from trainplan.optimizer.case import Case
from trainplan.topology.accelerators import get_accelerator

# GPT-2 small: 12 layers, h 768, 12 heads, V 50,257 (odd: no tp > 1 divides it), learned
# positions of 1,024, biases, tied embeddings, dropout
GPT2 = Architecture(
    num_layers=12,
    hidden_size=768,
    num_attention_heads=12,
    ffn_hidden_size=3072,
    vocab_size=50257,
    position_embedding="learned",
    max_position_embeddings=1024,
    linear_bias=True,
    tie_embeddings=True,
    dropout=True,
)


def _estimate(framework: str, zero_stage: int = 1):
    lay = Layout(tp=2, framework=framework, zero_stage=zero_stage)
    t = TrainingSpec(seq_len=1024, global_batch_size=1)
    return evaluate(ModelSpec(name="gpt2", arch=GPT2), t, lay, get_accelerator("H100-SXM"))


def test_each_framework_pads_as_its_code_does():
    assert VOCAB_MULTIPLE == {
        Framework.MEGATRON: 128,
        Framework.DEEPSPEED: 1,
        Framework.FSDP2: 1,
        Framework.TEXTBOOK: 1,
    }
    # Megatron at tp 2: a multiple of 128·2 = 256 above 50,257 is 197·256 = 50,432
    assert padded_vocab(50257, 128, 2) == 50_432
    # whole rows: ⌈50,257/2⌉ = 25,129 rows on the busiest rank, 2·25,129 = 50,258
    assert padded_vocab(50257, 1, 2) == 50_258
    # arrays of tp and multiples (the search's tables)
    import numpy as np

    assert padded_vocab(50257, np.array([128, 1]), np.array([2, 2])).tolist() == [50_432, 50_258]


def test_no_rank_holds_a_fractional_row():
    # textbook (the seed's V/tp, in whole rows), tp 2, s 1024, b 1, pp 1:
    # parameters on a GPU: (50,258 + 1,024)·768 embedding and positions = 39,384,576,
    # 12 layers of 12·768² + 13·768 = 7,087,872, final LayerNorm 1,536 → 124,440,576 / 2
    est = _estimate("textbook")
    assert est.padded_vocab_size == 50_258
    assert est.stages[0].dense_params == (39_384_576 + 12 * 7_087_872 + 1_536) // 2 == 62_220_288
    # the output layer's activations on the (only) stage, per micro-batch, S = 1024 tokens, SP on:
    #   embedding dropout mask S·h/2 = 393,216; final-norm and head inputs 2·2·S·h/2 = 1,572,864;
    #   FP32 logits 4·S·25,129 = 102,928,384 (whole rows: not 4·S·50,257/2)
    assert est.stages[0].activations.embedding_bytes == 393_216 + 1_572_864 + 102_928_384
    assert est.notes[0] == (
        "vocabulary 50,257 is not divisible by tp 2: the busiest tp rank holds ⌈50,257/2⌉ = "
        "25,129 rows, counted as 50,258 (whole rows, never fractional ones)"
    )
    # Megatron-LM pads with dummy tokens to 50,432: 25,216 rows per rank, and says so
    mega = _estimate("megatron")
    assert mega.padded_vocab_size == 50_432
    assert mega.stages[0].activations.embedding_bytes == 393_216 + 1_572_864 + 4 * 1024 * 25_216
    assert mega.notes[0].startswith("vocabulary 50,257 padded to 50,432 rows (megatron pads")


def test_megatron_pads_llama3_at_tp8_and_pad_vocab_overrides_it():
    # Llama 3's V = 128,256 = 128·1002; at tp 8 Megatron pads to a multiple of 1,024:
    # ⌈128,256/1,024⌉ = 126 → 129,024 (16,128 rows per rank); its two V·h matrices on the one
    # stage hold (129,024 − 128,256)·4,096/8 = 393,216 parameters more each: 2 B of bf16
    # weights × 786,432 = 1,572,864 bytes
    padded = Case.of(**{"model": "llama3-8b", "tp": 8}).evaluate()
    plain = Case.of(**{"model": "llama3-8b", "tp": 8, "vocab_multiple": 1}).evaluate()
    assert (padded.padded_vocab_size, plain.padded_vocab_size) == (129_024, 128_256)
    diff = padded.stages[0].state.weights_bytes - plain.stages[0].state.weights_bytes
    assert diff == 2 * 2 * 768 * 4096 // 8 == 1_572_864
