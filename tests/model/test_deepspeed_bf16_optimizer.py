"""DeepSpeed's ``BF16_Optimizer`` (BF16 weights, FP32 gradient accumulation, ZeRO stage 1, no
CPU offload), derived by hand from DeepSpeed edaa7221 ``deepspeed/runtime/engine.py``
``_do_optimizer_sanity_check`` and ``deepspeed/runtime/bf16_optimizer.py``: the whole FP32
gradient buffer and each parameter's BF16 ``.grad`` beside it (6 B a parameter), the FP32
master and moments partitioned, no IPG bucket, nothing materialised for the step
(model/deepspeed_mechanisms.py ``_deepspeed_bf16_optimizer``)."""

from __future__ import annotations

import trainplan
from trainplan.model.mechanisms import mechanism

GPT3 = dict(
    model="gpt3-175b", num_gpus=128, gpu="H100-SXM", framework="deepspeed", dp=4, tp=4, pp=8,
    zero_stage=1, micro_batch_size=1, global_batch_size=1536, recompute="none",
)  # fmt: skip


def test_gpt3_175b_stage0_by_hand():
    """GPT-3 175B (h 12,288, 96 layers, biases), tp 4, pp 8 (12 layers a stage), dp 4. One layer
    per tp rank: 12·h²/4 + the column-parallel biases 7·h/4 + the row-parallel biases 2·h and
    the two LayerNorms 4·h whole = 452,984,832 + 21,504 + 73,728 = 453,080,064; 12 layers
    5,436,960,768; stage 0 adds the word embedding (V 50,260 padded, ÷ tp 4: 12,565 rows ×
    12,288 = 154,398,720) and the positions (2,048 × 12,288 = 25,165,824): 5,616,525,312.
    Gradients 6 B each (BF16 ``.grad`` 2 + FP32 buffer 4) = 33,699,151,872 B; weights 2 B =
    11,233,050,624; optimizer 12 B ÷ dp 4 = 16,849,575,936; no IPG bucket. At the boundary's
    all-reduce ``allreduce_bucket`` casts the whole FP32 buffer to BF16 (``communication_data_type``
    defaults to bf16): 2 B × 5,616,525,312 = 11,233,050,624 B at the step moment (state 61.78 GB +
    11.23 = 73.01 GB, below the forward-backward peak).
    The earlier search answer (75.56 GB with 4 B of gradients and the 1.00 GB bucket) is
    75.56 + 11.23 − 1.00 = 85.79 GB: over an H100's 83.21. With flash-attn's FP32 softmax
    statistics (``FlashAttnVarlenFunc`` saves ``softmax_lse``), 4·96/4 heads·2,048 = 196,608 B a
    layer over stage 0's 12 layers × 8 micro-batches in flight: 18,874,368 B more:
    85,811,994,624 B. With NCCL's channels by placement and their set-up
    (model/terms/comm_memory.py group_channels), stage 0's communicators go 2,736 → 1,952 MiB,
    822,083,584 B fewer: 84,989,911,040 B, still over. Before: 228 connections of 12 MiB (tp 32,
    dp 32, the pipeline neighbour 4, the tied embedding's group 32, DeepSpeed's model-parallel,
    pipe and slice groups 3 × 32, the world 32). Now, on 128 H100s: the tp 4 ring in a node, 24
    channels, 288 + (32 × 3 + 2) × 2 = 484 MiB; the dp 4 ring over 16 consecutive ranks, 2 a node,
    8 channels, 96 + 52 = 148; the pp group (stride 16, one rank a node: 4 channels) reaches its
    neighbour over 4 channels and sets up 4, 48 + 28 = 76; the embedding group on the pp link,
    76; DeepSpeed's three groups and the world over 16 nodes, 16 channels, 4 × 292. NVLink SHARP
    (model/terms/nvls_memory.py): the tp 4 ring in a node 2 MiB of credits (NCCL's tuner runs a
    4-GPU all-reduce of an H100 node as a ring, model/nccl_search.py: no buffers; 16 × 2 × (128
    KiB × 8) × 4 = 128 MiB more were counted before), the dp ring (2 a node) and the four across
    nodes 2 each: 12 MiB more, 85,002,493,952 B."""
    layer = 3 * 12288**2 + 7 * 12288 // 4 + 6 * 12288
    assert layer == 453_080_064
    params = 12 * layer + 12565 * 12288 + 2048 * 12288
    assert params == 5_616_525_312
    e = trainplan.evaluate(**GPT3, gradient_dtype="fp32")
    s = e.stages[0]
    assert s.dense_params == params
    assert s.state.gradients_bytes == 6 * params == 33_699_151_872
    assert s.state.weights_bytes == 2 * params == 11_233_050_624
    assert s.state.optimizer_bytes == 12 * params // 4 == 16_849_575_936
    assert s.state.buffers_bytes == 0 and s.state.step_bytes == 2 * params == 11_233_050_624
    lse = 12 * 8 * 4 * 96 // 4 * 2048
    assert lse == 18_874_368
    comm = 484 + 148 + 76 + 76 + 4 * 292
    nvls = 2 + 5 * 2
    assert s.communicator_bytes == (comm + nvls) * 2**20 and 228 * 12 - comm == 784
    total = 85_793_120_256 + lse - 784 * 2**20
    assert total == 84_989_911_040
    assert int(e.peak.total_bytes) == total + nvls * 2**20 == 85_002_493_952 and not e.fits


def test_only_zero1_bf16_fp32_grads_without_offload():
    """``_do_optimizer_sanity_check`` picks ``BF16_Optimizer`` only for ZeRO stage 1, BF16
    weights, FP32 ``grad_accum_dtype`` and no CPU offload; otherwise DeepSpeed's ZeRO
    optimizer with its IPG bucket (5e8 elements × 2 B) and its step partition."""
    bf16 = mechanism("deepspeed", 1, 2, 4, 12)
    assert (bf16.grads_full, bf16.bucket_bytes, bf16.step_sharded) == (6, 0, 0)
    for zero, g, offload in ((1, 2, False), (2, 4, False), (1, 4, True)):
        m = mechanism("deepspeed", zero, 2, g, 12, cpu_offload=offload)
        # the step's flat copy in the gradients' dtype beside its FP32 cast: 2 + 4, or 4; ZeRO-2
        # reduces inside the backward, where allreduce_bucket's flattened copy (5e8 × 2 B) sits
        # beside the IPG bucket; ZeRO-1 without overlap_comm reduces after it
        bucket = 2_000_000_000 if zero == 2 else 1_000_000_000
        assert m.bucket_bytes == bucket and m.step_sharded == (6 if g == 2 else 4)
    assert mechanism("megatron", 1, 2, 4, 12).grads_full == 4


def test_gpt3_175b_gradients_are_all_reduced_in_bf16():
    """At ZeRO stage 1 the engine calls the optimizer's ``reduce_gradients`` only where it has
    one; ``BF16_Optimizer`` has none, so ``buffered_allreduce_fallback`` all-reduces the FP32
    buffers cast to BF16 (``communication_data_type``), and ``update_lp_params`` all-gathers the
    updated BF16 partitions (DeepSpeed edaa7221 ``engine.py`` ``allreduce_gradients``,
    ``bf16_optimizer.py`` ``update_lp_params``). Stage 0's 5,616,525,312 parameters over dp 4: an
    all-reduce of 2 B (2 × 3/4 × 2 B) and an all-gather of 2 B (3/4 × 2 B), 6 × 3/4 ×
    5,616,525,312 = 25,274,363,904 B a step — the same bytes as the reduce-scatter of FP32 the
    model used to name, now timed as an all-reduce."""
    e = trainplan.evaluate(**GPT3, gradient_dtype="fp32")
    dp = next(row for row in e.traffic if row.traffic.axis == "dp")
    assert dp.traffic.collective == "all-reduce (bf16) + all-gather per step"
    assert dp.traffic.bytes_per_step == 6 * 3 * 5_616_525_312 // 4 == 25_274_363_904
