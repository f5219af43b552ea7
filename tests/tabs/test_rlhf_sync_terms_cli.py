"""The faithful terms list the one weight-sync path each pool counts
(:func:`model.rlhf.split.counted_terms`), checked as a user reads them: ``python -m trainplan
rlhf --json`` in its own process.

Two paths (``model/rlhf/split.py``, ``model/rlhf/step.py`` ``sync_peak``):

* the engine on the actor's pool: the actor sends its weights over CUDA IPC on the pool's GPUs,
  OpenRLHF's ``ActorPPOTrainer.broadcast_to_vllm`` (``_handle_cuda_ipc``, 3c3be6234) or verl's
  ``ActorRolloutRefWorker.rollout_mode`` (b178a3cd5), counted by ``sync_peak``;
* the engine on GPUs of its own (OpenRLHF without ``--train.colocate_all``; verl's one-step
  off-policy recipe, ``DetachSync.sync_rollout_weights``): it receives each parameter whole
  over NCCL (``WorkerWrap.update_weight``; ``torch.empty(shape)`` + ``collective.broadcast``),
  counted by ``receive_peak`` and ``update_group``; the actor's pool has no engine, its
  ``sync_peak`` is 0, and it holds the group's sending side, one ring (``update_group``).

GRPO on Qwen2.5 7B, 16 H100s. Its largest parameter is the embedding, 152,064 × 3,584 × 2 B =
1,089,994,752 B; the model-update communicator is one 24-channel ring, 24 × 12 MiB =
301,989,888 B; verl's FSDP sync holds two 2,048 MiB IPC buckets and the largest parameter three
times (the FP32 full tensor and its BF16 cast): 2 × 2,147,483,648 + 3 × 1,089,994,752 =
7,564,951,552 B, and ``state_dict()``'s FP32 shard clones (torch 2.13 ``_create_chunk_dtensor``),
4 × 7,615,616,512 / 16 = 1,903,904,128 B: 9,468,855,680 B."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

RECEIVE = {
    ("rollout", "weight receive buffer (pool without the actor)"): 1_089_994_752,
    ("rollout", "model-update communicator (pool without the actor)"): 301_989_888,
    ("actor", "model-update communicator (pool without the engine)"): 301_989_888,
}
OPENRLHF_IPC = {("actor", "weight sync: largest parameter gathered + IPC clone"): 1_089_994_752}
VERL_IPC = {("actor", "weight sync: IPC bucket and clone, largest parameter whole"): 9_468_855_680}


def sync_terms(framework: str, *extra: str) -> dict[tuple[str, str], int]:
    """The listed memory terms of either weight-sync path, by (role, term)."""
    args = ["rlhf", "--algorithm", "grpo", "--model", "qwen2.5-7b", "--reward", "rule"]
    args += ["--gpus", "16", "--framework", framework, *extra, "--json"]
    p = subprocess.run(
        [sys.executable, "-m", "trainplan", *args], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
    terms = json.loads(p.stdout)["faithful"]["terms"]
    paths = ("weight sync:", "weight receive", "model-update")
    return {
        (t["role"], t["term"]): t["value"]
        for t in terms
        if t["unit"] == "bytes" and t["term"].startswith(paths)
    }


def test_sync_figures_by_hand():
    assert 152_064 * 3_584 * 2 == 1_089_994_752 and 24 * 12 * 2**20 == 301_989_888
    assert 2 * 2048 * 2**20 + 3 * 1_089_994_752 == 7_564_951_552
    assert 7_564_951_552 + 4 * 7_615_616_512 // 16 == 9_468_855_680


@pytest.mark.parametrize(
    ("framework", "extra", "listed"),
    [
        ("deepspeed", (), OPENRLHF_IPC),  # colocate_all: the IPC path, no NCCL receive
        ("deepspeed", ("--rollout-gpus", "8"), RECEIVE),  # the engine apart: NCCL only
        ("fsdp2", (), VERL_IPC),  # verl's hybrid engine
        # verl's one-step off-policy recipe receives over its actor_rollout NCCL group
        ("fsdp2", ("--rollout-gpus", "8"), RECEIVE),
    ],
)
def test_each_pool_lists_the_sync_path_it_counts(framework, extra, listed):
    """Where the report listed both paths (the receive terms beside the colocated actor's IPC
    sync, the actor's IPC sync on a pool without the engine), it lists the counted one only."""
    assert sync_terms(framework, *extra) == listed


def test_a_verl_engine_apart_receives_beside_its_budget_72b():
    """review-o HIGH-1, as a user runs it: GRPO on Qwen2.5 72B under ``megatron`` (verl), 64 H100,
    the engine alone on 32 (tp 8, fraction 0.95), one-step off-policy. verl's recipe
    (b178a3cd5 verl/experimental/one_step_off_policy/megatron_workers.py
    ``DetachSync.sync_rollout_weights``) receives each HF parameter whole, ``torch.empty(shape)``,
    while the engine is awake, over the ``actor_rollout`` NCCL group of every actor and rollout
    GPU (``ray_trainer.py`` ``create_collective_group``).

    Pool 0 in the rollout: the budget 0.95 × 85,017,493,504 = 80,766,618,828.8 B, less the
    logits-gather ring made inside it (24 × 12 MiB = 301,989,888), plus what it holds in every
    phase: the engine's tp communicators 327,155,712 (PyNccl ring 301,989,888 + custom
    all-reduce 24 MiB) and the gather ring 301,989,888, the CUDA graph pool 386,547,057 and the
    model-update ring 301,989,888 (1,317,682,545 B); plus the embedding received whole, 152,064
    × 8,192 × 2 = 2,491,416,576 B: 84,273,728,061.8 B, 1,063,718,461.8 B over the usable
    83,210,009,600 B (before: 81,480,321,597.8 B, "fits"). Scoring and training hold the awake
    budget and the ring: 81,782,311,485.8 B. Pool 1 (actor, reference) gains the actor's side of
    the ring, 301,989,888 B in every phase."""
    args = ["rlhf", "--algorithm", "grpo", "--reward", "rule", "--model", "qwen2.5-72b"]
    args += ["--gpus", "64", "--rollout-gpus", "32", "--off-policy", "1", "--train-tp", "8"]
    args += ["--train-pp", "2", "--rollout-tp", "8", "--engine-memory-fraction", "0.95", "--json"]
    p = subprocess.run(
        [sys.executable, "-m", "trainplan", *args], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)["faithful"]
    ring, graphs, budget = 24 * 12 * 2**20, 386_547_057, 0.95 * 85_017_493_504
    held = 327_155_712 + ring + graphs + ring
    assert held == 1_317_682_545
    pool0, pool1 = out["pools"]
    assert pool0["resident_bytes"] == held
    rollout = held + budget - ring + 2_491_416_576
    assert pool0["peak_bytes"]["rollout"] == pytest.approx(rollout, abs=1)
    assert rollout == pytest.approx(84_273_728_061.8, abs=1)
    assert pool0["peak_bytes"]["training"] == pytest.approx(held + budget - ring, abs=1)
    assert rollout - out["capacity_bytes"] == pytest.approx(1_063_718_461.8, abs=1)
    assert not pool0["fits"] and not out["fits"]
    terms = {(t["role"], t["term"]) for t in out["terms"]}
    assert ("actor", "model-update communicator (pool without the engine)") in terms
    assert pool1["fits"]
