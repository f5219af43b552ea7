"""NCCL runs fewer channels on slower NICs, so it holds fewer SMs for longer
(model/nccl_channels.py, model/comm_sms.py): the derivation from NVIDIA/nccl 5067397c, pinned on
an fsdp2 Llama 3 405B layout whose step falls as the NIC slows while its dp traffic hides."""

from __future__ import annotations

import pytest

from trainplan.interface.inputs import build_case
from trainplan.model.nccl_channels import collective_channels
from trainplan.model.nccl_search import nvlink_node
from trainplan.model.op_rates import stream_triad_fraction


def test_slower_nics_run_half_the_channels_and_hold_fewer_sm_seconds() -> None:
    """Llama 3 405B, fsdp2 dp 1024 × tp 4, ZeRO-3, full recompute, b 2, B 2048 on 4096 H100s:
    two dp members a node (rank order tp first, 8 GPUs a node). NVIDIA/nccl 5067397c
    ``src/graph/search.cc``: at 400 Gb/s (50 GB/s, PCIe Gen5 48) each member's NIC carries one
    search channel at ``sm90SpeedArrayInter`` 48 GB/s; ``ncclTopoDupChannels`` doubles them
    (bwIntra 48 ≥ 25, 2 ≤ 4 channels) to 4 at 24, ``ncclTopoPostset`` doubles: 8 channels. At
    200 Gb/s (25 GB/s) the speed is 24, ``ncclTopoDupChannels`` returns at bwIntra < 25: 2,
    doubled once: 4. NCCL's own tuning (``src/graph/tuning.cc``, busBw = nChannels × bwInter)
    puts 4 × 24 = 96 and 2 × 24 = 48 GB/s through the node's two NICs: both counts run the NICs
    at their rate, so the collective's time at the link's rate is NCCL's. The kernel's grid is
    its channels (``src/enqueue.cc``, ``dim3 grid = {nChannels}``), each block held for the
    whole collective: φ 8 blocks 0.15038, 4 blocks 0.07519. NCCL's tuner (model.nccl_tuner) runs
    the calls (3.2 GB reduce-scatters, 1.6 GB all-gathers a rank) as the ring in LL128, 14 +
    511 × 4.0 + 512 × 1.9 = 3,030.8 µs of latency against Simple's 8.4 + 511 × 14 + 512 × 3.4
    = 8,903.2 µs, at min(0.92 × 96, 4 × 36.7) = 88.32 GB/s at 50 and min(0.92 × 48, 2 × 36.7) =
    44.16 GB/s at 25; at 12.5 GB/s the reduce-scatters run Simple (24 GB/s against LL128's
    22.08). The dp traffic hides under the 26.603 s of computation either way, so it costs φ·a
    but its last reduce-scatter (the mean of the 126 calls, one a layer: 405,853,388,800 FP32
    gradients ÷ tp 4 × 4 B × 1023/1024 ÷ 126 = 3.218 GB a rank, 39.47 ms at 50, 75.90 ms at 25),
    which runs after the backward's computation and waits whole
    (model.dp_exposure.microbatch_exposed_seconds): 0.15038 × (10.3275 − 0.0395) + 0.0395 =
    1.5866 s at 50, 0.07519 × (19.5093 − 0.0759) + 0.0759 = 1.5371 s at 25 — 8 × 10.33 = 82.6
    block-seconds against 4 × 19.51 = 78.0 — and the step falls by 0.0495 s with the slower
    NICs (29.9983 → 29.9488 s; 29.9645 → 29.8784 s when the last call was charged φ too).
    Faithful to NCCL's channel rule, kept; at 12.5 GB/s the traffic
    (37.14 s) outlasts the computation and the step rises to 44.322 s. (Each step was 0.2 ms
    shorter, 29.9981, 29.9486 and 44.3218 s, before FSDP2's own optimizer-step passes:
    model.step_passes, +6 B over 405,853,388,800 ÷ 4 ÷ 1024 = 99,085,300 elements a GPU, the
    clip's scaling of every FP32 gradient less the BF16 copy torchtitan never writes, at
    2.97 TB/s.) Each step is 0.4783 s longer with FSDP2's copies around its collectives on the
    compute stream (model.fsdp2_copies: two all-gather copy-outs of 4 B and the FP32
    reduce-scatter copy-in of 6 B an element, one micro-batch) over the 405,853,388,800
    parameters less the 126 · 2 + 1 replicated norms of 16,384 (4,145,152), ÷ tp 4, plus those
    norms: 101,466,456,064 elements a GPU, at 2.97 TB/s."""
    h100 = nvlink_node("H100-SXM", 450e9)
    assert [collective_channels(2, 512, x * 1e9, h100) for x in (50, 25, 12.5)] == [8, 4, 4]
    base = {"model": "llama3-405b", "gpu": "H100-SXM", "framework": "fsdp2", "zero_stage": 3,
            "num_gpus": 4096, "dp": 1024, "tp": 4, "micro_batch_size": 2,
            "global_batch_size": 2048, "recompute": "full"}  # fmt: skip
    steps, dps = {}, {}
    for x in (50, 25, 12.5):
        est = build_case({**base, "scaleout_gbps": x}).evaluate()
        assert est.time_terms is not None
        steps[x] = est.step_s
        dps[x] = next((r.seconds, r.exposed_seconds) for r in est.traffic if r.traffic.axis == "dp")
        phi = dict(est.time_terms.sm_shares)["dp"]
        assert phi == pytest.approx(0.15038 if x == 50 else 0.07519, abs=1e-5)
    for x, phi, rate in ((50, 0.15038232795, 88.32e9), (25, 0.07519116398, 44.16e9)):
        call = 405_853_388_800 / 4 * 4 * 1023 / 1024 / 126  # the last reduce-scatter call
        last = call / rate + 3030.8e-6  # its bytes and LL128's latency, waited whole
        assert dps[x][1] == pytest.approx(phi * (dps[x][0] - last) + last, abs=5e-6)
    assert (dps[50][0], dps[25][0]) == (
        pytest.approx(10.3275, abs=1e-4),
        pytest.approx(19.5093, abs=1e-4),
    )
    elements = (405_853_388_800 - 4_145_152) // 4 + 4_145_152
    assert elements == 101_466_456_064
    copies = 14 * elements / (3.35e12 * stream_triad_fraction("H100-SXM"))  # type: ignore[operator]
    assert copies == pytest.approx(0.4783, abs=1e-4)
    assert steps[50] == pytest.approx(29.9983 + copies, abs=1e-4)
    assert steps[25] == pytest.approx(29.9488 + copies, abs=1e-4)
    assert steps[12.5] == pytest.approx(44.3220 + copies, abs=1e-4)
