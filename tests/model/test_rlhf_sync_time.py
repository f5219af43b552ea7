"""The weight sync's seconds (:func:`model.rlhf.engine.sync_weights_bytes`): every engine GPU
receives the policy's whole BF16 weights, whatever the engine's tp.

OpenRLHF 3c3be6234 ``ppo_actor.py`` ``broadcast_to_vllm`` broadcasts each parameter whole from
rank 0, and ``vllm_worker_wrap.py`` ``update_weight`` receives it into ``torch.empty(shape)``
of the full shape on every engine rank before ``load_weights`` keeps the rank's shard; verl
makes each parameter whole before its IPC bucket or its broadcast. Charging ``2·N/tp`` let a
larger engine tp look cheaper to sync than it is."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.model._rlhf_specs import qwen_grpo
from trainplan.model.hardware import ClusterLinks
from trainplan.model.rlhf.engine import sync_weights_bytes
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import Role
from trainplan.optimizer.rlhf.tables import RLHFProblem, cost_of
from trainplan.topology.accelerators import get_accelerator

N_QWEN = 7_615_616_512  # qwen2.5-7b, untied embedding and output layer


def test_sync_sends_the_whole_model_to_every_engine_gpu_at_any_tp():
    """Qwen2.5 7B on 16 H100s (two nodes: the sync rides the 400 Gb/s NIC, 50 GB/s a
    direction, ClusterLinks.from_device). Whole BF16 weights 2 × 7,615,616,512 =
    15,231,233,024 B; ÷ 50e9 B/s = 0.30462466048 s at tp 1, 2 and 4 alike (the old
    2·N/tp charge gave 0.1523 s at tp 2 and 0.0762 s at tp 4); plus, one tensor at a time,
    339 tensors (28 layers × 12 + 3) × a ring broadcast's latency over the 16 engine GPUs and
    actor rank 0 on 3 nodes: NCCL tuning.cc models Broadcast as base + nRanks hops at the
    tree's Simple latency of the ring's hardware, the network's 14 µs across nodes, 8.4 +
    17 × 14 = 246.4 µs (model.nccl_latency.broadcast_latency): 83.5296 ms more, 0.38815426048
    s. (The other ring collectives' form, 8.4 + (17 − 3) × 3.4 + 3 × 14 = 98 µs, gave
    0.33784666048 s: 339 × (246.4 − 98) µs = 50.3076 ms less.) Not in the engine's rollout
    seconds: the step adds it where the engine's pool lacks the actor (model.rlhf.sync_time)."""
    h100 = get_accelerator("H100-SXM")
    links = ClusterLinks.from_device(h100)
    assert links.across_domains() == 50e9
    spec = qwen_grpo(prompts=64, framework="megatron")
    assert sync_weights_bytes(spec.role(Role.ROLLOUT)) == 2 * N_QWEN == 15_231_233_024
    problem = RLHFProblem(spec, h100, 16, links)
    for tp in (1, 2, 4):
        option = RoleOption(Role.ROLLOUT, 16, 16 // tp, tp, 1, "none", Fraction(9, 10))
        engine = cost_of(problem, option)
        assert engine.sync_s == pytest.approx(15_231_233_024 / 50e9 + 339 * 246.4e-6, abs=1e-12)
        assert engine.sync_s == pytest.approx(0.38815426048, abs=1e-12)
        assert engine.rollout_s > engine.sync_s
