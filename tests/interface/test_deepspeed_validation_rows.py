"""DeepSpeed's validation rows as the pipeline engine and the optimizers of their own code ran
them, derived by hand: MT-NLG 530B (microsoft/DeepSpeed 29bee73f0, 2021-10, its fp16 ZeRO
optimizer) and BLOOM 176B (56c522386, 2022-04, ``BF16_Optimizer``): the pipeline messages on
``TrainSchedule``'s critical path (model/deepspeed_pipe.py) and the gradient accumulation inside
each backward (model/deepspeed_accumulate.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from trainplan.interface.fidelity.validation import evaluate_run, validation_runs
from trainplan.model.op_rates import stream_triad_fraction
from trainplan.model.roofline import Collective, RooflineParams, collective_time

A100 = 2.039e12 * stream_triad_fraction("A100-80GB")  # type: ignore[operator]
"""The A100-80GB's datasheet HBM at BabelStream's triad fraction, bytes per second."""

_PARAMS = (
    "gemm_efficiency",
    "hbm_efficiency",
    "scaleup_efficiency",
    "scaleout_efficiency",
    "collective_base_latency_s",
    "scaleup_hop_latency_s",
    "scaleout_hop_latency_s",
    "busbw_curve",
    "busbw_curve_link_gbps",
    "kernel_overhead_s",
    "part",
)
"""The roofline figures the report states, to time a collective as the model did (the part:
NCCL's tuner, model.nccl_tuner, for its generation)."""


def _report(key: str, **extra: object) -> dict[str, Any]:
    run = next(r for r in validation_runs() if r.key == key)
    if extra:
        run = replace(run, params={**run.params, **extra})
    report = evaluate_run(run).report
    assert report is not None
    return dict(report)


def test_bloom_176b_accumulation_by_hand() -> None:
    """BLOOM 176B (h 14,336, tp 4, pp 12, m = 2,048 / (2 · 8) = 128): the busiest stage is the
    last, 5 layers of 12·h²/4 + 7h/4 + 6h = 616,673,792 elements, the tied embedding's copy
    (250,880 / 4 · 14,336 = 899,153,920) and the final LayerNorm (2h): 3,982,551,552. Under the
    DeepSpeed of 2022 the run used (lp gradients freed), m + pp − 1 = 139 backwards of 18 B on
    the critical path at the A100's triad: 139 · 18 · 3,982,551,552 / (2.039 TB/s · 0.834)
    = 5.861 s. Today's code would zero and add too: (139 · 26 − 8) · 3,982,551,552 B = 8.448 s."""
    n = 5 * (12 * 14336**2 // 4 + 7 * 14336 // 4 + 6 * 14336) + 62_720 * 14336 + 2 * 14336
    assert n == 3_982_551_552
    t = _report("bloom-176b/bloom-176b")["time"]
    assert t["grad_accumulation_s"] == pytest.approx(139 * 18 * n / A100)
    assert t["grad_accumulation_s"] == pytest.approx(5.861, abs=1e-3)
    today = _report("bloom-176b/bloom-176b", lp_grads_set_to_none=False)["time"]
    assert today["grad_accumulation_s"] == pytest.approx((139 * 26 - 8) * n / A100)
    assert today["grad_accumulation_s"] == pytest.approx(8.448, abs=1e-3)


def test_mt_nlg_530b_accumulation_by_hand() -> None:
    """MT-NLG 530B (h 20,480, tp 8, pp 35, s 2,048): DeepSpeed's fp16 ZeRO optimizer of 2021
    accumulates the 16-bit ``.grad`` by autograd's add, 6 B from the second backward. The
    busiest stage is the first: 3 layers of 12·h²/8 + 7h/8 + 6h = 629,286,400, the word
    embedding 6,400 · 20,480 and the learned positions 2,048 · 20,480: 2,060,874,240. At dp 8,
    10, 12 (m 240, 192, 160) m + pp − 2 adds: 273, 225, 193 · 6 · 2,060,874,240 B at 1.700 TB/s:
    1.986, 1.637, 1.404 s."""
    n = 3 * (12 * 20480**2 // 8 + 7 * 20480 // 8 + 6 * 20480) + 6400 * 20480 + 2048 * 20480
    assert n == 2_060_874_240
    for key, adds, seconds in (("280", 273, 1.986), ("350", 225, 1.637), ("420", 193, 1.404)):
        t = _report(f"mt-nlg-530b/{key}-nodes")["time"]
        assert t["grad_accumulation_s"] == pytest.approx(adds * 6 * n / A100)
        assert t["grad_accumulation_s"] == pytest.approx(seconds, abs=1e-3)


def test_mt_nlg_pipeline_messages_by_hand() -> None:
    """MT-NLG 530B at 280 nodes (tp 8, pp 35, b 1, s 2,048, h 20,480, m 240): each share
    2,048 · 20,480 · 2 / 8 = 10,485,760 B across nodes (8.4 + 14 µs + the bytes at 0.96 of 25
    GB/s = 459.307 µs), each gather 7 shares over NVLink plus its zeros and clone, 3 ×
    83,886,080 B at 0.9 of 2.039 TB/s + 2 × 3 µs; 4m + 2pp − 8 = 1,022 transfers and 3m + 3pp −
    8 = 817 gathers; the tied embedding's FP16 gradient (6,400 · 20,480 per GPU, 262,144,000 B)
    all-reduced between the first and the last stage once, one rank on each of 2 nodes: NCCL's
    tuner (model.nccl_tuner) runs it as the ring in Simple, (8.4 + 2 × 14) × 1.4 µs (the
    ring's plateau) and the buffer at 0.96 × 25 GB/s, 10,973.63 µs (the tree's 36.4 µs comes
    with min(0.92 × 24, 1 × 23.6) × 0.5 × 0.9 GB/s; the model before paid the tree's latency
    with the ring's bandwidth, 10,959.07 µs)."""
    report = _report("mt-nlg-530b/280-nodes")
    pp_row = next(r for r in report["traffic"] if r["axis"] == "pp")
    p = RooflineParams(**{k: report["time"]["roofline"][k] for k in _PARAMS})
    share = 2048 * 20480 * 2 // 8
    assert share == 10_485_760
    send = collective_time(Collective.SEND_RECV, 2, share, 25e9, False, p)
    assert send == pytest.approx(22.4e-6 + 436.9067e-6, abs=1e-10)
    gather = collective_time(Collective.ALL_GATHER, 8, 7 * share, 300e9, True, p)
    gather += 3 * 8 * share / (0.9 * 2.039e12) + 2 * 3e-6
    tied = collective_time(Collective.ALL_REDUCE, 2, 2 * 6400 * 20480, 25e9, False, p)
    assert tied == pytest.approx((8.4 + 2 * 14) * 1.4e-6 + 262_144_000 / 24e9, rel=1e-12)
    assert pp_row["exposed_seconds"] == pytest.approx(1022 * send + 817 * gather + tied)
