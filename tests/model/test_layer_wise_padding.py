"""The padded parameter and gradient buffers of Megatron-Core's layer-wise distributed optimizer,
and the optimizer state of its busiest rank, dense and expert.

Source: Megatron-LM ``megatron/core/optimizer/layer_wise_optimizer.py``
``LayerWiseDistributedOptimizer._compute_per_buffer_param_layout`` (``_emit_bucket``: a bucket
spans ``dp_size × max(shard_cursors)`` elements; a bucket closes once it holds
``max(bucket_size, 0.9 · dp · its largest parameter)`` and the next parameter would grow it),
``megatron/core/distributed/param_and_grad_buffer.py`` ``_ParamAndGradBuffer.__init__``
(``param_data`` and ``grad_data`` allocated at the buckets' ``numel`` on every rank).
"""

from __future__ import annotations

from trainplan.model.layer_wise import layer_wise_bucket_size, layer_wise_owners, layer_wise_padding
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
    elements a bucket). The embedding and output layer are not in the layer-wise buffer
    (``layer_wise_optimizer.py`` ``is_managed_by_layer_wise_optimizer``: False for
    ``is_embedding_or_output_parameter``), only the 32 layers' matrices: per layer linear_qkv
    [3,072, 4,096] 12,582,912, linear_proj [4,096, 2,048] 8,388,608, fc1 [14,336, 4,096]
    58,720,256, fc2 [4,096, 7,168] 29,360,128 elements (109,051,904); Newton–Schulz cost in
    4,096³: fc1 3.5, fc2 1.75, qkv 0.5625, proj 0.25. Every size is a multiple of 64, so the
    64-element starts and the shard divisor lcm(64, lcm(4, 128) / 4) = 64 add nothing.

    Backprop order (fc2, fc1, proj, qkv from layer 31 down). A bucket closes once it holds
    ``max(40,000,000, int(0.9 · 4 · 58,720,256)) = 211,392,921`` elements and the next matrix
    would grow the least-loaded shard of the numel estimate past the fullest. After layers 31
    and 30 (218,103,808) the estimate's shards are [50,331,648, 58,720,256, 37,748,736,
    71,303,168]: layer 29's fc2 fits (37,748,736 + 29,360,128 ≤ 71,303,168), its fc1 does not.
    Bucket 1 (247,463,936; cap 1.3 / 4 of it, 80,425,779): the two fc1 to ranks 0 and 1, the
    three fc2 to ranks 2, 3, 2 (rank 0 and 1 would pass the cap), then both qkv and both proj
    to rank 3, the least loaded: shards [58,720,256 ×3, 71,303,168], 4 × 71,303,168 −
    247,463,936 = +37,748,736. Then 14 buckets of eight matrices (two of each kind, 218,103,808),
    each closed before the next fc1: the two fc1 on two ranks, each fc2 with a qkv and a proj on
    the others (50,331,648), so 4 × 58,720,256 − 218,103,808 = +16,777,216 each. The last 7
    (layer 1's fc1, proj, qkv and layer 0; 188,743,680) again span 4 × 58,720,256: +46,137,344.
    Padding 37,748,736 + 14 · 16,777,216 + 46,137,344 = 318,767,104 elements, in the BF16
    parameter buffer (2 B) and the FP32 gradient buffer (4 B): 1,912,602,624 B on every rank
    (with the embedding and output layer packed too it was 938,475,520).

    The optimizer state of the busiest rank, 3: its shards hold 71,303,168 in bucket 1, 58,720,256
    and 50,331,648 in turn over the 14 middle buckets, 58,720,256 in the last: 893,386,752
    matrix elements at Muon's 8 B (FP32 master and momentum), 7,147,094,016 B; plus a quarter of
    the embedding's, output layer's and 65 norms' Adam state and FP32 master (2 · 262,668,288 +
    65 · 4,096 = 525,602,816 elements at 12 B, the distributed optimizer's byte-level shards
    over the 4 ranks, ``distrib_optimizer.py``): 1,576,808,448 B; 8,723,902,464 B."""
    shapes = [QKV, PROJ, FC1, FC2] * 32
    assert sum(m * n for m, n in [QKV, PROJ, FC1, FC2]) == 109_051_904
    assert 9 + 14 * 8 + 7 == 4 * 32
    assert 2 * 109_051_904 >= int(0.9 * 4 * 58_720_256) == 211_392_921
    assert 2 * 58_720_256 + 3 * 29_360_128 + 2 * 12_582_912 + 2 * 8_388_608 == 247_463_936
    assert 2 * 12_582_912 + 2 * 8_388_608 + 29_360_128 == 71_303_168
    assert 29_360_128 + 12_582_912 + 8_388_608 == 50_331_648 < 58_720_256
    padding = 4 * 71_303_168 - 247_463_936
    padding += 14 * (4 * 58_720_256 - 2 * 109_051_904)
    padding += 4 * 58_720_256 - (2 * 109_051_904 - 29_360_128)
    assert padding == 37_748_736 + 14 * 16_777_216 + 46_137_344 == 318_767_104
    assert layer_wise_padding(shapes, 4, layer_wise_bucket_size(4)) == padding
    case = Case.of(model="llama3-8b", optimizer="muon", dp=4, tp=2, zero_stage=1).evaluate()
    stage = case.stages[0]
    assert stage.state.weights_bytes == 2 * (stage.dense_params + padding)
    assert stage.state.gradients_bytes == 4 * (stage.dense_params + padding)
    busiest = 71_303_168 + 7 * 58_720_256 + 7 * 50_331_648 + 58_720_256
    assert busiest == 893_386_752
    owners = layer_wise_owners(shapes, 4, layer_wise_bucket_size(4))
    assert sum(m * n for (m, n), r in zip(shapes, owners, strict=True) if r == 3) == busiest
    assert stage.dense_params == 32 * 109_051_904 + 2 * 262_668_288 + 65 * 4096
    assert stage.state.optimizer_bytes == 8 * busiest + 12 * 525_602_816 // 4 == 8_723_902_464
    adam = Case.of(model="llama3-8b", optimizer="adam", dp=4, tp=2, zero_stage=1).evaluate()
    assert adam.stages[0].state.weights_bytes == 2 * adam.stages[0].dense_params


def test_shards_round_to_the_shard_divisor() -> None:
    """Each shard is rounded up to ``lcm(64, lcm(dp, 128) / dp)`` elements (``_shard_divisor``:
    64 at dp 4, 128 at dp 3) and each matrix starts on a 64-element boundary
    (``pad_param_start``): one [4, 8] matrix over 4 ranks spans 4 × 64, padding 256 − 32; two
    [4, 8] over 3 ranks, 3 × 128 − 64; [16, 8] and [4, 8] over 2 ranks, shards 128 and 32 → 128:
    2 × 128 − 160. Three [8, 9] (72 elements each) over 2 ranks, cap 1.3 · 216 / 2 = 140.4: the
    first to rank 0, the second to rank 1 (rank 0's next start, 128, + 72 passes the cap), the
    third fits nowhere and goes to the emptier shard, rank 0 (the first of equals), at 128: a
    shard of 200, rounded to 256, 2 × 256 − 216. Fc1 and fc2 whole: 4 × 58,720,256 −
    88,080,384."""
    assert layer_wise_padding([(4, 8)], 4) == 4 * 64 - 32
    assert layer_wise_padding([(4, 8), (4, 8)], 3) == 3 * 128 - 64
    assert layer_wise_padding([(16, 8), (4, 8)], 2) == 2 * 128 - 160
    assert layer_wise_padding([(8, 9)] * 3, 2) == 2 * 256 - 216 == 296
    assert layer_wise_owners([(8, 9)] * 3, 2) == (0, 1, 0)
    assert layer_wise_padding([FC1, FC1], 2) == 0
    assert layer_wise_padding([FC1, FC2], 4) == 4 * 58_720_256 - 88_080_384


def test_mixtral_busiest_expert_rank_by_hand() -> None:
    """Mixtral 8x7B, Muon, dp 16 × pp 2 (4 model chunks of 4 layers a rank) × ep 8, ZeRO 1: each
    layer's one local expert, fc1 [28,672, 4,096] 117,440,512 and fc2 [4,096, 14,336]
    58,720,256 elements, packed over the 2 expert data-parallel ranks in the expert buffer
    (``compute_full_param_layout`` with ``expert_data_parallel_world_size``); the first chunk
    of pipeline rank 0 cut into 40,000,000-element buckets (``max(40e6, 1e6 · dp_cp)``).

    First chunk, backprop order fc2₃ fc1₃ fc2₂ fc1₂ fc2₁ fc1₁ fc2₀ fc1₀. Bucket A closes before
    fc1₂ (234,881,024 ≥ int(0.9 · 2 · 117,440,512) = 211,392,921 and fc1₂ would grow the fuller
    shard): fc1₃ to rank 0, fc2₃ and fc2₂ to rank 1 (cap 1.3 · 234,881,024 / 2 = 152,672,665).
    Bucket B (fc1₂ fc2₁ fc1₁ fc2₀; fc2₀ fills the estimate's gap, fc1₀ would not): the loads
    even (2 · fc1's cost each), fc1₂ to rank 0, fc1₁ to rank 1 (rank 0 would pass the cap
    228,982,374), fc2₁ to rank 0, fc2₀ to rank 1. Bucket C: fc1₀ to rank 0. Rank 0: three
    fc1 and one fc2. The other three chunks are one bucket each, two fc1 and two fc2 a rank.
    Rank 0 holds 9 fc1 + 7 fc2 = 1,468,006,400 elements at Muon's 8 B: 11,744,051,200 B,
    against the average 8 + 8, 1,409,286,144 elements, 11,274,289,152 B: +469,762,048 B.

    The dense part: per chunk 4 linear_qkv [6,144, 4,096], 4 linear_proj [4,096, 4,096] and 4
    routers [8, 4,096] over 16 ranks, each of the first eight past the cap alone: the busiest
    rank holds one linear_qkv a chunk, 4 · 25,165,824 · 8 = 805,306,368 B; the embedding's and
    32 norms' Adam state over 16 ranks, (32,000 · 4,096 + 32 · 4,096) · 12 / 16 = 98,402,304 B.
    """
    fc1, fc2 = (28672, 4096), (4096, 14336)
    chunk = [fc1, fc2] * 4
    assert layer_wise_owners(chunk, 2, layer_wise_bucket_size(16)) == (0, 1, 1, 0, 0, 1, 0, 1)
    assert layer_wise_owners(chunk, 2) == (1, 1, 0, 0, 1, 1, 0, 0)
    busiest = 9 * 117_440_512 + 7 * 58_720_256
    average = 8 * 117_440_512 + 8 * 58_720_256
    assert 8 * (busiest - average) == 469_762_048
    case = Case.of(
        model="mixtral-8x7b", optimizer="muon", dp=16, pp=2, virtual_stages=4, ep=8,
        seq_len=32768, global_batch_size=128, recompute="full", schedule="interleaved",
        zero_stage=1,
    ).evaluate()  # fmt: skip
    dense = 4 * 25_165_824 * 8 + (32_000 * 4096 + 32 * 4096) * 12 // 16
    assert dense == 903_708_672
    assert case.stages[0].state.optimizer_bytes == dense + 8 * busiest == 12_647_759_872
