"""torchtitan's gradient clipping opens rings on groups that otherwise connect point to point
(model/terms/comm_memory.py grad_stats_rings; torchtitan b5bcd76c6
``torchtitan/distributed/utils.py``): ``clip_grad_norm_`` all-reduces the norm over the pp mesh's
group where pp > 1, and ``_clip_grad_norm_with_ep`` reduces the experts' norm over the ep group
(``ep_grads_total_norm.full_tensor()``). Each communicator holds its ring's collective channels
× 12 MiB and, by default, its channels' set-up (pow2Up(channels) × 3 + 2) × 2 MiB: inside an
H100 node 24 channels, 288 + 196 = 484 MiB; across nodes at 8 ranks a node 16 channels,
192 + 100 = 292 MiB (model/terms/comm_memory.py group_channels). Beside them, the world group's
ring of torchtitan's barrier after the first step (``trainer.py`` ``Trainer.train`` →
``dist_utils.set_pg_timeouts``), placed as the whole job; torchtitan's "batch" (dp ranks) and
"loss" (dp·cp ranks) groups of the token count and loss (model/terms/comm_groups.py data_rings).
A group whose ranks are the whole world is PyTorch's default group (DeviceMesh
``_init_one_process_group``; model/terms/comm_groups.py own_group), so its ring is the world
ring and its point-to-point peers join the world's communicator, set up once. Each ring also
holds NVLink SHARP's (model/terms/nvls_memory.py): 8 ranks in an H100 node 2 MiB of credits and
16 × 2 × (128 KiB × 8) × 8 = 256 MiB of buffers, 258 (NVLS8); across nodes at 8 a node 2."""

import pytest

import trainplan

MIB = 2**20
NODE, CROSS = 288 + 196, 192 + 100
NVLS8, CREDITS = 2 + 256, 2


@pytest.mark.parametrize(
    ("model", "degrees", "mib"),
    [
        # 16 GPUs on 2 nodes: the FSDP ring's 16 ranks are the world, so it is the default
        # group's: the world ring alone (16 channels, 292); "batch" and "loss" are the world too
        ("llama3-8b", {"num_gpus": 16, "dp": 16, "pp": 1}, CROSS + CREDITS),
        # the FSDP ring over 8 GPUs in a node (484), the pp group's ring for the norm, placed as
        # the world (292), the one neighbouring stage on the other node, 4 channels of a 50 GB/s
        # NIC (48) and the pp communicator's set-up, one rank a node → 4 channels,
        # (4 × 3 + 2) × 2 = 28; the world ring (292); and "batch" and "loss", 8 ranks in a node
        # each (dp 8 of 16 GPUs, cp 1), 2 × 484
        (
            "llama3-8b",
            {"num_gpus": 16, "dp": 8, "pp": 2},
            NODE + CROSS + 48 + 28 + CROSS + 2 * NODE + 3 * NVLS8 + 2 * CREDITS,
        ),
        # ep 1, one node: the FSDP ring and the experts' FSDP ring span the 8 GPUs, the world:
        # both are the world ring, 484 once
        ("mixtral-8x7b", {"num_gpus": 8, "dp": 8, "ep": 1}, NODE + NVLS8),
        # ep 8 on 8 GPUs: the ep group is the world, so the all-to-all's 7 NVLink peers × 32
        # channels × 12 MiB (2,688) join the world's communicator, its ring (288) and one
        # set-up (32 channels, 196); the FSDP ring and the ep group's ring for the norm are
        # the world ring; the experts' FSDP group has one rank (none)
        ("mixtral-8x7b", {"num_gpus": 8, "dp": 8, "ep": 8}, 288 + 2688 + 196 + NVLS8),
    ],
)
def test_fsdp2_communicators(model, degrees, mib):
    e = trainplan.evaluate(model=model, framework="fsdp2", **degrees)
    assert e.peak.communicator_bytes == mib * MIB
