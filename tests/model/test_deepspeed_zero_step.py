"""DeepSpeed ZeRO-1/2's optimizer step, derived by hand from DeepSpeed edaa7221
``deepspeed/runtime/zero/stage_1_and_2.py`` ``DeepSpeedZeroOptimizer.step`` (non-offload
branch): the gradient partition is concatenated into a new flat tensor in the gradients' dtype
(``flatten`` / ``flatten_dense_tensors_aligned`` of ``averaged_gradients[i]``, a list of views)
and cast to FP32 beside it before ``del flat_grad_partition``: BF16 gradients add 2 + 4 B a
parameter ÷ D at that moment (model/deepspeed_mechanisms.py ``_deepspeed``, ``step_sharded``)."""

from __future__ import annotations

import trainplan
from trainplan.model.mechanisms import mechanism


def test_llama3_405b_tp4_pp32_by_hand():
    """Llama 3 405B (h 16,384; 8 K/V heads of 128; f 53,248), tp 4, pp 32, dp 1, ZeRO-1: stage 0
    holds 4 layers of (2·h² + 2·h·1,024 + 3·h·53,248)/4 + 2·h = 796,950,528 parameters and the
    word embedding 128,256/4 × h = 525,336,576: 3,713,138,688. The step's extra, ÷ dp 1: the
    BF16 flat copy 2 B and its FP32 cast 4 B a parameter, 6 × 3,713,138,688 =
    22,278,832,128 B (was 4 B: 14,852,554,752). The peak is the step's: 86,252,453,888 B, over
    an H100's 83.21 GB (the search answer, 78.83 GB before). 86,025,961,472 B with
    NCCL's channels by placement and their set-up (model/terms/comm_memory.py group_channels):
    stage 0's communicators 1,968 → 1,752 MiB, 226,492,416 B fewer. Before, 164 connections of
    12 MiB (tp 32, the world 32, the pipeline neighbour 4, DeepSpeed's model-parallel, pipe and
    slice groups 3 × 32). Now the tp 4 ring in a node, 24 channels, 288 + (32 × 3 + 2) × 2 =
    484 MiB; the world over 16 nodes, 16 channels, 192 + 100 = 292; the pp group (stride 4, 2
    ranks a node on 16 nodes: 8 channels) reaches its neighbour over 4 channels, 48 MiB, and sets
    up 8, (8 × 3 + 2) × 2 = 52: 100; DeepSpeed's three groups placed as the world, 3 × 292.
    NVLink SHARP (model/terms/nvls_memory.py): the tp 4 ring in a node 2 MiB of credits (NCCL's
    tuner runs a 4-GPU all-reduce of an H100 node as a ring, model/nccl_search.py: no buffers;
    16 × 2 × (128 KiB × 8) × 4 = 128 MiB more were counted before), the world ring and the three
    groups (8 a node) 2 each: 10 MiB more, 86,036,447,232 B."""
    h = 16384
    layer = (2 * h * h + 2 * h * 1024 + 3 * h * 53248) // 4 + 2 * h
    assert layer == 796_950_528
    params = 4 * layer + 128256 // 4 * h
    assert params == 3_713_138_688
    e = trainplan.evaluate(
        model="llama3-405b", num_gpus=128, gpu="H100-SXM", framework="deepspeed", dp=1, tp=4,
        pp=32, zero_stage=1, micro_batch_size=1, global_batch_size=2048, recompute="full",
    )  # fmt: skip
    s = e.stages[0]
    assert s.dense_params == params
    assert s.state.step_bytes == 6 * params == 22_278_832_128
    assert e.peak.peak_phase == "optimizer-step"
    assert s.communicator_bytes == (484 + 292 + 48 + 52 + 3 * 292 + 10) * 2**20
    nccl = (484 + 292 + 48 + 52 + 3 * 292 - 164 * 12) * 2**20
    assert 86_252_453_888 + nccl == 86_025_961_472
    assert int(e.peak.total_bytes) == 86_025_961_472 + 10 * 2**20 == 86_036_447_232
    assert not e.fits


def test_step_bytes_by_gradient_dtype_and_stage():
    """ZeRO-2 runs the same branch of ``step``: 2 + 4 with BF16 gradients. With FP32 gradients
    (ZeRO-2 here; ZeRO-1 runs ``BF16_Optimizer``) the cast returns the flat copy: 4. ZeRO-3
    flattens each sub-group the same way (``stage3.py`` ``_prepare_fp32_grad_for_sub_group``):
    2 + 4 (was 4)."""
    assert mechanism("deepspeed", 1, 2, 2, 12).step_sharded == 6
    assert mechanism("deepspeed", 2, 2, 2, 12).step_sharded == 6
    assert mechanism("deepspeed", 2, 2, 4, 12).step_sharded == 4
    assert mechanism("deepspeed", 1, 2, 4, 12, cpu_offload=True).step_sharded == 4
    assert mechanism("deepspeed", 3, 2, 2, 12).step_sharded == 6
