"""The padded parameter and gradient buffers of Megatron-Core's layer-wise distributed optimizer.

Source: Megatron-LM ``megatron/core/optimizer/layer_wise_optimizer.py``
``LayerWiseDistributedOptimizer._compute_per_buffer_param_layout`` (``_emit_bucket``: a bucket
spans ``dp_size × max(shard_cursors)`` elements; a bucket closes once it holds
``max(bucket_size, 0.9 · dp · its largest parameter)`` and the next parameter would grow it),
``megatron/core/distributed/param_and_grad_buffer.py`` ``_ParamAndGradBuffer.__init__``
(``param_data`` and ``grad_data`` allocated at the buckets' ``numel`` on every rank).
"""

from __future__ import annotations

from trainplan.model.layer_wise import layer_wise_bucket_size, layer_wise_padding
from trainplan.optimizer.case import Case

H, F, TP, VOCAB = 4096, 14336, 2, 128256
QKV, PROJ, FC1, FC2 = (
    ((32 + 16) * 128 // TP, H),
    (H, 32 * 128 // TP),
    (2 * F // TP, H),
    (H, F // TP),
)
ROWS = VOCAB // TP


def test_llama3_8b_dp4_tp2_buffers_by_hand() -> None:
    """Llama 3 8B at tp 2 over 4 data-parallel ranks, one model chunk, bucketed (40,000,000
    elements a bucket). Per layer linear_qkv 12,582,912, linear_proj 8,388,608, fc1 58,720,256,
    fc2 29,360,128 elements (109,051,904); the output layer and the embedding 64,128 × 4,096 =
    262,668,288 each. Backprop order, the output layer first: its bucket closes only past
    0.9 · 4 · 262,668,288 = 945,605,836, after six layers and the next fc2 (946,339,840 elements);
    the output layer fills one shard alone, so the bucket spans 4 × 262,668,288 =
    1,050,673,152: +104,333,312. The next bucket (eight matrices, 218,103,808) packs to shards
    [25,165,824, 58,720,256, 67,108,864, 67,108,864]: 4 × 67,108,864 − 218,103,808 =
    +50,331,648; the eleven after it, two layers' worth each, to [50,331,648, 50,331,648,
    58,720,256, 58,720,256] (the two fc1 apart, the two fc2 together): +16,777,216 each. The
    last (188,743,680 of layers and the 262,668,288 embedding) again spans 4 × 262,668,288:
    +599,261,184. Padding 104,333,312 + 50,331,648 + 11 · 16,777,216 + 599,261,184 =
    938,475,520 elements, in the BF16 parameter buffer (2 B) and the FP32 gradient buffer
    (4 B): 5,630,853,120 B on every rank."""
    shapes = [(ROWS, H), *[QKV, PROJ, FC1, FC2] * 32, (ROWS, H)]
    assert ROWS * H == 262_668_288
    assert sum(m * n for m, n in [QKV, PROJ, FC1, FC2]) == 109_051_904
    assert 262_668_288 + 6 * 109_051_904 + 29_360_128 == 946_339_840 > int(4 * 262_668_288 * 0.9)
    padding = 4 * 262_668_288 - 946_339_840
    padding += 4 * 67_108_864 - 218_103_808 + 11 * (4 * 58_720_256 - 218_103_808)
    padding += 4 * 262_668_288 - (262_668_288 + 188_743_680)
    assert padding == 938_475_520
    assert layer_wise_padding(shapes, 4, layer_wise_bucket_size(4)) == padding
    case = Case.of(model="llama3-8b", optimizer="muon", dp=4, tp=2, zero_stage=1).evaluate()
    stage = case.stages[0]
    assert stage.state.weights_bytes == 2 * (stage.dense_params + padding)
    assert stage.state.gradients_bytes == 4 * (stage.dense_params + padding)
    adam = Case.of(model="llama3-8b", optimizer="adam", dp=4, tp=2, zero_stage=1).evaluate()
    assert adam.stages[0].state.weights_bytes == 2 * adam.stages[0].dense_params


def test_tied_embedding_copy_is_a_bucket_of_its_own() -> None:
    """A tied embedding's pipeline copy (``shared_embedding``) sits in shard 0 of a bucket of its
    own, the other ``dp − 1`` shards padded to its size; the other parameters pack as before."""
    assert layer_wise_padding([FC1, FC1], 2) == 0
    assert layer_wise_padding([FC1, FC1], 2, shared=1000) == 1000
    assert layer_wise_padding([FC1, FC2], 4) == 4 * 58_720_256 - 88_080_384
