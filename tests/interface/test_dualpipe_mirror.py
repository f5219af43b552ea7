"""DualPipe's mirror stages: rank r holds stage r and stage pp − 1 − r, so rank pp − 1 − r holds
the same two, and each stage's gradient is the sum of its two copies' (deepseek-ai/DualPipe
``examples/example_dualpipe.py``: ``p0.grad += p1all[pp_size - 1 - rank]`` after
``DualPipe.step``). Charged as a 2-rank all-reduce between the mirrors after the flush, in the
pipeline axis's traffic and waited for (:func:`model.terms.traffic.pair_reduced_params`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainplan.interface.fidelity.validation import evaluate_run, validation_runs


def _deepseek_v3(schedule: str = "dualpipe") -> dict:
    (run,) = [
        r
        for r in validation_runs()
        if r.params.get("model") == "deepseek-v3" and r.params.get("schedule") == "dualpipe"
    ]
    params = {**run.params, "schedule": schedule}
    if schedule != "dualpipe":  # DeepEP under the textbook profile runs with DualPipe only
        params = {k: v for k, v in params.items() if k != "moe_node_limit"}
        params["moe_dispatcher"] = "alltoall"
    run = replace(run, params=params)
    result = evaluate_run(run)
    assert result.error is None
    return result.report


def _pp(report: dict) -> dict:
    (row,) = [r for r in report["traffic"] if r["axis"] == "pp"]
    return row


def test_deepseek_v3_mirror_all_reduce_by_hand():
    """DeepSeek-V3's published layout (2,048 H800: dp 128, pp 16, ep 64; FP32 gradients, §3.3.3)
    under DualPipe: stages of 3, 3, 4 × 12, 3 layers, the MTP module on the last. The pair that
    waits longest is ranks 0 and 15, both holding stages 0 and 15 (h = 7,168, V = 129,280):

    * MLA attention: 7,168·1,536 + 1,536 + 1,536·128·192 + 7,168·576 + 512 + 512·128·256
      + 128·128·7,168 = 187,107,328; the two norms 14,336;
    * stage 0: the embedding 926,679,040 + 3 dense layers × (187,107,328 + 14,336
      + 3·7,168·18,432 = 396,361,728) = 2,677,129,216;
    * a MoE layer on one GPU (256 experts ÷ ep 64 = 4 routed): 187,107,328 + 14,336 + the router
      256·7,168 + 256 bias + the shared expert 3·7,168·2,048 = 44,040,192 + 4 × 44,040,192
      = 409,157,888;
    * stage 15: 3 MoE layers + the MTP module's (4 × 409,157,888) + its 2h → h projection
      14,336·7,168 = 102,760,448 + the output head 926,679,040 + the final, MTP input and MTP
      final norms 4 × 7,168 (the embedding shared with stage 0's on the same rank) =
      2,666,099,712;

    5,343,228,928 parameters, 21,372,915,712 B of FP32 gradients. An all-reduce over 2 ranks
    sends 2·(1/2) of the buffer: 21,372,915,712 B on the 50 GB/s scale-out link, 0.42746 s,
    exposed whole (after the last backward: no computation left to hide it). The pipeline
    row's bytes gain those 21.37 GB; the step time gains the 0.42746 s (19.670 → 20.097 s)."""
    attention = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256
    attention += 128 * 128 * 7168
    assert attention == 187_107_328
    stage0 = 129_280 * 7168 + 3 * (attention + 2 * 7168 + 3 * 7168 * 18_432)
    moe = attention + 2 * 7168 + 256 * 7168 + 256 + 5 * 3 * 7168 * 2048
    assert (stage0, moe) == (2_677_129_216, 409_157_888)
    stage15 = 4 * moe + 2 * 7168 * 7168 + 129_280 * 7168 + 4 * 7168
    assert stage15 == 2_666_099_712
    grads = 4 * (stage0 + stage15)
    assert grads == 21_372_915_712
    report = _deepseek_v3()
    assert report["memory"]["gradients_bytes"] == grads  # the busiest rank's two stages
    row = _pp(report)
    assert row["collective"] == "send/recv (point-to-point) + mirror-stage gradient all-reduce"
    assert row["exposed_seconds"] == pytest.approx(grads / 50e9, rel=1e-12)
    sends = row["bytes_per_step"] - grads
    assert sends == 14_092_861_440  # the activations and their gradients, hidden by DualPipe
    assert report["time"]["step_s"] == pytest.approx(20.0972, abs=1e-4)


def test_one_copy_per_stage_has_no_mirror_reduction():
    """The same layout under 1F1B (with the plain all-to-all dispatcher: DeepEP runs under the
    textbook profile with DualPipe only) holds each stage once: its pipeline row is the sends
    alone (the textbook profile ties no embedding)."""
    row = _pp(_deepseek_v3("1f1b"))
    assert row["collective"] == "send/recv (point-to-point)"
    assert row["bytes_per_step"] == 14_092_861_440
