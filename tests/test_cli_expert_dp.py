"""The routed experts' data-parallel traffic on the expert data-parallel group's own link
(model/terms/dp_time.py, topology/placement.py ``edp``), as a user runs ``trainplan evaluate``:
its own process, ``--json`` and text. Figures derived by hand here.

Megatron-LM d98e8a64dd ``megatron/core/distributed/distributed_data_parallel.py``
``DistributedDataParallel.__init__`` reduces expert buffers on ``intra_expt_dp_group``, bucketed
apart (``expert_parallel_bucket_groups``) with the one bucket size ``max(4e7, 1e6·dp)``; the
group is ``parallel_state.py``'s expert rank generator's ``get_ranks("dp")``, order etp-ep-edp-pp,
so at tp 1, ep 8 its ranks stride 8: one a node."""

from __future__ import annotations

import json
import math

import pytest

from tests.cli_runs import run_many

QWEN3 = [
    *("evaluate", "--model", "qwen3-30b-a3b", "--gpu", "H100-SXM", "--gpus", "256"),
    *("--dp", "256", "--ep", "8", "--zero", "1", "--micro-batch", "1"),
]
"""The layout ``trainplan search --model qwen3-30b-a3b --gpus 256 --gpu H100-SXM`` answered
before the expert traffic had its own link (1.379 s then)."""

EXPERTS_PER_GPU = 48 * 128 * 3 * 2048 * 768 // 8
"""48 layers × 128 experts × 3·2048·768 (gate, up, down) = 28,991,029,248, over ep 8:
3,623,878,656 on each GPU."""

EXPERT_BYTES = 6 * EXPERTS_PER_GPU * 31 // 32
"""ZeRO-1 (the distributed optimizer): an fp32 reduce-scatter (4 B) and a bf16 all-gather (2 B)
per parameter, each rank sending the ring share (D_e − 1)/D_e = 31/32 of D_e = 256/8 = 32:
21,063,794,688 bytes."""

NIC = 50e9 * 0.96
"""The expert group's bandwidth: one member per 8-GPU node (span 256 = 32 ranks × stride 8, so
8·32 // 256 = 1 ring), one 50 GB/s NIC at the scale-out efficiency 0.96: 48 GB/s."""

BUCKETS = math.ceil(EXPERTS_PER_GPU / max(40_000_000, 1_000_000 * 256))
"""Megatron-Core's buckets over the expert buffer: ⌈3,623,878,656 / 2.56e8⌉ = 15."""

LATENCY = 8.4e-6 + 31 * 14e-6
"""One ring reduce-scatter or all-gather over 32 ranks across nodes: NCCL's base latency
8.4 µs plus 31 steps of 14 µs (model.roofline.collective_latency): 442.4 µs. NCCL's tuner
(model/nccl_tuner.py) keeps Simple: LL128's 14 + 31 × 8.5 µs (one rank a node: the tree's
network hop) = 277.5 µs saves 164.9 µs, but its bytes at min(0.92 × 48, 2 × 36.7) = 44.16 GB/s
cost 936.2 MB (a reduce-scatter's) or 468.1 MB (an all-gather's) × (1/44.16 − 1/48) ns a byte
more: 1.70 or 0.85 ms."""


@pytest.fixture(scope="module")
def runs():
    return run_many({"json": [*QWEN3, "--json"], "text": QWEN3})


def test_expert_row_bytes_link_and_time(runs):
    rows = {r["axis"]: r for r in json.loads(runs["json"].stdout)["traffic"]}
    edp = rows["edp"]
    assert EXPERT_BYTES == 21_063_794_688
    assert edp["bytes_per_step"] == EXPERT_BYTES
    assert (edp["group_size"], edp["link"], edp["bandwidth_bytes_per_s"]) == (32, "scale-out", 50e9)
    # 21,063,794,688 / 48e9 = 0.438829 s on the wire + 2·15 calls × 442.4 µs = 13.272 ms
    assert BUCKETS == 15
    assert edp["seconds"] == pytest.approx(EXPERT_BYTES / NIC + 2 * BUCKETS * LATENCY, rel=1e-12)
    assert edp["seconds"] == pytest.approx(0.452101, abs=1e-6)


def test_dense_row_keeps_eight_nics(runs):
    rows = {r["axis"]: r for r in json.loads(runs["json"].stdout)["traffic"]}
    dp = rows["dp"]
    # the dense parameters, every GPU all of them: 48 layers of attention (q and o 2048·4096,
    # k and v 2048·512), router 2048·128, norms 2·2048 + q/k norms 2·128; the final norm; the
    # untied embedding and output layer 2 · 151,936·2048
    layer = 2 * 2048 * 4096 + 2 * 2048 * 512 + 2048 * 128 + 2 * 2048 + 2 * 128
    dense = 48 * layer + 2048 + 2 * 151_936 * 2048
    assert dense == 1_541_093_376
    assert dp["bytes_per_step"] == 6 * dense * 255 // 256
    # 8 members a node, 8 NICs under the H100's NVLink: the ring at the slower of the two,
    # min(8 × 50 × 0.96, 450 × 0.8) = min(384, 360) = 360 GB/s (model/nvlink_bound.py
    # ring_busbw: NCCL's 8 channels at 45 GB/s through 18 × 20.6 GB/s of NVLink); ⌈P / 2.56e8⌉
    # = 7 buckets, each collective NCCL's ring over 32 nodes, 31 of its 255 steps between nodes
    # (model/nccl_latency.py), in the protocol NCCL's tuner picks (src/graph/tuning.cc
    # ncclTopoTuneModel, src/enqueue.cc topoGetAlgoInfo: the least latency + bytes ÷ bandwidth;
    # model/nccl_tuner.py). Simple: 8.4 µs + 31 × 14 µs + 224 × 3.4 µs = 1.2040 ms (3.5784 ms
    # with all 255 at 14 µs), the bytes at 360 GB/s. LL128: baseLat 14 µs + 31 × 4.0 µs
    # (hwLat[NET][RING]) + 224 × 1.9 µs (hwLat[NVLINK][RING], above getNetOverhead's 1 µs) =
    # 563.6 µs, the bytes at min(0.92 × 360, 8 channels × perChMaxRingLL128Bw 36.7) = 293.6 GB/s
    # (the ring graph's 8 channels, model.nccl_tuner.ring_graph). LL128's 640.4 µs less latency
    # outweighs its slower bytes below 640.4 µs ÷ (1/293.6 − 1/360) ns a byte = 1,019.4 MB sent a
    # rank: each bucket's fp32 reduce-scatter (4/6 of the bytes ÷ 7: 877.2 MB) and its bf16
    # all-gather (2/6 ÷ 7: 438.6 MB) both run in LL128. (LL's bytes at min(llMaxBw 20.4,
    # 0.5 × 360) GB/s are slower still.) With the ring at the NICs' 384 the crossover was
    # 798.7 MB and the reduce-scatters ran in Simple: 38.820 ms, now 39.261 ms.
    assert math.ceil(dense / 2.56e8) == 7
    reduce, gather = dp["bytes_per_step"] * 4 / 6, dp["bytes_per_step"] * 2 / 6
    simple, ll128 = 8.4e-6 + 31 * 14e-6 + 224 * 3.4e-6, 14e-6 + 31 * 4.0e-6 + 224 * 1.9e-6
    crossover = (simple - ll128) / (1 / 293.6e9 - 1 / 360e9)
    assert crossover == pytest.approx(1_019.39e6, rel=1e-5)
    assert crossover > reduce / 7 > gather / 7
    want = (reduce + gather) / (8 * 36.7e9) + 14 * ll128
    assert (dp["group_size"], dp["link"]) == (256, "scale-out")
    assert dp["seconds"] == pytest.approx(want, rel=1e-12)


def test_step_and_exposure(runs):
    """The exposure rule over both groups' sum, shared by their seconds: both rows hide the same
    share, and the rows' exposed seconds are the step's exposed dp. Before: the 30.27 GB timed
    together on the dense group's 8 NICs, 0.229 s, 54.8 ms exposed, step 1.379 s. The step
    1.5197 → 1.4864 s when the dense group's ring latency counted only its steps between nodes
    at the network's 14 µs (above); 1.4864 → 1.4844 s when NCCL's tuner runs the dense group's
    all-gathers in LL128 (above: 40.842 → 38.820 ms of dense-group collectives; the exposed
    comm 428.55 → 426.53 ms, the whole 2.02 ms); 1.4844 → 1.4912 s when the optimizer step zeroed
    the distributed optimizer's whole FP32 gradient buffers, dense and expert
    (model.terms.optimizer_time.whole_buffer_zeroing_bytes); 1.4912 → 1.4917 s with Megatron-Core's
    own optimizer-step passes (model.step_passes: the clip's scaling and the master's second read,
    12 B more an element stepped); 1.4917 → 1.4921 s when the dense ring ran at the slower of its
    NICs and NVLink, 360 GB/s (above: its reduce-scatters in LL128 too, 38.820 → 39.261 ms; the
    exposed comm 426.53 → 426.97 ms, the whole 0.44 ms)."""
    d = json.loads(runs["json"].stdout)
    rows = {r["axis"]: r for r in d["traffic"]}
    assert rows["dp"]["overlap"] == pytest.approx(rows["edp"]["overlap"], rel=1e-12)
    exposed = sum(r["exposed_seconds"] for r in d["traffic"])
    assert exposed == pytest.approx(d["time"]["exposed_comm_s"], rel=1e-12)
    assert d["time"]["step_s"] == pytest.approx(1.4921, abs=1e-4)


def test_text_table_shows_the_expert_group(runs):
    text = runs["text"].stdout
    line = next(x for x in text.splitlines() if x.startswith("edp "))
    assert "(routed experts)" in line and " 32 " in line and "21.06 GB" in line
    assert "scale-out" in line and "452.1 ms" in line
