"""FSDP2's gradient reduce-scatter under PyTorch's pipeline schedules (model/pipeline_reduce.py):
``perform_reduce_grad`` runs it after the stage's last backward and ``finalize_backward`` makes
the compute stream wait for it (torch 2.13 ``torch/distributed/pipelining/stage.py``,
``schedules.py``; ``fsdp/_fully_shard/_fsdp_param_group.py``), so the first stage's — the step's
last backward — waits whole in a one-chunk schedule, its last chunk's 1/v in a multi-chunk one;
the weights' all-gather keeps its overlap with the next step's first forward."""

from __future__ import annotations

import pytest

from trainplan.model.pipeline_reduce import reduce_waiting_share
from trainplan.model.step_time import dp_exposed_seconds
from trainplan.optimizer.case import Case

PHI = 1 - 1 / 1.314  # NCCL's NVLS SMs on Hopper (model.comm_sms; tests/model/test_comm_sms.py)


def test_the_share_that_waits():
    """1 for 1F1B and GPipe, 1/v for interleaved (v 8) and ZB-V (v 2), none at pp 1 or under
    another framework."""
    assert reduce_waiting_share("fsdp2", 4, 1) == 1.0
    assert reduce_waiting_share("fsdp2", 16, 8) == 0.125
    assert reduce_waiting_share("fsdp2", 2, 2) == 0.5
    assert reduce_waiting_share("fsdp2", 1, 1) == 0.0
    assert reduce_waiting_share("megatron", 8, 1) == reduce_waiting_share("deepspeed", 8, 1) == 0


def test_what_waits_beside_what_overlaps_by_hand():
    """Once-per-step traffic of 3 s, 2 s of it a reduction that waits, 1 s of gather under a
    1.5 s window at φ 0.25, tail 0.1: 2 + max(0.25 · 1, 1 − 1.5, 0.1 · 1) = 2.25 s. Not
    overlapped, all 3 s wait; without the waiting part max(0.25 · 3, 3 − 1.5, 0.3) = 1.5 s."""
    assert dp_exposed_seconds(3.0, 0.0, 8, 1.5, True, 0.1, True, 0.25, 2.0) == 2.25
    assert dp_exposed_seconds(3.0, 0.0, 8, 1.5, False, 0.1, True, 0.25, 2.0) == 3.0
    assert dp_exposed_seconds(3.0, 0.0, 8, 1.5, True, 0.1, True, 0.25) == 1.5


LAYOUT = dict(model="llama3-70b", num_gpus=64, device="H100-SXM", framework="fsdp2", dp=4, tp=4,
              pp=4, zero_stage=2, schedule="1f1b", global_batch_size=256, seq_len=8192,
              recompute="selective")  # fmt: skip


def test_llama3_70b_1f1b_waits_for_the_whole_reduce_scatter_by_hand():
    """``trainplan search --model llama3-70b --gpus 64 --framework fsdp2 --pp 2 --pp 4 --pp 8
    --schedule 1f1b --global-batch 256``'s answer: dp 4 × tp 4 × pp 4, ZeRO-2, m 64. Its dp
    group spans 2 nodes (scale-out): each of the 20 blocks of the busiest stage reduce-scatters
    its FP32 gradients once a step and all-gathers its BF16 weights once (FSDP2, one call a
    block), 215.0 ms if nothing overlapped. A call costs NCCL's 8.4 µs + 3 hops × 14 µs =
    50.4 µs of latency, 40 calls 2.016 ms; the bytes, 215.0 − 2.016 = 212.98 ms, split 4 : 2:
    the reduce-scatter 1.008 + 141.99 = 143.0 ms, the all-gather 1.008 + 70.99 = 72.0 ms.

    Before: all of it overlapped, max(φ · 215.0, 215.0 / 20) = 51.4 ms waited. Now the
    reduce-scatter waits whole after stage 0's last backward and the gather keeps its overlap:
    143.0 + max(φ · 72.0 = 17.2, 72.0 / 20 = 3.6) = 160.2 ms; the step 43.075 → 43.184 s."""
    est = Case.of(**LAYOUT).evaluate()
    dp = next(r for r in est.traffic if r.traffic.axis == "dp")
    c = dp.seconds
    assert c == pytest.approx(0.2150, abs=5e-5)
    latency = 20 * (8.4e-6 + 3 * 14e-6)
    reduce_s, gather_s = latency + (c - 2 * latency) * 2 / 3, latency + (c - 2 * latency) / 3
    assert (reduce_s, gather_s) == (
        pytest.approx(0.1430, abs=1e-4),
        pytest.approx(0.0720, abs=1e-4),
    )
    assert dp.exposed_seconds == pytest.approx(reduce_s + PHI * gather_s, abs=5e-5)
    assert dp.exposed_seconds == pytest.approx(0.1602, abs=1e-4)
    assert est.step_s == pytest.approx(43.184, abs=1e-3)


def test_interleaved_waits_for_its_last_chunk_only():
    """The same layout interleaved over v = 2 chunks a rank: the last chunk's half of the
    reduce-scatter waits, the rest of the once-per-step traffic keeps its overlap:
    c_r / 2 + max(φ · (c − c_r / 2), (c − c_r / 2) / 20)."""
    est = Case.of(**{**LAYOUT, "schedule": "interleaved", "virtual_stages": 2}).evaluate()
    dp = next(r for r in est.traffic if r.traffic.axis == "dp")
    c = dp.seconds
    latency = 20 * (8.4e-6 + 3 * 14e-6)
    half = (latency + (c - 2 * latency) * 2 / 3) / 2
    assert dp.exposed_seconds == pytest.approx(half + PHI * (c - half), abs=5e-5)
