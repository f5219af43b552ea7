"""torchtitan's MoE with expert parallelism off and tp > 1 keeps the router's FP32 input copy
whole on every tp rank (b5bcd76c6 ``models/common/moe_sharding.py``: "EP off, SP on" turns the
MoE input from ``Shard(1)`` into ``Replicate``; ``moe.py`` ``TokenChoiceTopKRouter.forward``
runs the gate under FP32 autocast on every token), as a user's ``evaluate`` shows it."""

from __future__ import annotations

import json

from tests.cli_runs import trainplan

ARGS = (
    "evaluate", "--model", "qwen3-30b-a3b", "--gpus", "64", "--gpu", "H100-SXM",
    "--framework", "fsdp2", "--dp", "4", "--tp", "4", "--pp", "4", "--ep", "1",
    "--micro-batch", "2", "--global-batch", "1024", "--zero", "2", "--recompute", "none",
    "--schedule", "1f1b", "--json",
)  # fmt: skip


def test_the_router_input_copy_is_whole_at_ep_1() -> None:
    """Stage 0 of pp 4 under 1F1B holds 4 micro-batches of its 12 layers: 48. Each keeps the
    router's FP32 copy of its input, 4 B × (b 2 × s 4,096 = 8,192 tokens) × h 2,048 =
    67,108,864 B whole, where a quarter (16,777,216 B) was counted at tp 4: 48 × ¾ × 67,108,864
    = 2,415,919,104 B more, 74,303,557,120 → 76,719,476,224 B (Qwen3-30B-A3B has no shared
    expert, whose BF16 input would be whole too). The tp ring of 4 in a node holds NVLink
    SHARP's 2 MiB of credits alone, not 2 + 128 MiB: NCCL's tuner runs a 4-GPU all-reduce of an
    H100 node as a ring (model/nccl_search.py), so its buffers are never set up: 134,217,728 B
    less, 76,585,258,496 B."""
    done = trainplan(*ARGS)
    assert done.returncode == 0, done.stderr[-2000:]
    memory = json.loads(done.stdout)["memory"]
    assert 48 * 3 * 4 * 8_192 * 2_048 // 4 == 2_415_919_104
    total = 74_303_557_120 + 2_415_919_104 - 128 * 2**20
    assert memory["total_bytes"] == total == 76_585_258_496
    assert memory["fits"]
