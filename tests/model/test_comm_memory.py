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


def test_a_tp_dp_pp_layout_by_hand():
    # 32 GPUs, 8 per NVLink domain, order tp-cp-ep-dp-pp: tp 4 and dp 2 inside a node (rings of
    # 32 channels, 384 MiB each); pp 4 across nodes on a 50 GB/s NIC: ⌈50/14⌉ = 4 → 4 channels
    # a peer (⌈4/8⌉ = 1 round: no halving), 48 MiB a neighbour. The ends have one neighbour.
    # Megatron-Core's distributed optimizer reduces its gradient statistics over its instance
    # group, here all 32 GPUs: one more ring, 384 MiB; and Megatron-LM's barriers on the world
    # group (test_the_world_group_of_the_barriers): another, 384 MiB.
    lay = Layout(dp=2, tp=4, pp=4)
    ends, middle = (384 + 384 + 48 + 384 + 384) * MIB, (384 + 384 + 96 + 384 + 384) * MIB
    assert _comm(DENSE, lay) == [ends, middle, middle, ends]


def test_interleaving_gives_the_ends_two_neighbours():
    lay = Layout(dp=2, tp=4, pp=4, virtual_stages=2, schedule="interleaved")
    assert _comm(DENSE, lay) == [(384 + 384 + 96 + 384 + 384) * MIB] * 4


def test_megatron_gradient_statistics_groups():
    """``megatron/core/optimizer/__init__.py``: the distributed optimizer's
    ``grad_stats_parallel_group`` is the optimizer instance's group (every GPU with one
    instance); Megatron-Core's DDP (ZeRO-0) reduces over the model-parallel group (tp·pp) and,
    for the experts' own optimizer, over the expert tp·ep·pp group: one ring each (384 MiB).
    Beside them, the world group's (384 MiB, test_the_world_group_of_the_barriers)."""
    zero0 = Layout(dp=2, tp=4, pp=4, zero_stage=0)
    ends, middle = (384 + 384 + 48 + 384 + 384) * MIB, (384 + 384 + 96 + 384 + 384) * MIB
    assert _comm(DENSE, zero0) == [ends, middle, middle, ends]  # tp·pp = 16 ranks
    assert _comm(DENSE, Layout(dp=8, zero_stage=0)) == [(384 + 384) * MIB]  # tp·pp = 1: none
    assert _comm(DENSE, Layout(dp=8)) == [(384 + 384 + 384) * MIB]  # ZeRO-1: all 8 GPUs
    # MoE under ZeRO-0, dp 16 × ep 8: tp·pp = 1 (none), expert tp·ep·pp = 8 (a ring)
    lay = Layout(dp=16, ep=8, zero_stage=0)
    assert _comm(MOE, lay) == [(384 + 7 * 32 * 12 + 384 + 384 + 384) * MIB]
    # the other profiles reduce their norms over groups counted already
    assert _comm(DENSE, Layout(dp=8, framework="fsdp2", zero_stage=3)) == [384 * MIB]


def test_expert_groups():
    # 16 GPUs, ep 8 inside a node (NVLink peers: 32 channels each, 7 · 32 · 12 MiB = 2,688 MiB),
    # dp 16 across two nodes (a ring, 384 MiB), the expert data-parallel group
    # tp·dp·cp/(etp·ep) = 16/8 = 2 ranks (a ring, 384 MiB); the distributed optimizer's
    # gradient-statistics group over all 16 GPUs (a ring, 384 MiB); the world group's (a ring)
    lay = Layout(dp=16, tp=1, pp=1, ep=8)
    assert _comm(MOE, lay) == [(384 + 7 * 32 * 12 + 384 + 384 + 384) * MIB]
    deepep = replace(TRAINING, moe_run=MoERun(dispatcher=Dispatcher.DEEPEP))
    assert _comm(MOE, lay, deepep) == [(384 + 384 + 384 + 384) * MIB]  # DeepEP's own buffers


def test_the_world_group_of_the_barriers():
    """torch.distributed.barrier() under NCCL all-reduces a one-element tensor on the default
    group (PyTorch ProcessGroupNCCL.cpp ProcessGroupNCCL::barrier), so the world group gets a
    communicator, a ring of 32 channels × 12 MiB = 384 MiB: Megatron-LM before training
    (training.py print_datetime), DeepSpeed in ZeRO-3's set-up and every save_checkpoint.
    torchtitan's trainer calls none. dp 8 on one node: the dp ring, and for Megatron-Core's
    distributed optimizer its gradient-statistics ring, then the world ring; FSDP2: the dp
    ring only; one GPU: nothing."""
    assert _comm(DENSE, Layout(dp=8)) == [3 * 384 * MIB]
    assert _comm(DENSE, Layout(dp=8, framework="deepspeed", zero_stage=2)) == [2 * 384 * MIB]
    assert _comm(DENSE, Layout(dp=8, framework="deepspeed", zero_stage=3)) == [2 * 384 * MIB]
    assert _comm(DENSE, Layout(dp=8, framework="fsdp2", zero_stage=3)) == [384 * MIB]
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
