"""``memory.fit_bytes``: the figure the search, the per-stage search and the frontier fit layouts
by (:func:`model.terms.peak.fit_total`), in the search, frontier and evaluate JSON and in the
frontier's table, beside the allocated peak the memory axis shows.

Llama 3 8B on 8 H100s under fsdp2 (the defaults: s 8192, B 1024): the frontier's fastest point
is dp 4 × tp 2, ZeRO-2, no recomputation, b 1, 66.87 GB at its allocated peak with the
communicators (``total_bytes``; 65.13 GB before NCCL's channels by placement, their set-up and
torchtitan's world barrier: the tp 2 and dp 4 rings in the node, 24 channels each, 288 +
(32 × 3 + 2) × 2 = 484 MiB, and the world ring of the barrier after step 1, 484: 1,452 MiB
against 2 × 384 = 768, 717,225,984 B more; 65.85 GB before torchtitan's "batch" and "loss"
groups, two more 4-rank rings in the node, 2 × 484 MiB = 1,015,021,568 B;
model/terms/comm_memory.py, comm_groups.py; 66.86 GB before NVLink SHARP's, the tp 2 and FSDP
rings' credits, 2 MiB each (NCCL's tuner runs an all-reduce of 2 or 4 GPUs of an H100 node as a
ring, model/nccl_search.py, so their buffers are never set up: 66 + 130 MiB were counted
before), and 2 MiB of credits on each of the world, "batch" and "loss" rings, whose one-float
all-reduces NCCL runs as rings: 10 MiB, model/terms/nvls_memory.py).
FSDP2's all-gather
copy-in stream keeps two outputs of its largest unit reserved and the next unit's copy-in
buffer beside them (:func:`model.terms.peak.stream_pool_term`), the embedding's 128,256 × 4,096
weights ÷ tp 2 in BF16: 2 × 2 B × 262,668,288 + 2 B × 262,668,288 / 4 = 1,050,673,152 +
131,334,144 = 1,182,007,296 B, so the fit figure is 68,053,409,792 B (68.05 GB). With
``--allocator-retries-ok`` the search fits by the allocated peak, and the figure is ``total_bytes``.

Each command is its own process (``python -m trainplan``), a few seconds each."""

from __future__ import annotations

import json

from tests.cli_runs import run_many

# pp 1: every point of the frontier is at pp 1 (10 s of tables without it, 1 s with it)
BASE = ("--model", "llama3-8b", "--gpus", "8", "--framework", "fsdp2", "--pp", "1")
POOL = 2 * 2 * 128_256 * 4_096 // 2 + 2 * 128_256 * 4_096 // 2 // 4
TOTAL = 65_128_669_184 + (5 * 484 - 2 * 384 + 2 + 2 + 3 * 2) * 2**20


def test_fit_bytes_in_every_answer_and_the_frontier_table():
    assert POOL == 1_050_673_152 + 131_334_144 == 1_182_007_296
    runs = run_many(
        {
            "frontier": ("frontier", *BASE, "--json"),
            "table": ("frontier", *BASE),
            "retries": ("frontier", *BASE, "--allocator-retries-ok", "--json"),
            "search": ("search", *BASE, "--json"),
            "evaluate": ("evaluate", *BASE, "--dp", "4", "--tp", "2", "--zero", "2", "--json"),
        }
    )
    for name, done in runs.items():
        assert done.returncode == 0, (name, done.stderr[-2000:])
    points = json.loads(runs["frontier"].stdout)["points"]
    first = points[0]
    lay = (first["dp"], first["tp"], first["zero_stage"], first["recompute"])
    assert lay == (4, 2, 2, "none") and first["micro_batch_size"] == 1
    assert first["total_bytes"] == TOTAL == 66_871_402_496
    assert first["fit_bytes"] == TOTAL + POOL == 68_053_409_792
    # every point fits by the figure the search compared; none below the allocated peak
    assert all(p["total_bytes"] <= p["fit_bytes"] <= p["capacity_bytes"] for p in points)

    # the table: the fit figure beside the memory axis
    head, _, row = runs["table"].stdout.splitlines()[1:4]
    assert head.split()[:5] == ["step", "memory/GPU", "fit/GPU", "MFU", "GPUs"]
    assert row.split()[2:6] == ["66.87", "GB", "68.05", "GB"]

    # allocator retries accepted: the search fits by the allocated peak, and says so
    assert all(
        p["fit_bytes"] == p["total_bytes"] for p in json.loads(runs["retries"].stdout)["points"]
    )

    # search and evaluate: the same key, the same rule
    m = json.loads(runs["search"].stdout)["memory"]
    assert m["fit_bytes"] == m["reserved_bytes"] + m["communicator_bytes"] <= m["capacity_bytes"]
    m = json.loads(runs["evaluate"].stdout)["memory"]
    assert (m["total_bytes"], m["stream_pool_bytes"], m["fit_bytes"]) == (TOTAL, POOL, TOTAL + POOL)
