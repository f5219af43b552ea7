"""NCCL's communicator buffers per process group (model/terms/comm_memory.py), derived by hand
from NCCL's buffer sizes and channel rules and checked on whole layouts."""

from __future__ import annotations

from dataclasses import replace

from trainplan.model.estimate import evaluate, stage_memory
from trainplan.model.frameworks import DEFAULT_RUNTIME_RESERVE_BYTES
from trainplan.model.hardware import ClusterLinks
from trainplan.model.layout import Layout
from trainplan.model.model_spec import ModelSpec
from trainplan.model.moe_run import Dispatcher, MoERun
from trainplan.model.specs import Architecture, MoESpec, TrainingSpec
from trainplan.model.terms.comm_memory import CONNECTION_BYTES, LL128_BYTES, LL_BYTES
from trainplan.optimizer.case import links_for
from trainplan.topology.accelerators import get_accelerator

MIB = 2**20
DENSE = Architecture(
    num_layers=8, hidden_size=256, num_attention_heads=8, num_kv_heads=4,
    ffn_hidden_size=512, vocab_size=1000, mlp="swiglu", norm="rmsnorm",
)  # fmt: skip
MOE = replace(DENSE, moe=MoESpec(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=256))
TRAINING = TrainingSpec(seq_len=512, global_batch_size=64)
H100 = get_accelerator("H100-SXM")
CLUSTER = ClusterLinks(nvlink_domain=8, nvlink_bytes_per_s=450e9, scaleout_bytes_per_s=50e9)


def _comm(arch: Architecture, layout: Layout, training: TrainingSpec = TRAINING) -> list[int]:
    model = ModelSpec(name="m", arch=arch)
    est = evaluate(model, training, layout, H100, links_for(layout, CLUSTER))
    return [int(s.communicator_bytes) for s in est.stages]


def test_one_connection_is_twelve_mib():
    # LL 8·512·8·16 = 524,288; LL128 120·640·8·8 = 4,915,200; Simple 4 MiB: 9,633,792 B,
    # rounded up to 2 MiB (CUDA_IPC_MIN) = 10 MiB, and ncclSendMem's 2 MiB (NVIDIA/nccl#1685)
    assert (LL_BYTES, LL128_BYTES) == (524_288, 4_915_200)
    assert CONNECTION_BYTES == 12 * MIB


# Each communicator: its ring's collective channels × 12 MiB (model/terms/comm_memory.py
# group_channels: 24 inside an H100 node, 16 across nodes at 4 or 8 ranks a node, 4 at one) plus
# its channels' set-up, on by default (CostOptions.nccl_channel_setup): (pow2Up(channels) × 3 +
# 2) × 2 MiB. Inside a node: 24 × 12 = 288 + (32 × 3 + 2) × 2 = 196 → 484 MiB; across nodes at
# 16 channels: 192 + (16 × 3 + 2) × 2 = 100 → 292 MiB (was 384 MiB for every ring, 32 channels,
# no set-up).
NODE_RING, CROSS_RING = (288 + 196) * MIB, (192 + 100) * MIB
assert (NODE_RING, CROSS_RING) == (484 * MIB, 292 * MIB)
# NVLink SHARP on an H100 (CostOptions.nccl_nvls, on by default; model/terms/nvls_memory.py,
# NCCL src/transport/nvls.cc): a ring whose r ranks lie in one node also holds ncclNvlsSetup's
# credits, 16 channels × 2 × 64 B × r heads rounded up to 2 MiB, and ncclNvlsBufferSetup's
# buffers, 16 × 2 × (NCCL_NVLS_CHUNKSIZE 128 KiB × NCCL_STEPS 8) × r = 32·r MiB; a ring across
# nodes with ≥ 2 ranks on a node the credits alone (2 MiB); one rank a node: nothing. NCCL sets
# the buffers up on the first collective it runs as NVLS (runtime connection, src/enqueue.cc
# ncclPrepareTasks → src/group.cc ncclCollPreconnect), and its tuner never picks NVLS for a
# one-float all-reduce (Simple protocol only, 25 µs of latency; src/graph/tuning.cc): a ring in
# a node that runs only those (the world's barrier, the gradient statistics, Megatron's
# model-parallel and token-count groups) holds the 2 MiB of credits alone. Nor does it run a
# large all-reduce of 2 or 4 GPUs of an H100 node as NVLS (model/nccl_search.py: NVLS's bus
# bandwidth 2 × min(60 × 0.85 × 1/2 × 2, 60) = 102 and 4 × min(60 × 0.85 × 3/4 × 2, 60) = 240
# GB/s against the ring's 12 × 30 = 360, src/graph/tuning.cc ncclTopoTuneModel): those rings
# hold the credits alone too (they held 2 + 64 and 2 + 128 MiB while NVLS was kept there).
CREDITS = 2 * MIB
NVLS8, NVLS4, NVLS2 = (2 + 256) * MIB, CREDITS, CREDITS


def test_a_tp_dp_pp_layout_by_hand():
    # 32 GPUs, 8 per NVLink domain, order tp-cp-ep-dp-pp: tp 4 and dp 2 inside a node (24
    # channels: 484 MiB each); pp 4 across nodes on a 50 GB/s NIC: ⌈50/14⌉ = 4 → 4 channels a
    # peer (⌈4/8⌉ = 1 round: no halving), 48 MiB a neighbour, and the pp communicator's set-up,
    # one rank a node → 4 channels: (4 × 3 + 2) × 2 = 28 MiB. The ends have one neighbour.
    # Megatron-Core's distributed optimizer reduces its gradient statistics over its instance
    # group, here all 32 GPUs (8 a node on 4 nodes: 16 channels, 292 MiB); and Megatron-LM's
    # barriers on the world group (test_the_world_group_of_the_barriers): another, 292 MiB.
    # Megatron-LM's train_step all-reduces over the model-parallel group (tp·pp = 16 ranks) after
    # every optimizer step (test_megatron_groups, test_the_model_parallel_group_at_every_zero_stage):
    # the tp block of 4 at each pp stride of 8, 4 ranks a node on 4 nodes: 16 channels, 292 MiB.
    # NVLS: tp 4 and dp 2 in a node the credits, 2 MiB each (their all-reduces run as rings:
    # header), the three rings across nodes at 8 or 4 ranks a node 2 each, the pipeline (one
    # rank a node) none: 10 MiB (202 while tp 4 and dp 2 held NVLS's buffers).
    lay = Layout(dp=2, tp=4, pp=4)
    nvls = NVLS4 + NVLS2 + 3 * CREDITS
    ends = (484 + 484 + 48 + 28 + 292 + 292 + 292) * MIB + nvls
    middle = (484 + 484 + 96 + 28 + 292 + 292 + 292) * MIB + nvls
    assert (ends, middle) == (1930 * MIB, 1978 * MIB)  # 1,920 and 1,968 without NVLS
    assert _comm(DENSE, lay) == [ends, middle, middle, ends]


def test_interleaving_gives_each_stage_two_pair_communicators():
    """Megatron-LM's interleaved schedule overlaps its pipeline sends by default and then does
    not batch them (``argument_utils.py``: ``batch_p2p_comm = not args.overlap_p2p_comm``), so
    each neighbour pair gets a two-rank communicator (PyTorch ``getKeySendRecv``): every stage
    holds two, the ends too (the schedule wraps the model chunks). A pair of adjacent stages, 8
    ranks apart, has one rank on each of 2 nodes: 4 channels, 4 × 12 = 48 MiB of buffers and
    28 MiB of set-up, 76 MiB each; with the model-parallel ring (292 MiB,
    test_a_tp_dp_pp_layout_by_hand): 484 + 484 + 2 × 76 + 292 + 292 + 292 = 1,996 MiB, and
    NVLS's 10 MiB (the pairs, one rank a node, none)."""
    lay = Layout(dp=2, tp=4, pp=4, virtual_stages=2, schedule="interleaved")
    nvls = NVLS4 + NVLS2 + 3 * CREDITS
    assert _comm(DENSE, lay) == [(484 + 484 + 2 * 76 + 292 + 292 + 292) * MIB + nvls] * 4


def test_megatron_gradient_statistics_groups():
    """``megatron/core/optimizer/__init__.py``: the distributed optimizer's
    ``grad_stats_parallel_group`` is the optimizer instance's group (every GPU with one
    instance); Megatron-Core's DDP (ZeRO-0) reduces over the model-parallel group (tp·pp) and,
    for the experts' own optimizer, over the expert tp·ep·pp group: one ring each, placed as the
    world group is (model/terms/comm_memory.py comm_memory_term). Beside them, the world
    group's (test_the_world_group_of_the_barriers). The model-parallel group is the one
    train_step reduces over at every stage: counted once, on its own placement (the tp block of
    4 at each pp stride of 8: 4 ranks a node on 4 nodes, 16 channels, 292 MiB, as the world's
    8 a node on 4 nodes is)."""
    # NVLS (header): tp 4 and dp 2 in a node, the two rings across nodes 2 MiB each; the dp ring
    # of 8 in a node 258 MiB, the gradient-statistics and world rings of 8 (one-float
    # all-reduces) 2 each
    zero0 = Layout(dp=2, tp=4, pp=4, zero_stage=0)
    nvls = NVLS4 + NVLS2 + 2 * CREDITS
    ends, middle = (484 + 484 + 48 + 28 + 292 + 292) * MIB, (484 + 484 + 96 + 28 + 292 + 292) * MIB
    assert _comm(DENSE, zero0) == [ends + nvls, middle + nvls, middle + nvls, ends + nvls]
    dp8 = 484 * MIB + NVLS8  # tp·pp = 1: the dp ring and the world's
    assert _comm(DENSE, Layout(dp=8, zero_stage=0)) == [dp8 + 484 * MIB + CREDITS] == [1228 * MIB]
    one_float = 484 * MIB + CREDITS  # ZeRO-1: the gradient statistics over all 8 GPUs too
    assert _comm(DENSE, Layout(dp=8)) == [dp8 + 2 * one_float] == [1714 * MIB]
    # MoE under ZeRO-0, dp 16 × ep 8 on 2 nodes: the dp ring across them (292); the all-to-all's
    # 7 NVLink peers × 32 channels × 12 MiB = 2,688 + the ep communicator's set-up (24 → 32
    # channels, 196); the expert dp group, 2 ranks at stride ep = 8, one on each node (4
    # channels: 48 + 28 = 76); tp·pp = 1 (none), expert tp·ep·pp = 8 (a ring placed as the
    # world, 292); the world (292); the expert tp·ep group of the token counts' all-gather, the
    # 8 ep ranks in a node (484; tests/model/test_megatron_groups.py); NVLS: the tp·ep ring in a
    # node runs the token counts' all-gather only (a few KiB: a ring's, header) 2, the three
    # rings across the two nodes at 8 a node 2 each, none on the all-to-all
    lay = Layout(dp=16, ep=8, zero_stage=0)
    nvls = 4 * CREDITS
    assert _comm(MOE, lay) == [(292 + 2688 + 196 + 76 + 292 + 292 + 484) * MIB + nvls]
    # the other profiles reduce their norms over groups counted already; FSDP2's world ring is
    # torchtitan's barrier after the first step (test_the_world_group_of_the_barriers), and its
    # dp 8 FSDP group of all 8 GPUs is that default group (DeviceMesh): one ring
    assert _comm(DENSE, Layout(dp=8, framework="fsdp2", zero_stage=3)) == [484 * MIB + NVLS8]


def test_expert_groups():
    # 16 GPUs, ep 8 inside a node (NVLink peers: 32 channels each, 7 · 32 · 12 MiB = 2,688 MiB,
    # and the set-up of 32 channels, 196 MiB), dp 16 across two nodes (a ring of 16 channels,
    # 292 MiB), the expert data-parallel group tp·dp·cp/(etp·ep) = 16/8 = 2 ranks at stride
    # etp·ep = 8, one on each node (4 channels: 48 + 28 = 76 MiB; was 292 on the dense dp
    # group's placement); the distributed optimizer's gradient-statistics group over all 16 GPUs
    # (292 MiB); the world group's (292 MiB); Megatron-Core's expert tp·ep group, the 8 ep ranks
    # in a node (484 MiB, tests/model/test_megatron_groups.py), under DeepEP too; NVLS (header):
    # the tp·ep ring (the token counts' all-gather only) 2 MiB, dp, gradient-statistics and
    # world rings at 8 a node 2 MiB each: 8 MiB (was 264 with the tp·ep ring's buffers)
    lay = Layout(dp=16, tp=1, pp=1, ep=8)
    nvls = 4 * CREDITS
    assert _comm(MOE, lay) == [(292 + 2688 + 196 + 76 + 292 + 292 + 484) * MIB + nvls]
    deepep = replace(TRAINING, moe_run=MoERun(dispatcher=Dispatcher.DEEPEP))
    assert _comm(MOE, lay, deepep) == [(292 + 76 + 292 + 292 + 484) * MIB + nvls]  # DeepEP


def test_the_world_group_of_the_barriers():
    """torch.distributed.barrier() under NCCL all-reduces a one-element tensor on the default
    group (PyTorch ProcessGroupNCCL.cpp ProcessGroupNCCL::barrier), so the world group gets a
    communicator, inside one node a ring of 24 channels, 484 MiB with its set-up: Megatron-LM
    before training (training.py print_datetime), DeepSpeed in ZeRO-3's set-up and every
    save_checkpoint, torchtitan after the first step (trainer.py Trainer.train →
    dist_utils.set_pg_timeouts). dp 8 on one node: the dp ring, and for Megatron-Core's
    distributed optimizer its gradient-statistics ring, then the world ring; under fsdp2 the
    FSDP group of all 8 GPUs is the default group itself (PyTorch DeviceMesh
    ``_init_one_process_group``; model/terms/comm_groups.py own_group), so the world ring
    alone, 484 MiB (was 2 × 484); one GPU: nothing. NVLS (header): the dp ring of 8 in the node
    258 MiB; the barrier's and the gradient statistics' rings 2 MiB of credits each; under
    fsdp2 the world ring is the FSDP group's, whose all-gathers set the buffers up: 258."""
    ring, barrier = 484 * MIB + NVLS8, 484 * MIB + CREDITS
    assert _comm(DENSE, Layout(dp=8)) == [ring + 2 * barrier]
    assert _comm(DENSE, Layout(dp=8, framework="deepspeed", zero_stage=2)) == [ring + barrier]
    assert _comm(DENSE, Layout(dp=8, framework="deepspeed", zero_stage=3)) == [ring + barrier]
    assert _comm(DENSE, Layout(dp=8, framework="fsdp2", zero_stage=3)) == [ring]
    assert _comm(DENSE, Layout(framework="deepspeed")) == [0]


def test_the_textbook_counts_none_and_one_gpu_has_none():
    assert _comm(DENSE, Layout(dp=2, tp=4, pp=4, framework="textbook")) == [0, 0, 0, 0]
    assert _comm(DENSE, Layout()) == [0]


def test_the_peak_holds_them_in_both_phases_and_the_reserve_lost_them():
    lay = Layout(dp=2, tp=4, pp=4)
    st = stage_memory(ModelSpec(name="m", arch=DENSE), TRAINING, lay, None, H100)[0]
    assert st.total_bytes == st.allocated_bytes + st.communicator_bytes
    # 841 MiB (what an H100's driver keeps of its 80 GiB: 361 MiB its Total leaves out + 480 MiB
    # Reserved) + 666,632,192 B (CUDA context) + 32 MiB + 32 MiB + 1 KiB (cuBLAS, TE)
    # + 1 GiB (fragmentation), no NCCL
    assert DEFAULT_RUNTIME_RESERVE_BYTES == 841 * MIB + 666_632_192 + 64 * MIB + 1024 + 2**30


def test_an_h800_node_rings_on_16_channels():
    """An H800 node (8 NVLinks, 164.8 GB/s as NCCL counts them: 4 search channels at 40 GB/s,
    doubled twice, tests/model/test_nccl_channels.py) gives a ring 16 collective channels and
    sets up pow2Up(16) = 16: 16 × 12 = 192 MiB and (16 × 3 + 2) × 2 = 100 MiB, 292 MiB where an
    H100 node's ring holds 484. dp 8 on 8 GPUs, ZeRO-1: the dp ring, the distributed optimizer's
    gradient-statistics ring and the world ring, 3 × 292 = 876 MiB (1,452 on H100s); NVLS: the
    dp ring's 8 heads run its all-reduce as NVLS (178.5 GB/s of bus bandwidth against the ring's
    160, model/nccl_search.py), 2 + 16 × 2 × 1 × 8 = 258 MiB, the two one-float rings 2 each:
    1,138 MiB."""
    h800 = get_accelerator("H800")
    cluster = ClusterLinks(nvlink_domain=8, nvlink_bytes_per_s=200e9, scaleout_bytes_per_s=50e9)
    layout = Layout(dp=8)
    est = evaluate(ModelSpec(name="m", arch=DENSE), TRAINING, layout, h800,
                   links_for(layout, cluster))  # fmt: skip
    assert [int(s.communicator_bytes) for s in est.stages] == [(3 * 292 + 258 + 2 * 2) * MIB]
    assert (3 * 292 + 258 + 2 * 2) * MIB == 1138 * MIB
