"""The weight sync's seconds by placement (:mod:`model.rlhf.sync_time`): colocated, the actor's
ranks make each tensor whole over their own mesh and hand it to the engine rank on the same GPU;
on GPUs of their own, actor rank 0 broadcasts the whole BF16 model to every engine GPU, one
tensor at a time. The step (:func:`model.rlhf.step.compose`) and the placement search read the
same term.

Qwen2.5 7B: N = 7,615,616,512 parameters in 339 tensors (28 layers × (Q, K, V, O, their three
biases, two norms, gate, up, down) + embedding, final norm, untied output layer). H100 SXM links
(``ClusterLinks.from_device``): 450 GB/s NVLink in 8-GPU domains, 50 GB/s NIC. NCCL latencies
(``tuning.cc``, :class:`model.roofline.RooflineParams`): base 8.4 µs, NVLink hop 3.4 µs,
network hop 14 µs; a broadcast's hops are ``nRanks`` at the tree's Simple latency of the ring's
hardware, the network's 14 µs across nodes (:func:`model.nccl_latency.broadcast_latency`).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.model._rlhf_specs import qwen_grpo
from trainplan.model.hardware import ClusterLinks
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import Role
from trainplan.model.rlhf.step import compose
from trainplan.model.rlhf.sync_time import parameter_tensors
from trainplan.optimizer.rlhf.tables import RLHFProblem, cost_of
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

N = 7_615_616_512
TENSORS = 339
AG8 = 8.4e-6 + 7 * 3.4e-6  # ring all-gather over 8 ranks of one node: 32.2 µs
BCAST_9_ON_2 = 8.4e-6 + 9 * 14e-6  # 134.4 µs: rank 0 + 8 engine GPUs, 2 nodes
APART = 2 * N / 50e9 + TENSORS * BCAST_9_ON_2  # 0.30462466048 + 0.0455616 s


def _costs(framework: str, actor_tp: int = 1):
    h100 = get_accelerator("H100-SXM")
    spec = qwen_grpo(prompts=64, framework=framework)
    problem = RLHFProblem(spec, h100, 16, ClusterLinks.from_device(h100))
    engine = cost_of(problem, RoleOption(Role.ROLLOUT, 8, 8, 1, 1, "none", Fraction(9, 10)))
    actor = cost_of(problem, RoleOption(Role.ACTOR, 8, 8 // actor_tp, actor_tp, 1))
    return engine, actor


def _rollout_busy(engine, actor, pools):
    plan = compose([engine, actor], list(pools), 80 * 2**30, 2 * 10**12, 8)
    return plan.pools[pools[0]].busy_s[0]


def test_qwen_has_339_tensors():
    assert parameter_tensors(get_model("qwen2.5-7b").model.arch) == 28 * 12 + 3 == TENSORS


def test_verl_fsdp_colocated_gathers_fp32_over_the_node_and_apart_broadcasts_2n():
    """verl's FSDP actor at dp 8 on one node: full_tensor() gathers its FP32 shards, 4N·7/8 =
    26,654,657,792 B per GPU over NVLink (0.0592325729 s) + 339 × 32.2 µs (0.0109158 s) =
    0.0701483729 s; the IPC buckets add nothing per tensor. Apart, the same gather then the
    broadcast: 0.30462466048 + 339 × 134.4 µs = 0.35018626048 s more."""
    engine, actor = _costs("fsdp2")
    gather = 4 * N * 7 / 8 / 450e9 + TENSORS * AG8
    assert actor.sync_gather_s == pytest.approx(gather, rel=1e-12)
    assert actor.sync_gather_s == pytest.approx(0.0701483728711, abs=1e-12)
    assert actor.sync_shared_s == actor.sync_gather_s
    assert engine.sync_s == pytest.approx(APART, rel=1e-12)
    assert engine.sync_s == pytest.approx(0.35018626048, abs=1e-12)
    together = _rollout_busy(engine, actor, (0, 0))
    apart = _rollout_busy(engine, actor, (0, 1))
    assert together == pytest.approx(engine.rollout_s + gather, rel=1e-12)
    assert apart == pytest.approx(engine.rollout_s + gather + APART, rel=1e-12)


def test_megatron_colocated_gathers_its_tp_shards_in_bf16():
    """verl's Megatron actor at tp 2, pp 1: mbridge's export gathers tp, 2N·(1 − 1/2) = N B per
    GPU over NVLink (0.0169235922 s) + 339 × (8.4 + 3.4) µs (4.0002 ms) = 0.0209237922 s."""
    engine, actor = _costs("megatron", actor_tp=2)
    gather = N / 450e9 + TENSORS * (8.4e-6 + 3.4e-6)
    assert actor.sync_shared_s == pytest.approx(gather, rel=1e-12)
    assert actor.sync_shared_s == pytest.approx(0.0209237922489, abs=1e-12)
    assert _rollout_busy(engine, actor, (0, 0)) == pytest.approx(engine.rollout_s + gather)


def test_openrlhf_zero2_colocated_pays_three_collectives_per_tensor_and_no_bytes():
    """OpenRLHF at ZeRO-2, tp 1 (its default): ``param.data`` is whole, nothing is gathered;
    ``_handle_cuda_ipc`` runs per tensor all_gather_object (two all-gathers, 32.2 µs each) and a
    barrier (one-element all-reduce over 8 ranks: 8.4 + 14 × 3.4 = 56 µs): 339 × 120.4 µs =
    0.0408156 s; rank 0's Ray call to the engine per tensor, a round trip of 1 / 1,950.1567 s
    (Ray's ``1_1_actor_calls_sync``: 512.7793 µs), 339 × that = 0.1738321851 s; and the clone
    of each tensor, 4 B an element read and written at 3.35 TB/s × 0.9 plus 3 µs a kernel:
    4N / 3.015e12 = 0.0101036371 s + 339 × 3 µs = 0.0111206372 s. In all 0.2257684223 s
    (0.0408156 s without the Ray calls and the clone). Apart, the engine's broadcast adds the
    Ray call per tensor too: 0.35018626048 + 0.1738321851 = 0.5240184456 s."""
    engine, actor = _costs("deepspeed")
    ray = TENSORS / 1950.1566973268486
    clone = 4 * N / (3.35e12 * 0.9) + TENSORS * 3e-6
    assert actor.sync_gather_s == 0.0
    shared = TENSORS * (2 * AG8 + 56e-6) + ray + clone
    assert actor.sync_shared_s == pytest.approx(shared, rel=1e-12)
    assert actor.sync_shared_s == pytest.approx(0.0408156 + 0.1738321851 + 0.0111206372, abs=1e-9)
    assert actor.sync_shared_s == pytest.approx(0.2257684223, abs=1e-9)
    assert engine.sync_s == pytest.approx(APART + ray, rel=1e-12)
    assert engine.sync_s == pytest.approx(0.5240184456, abs=1e-9)
    together = _rollout_busy(engine, actor, (0, 0))
    assert together == pytest.approx(engine.rollout_s + shared, rel=1e-12)


def test_without_the_rule_the_shared_pool_paid_the_broadcast():
    """Attribution: the old rule charged 2N at one bandwidth wherever the engine ran; the shared
    pool's rollout phase is now shorter by the broadcast less the actor's gather."""
    engine, actor = _costs("fsdp2")
    together = _rollout_busy(engine, actor, (0, 0))
    apart = _rollout_busy(engine, actor, (0, 1))
    assert apart - together == pytest.approx(APART, rel=1e-9)


def test_a_shared_engine_copy_still_waits_for_the_actors_gather():
    """``shared_weights`` (HybridFlow's 3D-HybridEngine, §5.4) lets the engine reuse the actor's
    BF16 weights in memory, but they are whole only after the actor's gather: verl's FSDP actor
    at dp 8 still gathers 4N·7/8 B over NVLink + 339 × 32.2 µs = 0.0701483729 s, as without the
    shared copy (it counted 0 s: a sync listed among the terms but not in the step)."""
    engine, actor = _costs("fsdp2")
    gather = 4 * N * 7 / 8 / 450e9 + TENSORS * AG8
    plan = compose([engine, actor], [0, 0], 80 * 2**30, 2 * 10**12, 8, shared_weights=True)
    assert plan.pools[0].busy_s[0] == pytest.approx(engine.rollout_s + gather, rel=1e-12)
    assert plan.pools[0].busy_s[0] == _rollout_busy(engine, actor, (0, 0))


def test_gpt_oss_sends_its_stacked_experts_as_four_tensors_a_layer():
    """gpt-oss holds each layer's experts stacked (``GptOssExperts``: ``gate_up_proj``,
    ``gate_up_proj_bias``, ``down_proj``, ``down_proj_bias``), and every export sends them so
    (Megatron-Bridge's ``GPTOSSMLPGateUpProjMapping`` stacks the experts into one HF tensor):
    per layer q, k, v, o + 4 biases + sinks + 2 norms + router + its bias + 4 = 17; 20b: 24 × 17
    + 3 (embedding, final norm, untied output) = 411; 120b: 36 × 17 + 3 = 615. Megatron's export
    gathers each expert's parameters apart (``per_expert``): 20b 24 × (11 + 32 × 3 + 2) + 3 =
    2,619; 120b 36 × (11 + 128 × 3 + 2) + 3 = 14,295."""
    small, large = (get_model(m).model.arch for m in ("gpt-oss-20b", "gpt-oss-120b"))
    assert (parameter_tensors(small), parameter_tensors(large)) == (24 * 17 + 3, 36 * 17 + 3)
    assert (parameter_tensors(small), parameter_tensors(large)) == (411, 615)
    apart = (parameter_tensors(small, per_expert=True), parameter_tensors(large, per_expert=True))
    assert apart == (24 * (11 + 32 * 3 + 2) + 3, 36 * (11 + 128 * 3 + 2) + 3) == (2_619, 14_295)
    # a model whose experts are not stacked counts the same either way (Qwen3-30B-A3B)
    qwen = get_model("qwen3-30b-a3b").model.arch
    assert parameter_tensors(qwen) == parameter_tensors(qwen, per_expert=True)
