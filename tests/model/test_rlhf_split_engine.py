"""The rollout engine on a pool without the actor (:mod:`model.rlhf.split`), held to hand-derived
bytes: one-step off-policy keeps the engine alone on its pool (OpenRLHF forbids vLLM's sleep
under ``--train.async_enable``; verl's off-policy recipes put the reference and reward models
on the actor's pool), and the engine receives each whole BF16 parameter over a model-update
NCCL group (OpenRLHF ``WorkerWrap.update_weight``; verl's one-step off-policy
``DetachSync.sync_rollout_weights``)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.model._rlhf_specs import qwen_grpo
from trainplan.model.errors import InputError
from trainplan.model.hardware import ClusterLinks
from trainplan.model.rlhf.openrlhf import engine_receive_bytes
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import RLHFSpec, Role
from trainplan.model.rlhf.step import compose
from trainplan.optimizer.rlhf.tables import RLHFProblem, cost_of
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

QWEN = get_model("qwen2.5-7b").model  # h 3,584, V 152,064
H100 = get_accelerator("H100-SXM")
CAPACITY = 83_210_009_600  # H100-SXM usable bytes
HOST = 2 * 10**12
# one NCCL ring, NCCL's 24 collective channels inside a node (model/terms/comm_memory.py
# RING_CHANNELS; was counted at 32) × 12 MiB = 301,989,888 B; the engines' rings count no set-up
RING = 24 * 12 * 2**20
GRAPHS = 386_547_057
"""The engine's CUDA graph pool, assumed (model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES)."""


def _problem(framework: str, algorithm: str = "grpo", off_policy: int = 1) -> RLHFProblem:
    spec = qwen_grpo(algorithm=algorithm, framework=framework, off_policy=off_policy)
    return RLHFProblem(spec, H100, 8, ClusterLinks.from_device(H100))


def test_receive_bytes_by_hand():
    """Qwen2.5 72B's largest parameter is its embedding (and output) matrix, 152,064 × 8,192 ×
    2 B = 2,491,416,576 B, received whole; the model-update group is one ring, 301,989,888 B.
    verl's profiles the same: its one-step off-policy recipe (b178a3cd5 verl/experimental/
    one_step_off_policy/megatron_workers.py DetachSync.sync_rollout_weights) receives each HF
    parameter whole into torch.empty(shape) over the actor_rollout NCCL group (was (0, 0))."""
    big = get_model("qwen2.5-72b").model
    size = dict(prompts=4, samples_per_prompt=16, prompt_tokens=1024, completion_tokens=4096)
    spec = RLHFSpec(algorithm="grpo", policy=big, reward="rule", framework="deepspeed", **size)
    assert RING == 301_989_888
    assert engine_receive_bytes(spec, spec.role(Role.ROLLOUT)) == (2_491_416_576, RING)
    verl = RLHFSpec(algorithm="grpo", policy=big, reward="rule", framework="megatron", **size)
    assert engine_receive_bytes(verl, verl.role(Role.ROLLOUT)) == (2_491_416_576, RING)


def test_an_engine_without_the_actor_receives_beside_its_budget():
    """Qwen2.5 7B engine (tp 1, fraction 0.9 of 85,017,493,504 B = 76,515,744,153.6 B) alone on
    8 H100, the actor on 8 more. Under ``deepspeed`` (OpenRLHF's model-update group) and
    ``fsdp2`` (verl's one-step off-policy ``actor_rollout`` group) alike pool 0 holds the
    model-update ring in every phase, 301,989,888 B, and the rollout's peak adds the embedding it
    receives whole, 152,064 × 3,584 × 2 B = 1,089,994,752 B: 76,515,744,153.6 + 301,989,888 +
    1,089,994,752 = 77,907,728,793.6 B (fsdp2 was the budget alone before verl's receive was
    counted). The engine's CUDA graph pool, an assumed 386,547,057 B beyond the budget, is held
    in every phase (GRAPHS: model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES). The actor's pool holds
    the sending side of the same group, one ring (DeepSpeed rank 0; every verl actor GPU). On
    a pool holding both (CUDA IPC) nothing is received and no group is made. Off-policy, or
    under deepspeed, the engine stays awake in every phase."""
    for framework in ("deepspeed", "fsdp2"):
        p = _problem(framework)
        engine = cost_of(p, RoleOption(Role.ROLLOUT, 8, 8, 1, 1, "none", Fraction(9, 10)))
        actor = cost_of(p, RoleOption(Role.ACTOR, 8, 8, 1, 1))
        assert engine.budget_bytes == Fraction(9, 10) * 85_017_493_504
        split = compose((engine, actor), (0, 1), CAPACITY, HOST, 8, off_policy=1)
        pool = split.pools[0]
        assert pool.peak_bytes[0] == engine.budget_bytes + RING + 1_089_994_752 + GRAPHS
        assert pool.held_bytes == pool.resident_bytes == RING + GRAPHS
        assert pool.peak_bytes[0] == Fraction(779_077_287_936, 10) + GRAPHS
        # the actor's pool: its own communicators and the sending ring
        assert split.pools[1].resident_bytes == actor.resident_bytes + RING
        # one-step off-policy: the engine never sleeps, so scoring and training hold its budget
        # (76,515,744,153.6 B) and the ring: 76,817,734,041.6 B
        awake = engine.budget_bytes + RING + GRAPHS
        assert pool.peak_bytes[1] == pool.peak_bytes[2] == awake
        assert awake == Fraction(768_177_340_416, 10) + GRAPHS
        sync = compose((engine, actor), (0, 1), CAPACITY, HOST, 8, off_policy=0)
        # synchronous: OpenRLHF keeps vLLM awake without --train.colocate_all (deepspeed);
        # verl's engine (fsdp2) sleeps outside the rollout, keeping the ring and the graphs
        assert sync.pools[0].peak_bytes[1] == (awake if framework == "deepspeed" else RING + GRAPHS)
        # on the actor's pool (every role of this two-role step: OpenRLHF's colocate_all, which
        # it runs synchronously only) the actor sends over CUDA IPC: no group
        off = int(framework != "deepspeed")
        shared = compose((engine, actor), (0, 0), CAPACITY, HOST, 8, off_policy=off)
        assert shared.pools[0].resident_bytes == actor.resident_bytes + GRAPHS


def test_one_step_off_policy_keeps_the_engine_alone():
    """The reference beside an off-policy engine without the actor is refused; beside the actor
    (the engine's pool holds the actor: the step runs as synchronous), or in a synchronous step
    under verl's profiles, it is composed. Under deepspeed it is refused in a synchronous step
    too (OpenRLHF shares the engine's GPUs only under --train.colocate_all, every role there)."""
    p = _problem("megatron", "ppo")
    ds = _problem("deepspeed", "ppo")
    opts = {
        Role.ROLLOUT: RoleOption(Role.ROLLOUT, 8, 8, 1, 1, "none", Fraction(1, 2)),
        Role.ACTOR: RoleOption(Role.ACTOR, 8, 8, 1, 1),
        Role.REFERENCE: RoleOption(Role.REFERENCE, 8, 8, 1, 1),
    }
    engine, actor, ref = (cost_of(p, o) for o in opts.values())
    with pytest.raises(InputError, match="alone on its GPUs"):
        compose((engine, actor, ref), (0, 1, 0), CAPACITY, HOST, 8, off_policy=1)
    assert compose((engine, actor, ref), (0, 1, 0), CAPACITY, HOST, 8, off_policy=0).pools
    assert compose((engine, actor, ref), (0, 0, 1), CAPACITY, HOST, 8, off_policy=1).pools
    # deepspeed: OpenRLHF places the engine beside other roles only under colocate_all
    engine, actor, ref = (cost_of(ds, o) for o in opts.values())
    with pytest.raises(InputError, match=r"pool 0 puts rollout, reference .* OpenRLHF"):
        compose((engine, actor, ref), (0, 1, 0), CAPACITY, HOST, 8, off_policy=0)
