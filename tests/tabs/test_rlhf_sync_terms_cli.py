"""The faithful terms list the one weight-sync path each pool counts
(:func:`model.rlhf.split.counted_terms`), checked as a user reads them: ``python -m trainplan
rlhf --json`` in its own process.

Two paths (``model/rlhf/split.py``, ``model/rlhf/step.py`` ``sync_peak``):

* the engine on the actor's pool: the actor sends its weights over CUDA IPC on the pool's GPUs,
  OpenRLHF's ``ActorPPOTrainer.broadcast_to_vllm`` (``_handle_cuda_ipc``, 3c3be6234) or verl's
  ``ActorRolloutRefWorker.rollout_mode`` (b178a3cd5), counted by ``sync_peak``;
* the engine on GPUs of its own (OpenRLHF without ``--train.colocate_all``): it receives each
  parameter whole over NCCL (``WorkerWrap.update_weight``), counted by ``receive_peak`` and
  ``receive_resident``; the actor's pool has no engine and its ``sync_peak`` is 0.

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
        ("fsdp2", ("--rollout-gpus", "8"), {}),  # the actor's pool has no engine to send to
    ],
)
def test_each_pool_lists_the_sync_path_it_counts(framework, extra, listed):
    """Where the report listed both paths (the receive terms beside the colocated actor's IPC
    sync, the actor's IPC sync on a pool without the engine), it lists the counted one only."""
    assert sync_terms(framework, *extra) == listed
