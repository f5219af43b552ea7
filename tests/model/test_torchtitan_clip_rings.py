"""torchtitan's gradient clipping opens rings on groups that otherwise connect point to point
(model/terms/comm_groups.py group_rings; torchtitan b5bcd76c6
``torchtitan/distributed/utils.py``): ``clip_grad_norm_`` all-reduces the norm over the pp mesh's
group where pp > 1, and ``_clip_grad_norm_with_ep`` reduces the experts' norm over the ep group
(``ep_grads_total_norm.full_tensor()``). Each runs on a process group whose communicator the
pipeline's sends or the all-to-all already make (one process group is one NCCL communicator per
device, ProcessGroupNCCL ``getKeyFromDevice``), so the ring joins that communicator: its
channels are the group's placement and its set-up is the group's one set-up. A communicator
holds its ring's collective channels × 12 MiB and, by default, its channels' set-up
(pow2Up(channels) × 3 + 2) × 2 MiB: inside an H100 node 24 channels, 288 + 196 = 484 MiB;
across nodes at 8 or 4 ranks a node 16 channels, 192 + 100 = 292 MiB; one rank a node on 2
nodes 4 channels, 48 + 28 = 76 MiB (model/terms/comm_memory.py group_channels). Beside them,
the world group's ring of torchtitan's barrier after the first step (``trainer.py``
``Trainer.train`` → ``dist_utils.set_pg_timeouts``), placed as the whole job; torchtitan's
"batch" (dp ranks) and "loss" (dp·cp ranks) groups of the token count and loss
(model/terms/comm_groups.py data_rings). A group whose ranks are the whole world is PyTorch's
default group (DeviceMesh ``_init_one_process_group``; model/terms/comm_groups.py own_group), so
its ring is the world ring and its point-to-point peers join the world's communicator, set up
once. torchtitan has no expert tensor-parallel group and, at ep = 1, no expert FSDP group
(model/terms/comm_groups.py expert_tp_ring, placed_rings): the experts use the tp group and the
dense FSDP mesh. Each ring with at least 2 ranks on a node also holds NVLink SHARP's
(model/terms/nvls_memory.py): 8 ranks in an H100 node 2 MiB of credits and 16 × 2 × (128 KiB ×
8) × 8 = 256 MiB of buffers (NVLS8); across nodes 2 MiB of credits; one rank a node none.
NCCL sets the buffers up on the first collective it runs as NVLS (src/enqueue.cc
ncclPrepareTasks, src/group.cc ncclCollPreconnect) and never runs a one-float all-reduce as NVLS
(src/graph/tuning.cc: Simple protocol only, 25 µs): a ring whose step runs only those (the world
barrier, "batch", "loss", the norms' rings on pp and ep) holds the 2 MiB of credits alone."""

import pytest

import trainplan

MIB = 2**20
NODE, CROSS = 288 + 196, 192 + 100
NVLS8, CREDITS = 2 + 256, 2
# NVLink SHARP for 4 and 2 ranks in an H100 node: the 2 MiB of credits alone — NCCL's tuner runs
# their all-reduces as rings (NVLS's 240 and 102 GB/s of bus bandwidth against the ring's 360,
# model/nccl_search.py), so the 16 × 2 × (128 KiB × 8) × heads of buffers (128 and 64 MiB,
# counted before) are never set up
NVLS4, NVLS2 = CREDITS, CREDITS


@pytest.mark.parametrize(
    ("model", "degrees", "mib"),
    [
        # 16 GPUs on 2 nodes: the FSDP ring's 16 ranks are the world, so it is the default
        # group's: the world ring alone (16 channels, 292); "batch" and "loss" are the world too
        ("llama3-8b", {"num_gpus": 16, "dp": 16, "pp": 1}, CROSS + CREDITS),
        # the FSDP ring over 8 GPUs in a node (484); the pp group's one communicator: the norm's
        # ring on the pp group, one rank on each of 2 nodes → 4 channels (4 × 12 = 48), the one
        # neighbouring stage on the other node, 4 channels of a 50 GB/s NIC (48), and its
        # set-up, (4 × 3 + 2) × 2 = 28 (before: the ring placed as the world with a set-up of
        # its own, 292, in place of 48: 2,112 → 1,868 MiB); the world ring (292); and "batch"
        # and "loss", 8 ranks in a node each (dp 8 of 16 GPUs, cp 1), 2 × 484. NVLS: the FSDP
        # ring 258, "batch", "loss" (one float each) and the world ring 2 each (was 3 × 258 + 2)
        (
            "llama3-8b",
            {"num_gpus": 16, "dp": 8, "pp": 2},
            NODE + 48 + 48 + 28 + CROSS + 2 * NODE + NVLS8 + 3 * CREDITS,
        ),
        # ep 1, one node: the FSDP ring spans the 8 GPUs, the world: it is the world ring, 484
        # once; the experts are sharded over the same dense FSDP mesh (no ring of their own)
        ("mixtral-8x7b", {"num_gpus": 8, "dp": 8, "ep": 1}, NODE + NVLS8),
        # ep 8 on 8 GPUs: the ep group is the world, so the all-to-all's 7 NVLink peers × 32
        # channels × 12 MiB (2,688) join the world's communicator, its ring (288) and one
        # set-up (32 channels, 196); the FSDP ring and the ep group's ring for the norm are
        # the world ring; the experts' FSDP group has one rank (none)
        ("mixtral-8x7b", {"num_gpus": 8, "dp": 8, "ep": 8}, 288 + 2688 + 196 + NVLS8),
        # ep 1 with tp 2 on 16 GPUs: the tp ring (484); the FSDP ring, 8 ranks at stride 2 on 2
        # nodes, 4 a node → 16 channels (292); the world ring (292); "batch" and "loss", placed
        # as the FSDP ring (2 × 292). No expert tp ring (the experts split over the tp group)
        # and no expert FSDP ring (the dense FSDP mesh): before, 484 + 292 more, 2,428 MiB
        (
            "mixtral-8x7b",
            {"num_gpus": 16, "dp": 8, "tp": 2, "ep": 1},
            NODE + 4 * CROSS + NVLS2 + 4 * CREDITS,
        ),
        # ep 8 in a node of 16 GPUs: the ep group's communicator, the norm's ring (24 channels,
        # 288), the all-to-all's 7 NVLink peers × 32 channels × 12 MiB (2,688) and one set-up
        # (32 channels, 196); the FSDP, "batch" and "loss" groups are the world (none); the
        # world ring (292); the experts' FSDP group, 16 ÷ 8 = 2 ranks at stride 8, one a node
        # → 4 channels, 48 + 28 = 76. Before: the norm's ring placed as the world with its own
        # set-up, 292 in place of 288: 3,544 MiB. NVLS: the ep ring in a node runs the norm's one
        # float (its all-to-all is not NVLS) and the world ring crosses nodes: 2 each
        (
            "mixtral-8x7b",
            {"num_gpus": 16, "dp": 16, "ep": 8},
            288 + 2688 + 196 + CROSS + 76 + 2 * CREDITS,
        ),
        # dp 8 × pp 2 with ep 4 on 16: the FSDP ring in a node (484), the world ring (292),
        # "batch" and "loss" in a node (2 × 484); the ep group's communicator, ring 288, 3 peers
        # × 32 × 12 = 1,152, set-up 196; the experts' FSDP group, 8 ÷ 4 = 2 ranks in a node
        # (484); the pp group's communicator, 48 + 48 + 28 as above. Before: 4,236 MiB (each
        # norm ring placed as the world with its own set-up, 2 × 292, in place of 288 + 48).
        # NVLS: the FSDP ring 258 and the experts' FSDP pair 2 (a ring all-reduce: NVLS2); the
        # world, "batch", "loss" and the ep norm's ring 2 each: 268 MiB (332 with the pair's
        # buffers; 3 × 258 + 2 + 130 + 66 = 972 before that)
        (
            "mixtral-8x7b",
            {"num_gpus": 16, "dp": 8, "pp": 2, "ep": 4},
            NODE
            + CROSS
            + 2 * NODE
            + (288 + 1152 + 196)
            + NODE
            + (48 + 48 + 28)
            + NVLS8
            + NVLS2
            + 4 * CREDITS,
        ),
    ],
)
def test_fsdp2_communicators(model, degrees, mib):
    e = trainplan.evaluate(model=model, framework="fsdp2", **degrees)
    assert e.peak.communicator_bytes == mib * MIB
