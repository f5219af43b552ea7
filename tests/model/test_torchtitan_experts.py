"""torchtitan's routed experts as it runs them (``fsdp2``, :mod:`model.torchtitan_experts`):
one ``torch._grouped_mm`` per pass at the grouped/dense ratio measured on one H200, and the
dispatcher's all-to-all of the token counts and host wait per MoE layer forward.

The measurement (``tests/data/device/h200-2026-12-04/kernels.json``, section ``grouped_gemm``:
16 experts, n 1,536, k 2,048, BF16 forward, PyTorch 2.11) gives ``torch._grouped_mm`` over a
dense GEMM of the same FLOPs 1.108 / 1.186 / 2.195 at 2,048 / 512 / 128 rows per expert; the
Megatron-Core rule (Transformer Engine's per-expert GEMMs, the wave rule, the 4-stream launch
gaps) gave 1.064 / 1.128 / 1.384 for the same shapes, so an fsdp2 layout with few tokens per
expert looked cheaper than it is. Each figure below is derived by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.model._shared import search_matches_evaluate
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Layout
from trainplan.model.moe_kernels import (
    DispatchMetadata,
    ExpertPasses,
    dispatch_metadata,
    expert_passes_of,
)
from trainplan.model.op_rates import deployed_params
from trainplan.model.op_time import Clock, dgrad_seconds, op_seconds, wgrad_seconds
from trainplan.model.ops import Op, OpKind
from trainplan.model.roofline import Collective, LinkTime, collective_seconds
from trainplan.model.torchtitan_experts import (
    GROUPED_MM_OVER_DENSE,
    HOST_SYNC_S,
    counts_sent_bytes,
    grouped_mm_ratio,
    grouped_mm_seconds,
    torchtitan_dispatch_seconds,
)
from trainplan.optimizer.case import Case
from trainplan.optimizer.space import SearchSpace

DATA = Path(__file__).resolve().parents[1] / "data" / "device" / "h200-2026-12-04"
P = deployed_params("H200")
"""The H200's roofline figures: e_GEMM 0.5725, clock fraction 1, e_HBM 0.9, t_kernel 3 µs,
132 SMs; the accelerator table's 989.4 TFLOP/s and 4.8 TB/s."""
PEAK, HBM = 989.4e12, 4.8e12
TITAN = Clock(PEAK, HBM, P, grouped_mm=True)
TE = Clock(PEAK, HBM, P)


def _experts(rows: int, groups: int = 16) -> Op:
    return Op("experts up", OpKind.GEMM, m=rows, n=1536, k=2048, batch=groups)


def test_the_table_is_the_measurement() -> None:
    """Each ratio of :data:`GROUPED_MM_OVER_DENSE` from the file: 16 experts at 128, 512 and
    2,048 rows, 8 experts at 4,096; the fifth row (4 experts of 2,048 rows, 1.142) is left out
    of the table, 3 % from the 16-expert figure at the same rows."""
    rows = {
        (r["groups"], r["tokens_per_group"]): r["grouped_mm_s"] / r["dense_same_flops_s"]
        for r in json.loads((DATA / "kernels.json").read_text())["grouped_gemm"]["rows"]
    }
    measured = {t: rows[16, t] for t in (128, 512, 2048)} | {4096: rows[8, 4096]}
    assert dict(GROUPED_MM_OVER_DENSE) == pytest.approx(measured, abs=5e-4)
    assert rows[4, 2048] == pytest.approx(1.142, abs=5e-4)
    host = json.loads((DATA / "kernels.json").read_text())["host"]
    assert host["add_s"] == pytest.approx(HOST_SYNC_S, abs=5e-9)


def test_the_ratio_between_and_outside_the_measured_rows() -> None:
    """256 rows lie half-way in log2 between 128 (2.195) and 512 (1.186):
    2.195 + (1.186 − 2.195)·(8 − 7)/(9 − 7) = 1.6905; outside, the end values, flagged."""
    assert grouped_mm_ratio(256).value == pytest.approx(1.6905, abs=1e-12)
    assert grouped_mm_ratio(1024).value == pytest.approx((1.186 + 1.108) / 2, abs=1e-12)
    assert (grouped_mm_ratio(64).value, grouped_mm_ratio(64).clamped) == (2.195, "below")
    assert (grouped_mm_ratio(8192).value, grouped_mm_ratio(8192).clamped) == (1.023, "above")
    assert grouped_mm_ratio(512).clamped is None and grouped_mm_ratio(0).value == 1.0


def test_the_measured_forward_by_hand() -> None:
    """16 experts of 128 rows on the H200 under fsdp2. The dense GEMM of the same FLOPs is
    [2,048 × 2,048] × [2,048 × 1,536]: k₀ = 0.5725·989.4e12/(0.9·4.8e12) = 131.118,
    e(2,048) = 0.5725·2,048/2,179.118 = 0.538052; DeepGEMM's dense 256 × 96 tiles, 8·16 = 128
    of them in one wave of 132 SMs, w = 128/132; 2·2,048·1,536·2,048 = 12,884,901,888 FLOPs at
    989.4e12·e·w, plus 3 µs = 27.960 µs (its bytes, 20,971,520, take 4.9 µs). The grouped
    GEMM: 2.195 × that = 61.373 µs, above its own roofline (the same FLOPs at the dense rate,
    its 16 weights' bytes: 115,343,360 B, 26.7 µs). Transformer Engine's rule gave 38.7 µs
    (1.384×)."""
    k0 = 0.5725 * PEAK / (0.9 * HBM)
    e = 0.5725 * 2048 / (2048 + k0)
    dense = 2 * 2048 * 1536 * 2048 / (PEAK * e * 128 / 132) + 3e-6
    assert (round(k0, 3), round(e, 6), round(dense * 1e6, 3)) == (131.118, 0.538052, 27.96)
    assert op_seconds(_experts(128), TITAN) == pytest.approx(2.195 * dense, rel=1e-12)
    assert round(op_seconds(_experts(128), TITAN) * 1e6, 3) == 61.373
    own = 2 * (2048 * 2048 + 2048 * 1536 + 2048 * 1536 + 15 * 2048 * 1536) / (0.9 * HBM)
    assert own + 3e-6 < 2.195 * dense
    assert round(op_seconds(_experts(128), TE) / dense, 3) == 1.384  # the rule before, Megatron's


@pytest.mark.parametrize(("rows", "ratio"), [(2048, 1.108), (512, 1.186), (128, 2.195)])
def test_the_model_reproduces_the_measured_ratios(rows: int, ratio: float) -> None:
    """At each measured point of the 16-expert sweep, the model's grouped forward over its own
    dense GEMM of the same FLOPs (one ``[16·rows, 2,048] × [2,048, 1,536]``) is the
    measurement's ratio."""
    dense = op_seconds(Op("dense", OpKind.GEMM, m=16 * rows, n=1536, k=2048), TITAN)
    assert op_seconds(_experts(rows), TITAN) / dense == pytest.approx(ratio, rel=1e-12)


def test_the_backward_takes_the_forwards_ratio() -> None:
    """Not measured: the input gradient (``_grouped_mm_mat1_backward``, offsets on the rows)
    takes 2.195 × the dense [2,048 × 1,536] × [1,536 × 2,048]; the weight gradient
    (``_grouped_mm_mat2_backward``, offsets on the reduction) the same ratio × the dense
    [2,048 × 2,048] × [2,048 × 1,536] of depth 16·128 — but its own bytes are more: 16 weight
    gradients of 2,048 × 1,536 (2 B each) and their FP32 accumulation (8 B), with both
    operands, 2·(2,048·2,048 + 2·2,048·1,536) + 2·15·2,048·1,536 + 8·16·2,048·1,536 =
    517,996,544 B at 0.9·4.8 TB/s = 119.907 µs, plus 3 µs."""
    op = _experts(128)
    dense_dgrad = op_seconds(Op("d", OpKind.GEMM, m=2048, n=2048, k=1536), TITAN)
    assert dgrad_seconds(op, TITAN) == pytest.approx(2.195 * dense_dgrad, rel=1e-12)
    moved = 2 * (2048 * 2048 + 2 * 2048 * 1536) + 2 * 15 * 2048 * 1536 + 8 * 16 * 2048 * 1536
    assert moved == 517_996_544
    assert wgrad_seconds(op, TITAN) == pytest.approx(moved / (0.9 * HBM) + 3e-6, rel=1e-12)
    dense_wgrad = op_seconds(Op("w", OpKind.GEMM, m=2048, n=1536, k=2048), TITAN)
    assert 2.195 * dense_wgrad < wgrad_seconds(op, TITAN)


def test_one_kernel_no_stream_gaps() -> None:
    """On a part with no sourced SM count (no waves) the grouped pass of 64 experts of 128
    rows is one kernel: 2.195 × (the dense GEMM's FLOP time + one 3 µs t_kernel), no launch gap
    per expert or per stream."""
    bare = P.with_(part="")
    op = _experts(128, 64)
    t = grouped_mm_seconds((128, 1536, 2048), 64, 0, PEAK, HBM, bare)
    flops = 2 * 64 * 128 * 1536 * 2048
    e = 0.5725 * 2048 / (2048 + 0.5725 * PEAK / (0.9 * HBM))
    assert t == pytest.approx(2.195 * (flops / (PEAK * e) + 3e-6), rel=1e-12)
    assert op_seconds(op, Clock(PEAK, HBM, bare, grouped_mm=True)) == t


def test_dispatch_metadata_and_the_wait_by_hand() -> None:
    """torchtitan's ``AllToAllTokenDispatcher`` under the alltoall dispatcher: one all-to-all of
    the counts and one host wait per MoE layer forward; none under DeepEP, none for Megatron.
    128 experts over 8 NVLink H200s: each rank sends 7 × 16 int64 = 896 B; NCCL's base 8.4 µs +
    one hop 3.4 µs + 896 B / (0.8 · 450 GB/s) = 11.80249 µs; the wait 6.84 µs."""
    passes = expert_passes_of("fsdp2", "bf16")
    assert passes == ExpertPasses(torchtitan=True)
    assert dispatch_metadata(passes, "alltoall") == DispatchMetadata(
        counts_all_to_alls=1, host_syncs=1
    )
    assert dispatch_metadata(passes, "deepep") == DispatchMetadata()
    assert dispatch_metadata(expert_passes_of("megatron", "bf16"), "alltoall").host_syncs == 0
    assert counts_sent_bytes(128, 8) == 896
    link = LinkTime(450e9, True)
    a2a = collective_seconds(Collective.ALL_TO_ALL, 8, 896.0, link, P)
    assert a2a == pytest.approx(8.4e-6 + 3.4e-6 + 896 / (0.8 * 450e9), rel=1e-12)
    t = torchtitan_dispatch_seconds(DispatchMetadata(counts_all_to_alls=1, host_syncs=1), 128, 8,
                                    link, P)  # fmt: skip
    assert round(t * 1e6, 5) == round(11.80249 + 6.84, 5)


def _qwen3(framework: str) -> tuple[float, float, float]:
    """(step, compute, ep seconds) of Qwen3-30B-A3B on 8 H200s, dp 8 × ep 8, micro-batch 1,
    4,096 tokens, 64 sequences (8 micro-batches)."""
    case = Case.of("qwen3-30b-a3b", "H200", seq_len=4096, global_batch_size=64)
    est = case.evaluate(Layout.of(framework=framework, dp=8, ep=8, micro_batch_size=1))
    ep = next(r for r in est.traffic if r.traffic.axis == "ep")
    assert est.step_s is not None and est.compute_s is not None and ep.seconds is not None
    return est.step_s, est.compute_s, ep.seconds


def test_megatron_is_unchanged() -> None:
    """The Megatron-Core MoE figure before this rule, to the last bit: 2.5131995938682232 s —
    2.5137275987031598 s since NCCL's SM charge follows the algorithm NCCL runs
    (model.nccl_channels): the dp group's distributed-optimizer reduce-scatter and all-gather in
    the H200 node run as rings on its 24 channels, φ = 1 − 1/1.350 = 0.259259, not NVLS's
    0.238965, and of the 0.026017 s of them, once a step beside the last backward, φ waits:
    + 0.020294 × 0.026017 = 0.000528 s — 2.51502731600822 s since the optimizer step zeroes the
    distributed optimizer's whole FP32 gradient buffer, not the shard
    (model.terms.optimizer_time.whole_buffer_zeroing_bytes) — 2.52606302298075 s with
    Megatron-Core's own optimizer-step passes (model.step_passes: the clip's scaling of every
    FP32 gradient and the master's second read, 12 B an element stepped): the GPU steps
    1,541,093,376 / 8 dense and 3,623,878,656 expert elements (expert dp 1), 3,816,515,328, at
    the H200's 4.15 TB/s triad, 11.036 ms."""
    assert _qwen3("megatron")[0] == 2.52606302298075
    assert 2.52606302298075 - 2.51502731600822 == pytest.approx(
        12 * (1_541_093_376 / 8 + 3_623_878_656) / 4.15e12, abs=1e-9
    )
    assert 2.5137275987031598 - 2.5131995938682232 == pytest.approx(
        (1 / 1.314 - 1 / 1.350) * 0.0260174, abs=1e-9
    )


def test_the_fsdp2_step_by_hand() -> None:
    """Qwen3-30B-A3B under fsdp2 (before this rule: step 2.7688682734289354 s, compute
    2.1494042467830887 s, ep 0.5192043178666667 s). The ep time grows by 48 MoE layers × 8
    micro-batches × (11.80249 + 6.84) µs = 7.15872 ms; the compute by the experts' grouped GEMMs
    at 4,096·8/128 = 256 rows per expert (ratio 1.6905). The step 2.794422 s, 2.799968 s since
    the dp group's per-micro-batch gathers and reduce-scatters (FSDP2 in the H200 node, 0.273317
    s a step, each waiting φ of its seconds) are charged the ring's 24 blocks, φ 0.259259, not
    NVLS's 0.238965: + 0.020294 × 0.273317 = 0.005547 s; 2.804428 s since each pass's
    all-gathers run in calls of their own (a unit's forward gather and its backward gather, two
    calls at half the message where one carried both, read lower on the H200's published
    bus-bandwidth curve; model.dp_exposure.dp_seconds): dp 0.273317 → 0.290519 s, + 0.259259 ×
    0.017202 = 0.004460 s; 2.806537 s since each micro-batch's last reduce-scatter bucket, run
    after the backward's computation, waits whole instead of φ of it
    (model.dp_exposure.microbatch_exposed_seconds): + 8 × (1 − 0.259259) × 0.3559 ms =
    0.002109 s; 2.812055 s with FSDP2's own optimizer-step passes (model.step_passes: the
    clip's scaling of every FP32 gradient, 8 B, less the BF16 copy torchtitan never writes, 2 B)
    over the same 3,816,515,328 elements at 4.15 TB/s: + 0.005518 s; 2.951447 s with FSDP2's
    copies around its collectives on the compute stream (model.fsdp2_copies: two all-gather
    copy-outs of 4 B and the FP32 reduce-scatter copy-in of 6 B, every micro-batch) over the
    1,541,093,376 dense and 3,623,878,656 expert elements a GPU holds unsharded, 8 micro-batches
    at 4.15 TB/s: + 8 × 14 × 5,164,972,032 / 4.15e12 = 0.139392 s."""
    step, compute, ep = _qwen3("fsdp2")
    assert ep - 0.5192043178666667 == pytest.approx(48 * 8 * 18.64249e-6, abs=1e-9)
    assert round(compute, 6) == 2.167799 and round(step, 6) == 2.951447
    ring = (1 / 1.314 - 1 / 1.350) * 0.273317
    passes = (1 - 1 / 1.350) * (0.290519 - 0.273317)
    bucket = 8 * (1 / 1.350) * 0.3559e-3
    own = 6 * (1_541_093_376 / 8 + 3_623_878_656) / 4.15e12
    copies = 8 * 14 * (1_541_093_376 + 3_623_878_656) / 4.15e12
    total = 0.025553 + ring + passes + bucket + own + copies
    assert math.isclose(step - 2.7688682734289354, total, abs_tol=2e-6)


def test_the_search_reads_the_same_terms() -> None:
    """The search's tables (float64 arrays over candidates) against the evaluator on every
    legal fsdp2 candidate of Qwen3-30B-A3B on 8 H200s at ep 2 and 8: time to the nanosecond
    (:data:`optimizer.search.NS_TOLERANCE`), so the grouped ``_grouped_mm`` rate and the
    dispatcher's wait reach the search as they reach evaluate."""
    case = Case.of("qwen3-30b-a3b", "H200", seq_len=4096, global_batch_size=64)
    space = SearchSpace(
        num_gpus=8, max_micro_batch_size=1, frameworks=(Framework.FSDP2,), ep=(2, 8)
    )
    assert any(lay.ep > 1 for lay in search_matches_evaluate(case, 8, space))
