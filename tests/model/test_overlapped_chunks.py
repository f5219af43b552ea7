"""ZeRO-3's gathered weights under schedules that compute two chunks at once
(:mod:`model.overlapped_chunks`): DualPipe's overlapped forward-backward
(deepseek-ai/DualPipe 3da1bbe ``dualpipe.py`` ``DualPipe._forward_backward_compute_chunk``:
``overlapped_forward_backward(module0, …, module1, …)``, the forward chunk and the backward
chunk together) holds each pass's current and next unit: 4 units where one pass holds 2.

Hand derivation, Llama 3 405B at tp 4, textbook ZeRO-3 over dp 16 (the search's pick the
adversary found, 512 GB200s, pp 8, B 2048):

* one layer: q and o 2 × 16384² = 536,870,912; k and v 2 × 16384 × 1024 = 33,554,432; MLP
  3 × 16384 × 53248 = 2,617,245,696; two RMSNorms 2 × 16384 = 32,768; in all 3,187,703,808;
* per GPU ÷ tp 4: 796,925,952 elements; BF16 2 B, the textbook counts beyond the shard
  (D − 1)/D = 15/16 of a unit: 1,494,236,160 B a unit;
* 1F1B, ZB-V (one pass at a time): current + next = 2 units, 2,988,472,320 B (2.99 GB, the
  figure the report said under DualPipe before);
* DualPipe, DualPipeV: 2 units × 2 chunks = 4 units, 5,976,944,640 B (5.98 GB); the peak
  181.90 → 184.89 GB of 186 GB (still fits: the search's pick stays).
"""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import run_many
from trainplan.model.mechanisms import mechanism
from trainplan.model.overlapped_chunks import chunks_at_once, overlapped_mechanism

LAYER = 2 * 16384**2 + 2 * 16384 * 1024 + 3 * 16384 * 53248 + 2 * 16384
UNIT = LAYER // 4
UNIT_BYTES = 2 * UNIT * 15 // 16

JOB = ["evaluate", "--model", "llama3-405b", "--gpu", "GB200", "--gpus", "512", "--dp", "16"]
JOB += ["--tp", "4", "--pp", "8", "--zero", "3", "--global-batch", "2048", "--json"]


def test_hand_derivation():
    assert LAYER == 3_187_703_808
    assert UNIT == 796_925_952
    assert UNIT_BYTES == 1_494_236_160
    m = overlapped_mechanism(mechanism("textbook", 3), "dualpipe")
    assert m.units_held(UNIT) == 4
    assert m.memory_terms(10**9, 16, UNIT)[3] == 4 * UNIT_BYTES == 5_976_944_640
    one = overlapped_mechanism(mechanism("textbook", 3), "zb-v")
    assert one.memory_terms(10**9, 16, UNIT)[3] == 2 * UNIT_BYTES == 2_988_472_320


@pytest.mark.parametrize(
    ("framework", "schedule", "n"),
    [
        ("textbook", "dualpipe", 2),
        ("textbook", "dualpipev", 2),
        ("textbook", "zb-v", 1),
        ("textbook", "1f1b", 1),
        ("fsdp2", "dualpipev", 1),  # the runtime holds both chunks whole already
        ("megatron", "interleaved", 1),
    ],
)
def test_chunks_at_once(framework, schedule, n):
    assert chunks_at_once(framework, schedule) == n


def test_evaluate_counts_both_chunks():
    done = run_many(
        {
            s: [*JOB, "--framework", "textbook", "--schedule", s]
            for s in ("dualpipe", "dualpipev", "zb-v", "1f1b")
        }
    )
    assert all(d.returncode == 0 for d in done.values()), {k: d.stderr for k, d in done.items()}
    mem = {k: json.loads(d.stdout)["memory"] for k, d in done.items()}
    assert mem["dualpipe"]["zero3_gathered_bytes"] == 5_976_944_640
    assert mem["dualpipev"]["zero3_gathered_bytes"] == 5_976_944_640
    assert mem["zb-v"]["zero3_gathered_bytes"] == 2_988_472_320
    assert mem["1f1b"]["zero3_gathered_bytes"] == 2_988_472_320
    assert mem["dualpipe"]["zero3_gathered_what"] == "current + next unit of 2 chunks at once"
    assert mem["1f1b"]["zero3_gathered_what"] == "current + next unit"
    assert mem["dualpipe"]["total_bytes"] == 184_889_438_208
