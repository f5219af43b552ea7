"""DeepSpeed ZeRO-3's gathered weights at the turn from forward to backward
(model/deepspeed_gathered.py zero3_turn_elements; model/terms/deepspeed_turn.py).

The rule, from DeepSpeed edaa72212 deepspeed/runtime/zero/partitioned_param_coordinator.py:
PartitionedParameterCoordinator.__params_to_release keeps a module's parameters gathered after
its forward when the trace (forward, then backward) uses them again within max_reuse_distance
= 1e9 elements (zero/config.py); a layer j from the end is 2·(j − 1) layers and the output
weight H away from its own backward, so the last k = ⌈(1e9 − H) ÷ 2u⌉ layers stay.
_fetch_sub_module_impl prefetches the next parameters not available until 5e7 elements
(stage3_prefetch_bucket_size), the last one whole, while those available are below
max_live_parameters = 1e9: every fetch prefetches again, so the available parameters reach 1e9 +
the largest layer tensor wherever the GPU holds that many, and the count is at least that. The
output weight is held through forward and backward (Megatron-DeepSpeed gpt_model.py
post_language_model_processing reads it in the root module's forward: parameter_offload.py
ZeROOrderedDict.__getitem__ registers it as that module's external parameter). The all-gather
writes a new whole buffer (the partition ds_tensor stays), so the elements count whole, 2 B.
"""

from __future__ import annotations

from trainplan.model.deepspeed_gathered import zero3_turn_elements
from trainplan.model.layout import Layout
from trainplan.optimizer.case import Case


def _gathered(model: str, **layout: int) -> int:
    lay = Layout.of(framework="deepspeed", zero_stage=3, **layout)
    precision = "fp8" if model == "gpt3-175b" else "bf16"
    return (
        Case.of(model, "H100-SXM", lay, precision=precision)
        .evaluate()
        .stages[0]
        .state.gathered_bytes
    )


def test_gpt3_175b_tp16_keeps_five_layers_and_the_tied_embedding():
    """GPT-3 175B, dp 4 tp 16 b 3 fp8 (the 64-GPU deepspeed answer). A layer on one GPU:
    12·12,288² ÷ 16 = 113,246,208 weights + QKV and FC1 biases ÷ 16 (2,304 + 3,072) + the two
    row-parallel biases and both LayerNorms whole (2·12,288 + 4·12,288) = 113,325,312. The tied
    output weight: 50,272 rows (⌈50,257 ÷ 16⌉·16) × 12,288 ÷ 16 = 38,608,896. k = ⌈(1e9 −
    38,608,896) ÷ (2·113,325,312)⌉ = ⌈4.24⌉ = 5 (layers 91 to 95: layer 91 is 8 layers and H =
    945 M elements from its backward). FC1, 4·12,288² ÷ 16 = 37,748,736, the largest tensor.
    5·113,325,312 + 38,608,896 + 5e7 + 37,748,736 = 692,984,192 elements, below what the
    prefetch reaches under the live cap, 1e9 + 37,748,736 = 1,037,748,736, 2 B each (was two
    units beyond the 1/4 shard: 2·113,325,312·2·3/4 = 339,975,936 B)."""
    held = 5 * 113_325_312 + 38_608_896 + 50_000_000 + 37_748_736
    assert held == 692_984_192 < 1_000_000_000 + 37_748_736
    gathered = _gathered("gpt3-175b", dp=4, tp=16, micro_batch_size=3)
    assert gathered == 2 * (1_000_000_000 + 37_748_736) == 2_075_497_472


def test_llama3_70b_tp4_keeps_two_layers_and_the_output_layer():
    """Llama 3 70B, dp 16 tp 4 (the 64-GPU deepspeed answer). A layer: 8,192·(8,192 +
    2·1,024) + 8,192² + 3·8,192·28,672 = 855,638,016 ÷ 4 + its two RMSNorms whole (16,384) =
    213,925,888. The untied output layer 128,256·8,192 ÷ 4 = 262,668,288. k = ⌈(1e9 −
    262,668,288) ÷ 427,851,776⌉ = ⌈1.72⌉ = 2. FC1 (gate and up fused) 2·28,672·8,192 ÷ 4 =
    117,440,512. 2·213,925,888 + 262,668,288 + 5e7 + 117,440,512 = 857,960,576 elements, below
    the live cap's 1e9 + 117,440,512 = 1,117,440,512 (was two units of the output layer,
    2·262,668,288·2·15/16 = 985,006,080 B)."""
    held = 2 * 213_925_888 + 262_668_288 + 50_000_000 + 117_440_512
    assert held == 857_960_576 < 1_000_000_000 + 117_440_512
    assert _gathered("llama3-70b", dp=16, tp=4) == 2 * 1_117_440_512 == 2_234_881_024


def test_the_rule_at_its_edges():
    """An output weight past the reuse distance keeps only the layer computed; a model whose
    whole trace is within it keeps everything (the untied embedding too), at most its
    parameters; the count never goes below the two units the mechanism holds elsewhere."""
    # H = 2.1e9 > 1e9: k = 1 (the layer computed); 3e8 + 2.1e9 + 5e7 + 1e8
    assert zero3_turn_elements(3 * 10**8, 126, 21 * 10**8, 0, 10**8, 10**12) == 2_550_000_000
    # 2·4·10 + 20 < 1e9: all 4 layers, the output and the embedding, capped at the 95 held
    assert zero3_turn_elements(10, 4, 20, 30, 5, 95) == 95
    # with more on the GPU the prefetch reaches the live cap, 1e9 + the last tensor, at most all
    assert zero3_turn_elements(10, 4, 20, 30, 5, 10**9) == 10**9
    assert zero3_turn_elements(10, 4, 20, 30, 5, 2 * 10**9) == 10**9 + 5
    # Llama 3 8B at dp 8 (untied, H = 525,336,576 > a layer): k = ⌈474,663,424 ÷ 436,224,000⌉
    # = 2, FC1 117,440,512: 1,129,001,088 elements whole, above the two 525 M units' 7/8
    held = 2 * 218_112_000 + 525_336_576 + 50_000_000 + 117_440_512
    assert _gathered("llama3-8b", dp=8) == 2 * held == 2_258_002_176 > 2 * 525_336_576 * 2 * 7 // 8
