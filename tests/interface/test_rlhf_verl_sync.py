"""verl's weight sync to a colocated engine (:mod:`model.rlhf.verl_sync`) as a user meets it:
``trainplan rlhf`` in its own process. verl brings an idle-offloaded actor's parameters back,
wakes the engine's weights before its KV cache and streams the parameters through a 2,048 MiB
CUDA IPC bucket the engine clones, each parameter made whole (verl b178a3cd5
``ActorRolloutRefWorker.rollout_mode``)."""

from __future__ import annotations

import json

from tests.cli_runs import run_many

ARGS = ("rlhf", "--algorithm", "grpo", "--model", "llama3-70b", "--reward", "rule", "--gpus",
        "64", "--train-tp", "4", "--train-pp", "2", "--rollout-tp", "2")  # fmt: skip


def test_an_idle_offloaded_actor_cannot_sync_beside_a_large_engine() -> None:
    """Llama 3 70B GRPO on 64 H100s, the actor at dp 8 × tp 4 × pp 2 offloaded while idle, the
    engine at tp 2 with 0.9 of the memory. At the sync a GPU holds what stays in every phase
    (3.45 GB: communicators, buffers, a second process), the engine's weights (2 × 70,553,706,496
    / 2 = 70.55 GB), two buckets (2 × 2,147,483,648 B), the embedding gathered and concatenated
    (2 × 128,256 × 8,192 × 2 B = 4,202,692,608 B) and the actor's busiest BF16 stage back: the
    last, 40 layers of (855,654,400 − 16,384) / 4 + 16,384 = 213,925,888 parameters per tp rank,
    the output layer's 128,512 (padded to 128 × tp) × 8,192 / 4 rows and the final norm's 8,192,
    8,820,236,288 parameters, 17,640,472,576 B: 100.14 GB, over the 83.21 GB usable. The engine's
    budget (76.52 GB) alone fitted, so the placement used to be answered "fits".

    99.63 GB, 16.42 above, with NCCL's channels by placement and their set-up
    (model/terms/comm_memory.py; the derivation in tests/interface/test_rlhf_resident.py): the
    actor's groups 1,912,602,624 → 1,606,418,432 B (tp 484 + dp 148 + pp pair 76 +
    gradient-statistics 292 + world 292 MiB, and the output layer's 251,658,240 B "mpu" buffer),
    the engine's tp 2 ring and its logits-gather ring at a node's 24 channels, 402,653,184 →
    301,989,888 B each: 507,510,784 B less held (3,443,261,440 → 2,935,750,656 B).

    99.94 GB, 16.73 above, with Megatron-LM's model-parallel group (train_step's all-reduces at
    every ZeRO stage; the tp block of 4 at the pp stride of 32, 4 a node on 2 nodes, 16
    channels: 292 MiB, model/terms/comm_groups.py ``megatron_rings``): 306,184,192 B more held
    (2,935,750,656 → 3,241,934,848 B), 99.63 → 99.94 GB.

    100.46 GB, 17.25 above, with verl's default exporter, mbridge's ``Bridge.export_weights``
    (04fe4d52): the last stage receives the embedding from stage 0 into its tp shard first
    (``broadcast_from_megatron_pp``: ``torch.empty``, 2,101,346,304 / 4 = 525,336,576 B) before
    the tp all-gather and the merge.

    100.61 GB (100,605,132,800 B), 17.40 above, with NVLink SHARP (model/terms/nvls_memory.py;
    the derivation in tests/interface/test_rlhf_resident.py): the actor's tp 4 ring in a node
    2 MiB of credits and 16 × 2 × (128 KiB × 8) × 4 = 128 MiB of buffers, its dp,
    gradient-statistics, world and model-parallel rings 2 MiB of credits each: 138 MiB =
    144,703,488 B more held (3,241,934,848 → 3,386,638,336 B). With the engine's CUDA graph pool
    held in every phase, an assumed 386,547,057 B (model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES):
    100,991,679,857 B.

    100.86 GB (100,857,462,129 B), 17.65 above, since NCCL's tuner runs a 4-GPU all-reduce of an
    H100 node as a ring (model/nccl_search.py: NVLS's 240 GB/s of bus bandwidth against the
    ring's 360): the actor's tp 4 ring holds NVLS's 2 MiB of credits alone, its buffers never
    set up, 134,217,728 B less held.

    101.81 GB (101,811,666,289 B), 18.60 above, with Transformer Engine's placeholder weight
    gradients the trained actor holds on its last stage in every phase (model/terms/
    dummy_wgrads.py; at tp 4 QKV [2,560, 8,192], proj [8,192, 2,048], FC1 [14,336, 8,192],
    FC2 [8,192, 7,168] and the output layer [32,128, 8,192] in BF16): 954,204,160 B."""
    runs = run_many({
        "text": (*ARGS, "--offload", "idle", "--engine-memory-fraction", "0.9"),
        "json": (*ARGS, "--offload", "idle", "--engine-memory-fraction", "0.9", "--json"),
    })  # fmt: skip
    text = runs["text"].stdout
    assert "DOES NOT FIT" in text, runs["text"].stderr[-2000:]
    assert (
        "needs 101.81 GB per GPU in the rollout phase, 18.60 GB above the 83.21 GB usable" in text
    )
    stage = 40 * ((855_654_400 - 16_384) // 4 + 16_384) + 128_512 * 8_192 // 4 + 8_192
    assert stage == 8_820_236_288
    actor_sync = 2 * 2_147_483_648 + 2 * 2_101_346_304 + 2_101_346_304 // 4 + 2 * stage
    assert actor_sync == 26_663_469_056
    terms = json.loads(runs["json"].stdout)["faithful"]["terms"]
    held = {t["term"]: t["value"] for t in terms if t["phase"] == "held"}
    assert held["engine logits-gather communicator"] == 24 * 12 * 2**20 == 301_989_888
    assert held["engine CUDA graph pool, kept asleep (assumed)"] == 386_547_057
    assert "engine CUDA graph pool, kept asleep (assumed)" in text
    assert held["engine tp communicators, kept asleep"] == 301_989_888 + 25_165_824
    assert 1_912_602_624 - 1_606_418_432 + 2 * (402_653_184 - 301_989_888) == 507_510_784
    sync = [t for t in terms if t["term"].startswith("weight sync: IPC bucket and clone")]
    assert [(t["role"], t["phase"], t["value"]) for t in sync] == [("actor", "rollout", actor_sync)]
