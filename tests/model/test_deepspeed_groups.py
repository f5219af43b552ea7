"""DeepSpeed's and Megatron-DeepSpeed's process groups of their own, each a communicator of 32
ring channels × 12 MiB beside those counted before (model/terms/comm_memory.py
grad_stats_rings): ZeRO's grad-norm all-reduce over the model-parallel group where tp·pp > 1
(stage_1_and_2.py _model_parallel_all_reduce), and under the pipeline engine (pp > 1) the loss
broadcast over the pipe group and, with tp > 1, the partitioned activations over the slice
group (pipe/engine.py)."""

import pytest

import trainplan

RING = 32 * 12 * 2**20


@pytest.mark.parametrize(
    ("degrees", "before", "rings"),
    [
        ({"dp": 8, "tp": 4, "pp": 2}, 100, 3),  # model-parallel, pipe and slice groups
        ({"dp": 32, "tp": 2, "pp": 1}, 96, 1),  # model-parallel group only
        ({"dp": 16, "tp": 1, "pp": 4}, 68, 2),  # model-parallel and pipe groups
        ({"dp": 64, "tp": 1, "pp": 1}, 64, 0),  # none: no model parallelism
    ],
)
def test_qwen25_72b_on_64_gpus(degrees, before, rings):
    """Connections of 12 MiB counted before (the tp and dp rings, the world ring, the pipeline
    neighbours' point-to-point channels), plus 32 per group of DeepSpeed's own. The search's
    answer before, dp 8 × tp 4 × pp 2 ZeRO-1 at 82.76 of 83.21 GB, holds 1.21 GB more: 83.97;
    with Megatron-DeepSpeed's bool causal masks on stage 0 (``args.attn_mask`` and the input
    buffers' clones of pp 2 micro-batches, 3 × 4,096² = 50,331,648 B) 84.02; with the
    embedding's whole output the first layer's input views on stage 0 (no dropout, SP:
    model/deepspeed_layers.py keeps_embedding_view), 2 micro-batches × 2·4,096·8,192 × 3/4 =
    100,663,296 B more: 84.12; with flash-attn's FP32 softmax statistics (``FlashAttnVarlenFunc``
    saves ``softmax_lse``), 4·64/4 heads·4,096 = 262,144 B a layer over stage 0's 40 layers × 2
    micro-batches, 20,971,520 B more: 84.14."""
    e = trainplan.evaluate(model="qwen2.5-72b", framework="deepspeed", num_gpus=64, **degrees)
    assert e.peak.communicator_bytes == (before + 32 * rings) * 12 * 2**20
    if rings == 3:
        assert 3 * RING == 1_207_959_552 and round(e.peak.total_bytes / 1e9, 2) == 84.14
        assert not e.fits
