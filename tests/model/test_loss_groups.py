"""The groups the loss and token count are reduced over, each a ring communicator of its own
(model/terms/comm_groups.py data_rings): torchtitan b5bcd76c6's "batch" (dp ranks) and "loss"
(dp·cp ranks) DeviceMesh groups (``parallel_dims.py`` ``build_mesh``; ``trainer.py``
``train_step`` all-reduces ``global_valid_tokens`` and ``loss_is_finite`` on them every step),
dropped where they span the world (PyTorch ``device_mesh.py`` ``_init_one_process_group``: the
default group); Megatron-DeepSpeed 4efb479d's ``_DATA_PARALLEL_GROUP`` under Ulysses (cp > 1),
apart from ZeRO's dp·cp group (``parallel_state.py``; ``pretrain_gpt.py`` ``loss_func``).

A ring inside an H100 node: 24 channels × 12 MiB = 288 MiB and set-up (32 × 3 + 2) × 2 MiB =
196 MiB, 484 MiB; across nodes at 4 or 8 ranks a node: 16 × 12 = 192 and (16 × 3 + 2) × 2 = 100,
292 MiB (model/terms/comm_memory.py group_channels, channel_setup_bytes). NVLink SHARP
(model/terms/nvls_memory.py, NCCL src/transport/nvls.cc): a ring of r ranks in an H100 node adds
2 MiB of credits, and where NCCL's tuner runs its all-reduce as NVLS (r of 6 to 8; at 2 to 5 the
ring is faster, model/nccl_search.py) 16 channels × 2 × (128 KiB × 8 steps) × r heads = 32·r MiB
of buffers; a ring across nodes with ≥ 2 ranks a node the 2 MiB of credits; point-to-point peers
nothing."""

import trainplan

MIB = 2**20
NODE, CROSS = 288 + 196, 192 + 100


def nvls(r: int) -> int:
    """MiB of NVLS credits and buffers of a ring of ``r`` ranks in one H100 node: the buffers
    only from 6 ranks (module docstring)."""
    return 2 + (32 * r if r >= 6 else 0)


def test_fsdp2_dp4_tp2_holds_batch_and_loss_rings():
    """llama3-8b on 8 GPUs, dp 4 × tp 2, ZeRO-2 (torchtitan b5bcd76c6 ``parallel_dims.py``
    ``build_mesh``'s "batch" and "loss" meshes, all-reduced every step by ``trainer.py``
    ``train_step``): before, the tp ring, the
    FSDP ring and the world ring, 3 × 484 MiB = 1,522,532,352 B; now also "batch" and "loss",
    two 4-rank groups in the node, 5 × 484 MiB = 2,537,553,920 B; the total 65,845,895,168 B
    grows by 2 × 484 MiB = 1,015,021,568 B to 66,860,916,736 B. With NVLS: tp 2 and FSDP (4
    ranks) 2 MiB of credits each — NCCL's tuner runs their all-reduces as rings, NVLS's 102 and
    240 GB/s of bus bandwidth against the ring's 360 (model/nccl_search.py), so their buffers
    are never set up (66 and 130 MiB were counted before); "batch", "loss" and the world run
    one-float all-reduces only, which NCCL never runs as NVLS (src/graph/tuning.cc), so their
    credits alone, 2 each: 10 MiB more (202 while tp 2 and FSDP held buffers)."""
    e = trainplan.evaluate(
        model="llama3-8b", num_gpus=8, framework="fsdp2", dp=4, tp=2, zero_stage=2,
        micro_batch_size=1, global_batch_size=2048,
    )  # fmt: skip
    added = nvls(2) + nvls(4) + 3 * 2
    assert added == 10
    assert e.peak.communicator_bytes == (5 * NODE + added) * MIB == 2_548_039_680
    assert e.peak.total_bytes == 65_845_895_168 + (2 * NODE + added) * MIB == 66_871_402_496


def test_fsdp2_world_sized_groups_are_the_default_group():
    """dp 8 on 8 GPUs: the FSDP group, "batch" and "loss" all span the world, so DeviceMesh
    hands each the default group, whose ring the world barrier's is: one ring, 484 MiB (before
    this rule the FSDP ring and the world ring, 2 × 484 MiB = 1,015,021,568 B); with NVLS's 258."""
    e = trainplan.evaluate(model="llama3-8b", num_gpus=8, framework="fsdp2", dp=8, zero_stage=3)
    assert e.peak.communicator_bytes == (NODE + nvls(8)) * MIB == 778_043_392


def test_fsdp2_world_sized_cp_joins_the_default_communicator():
    """llama3-8b on 8 GPUs, cp 8 (PyTorch's context_parallel, 256k; torchtitan-2024-12-h100 t2):
    the cp group is the world, so the K/V ring's two neighbours, 2 × 32 NVLink channels × 12 MiB =
    768 MiB, connect on the default group's communicator, whose ring (288) and set-up (196) the
    world ring counts; the FSDP (dp·cp) ring and "loss" are the world ring too, "batch" has one
    rank: 484 + 768 = 1,252 MiB (before: the FSDP ring 484, the world ring 484, the cp
    communicator 768 + 196: 1,932 MiB = 2,025,848,832 B); the world ring's NVLS 258 MiB more."""
    e = trainplan.evaluate(
        model="llama3-8b", num_gpus=8, framework="fsdp2", cp=8, cp_kind="pytorch-allgather",
        seq_len=262144, micro_batch_size=1, global_batch_size=1,
    )  # fmt: skip
    assert e.peak.communicator_bytes == (NODE + 768 + nvls(8)) * MIB == 1_583_349_760


def test_megatron_world_sized_groups_stay_their_own():
    """Megatron-LM's groups are each a ``new_group`` (``parallel_state.py``), not the default
    group, whatever their size: dp 8 on 8 GPUs keeps the dp ring beside the world ring — and the
    gradient-statistics group (every GPU under the distributed optimizer, the default here):
    the dp ring with NVLS's 258 MiB, the two one-float rings with its 2 MiB of credits each."""
    e = trainplan.evaluate(model="llama3-8b", num_gpus=8, framework="megatron", dp=8)
    assert e.peak.communicator_bytes == (3 * NODE + nvls(8) + 2 * 2) * MIB


def test_deepspeed_ulysses_holds_the_dp_group():
    """llama3-70b on 64 GPUs, deepspeed dp 32 × cp 2 Ulysses ZeRO-3 (Megatron-DeepSpeed 4efb479d
    ``_DATA_PARALLEL_GROUP``, reduced by ``average_losses_across_data_parallel_group``): before,
    the ZeRO ring over 64 ranks (292), the world ring (292) and the Ulysses all-to-all peer in
    the node (32 × 12 + 196 = 580), 1,164 MiB = 1,220,542,464 B; now also the dp group, 32 ranks
    at 4 a node over 8 nodes, 16 channels: + 292 MiB = 1,526,726,656 B; and NVLS's credits on
    the three rings across nodes, 3 × 2 MiB (the all-to-all's peers: none)."""
    e = trainplan.evaluate(
        model="llama3-70b", num_gpus=64, framework="deepspeed", dp=32, cp=2, cp_kind="ulysses",
        zero_stage=3, recompute="full", seq_len=32768, micro_batch_size=1, global_batch_size=2048,
    )  # fmt: skip
    rings = CROSS + CROSS + 580 + CROSS + 3 * 2
    assert e.peak.communicator_bytes == rings * MIB == 1_533_018_112
