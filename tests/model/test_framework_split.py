"""Each framework's own default pipeline split (:func:`trainplan.model.split.split_rule_of`,
:func:`trainplan.model.split.default_chunk_sizes`), worked by hand from the frameworks' code.

* deepspeed (Megatron-DeepSpeed 4efb479d ``GPTModelPipe`` → DeepSpeed edaa7221
  ``PipelineModule._partition_layers('type:transformer')`` → ``partition_balanced``): ⌊L/pp⌋
  layers per stage, the first L mod pp stages one more.
* fsdp2 (torchtitan b5bcd76c ``_generate_llm_fqn_per_model_part`` with
  ``pipeline_parallel_first/last_stage_less_layers`` 1): E = L + 2 effective layers over the
  pp·v model chunks, ⌊E/S⌋ each, the first E mod S one more, then the first and the last chunk
  one fewer.
* megatron: as even as L allows, the end stages one fewer first (unchanged).
"""

from __future__ import annotations

import pytest

import trainplan
from trainplan.model.errors import LayoutError
from trainplan.model.layout import Layout
from trainplan.model.split import default_chunk_sizes, split_rule_of


def test_deepspeed_split_puts_the_extra_layers_on_the_first_stages():
    """126 = 16·7 + 14: the first 14 stages 8, the last two 7; 126 = 8·15 + 6: six 16s, two 15s;
    80 = 4·20 and 32 = 8·4 even; 61 = 16·3 + 13: thirteen 4s, three 3s."""
    assert default_chunk_sizes(126, 16, 1, "deepspeed") == (8,) * 14 + (7, 7)
    assert default_chunk_sizes(126, 8, 1, "deepspeed") == (16,) * 6 + (15, 15)
    assert default_chunk_sizes(80, 4, 1, "deepspeed") == (20,) * 4
    assert default_chunk_sizes(32, 8, 1, "deepspeed") == (4,) * 8
    assert default_chunk_sizes(61, 16, 1, "deepspeed") == (4,) * 13 + (3,) * 3
    # Megatron's placement of the same 126 layers: the ends give a layer back
    assert default_chunk_sizes(126, 16) == (7,) + (8,) * 14 + (7,)


def test_torchtitan_split_counts_the_embedding_and_the_output_as_a_layer_each():
    """80 over 4: E = 82 = 4·20 + 2 → 21, 21, 20, 20 → 20, 21, 20, 19.
    32 over 4: 34 = 4·8 + 2 → 9, 9, 8, 8 → 8, 9, 8, 7.
    32 over 8: 34 = 8·4 + 2 → 5, 5, 4 × 6 → 4, 5, 4, 4, 4, 4, 4, 3.
    126 over 16: 128 = 16·8 → 7, 8 × 14, 7 (Megatron's placement here).
    32 over pp 2 × v 2 = 4 model chunks: 8, 9, 8, 7 per chunk."""
    assert default_chunk_sizes(80, 4, 1, "torchtitan") == (20, 21, 20, 19)
    assert default_chunk_sizes(32, 4, 1, "torchtitan") == (8, 9, 8, 7)
    assert default_chunk_sizes(32, 8, 1, "torchtitan") == (4, 5, 4, 4, 4, 4, 4, 3)
    assert default_chunk_sizes(126, 16, 1, "torchtitan") == (7,) + (8,) * 14 + (7,)
    assert default_chunk_sizes(32, 2, 2, "torchtitan") == (8, 9, 8, 7)


def test_the_rule_follows_the_framework_only_with_a_pipeline():
    assert split_rule_of(True, "deepspeed", 16) == "deepspeed"
    assert split_rule_of(True, "fsdp2", 4) == "torchtitan"
    assert split_rule_of(True, "fsdp2", 1) is True
    assert split_rule_of(False, "megatron", 4) is False
    assert Layout(pp=4, framework="fsdp2").split_rule == "torchtitan"
    assert Layout(pp=4, framework="megatron").split_rule is True


def test_deepspeed_refuses_another_split_and_fsdp2_takes_one():
    """deepspeedai/Megatron-DeepSpeed's GPTModelPipe always passes 'type:transformer' (8 × 14,
    7, 7 here); bigscience-workshop's fork takes --pp-partition-method 'type:transformer|embedding'
    (BLOOM's), where the embedding and the tied output weigh a layer each: 128 = 16·8 → 7, 8 × 14,
    7. Any other split is refused; torchtitan takes module_fqns_per_model_part, so fsdp2 runs
    any split."""
    base = {"model": "llama3-405b", "num_gpus": 128, "gpu": "H200", "dp": 1, "tp": 8, "pp": 16,
            "zero_stage": 1, "global_batch_size": 2048, "recompute": "none"}  # fmt: skip
    other = ",".join(map(str, (6,) + (8,) * 15))
    with pytest.raises(LayoutError, match="under deepspeed with pp 16: Megatron-DeepSpeed"):
        trainplan.evaluate(**base, framework="deepspeed", stage_layers=other)
    for split in ((8,) * 14 + (7, 7), (7,) + (8,) * 14 + (7,)):
        est = trainplan.evaluate(
            **base, framework="deepspeed", stage_layers=",".join(map(str, split))
        )
        assert tuple(s.num_layers for s in est.stages) == split
    fsdp2 = {**base, "framework": "fsdp2", "zero_stage": 2, "stage_layers": other}
    assert [s.num_layers for s in trainplan.evaluate(**fsdp2).stages][:2] == [6, 8]


def test_deepspeed_stage_holds_the_layer_the_split_gives_it():
    """Llama 3 405B (h 16,384; 128 heads, 8 K/V heads of 128; f 53,248), tp 8, pp 16, ZeRO-1,
    dp 1, under deepspeed: stage 1 holds 8 layers, stage 14 holds 7. One layer per tp rank:
    (2·16,384² + 2·16,384·1,024 + 3·16,384·53,248) / 8 = 398,458,880 plus the two norms whole,
    2·16,384 = 32,768: 398,491,648 parameters; ZeRO-1 at dp 1 keeps 2 + 2 + 12 = 16 B of each:
    6,375,866,368 B more model state on stage 1 than on stage 14. Stage 0 holds 8 layers and
    the embedding with 16 micro-batches in flight: the busiest, 150.68 GB (over an H200's
    148.21 GB usable), where Meta's split (7 layers on stage 0) counted 133.03 GB; with the
    embedding's whole output the first layer's input views (no dropout, SP:
    model/deepspeed_layers.py keeps_embedding_view) 16 × 2·8,192·16,384 × 7/8 =
    3,758,096,384 B more: 154,436,028,928; with flash-attn's FP32 softmax statistics
    (``FlashAttnVarlenFunc`` saves ``softmax_lse``), 4·128/8 heads·8,192 = 524,288 B a layer,
    8 layers × 16 micro-batches × 524,288 = 67,108,864 B more: 154,503,137,792; with NCCL's
    channels by placement and their set-up (model/terms/comm_memory.py group_channels), stage
    0's communicators go 1,968 → 1,728 MiB, 251,658,240 B fewer: 154,251,479,552. Before, 164
    connections of 12 MiB: tp 32, the world 32, one pipeline neighbour 4, DeepSpeed's
    model-parallel, pipe and slice groups 3 × 32. Now the tp 8 ring in a node 24 channels,
    24 × 12 + (32 × 3 + 2) × 2 = 484 MiB; the world over 16 nodes, 8 a node, 16 channels,
    192 + 100 = 292; the pipeline neighbour on another node, one rank a node, 4 channels,
    48 + (4 × 3 + 2) × 2 = 76; DeepSpeed's three groups placed as the world, 3 × 292 = 876.
    With Megatron-DeepSpeed's TorchScript bias-dropout-add masks (model.activation_rows.
    BIAS_DROPOUT_MASKS: a bool [s/tp, b, h] per residual add at dropout 0), 2·8,192·16,384/8 =
    33,554,432 B a layer, 8 layers × 16 micro-batches: 4,294,967,296 B more, 158,546,446,848.
    NVLink SHARP (model/terms/nvls_memory.py): the tp ring of 8 in the node 2 MiB of credits and
    16 × 2 × (128 KiB × 8) × 8 = 256 MiB of buffers, the world ring and the three groups (8 a
    node) 2 MiB each: 266 MiB, 158,825,368,064 B."""
    est = trainplan.evaluate(
        model="llama3-405b", num_gpus=128, gpu="H200", framework="deepspeed", dp=1, tp=8, pp=16,
        zero_stage=1, micro_batch_size=1, global_batch_size=2048, recompute="none",
    )  # fmt: skip
    layer = (2 * 16384**2 + 2 * 16384 * 1024 + 3 * 16384 * 53248) // 8 + 2 * 16384
    assert layer == 398_491_648
    assert [s.num_layers for s in est.stages] == [8] * 14 + [7, 7]
    assert est.stages[1].dense_params - est.stages[14].dense_params == layer
    assert est.stages[1].state.total_bytes - est.stages[14].state.total_bytes == 16 * layer
    assert 16 * layer == 6_375_866_368
    assert est.busiest == 0 and est.stages[0].activations.microbatches_in_flight == 16
    view = 16 * 2 * 8192 * 16384 * 7 // 8
    assert view == 3_758_096_384
    lse = 8 * 16 * 4 * 128 // 8 * 8192
    assert lse == 67_108_864
    assert est.stages[0].communicator_bytes == (484 + 292 + 76 + 3 * 292 + 266) * 2**20
    assert 164 * 12 - (484 + 292 + 76 + 3 * 292) == 240
    nccl = -240 * 2**20
    masks = 8 * 16 * 2 * 8192 * 16384 // 8
    assert masks == 4_294_967_296
    total = 150_677_932_544 + view + lse + nccl + masks
    assert total == 158_546_446_848
    assert int(est.peak.total_bytes) == total + 266 * 2**20 == 158_825_368_064


def test_fsdp2_stage_one_holds_the_extra_layer():
    """Llama 3 70B (h 8,192; 64 heads, 8 K/V heads of 128; f 28,672), tp 4, pp 4, fsdp2: stages
    20, 21, 20, 19. One layer per tp rank: (2·8,192² + 2·8,192·1,024 + 3·8,192·28,672) / 4 =
    213,909,504 plus the two norms whole, 16,384: 213,925,888 parameters more on stage 1 than
    on stage 2. Stage 1 (3 micro-batches in flight) is the busiest: 83.71 GB, over an H100's
    83.21 GB usable (81.58 GB with the even 20 × 4). 83,709,935,616 B with 1,248 MiB of
    communicators (104 connections of 12 MiB: tp 32, dp 32, two pipeline neighbours 2 × 4, the
    pp group's clip_grad_norm_ ring 32); 83,806,404,608 B, 92 MiB more, with NCCL's channels by
    placement and their set-up (model/terms/comm_memory.py group_channels) and torchtitan's world
    barrier: the tp 4 ring in a node, 24 channels, 288 + 196 = 484 MiB; the dp 4 ring over 16
    consecutive ranks, 2 a node (2 → dup 4 → Postset 8 channels), 96 + (8 × 3 + 2) × 2 = 148;
    the two pipeline neighbours, one rank a node (pp stride 16), 4 channels each, 2 × 48 and
    the pp communicator's set-up (4 × 3 + 2) × 2 = 28; the pp norm ring placed as the world (16
    channels), 192 + 100 = 292; the world ring of torchtitan's barrier after step 1, 292:
    1,340 MiB; and torchtitan's "batch" (dp 4) and "loss" (dp·cp = 4) groups, placed as the dp
    ring, 2 × 148 = 296 more (model/terms/comm_groups.py data_rings): 1,636 MiB,
    84,116,783,104 B. The pp norm ring runs on the pp group, whose communicator the sends made
    (model/terms/comm_groups.py group_rings): its connections at the pp group's placement, one
    rank a node, 4 channels, 48 MiB, set up with that communicator: 244 MiB less, 1,392 MiB,
    83,860,930,560 B. NVLink SHARP (model/terms/nvls_memory.py): the tp 4 ring in a node 2 MiB
    of credits (NCCL's tuner runs a 4-GPU all-reduce of an H100 node as a ring,
    model/nccl_search.py: no buffers; 16 × 2 × (128 KiB × 8) × 4 = 128 MiB more were counted
    before); the dp, world, "batch" and "loss" rings (≥ 2 ranks a node) 2 MiB each, the pp group
    none (one rank a node): 10 more, 83,871,416,320 B."""
    est = trainplan.evaluate(
        model="llama3-70b", num_gpus=64, gpu="H100-SXM", framework="fsdp2", dp=4, tp=4, pp=4,
        zero_stage=2, micro_batch_size=2, global_batch_size=2048, recompute="full",
    )  # fmt: skip
    layer = (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) // 4 + 2 * 8192
    assert layer == 213_925_888
    assert [s.num_layers for s in est.stages] == [20, 21, 20, 19]
    assert est.stages[1].dense_params - est.stages[2].dense_params == layer
    assert est.busiest == 1
    comm = 484 + 148 + 2 * 48 + 28 + 48 + 292
    assert comm + 2 * 148 == 1636 - 244 == 1392
    assert est.stages[1].communicator_bytes == (1392 + 10) * 2**20 == 1_470_103_552
    assert 84_116_783_104 - 244 * 2**20 == 83_860_930_560
    assert int(est.peak.total_bytes) == 83_860_930_560 + 10 * 2**20 == 83_871_416_320
