"""A gathered unit is whole on the GPU beside its local shard (model.mechanism_record
Mechanism.memory_terms): every framework all-gathers into a new unsharded buffer — FSDP2
``FSDPParam.init_all_gather_outputs`` (``torch.empty`` of the padded unsharded size; the
sharded parameter, FP32 under torchtitan's mixed precision, apart), DeepSpeed's full buffer
beside ``ds_tensor`` (``partition_parameters.py``), Megatron-FSDP's
``DataParallelBuffer.fetch_bucket`` → ``allocate_bucket_storage``. FSDP2 wraps the routed
experts on their own mesh, one rank included, and still copies them into unsharded parameters
(``_fsdp_param_group.py`` ``wait_for_unshard``, world size 1)."""

import trainplan


def test_fsdp2_llama3_8b_two_whole_units():
    """Llama 3 8B, dp 8, fsdp2 ZeRO-3: the largest unit is the output layer, 128,256 × 4,096 =
    525,336,576 elements; the unit computed and the next one, 2 B each: 2 × 2 × 525,336,576 =
    2,101,346,304 B (7/8 of it, 1,838,678,016 B, was counted before)."""
    e = trainplan.evaluate(model="llama3-8b", gpu="H100-SXM", dp=8, framework="fsdp2",
                           zero_stage=3, global_batch_size=64)  # fmt: skip
    assert 128_256 * 4096 == 525_336_576
    assert e.peak.state.gathered_bytes == 2 * 2 * 525_336_576 == 2_101_346_304


def test_fsdp2_mixtral_experts_on_a_mesh_of_one():
    """Mixtral 8×7B, dp 8 × ep 8, fsdp2 ZeRO-3: the experts' shard degree is dp/ep = 1, yet
    FSDP2 copies them into unsharded parameters. A layer's unit on a GPU: its attention
    4,096 × (4,096 + 1,024 + 1,024 + 4,096) = 41,943,040, two norms 8,192 and the router
    8 × 4,096 = 32,768 (41,984,000 dense) and one expert, 3 × 4,096 × 14,336 = 176,160,768:
    218,144,768 elements; two units, 2 B each: 872,579,072 B (before: 7/8 of the dense part
    and none of the experts, 146,944,000 B)."""
    e = trainplan.evaluate(
        model="mixtral-8x7b", gpu="H100-SXM", dp=8, ep=8, framework="fsdp2", zero_stage=3,
        global_batch_size=64, seq_len=8192, recompute="full",
    )  # fmt: skip
    dense, expert = 41_943_040 + 8_192 + 32_768, 3 * 4096 * 14336
    assert (dense, expert) == (41_984_000, 176_160_768)
    assert e.peak.state.gathered_bytes == 2 * 2 * (dense + expert) == 872_579_072


def test_nothing_is_gathered_unsharded():
    """dp 1 (nothing sharded, no ``fully_shard``): no gathered units under fsdp2."""
    e = trainplan.evaluate(model="llama3-8b", gpu="H200", dp=1, framework="fsdp2",
                           zero_stage=3, global_batch_size=8)  # fmt: skip
    assert e.peak.state.gathered_bytes == 0
