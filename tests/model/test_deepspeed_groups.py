"""DeepSpeed's and Megatron-DeepSpeed's process groups of their own, each a ring communicator
beside those counted before (model/terms/comm_memory.py grad_stats_rings): ZeRO's grad-norm
all-reduce over the model-parallel group where tp·pp > 1 (stage_1_and_2.py
_model_parallel_all_reduce), and under the pipeline engine (pp > 1) the loss broadcast over the
pipe group and, with tp > 1, the partitioned activations over the slice group (pipe/engine.py).
On 64 H100s (8 nodes) each is placed as the world: 16 collective channels × 12 MiB = 192 MiB
and its set-up (16 × 3 + 2) × 2 MiB = 100 MiB, 292 MiB (model/terms/comm_memory.py
group_channels; was 32 channels × 12 MiB = 384 MiB, no set-up). NVLink SHARP
(model/terms/nvls_memory.py, NCCL src/transport/nvls.cc): a ring of r ranks in an H100 node adds
2 MiB of credits, and where NCCL's tuner runs its all-reduce as NVLS (r of 6 to 8; at 2 to 5 the
ring is faster, model/nccl_search.py) 32·r MiB of buffers (16 channels × 2 × 128 KiB × 8 steps ×
r heads); one across nodes with ≥ 2 ranks a node the 2 MiB of credits."""

import pytest

import trainplan

MIB = 2**20
GROUP = 192 + 100


@pytest.mark.parametrize(
    ("degrees", "before", "rings", "nvls"),
    [
        # tp 4 in a node (24 channels: 288 + 196 = 484); dp 8 over 32 consecutive ranks, 2 a node
        # on 4 nodes (2 → dup 4 → Postset 8 channels: 96 + (8 × 3 + 2) × 2 = 52); pp 2's one
        # neighbour 32 ranks away, one rank a node (4 channels: 48 + 28); the world (292)
        # NVLS: tp 4 in a node 2 (its all-reduces rings: 130 with NVLS's buffers before); dp,
        # world and the three groups 2 each
        (
            {"dp": 8, "tp": 4, "pp": 2},
            484 + 148 + 76 + 292,
            3,
            2 + 5 * 2,
        ),  # model-parallel, pipe, slice
        # tp 2 in a node (484); dp 32 over 64 ranks, 4 a node on 8 nodes (16: 292); the world
        ({"dp": 32, "tp": 2, "pp": 1}, 484 + 292 + 292, 1, 2 + 3 * 2),  # model-parallel only
        # dp 16 over 2 nodes (292); stage 0's one neighbour, 4 channels (48 + 28); the world
        ({"dp": 16, "tp": 1, "pp": 4}, 292 + 76 + 292, 2, 4 * 2),  # model-parallel and pipe
        ({"dp": 64, "tp": 1, "pp": 1}, 292 + 292, 0, 2 * 2),  # none: no model parallelism
    ],
)
def test_qwen25_72b_on_64_gpus(degrees, before, rings, nvls):
    """Communicators counted before (the tp and dp rings, the world ring, the pipeline
    neighbours), plus 292 MiB per group of DeepSpeed's own. The search's answer before, dp 8 ×
    tp 4 × pp 2 ZeRO-1 at 82.76 of 83.21 GB, holds 1.21 GB more: 83.97; with Megatron-DeepSpeed's
    bool causal masks on stage 0 (``args.attn_mask`` and the input buffers' clones of pp 2
    micro-batches, 3 × 4,096² = 50,331,648 B) 84.02; with the embedding's whole output the first
    layer's input views on stage 0 (no dropout, SP: model/deepspeed_layers.py
    keeps_embedding_view), 2 micro-batches × 2·4,096·8,192 × 3/4 = 100,663,296 B more: 84.12;
    with flash-attn's FP32 softmax statistics (``FlashAttnVarlenFunc`` saves ``softmax_lse``),
    4·64/4 heads·4,096 = 262,144 B a layer over stage 0's 40 layers × 2 micro-batches,
    20,971,520 B more: 84.14 GB (84,137,107,968 B). Those held (100 + 3 × 32) × 12 MiB = 2,352
    MiB of communicators at 32 channels a ring and no set-up; placed and set up they are 1,876
    MiB, 476 MiB = 499,122,176 B fewer: 83,637,985,792 B, 83.64 GB, still over; with
    Megatron-DeepSpeed's TorchScript bias-dropout-add masks (a bool [s/tp, b, h] per residual
    add at dropout 0), 80 × 2·4,096·8,192/4 = 1,342,177,280 B more: 84,980,163,072 B; with
    NVLS's 12 MiB (140 while the tp 4 ring held NVLS's buffers), 84,992,745,984 B."""
    e = trainplan.evaluate(model="qwen2.5-72b", framework="deepspeed", num_gpus=64, **degrees)
    assert e.peak.communicator_bytes == (before + GROUP * rings + nvls) * MIB
    if rings == 3:
        assert before + GROUP * rings == 1876
        masks = 40 * 2 * 2 * 4096 * 8192 // 4
        total = 84_137_107_968 - 476 * MIB + masks
        assert total == 84_980_163_072
        assert total + 12 * MIB == int(e.peak.total_bytes) == 84_992_745_984
        assert not e.fits
