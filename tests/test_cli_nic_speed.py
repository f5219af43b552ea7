"""A faster NIC never slows the data-parallel ring, as a user runs ``trainplan evaluate`` (each
call its own process): Llama 3 8B on 16 H100s (two 8-GPU nodes), dp 16, with
``--set scaleout_gbps=`` 50, 100, 449, 450 and 451, and on 16 H800s at 199, 200 and 201.
Figures derived by hand here.

The dp row: Megatron-Core's distributed optimizer (ZeRO-1), an fp32 reduce-scatter (4 B) and a
bf16 all-gather (2 B) per parameter, each rank sending 15/16 of it:
6 × 8,030,261,248 × 15/16 = 45,170,219,520 B, in ⌈8,030,261,248 / max(4e7, 1e6 × 16)⌉ = 201
buckets (Megatron-LM ``distributed_data_parallel.py`` ``DistributedDataParallel.__init__``'s
bucket size), so 402 calls. Each a ring over 16 ranks on 2 nodes: 1 of its 15 steps between
nodes (model/nccl_latency.py), 8.4 + 14 + 14 × 3.4 = 70.0 µs in Simple; LL128's 14 + 4.0 + 14 ×
1.9 = 44.6 µs saves 25.4 µs but its bytes at 293.6 GB/s (8 channels × 36.7) cost more from
25.4 µs ÷ (1/293.6 − 1/360) ns = 40.4 MB a call, and the smallest call (the all-gather's 2/6 ÷
201 = 74.9 MB) is past it: every call Simple.

The ring's bus bandwidth (model/nvlink_bound.py ``ring_busbw``): the slower of the NICs,
8 × NIC capped at NVLink (model/step_time.py ``rings_bandwidth``) × 0.96, and NVLink × 0.8
(NCCL's graph: 8 channels at 45 GB/s through 18 × 20.6 GB/s of an H100's NVLink; 4 at 40
through an H800's 8 × 20.6; NVIDIA/nccl 5067397c ``src/graph/search.cc`` ``ncclTopoCompute``):
H100 min(384, 360) = 360 GB/s at 50 GB/s NICs and min(432, 360) = 360 at 100, 449, 450 and 451;
H800 min(192, 160) = 160 GB/s at 199, 200 and 201. The group is across nodes, so scale-out at
every NIC figure, NVLink's own included (model/step_time.py ``link_time_of``).

H100: 45,170,219,520 / 360e9 + 402 × 70 µs = 0.125473 + 0.028140 = 0.153613 s at each speed.
Before: 145.8 ms at 50 GB/s (the NICs' 384 GB/s) and 148.7 ms at exactly 450 (timed as
NVLink), 153.6 at the others. H800: 45,170,219,520 / 160e9 + 402 × 70 µs = 0.310454 s at each;
before, 334.6 ms at exactly 200."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import run_many

LLAMA = [
    *("evaluate", "--model", "llama3-8b", "--gpus", "16", "--tp", "1", "--dp", "16"),
    *("--global-batch", "64", "--seq-len", "4096", "--json"),
]
BYTES = 6 * 8_030_261_248 * 15 // 16
CALLS = 2 * 201
LATENCY = 8.4e-6 + 14e-6 + 14 * 3.4e-6


@pytest.fixture(scope="module")
def runs():
    h100 = {f"H100-SXM {g}": (*LLAMA, "--gpu", "H100-SXM", "--set", f"scaleout_gbps={g}")
            for g in (50, 100, 449, 450, 451)}  # fmt: skip
    h800 = {f"H800 {g}": (*LLAMA, "--gpu", "H800", "--set", f"scaleout_gbps={g}")
            for g in (199, 200, 201)}  # fmt: skip
    return run_many(h100 | h800)


def _dp(done):
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    row = next(r for r in out["traffic"] if r["axis"] == "dp")
    return row, out["time"]["step_s"]


def test_the_hand_derived_row():
    assert BYTES == 45_170_219_520
    assert -(-8_030_261_248 // max(40_000_000, 1_000_000 * 16)) == 201
    assert LATENCY == pytest.approx(70.0e-6)
    crossover = (LATENCY - (14e-6 + 4.0e-6 + 14 * 1.9e-6)) / (1 / 293.6e9 - 1 / 360e9)
    assert round(crossover / 1e6, 1) == 40.4 < BYTES * 2 / 6 / 201 / 1e6


@pytest.mark.parametrize(
    ("gpu", "speeds", "busbw"), [("H100-SXM", (50, 100, 449, 450, 451), 360e9),
                                 ("H800", (199, 200, 201), 160e9)]
)  # fmt: skip
def test_every_nic_speed_times_the_ring_alike(runs, gpu, speeds, busbw):
    want = BYTES / busbw + CALLS * LATENCY
    rows = [_dp(runs[f"{gpu} {g}"]) for g in speeds]
    for (row, _), g in zip(rows, speeds, strict=True):
        assert (row["link"], row["bandwidth_bytes_per_s"]) == ("scale-out", g * 1e9)
        assert row["bytes_per_step"] == BYTES
        assert row["seconds"] == pytest.approx(want, rel=1e-12)
    assert len({step for _, step in rows}) == 1  # the steps alike too: monotone in the NIC
