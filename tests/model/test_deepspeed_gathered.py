"""DeepSpeed ZeRO-3's gathered weights at the memory peak, from the walk of its fetch coordinator
(model/deepspeed_coordinator.py walk_held, model/deepspeed_fetches.py gathered_envelope,
model/deepspeed_gathered.py zero3_peak_gathered_bytes, model/terms/deepspeed_turn.py).

DeepSpeed 38327e07 deepspeed/runtime/zero/partitioned_param_coordinator.py: n_available rises
when __all_gather_params_ launches a gather (:484), prefetches in flight included, and falls at
__release_param (:515-520); partition_parameters.py all_gather_coalesced allocates the whole
buffer before the collective (:1254, :1331), so n_available is the gathered bytes ÷ 2 (BF16).
The memory model adds the gathered bytes to the activations at their peak (the turn from forward
to backward); a moment k layers from the turn (k layers' saved activations not live) counts
with k of the least a layer saves (its input, b·s·h·2 ÷ tp·cp) taken off.
"""

from __future__ import annotations

from trainplan.model.deepspeed_fetches import gathered_envelope
from trainplan.model.layout import Layout
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model

# Llama 3 8B at tp 1: a layer's weights QKV 4,096·(4,096 + 2·1,024) = 25,165,824, output
# projection 16,777,216, gate-up 2·4,096·14,336 = 117,440,512, down 58,720,256; the output
# weight and the input embedding 128,256·4,096 = 525,336,576 each
QKV, PROJ, FC1, FC2, HEAD = 25_165_824, 16_777_216, 117_440_512, 58_720_256, 525_336_576
LAYER = QKV + PROJ + FC1 + FC2  # 218,103,808


def _state(model: str, options: dict | None = None, **layout: object):
    lay = Layout.of(framework="deepspeed", zero_stage=3, **layout)
    case = Case.of(model, "H100-SXM", lay, **(options or {}))
    return case.evaluate().stages[0]


def test_llama3_8b_tp1_the_moments_of_the_walk():
    """Llama 3 8B at tp 1, what the walk holds gathered:

    * at the turn (k 0; the most there at the backward fetch of layer 31's gate-up): the output
      weight (gathered by the root module's first fetch, held until the optimizer step), layer
      31's QKV, projection and gate-up (its down was freed after its backward), all of layer 30
      (the reuse distance kept them from the forward), layer 29's gate-up and down (prefetched);
      n_available is then past 1e9, so the prefetch stops: 1,078,984,704;
    * in layer 29's forward (k 2): 1,095,761,920, the prefetch filled to the cap;
    * in layer 2's backward (k 29): the output weight, the input embedding (prefetched; the
      trace's last parameter), layers 0 and 1 whole and layer 2's QKV (prefetched, the backward
      runs down to them): 2·525,336,576 + 2·218,103,808 + 25,165,824 = 1,512,046,592.
    """
    arch = get_model("llama3-8b").model.arch
    turn = HEAD + (QKV + PROJ + FC1) + LAYER + (FC1 + FC2)
    assert turn == 1_078_984_704
    late = 2 * HEAD + 2 * LAYER + QKV
    assert late == 1_512_046_592
    assert gathered_envelope(arch, 1, 1, 1, 32, 0) == ((0, turn), (2, 1_095_761_920), (29, late))


def test_llama3_8b_dp8_at_8192_tokens_the_turn_is_the_peak():
    """dp 8, b 1, s 8,192, BF16: a layer's input 8,192·4,096·2 = 67,108,864 bytes. The turn
    2·1,078,984,704 = 2,157,969,408; layer 29's forward 2·1,095,761,920 − 2·67,108,864 =
    2,057,306,112; layer 2's backward 2·1,512,046,592 − 29·67,108,864 = 1,077,936,128. The turn
    is the most of the walk without recomputation, the term's figure for that layout. Under √n
    recomputation its own walk (6 layers a chunk: ((0, 1,062,207,488), (1, 1,137,704,960), (5,
    1,512,046,592))), whose layer 2's backward frees only 5 chunks' inputs: 2·1,512,046,592 −
    5·67,108,864 = 2,688,548,864 (while the term took the most of the walks, the layout without
    recomputation read this too: 0.53 GB over the turn)."""
    assert 2 * 1_095_761_920 - 2 * 67_108_864 == 2_057_306_112
    assert 2 * 1_512_046_592 - 29 * 67_108_864 == 1_077_936_128
    arch = get_model("llama3-8b").model.arch
    assert gathered_envelope(arch, 1, 1, 1, 32, 0, 6) == (
        (0, 1_062_207_488),
        (1, 1_137_704_960),
        (5, 1_512_046_592),
    )
    assert 2 * 1_512_046_592 - 5 * 67_108_864 == 2_688_548_864 > 2 * 1_078_984_704
    assert _state("llama3-8b", dp=8).state.gathered_bytes == 2 * 1_078_984_704 == 2_157_969_408
    assert _state("llama3-8b", dp=8, recompute="sqrt").state.gathered_bytes == 2_688_548_864


def test_llama3_8b_dp8_at_2048_tokens_layer_two_backward_is_the_peak():
    """s 2,048: a layer's input 2,048·4,096·2 = 16,777,216 bytes, the least any recompute mode
    frees a layer. Layer 2's backward: 2·1,512,046,592 − 29·16,777,216 = 2,537,553,920 bytes,
    above the turn's 2,157,969,408 (the turn bound under-counted it by 2·1,512,046,592 −
    2,258,002,176 − 29·16,777,216 = 279,551,744 bytes under full recompute), without
    recomputation and under full recomputation alike. √n recomputation's walk frees only 5
    chunks' inputs there: 2·1,512,046,592 − 5·16,777,216 = 2,940,207,104, its layout's figure
    (every mode's while the term took the most of the walks)."""
    assert 2 * 1_512_046_592 - 29 * 16_777_216 == 2_537_553_920
    assert 2 * 1_512_046_592 - 5 * 16_777_216 == 2_940_207_104
    want = {"full": 2_537_553_920, "none": 2_537_553_920, "sqrt": 2_940_207_104}
    for recompute, gathered in want.items():
        st = _state("llama3-8b", {"seq_len": 2048}, dp=8, recompute=recompute)
        assert st.state.gathered_bytes == gathered, recompute


def test_llama3_70b_tp8_the_turn_is_the_peak():
    """Llama 3 70B at tp 8: a layer's QKV 8,192·(8,192 + 2·1,024) ÷ 8 = 10,485,760, projection
    8,388,608, gate-up 2·8,192·28,672 ÷ 8 = 58,720,256, down 29,360,128 (106,954,752 a layer);
    the output weight 128,256·8,192 ÷ 8 = 131,334,144. At the turn (the backward fetch of layer
    79's gate-up): the output weight, layer 79's QKV, projection and gate-up, layers 72 to 78
    whole (kept by the reuse distance), layer 71's gate-up and down (prefetched):
    131,334,144 + 77,594,624 + 7·106,954,752 + 88,080,384 = 1,045,692,416. The walk's most,
    1,128,792,064 in layer 8's backward (the embedding prefetched beside the output weight),
    comes with 71 layers freed: 2·83,099,648 = 166,199,296 bytes more gathered against
    71·(8,192·8,192·2 ÷ 8) = 1,191,182,336 bytes less saved at b 1, s 8,192."""
    qkv, proj, fc1, fc2, head = 10_485_760, 8_388_608, 58_720_256, 29_360_128, 131_334_144
    turn = head + (qkv + proj + fc1) + 7 * (qkv + proj + fc1 + fc2) + (fc1 + fc2)
    assert turn == 1_045_692_416
    arch = get_model("llama3-70b").model.arch
    assert gathered_envelope(arch, 8, 1, 1, 80, 0) == (
        (0, turn),
        (8, 1_054_081_024),
        (71, 1_128_792_064),
    )
    assert 2 * turn == 2_091_384_832
    assert _state("llama3-70b", dp=8, tp=8).state.gathered_bytes == 2 * turn
    # √n recomputation (9 layers a chunk): the same 1,128,792,064 with only 8 chunks' inputs
    # freed, 2·1,128,792,064 − 8·16,777,216 = 2,123,366,400, that layout's figure
    assert gathered_envelope(arch, 8, 1, 1, 80, 0, 9)[-1] == (8, 1_128_792_064)
    want = 2 * 1_128_792_064 - 8 * 16_777_216
    st = _state("llama3-70b", dp=8, tp=8, recompute="sqrt")
    assert st.state.gathered_bytes == want == 2_123_366_400


def test_llama3_70b_tp4_and_gpt3_175b_tp16():
    """The figures the turn bound gave for the 64-GPU deepspeed layouts, against the walk's:
    Llama 3 70B dp 16 tp 4 2,234,881,024 → 2·1,101,529,088 = 2,203,058,176 bytes (the turn's; the
    walk's most, 1,204,813,824 in layer 3's backward, comes with 76 layers' 8,192·8,192·2 ÷ 4 =
    33,554,432 bytes freed); GPT-3 175B dp 4 tp 16 b 3 (FP8 recipe, BF16 weights gathered)
    2,075,497,472 → 2·1,020,076,032 = 2,040,152,064 (k 8's 1,029,513,216 comes with 8 layers'
    3·2,048·12,288·2 ÷ 16 = 9,437,184 bytes freed: 2,059,026,432 − 75,497,472 below the turn)."""
    assert _state("llama3-70b", dp=16, tp=4).state.gathered_bytes == 2_203_058_176
    arch = get_model("gpt3-175b").model.arch
    assert gathered_envelope(arch, 16, 1, 1, 96, 0) == ((0, 1_020_076_032), (8, 1_029_513_216))
    st = _state("gpt3-175b", {"precision": "fp8"}, dp=4, tp=16, micro_batch_size=3)
    assert st.state.gathered_bytes == 2 * 1_020_076_032 == 2_040_152_064
    # √n (10 layers a chunk): k 1's 1,029,513,216 with one chunk's input freed,
    # 2·1,029,513,216 − 9,437,184 = 2,049,589,248, above the turn's 2,040,152,064
    assert gathered_envelope(arch, 16, 1, 1, 96, 0, 10) == ((0, 1_020_076_032), (1, 1_029_513_216))
    sq = _state(
        "gpt3-175b", {"precision": "fp8"}, dp=4, tp=16, micro_batch_size=3, recompute="sqrt"
    )
    assert sq.state.gathered_bytes == 2 * 1_029_513_216 - 9_437_184 == 2_049_589_248
