"""What verl's weight sync and its FSDP actor hold, by hand (:mod:`model.rlhf.verl_sync`,
:func:`model.rlhf.verl_fsdp1.held_state`).

* verl's FSDP1 ``rollout_mode`` calls ``state_dict()`` under ``SHARDED_STATE_DICT``
  (``fsdp_workers.py``, b178a3cd5), whose post hook builds each entry with torch 2.13
  ``_shard_utils._create_chunk_dtensor``: ``tensor.detach().clone()`` then
  ``redistribute(Shard(0))`` (``_select_split_tensor(..., clone=True)``): new FP32 shards,
  4·N/dp bytes per GPU, held until ``del params`` after ``update_weights``.
* ``update_policy`` (``dp_actor.py``) and ``update_critic`` (``dp_critic.py``) end with
  ``zero_grad()`` (``set_to_none=True``): the FP32 gradient shard, 4·N/dp, exists only in the
  update.
* verl's Megatron default exporter is mbridge's ``Bridge.export_weights`` (04fe4d52): a rank of
  a stage that does not own a parameter receives it into its tp shard first
  (``broadcast_from_megatron_pp``: ``torch.empty``, L/tp), then all-gathers (L) and merges (L).
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction

from trainplan.model.frameworks import Framework
from trainplan.model.rlhf.verl_sync import SYNC_BUCKET_BYTES, verl_sync_bytes

N_QWEN = 7_615_616_512  # Qwen2.5 7B parameters
L_LLAMA70 = 128_256 * 8_192 * 2  # Llama 3 70B's embedding (and output layer), BF16 bytes


def _pool(*extra: str) -> dict:
    args = ["rlhf", "--algorithm", "grpo", "--model", "qwen2.5-7b", "--reward", "rule"]
    args += ["--gpus", "8", "--framework", "fsdp2", "--rollout-tp", "1", *extra, "--json"]
    p = subprocess.run(
        [sys.executable, "-m", "trainplan", *args], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["faithful"]


def test_fsdp1_clones_at_the_sync_and_gradients_freed_between_updates():
    """GRPO Qwen2.5 7B on 8 H100, actor and reference dp 8 under ``fsdp2`` (verl FSDP1), no
    offload, engine tp 1 at fraction 0.3. The gradients, 4 × N / 8 = 3,807,808,256 B, leave the
    held bytes (18,850,345,344 → 15,042,537,088 B) and the update's peak keeps them (training
    50,352,232,832 B, unchanged); the scoring peak is 52,639,164,800 − 3,807,808,256 =
    48,831,356,544 B. The sync adds the clones, the same 3,807,808,256 B, to 2 buckets and the
    embedding gathered in FP32 and cast (2 × 2,147,483,648 + 3 × 152,064 × 3,584 × 2 =
    7,564,951,552 B): 11,372,759,808 B. The sync moment, held + the engine's weights
    (2 × N = 15,231,233,024 B) + 11,372,759,808 = 41,646,529,920 B, is unchanged and is now the
    rollout's peak: the generation's, 44,355,593,395.2 B before, loses the 3,807,808,256 B too
    (40,547,785,139.2 B).

    NVLink SHARP (:mod:`model.terms.nvls_memory`) adds 258 MiB to each role's one ring (the FSDP
    group of 8 in the node is the world, :func:`model.terms.nvls_memory.world_runs_large`; it
    all-gathers and reduce-scatters): 2 MiB of credits and 16 × 2 × (128 KiB × 8) × 8 = 256 MiB
    of buffers, so each role's communicators go 484 → 742 MiB (778,043,392 B) and every figure
    of the pool by 2 × 258 MiB = 541,065,216 B: held 15,583,602,304 B, training
    50,893,298,048, scoring 49,372,421,760, rollout (the sync moment) 42,187,595,136 B.
    The engine's CUDA graph pool, an assumed 386,547,057 B held in every phase
    (model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES), adds to the held bytes and every peak.

    The update's side-stream pool holds, beside two all-gather outputs of the largest unit, the
    next unit's low-precision shard (FSDP1: ``FlatParamHandle._use_low_precision_shard``
    allocates ``_mp_shard`` in ``pre_unshard``, freed in ``post_unshard`` after the all-gather;
    :func:`model.terms.peak.stream_pool_term`): the largest unit is the embedding,
    152,064 × 3,584 × 2 B / 8 = 136,249,344 B more at the training peak (50,488,482,176 B)."""
    graphs = 386_547_057
    grads = 4 * N_QWEN // 8
    assert grads == 3_807_808_256
    sync = 2 * SYNC_BUCKET_BYTES + 3 * 152_064 * 3_584 * 2 + grads
    assert sync == 11_372_759_808
    plan = _pool("--offload", "none", "--engine-memory-fraction", "0.3")
    (pool,) = plan["pools"]
    nvls = 2 * (2 + 256) * 2**20
    assert nvls == 541_065_216
    assert pool["held_bytes"] - nvls - graphs == 18_850_345_344 - grads == 15_042_537_088
    assert pool["held_bytes"] == 15_583_602_304 + graphs
    copy_in = 152_064 * 3_584 * 2 // 8
    assert copy_in == 136_249_344
    assert pool["peak_bytes"]["training"] == 50_352_232_832 + copy_in + nvls + graphs
    assert pool["peak_bytes"]["scoring"] - nvls - graphs == 52_639_164_800 - grads
    assert 52_639_164_800 - grads == 48_831_356_544
    held = 15_583_602_304 + graphs
    assert pool["peak_bytes"]["rollout"] == held + 2 * N_QWEN + sync == 42_187_595_136 + graphs
    terms = {(t["role"], t["term"]): t for t in plan["terms"]}
    g = terms[("actor", "gradients (freed after each update)")]
    assert (g["phase"], g["value"]) == ("training", grads)
    assert "update_policy and dp_critic.py" in plan["sources"][g["source"]]
    assert (
        terms[("actor", "weight sync: IPC bucket and clone, largest parameter whole")]["value"]
        == sync
    )


def test_mbridge_export_receives_the_shard_on_a_stage_without_it():
    """Llama 3 70B's largest parameter, L = 2,101,346,304 B, made whole by mbridge's
    ``export_weights`` beside two buckets (2 × 2,147,483,648 B): tp 4 × pp 2, on the stage
    without it: L/4 = 525,336,576 B received, L gathered, L merged (4,728,029,184 B); tp 4 × pp 1:
    2·L; tp 1 × pp 2: L received, no copy at the merge; tp 1 × pp 1: nothing."""
    buckets = 2 * SYNC_BUCKET_BYTES
    model = 2 * 70_553_706_496

    def whole(tp: int, pp: int) -> Fraction:
        return verl_sync_bytes(Framework.MEGATRON, tp, pp, Fraction(0), L_LLAMA70, model) - buckets

    assert L_LLAMA70 == 2_101_346_304 and L_LLAMA70 // 4 == 525_336_576
    assert whole(4, 2) == 2 * L_LLAMA70 + 525_336_576 == 4_728_029_184
    assert whole(4, 1) == 2 * L_LLAMA70
    assert whole(1, 2) == L_LLAMA70
    assert whole(1, 1) == 0
