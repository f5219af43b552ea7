"""Megatron-Core's interleaved schedule launches the parameter all-gathers chunk by chunk under
the next step's warm-up forwards (model/pipeline_reduce.py chunked_param_gathers,
model/dp_exposure.py interleaved_gather_seconds), on a published run a user evaluates."""

from __future__ import annotations

import pytest


def test_interleaved_param_gathers_by_chunk_nemo_gpt3_175b():
    """NeMo 24.07's GPT-3 175B on 512 H100s (dp 16 × tp 4 × pp 8, v 6, b 2, B 2,048: m = 64;
    Apex's distributed Adam, whose ``param_sync_func`` the interleaved schedule calls as it does
    Megatron-Core's ``start_param_sync``; megatron/core/pipeline_parallel/schedules.py at
    Megatron-LM d98e8a64dd and at the container's 338af514 alike). The dp row: 0.28104 s a step,
    the BF16 reduce-scatter 0.14052 and the all-gather 0.14052; 141 buckets (tail 1/141); the
    group 16 ranks over 8 nodes at 2 a node, 8 ring blocks, φ = 1 − 1/1.177 = 0.15038; one
    micro-batch of the slowest stage 0.17036 s (t).

    Before: the reduction's chunk 0, 0.14052 / 6 = 0.02342, waits whole; the rest, 0.25762 s of
    reduce-scatters and all-gathers, under one window t: max(φ · 0.25762, 0.25762 − 0.17036) =
    0.08726, 0.11068 s exposed. Megatron-Core gives the all-gathers the warm-up's forwards chunk
    by chunk (model.pipeline_reduce.chunked_param_gathers): 0.02342 s a chunk; a chunk-forward
    t / 18 = 0.009464 s; chunk 0 under its own first forward, 0.02342 − 0.00946 = 0.01396;
    chunk 1 under chunk 0's other 7 forwards and chunks 2–5 under 8 each, φ · 0.02342 = 0.00352
    each (5 × 0.00352 = 0.01761): 0.03157 s. The reduction's other five chunks, 0.11710 s,
    under t: φ · 0.11710 = 0.01761. 0.02342 + 0.01761 + 0.03157 = 0.07259 s: 0.0381 s less,
    the step 11.275 → 11.237 s (the row +13.5 % → +13.2 % against the published 9.930 s).

    Then NCCL's ring latency counted only its 7 steps between the 8 nodes at the network's 14 µs
    (model/nccl_latency.py): 8.4 + 7 × 14 + 8 × 3.4 = 133.6 µs a call where 8.4 + 15 × 14 =
    218.4 were charged, 2 × 141 calls: 0.28104 − 0.02391 = 0.25713 s, 0.12856 a collective,
    0.02143 a chunk; chunk 0 waits 0.02143 − 0.00946 = 0.01196, chunks 1–5 φ · 0.02143 = 0.00322
    each: 0.02808 s; the reduction's other five chunks φ · 0.10713 = 0.01611: 0.02143 + 0.01611
    + 0.02808 = 0.06562 s, the step 11.230 s (+13.1 %).

    Then NCCL's tuner (model/nccl_tuner.py: ``ncclTopoTuneModel``, ``topoGetAlgoInfo``) runs each
    of the 2 × 141 calls, 74,705,321 bytes a rank, in
    LL128: 14 + 7 × 4.0 + 8 × 1.9 = 57.2 µs and the bytes at min(0.92 × 96, 4 channels × 36.7) =
    88.32 GB/s, 903.05 µs, against Simple's 133.6 µs at 96 GB/s, 911.78: 0.25713 − 2 × 141 ×
    (161.2 µs of latency less − 67.67 µs of slower bytes) = 0.25466 s, 0.12733 a collective,
    0.02122 a chunk; chunk 0 waits 0.02122 − 0.00946 = 0.01176, chunks 1–5 φ · 0.02122 = 0.00319
    each: 0.02771 s; the reduction's other five chunks φ · 0.10611 = 0.01596: 0.02122 + 0.01596
    + 0.02771 = 0.06489 s, 0.73 ms less; the pp row's embedding all-reduce over its 2 nodes (one
    rank each) the Simple ring's 8.4 + 2 × 14 µs × 1.4 (the multi-node ring's plateau) where
    the tree's latency was charged, +14.6 µs: the step 11.22877 → 11.22806 s; then 11.22806 →
    11.23137 s when the optimizer step zeroed Apex DistributedFusedAdam's whole BF16 gradient
    buffer, 2 B × every parameter element on the GPU, in place of 4 B × the shard
    (``zero_grad``: ``self._grad_buffer.zero_()``;
    model.terms.optimizer_time.whole_buffer_zeroing_bytes)."""
    from trainplan.interface.fidelity.validation import evaluate_run, validation_runs

    run = next(r for r in validation_runs() if r.key == "nemo-24.07-h100/gpt3-175b-512")
    result = evaluate_run(run)
    dp = next(t for t in result.value("traffic") if t["axis"] == "dp")
    phi = 1 - 1 / 1.177
    sent = 74_705_321  # a rank's bytes a call
    ll128, simple = 14e-6 + 7 * 4.0e-6 + 8 * 1.9e-6, 8.4e-6 + 7 * 14e-6 + 8 * 3.4e-6
    slower = sent / (0.92 * 96e9) - sent / 96e9  # LL128's bytes at min(0.92 × 96, 4 × 36.7) GB/s
    assert dp["seconds"] == pytest.approx(
        0.28104 - 2 * 141 * 84.8e-6 - 2 * 141 * (simple - ll128 - slower), abs=1e-5
    )
    reduce_s = gather_s = dp["seconds"] / 2
    t, v = 0.17036, 6
    chunk, f = gather_s / v, t / (3 * v)
    assert (chunk, f) == (pytest.approx(0.02122, abs=1e-5), pytest.approx(0.009464, abs=1e-6))
    gathers = max(phi * chunk, chunk - f, gather_s / 141) + (v - 1) * phi * chunk
    assert gathers == pytest.approx(0.02771, abs=1e-5)
    rest = reduce_s - reduce_s / v
    exposed = reduce_s / v + max(phi * rest, rest - t) + gathers
    assert dp["exposed_seconds"] == pytest.approx(exposed, abs=2e-5)
    assert dp["exposed_seconds"] == pytest.approx(0.06489, abs=1e-5)
    # 11.231 s: the bubble Megatron-Core's order on the chunks as timed (the validation page's
    # nemo-24.07-h100/gpt3-175b-512 row)
    assert result.step_s == pytest.approx(11.231, abs=5e-4)
