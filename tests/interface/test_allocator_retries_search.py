"""The search's memory rule: a candidate fits only where its reserved bytes with the
communicators fit the capacity (:func:`model.terms.peak.fit_bytes`), since the caching
allocator's release-and-retry time has no per-operation source and the step time does not charge
it (:func:`model.terms.peak.reserved_over_capacity`). ``--allocator-retries-ok`` (the
``[constraints]`` key ``allocator_retries_ok``) accepts such layouts.

Llama 3 405B on 2,048 H100s under fsdp2 (s 8192, B 2048, the defaults): dp 2048 ZeRO-3, full
recomputation, b 1 is the fastest layout whose allocated peak fits (83.16 GB with the
communicators of the usable 83,210,009,600 B; its two gathered units whole beside the local
shard), but with the all-gather stream's pool (2·2 B·3,187,703,808 elements = 12.75 GB, one
whole layer gathered twice) the GPU would hold 95.92 GB: 12.71 GB over, so the allocator would
free its cached blocks and retry at least once a step. The fastest layout whose reserved bytes
fit is dp 1024 × tp 2, b 2, full recomputation: 56.648 s (reserved 77.46 GB: allocated 71.08 GB
+ a 6.38 GB pool, half a layer per GPU at tp 2; 78.58 GB with 1.12 GB of communicators: the tp
ring in a node, 24 channels × 12 MiB + (32 × 3 + 2) × 2 MiB of set-up = 484 MiB, the dp ring over
256 nodes at 4 ranks a node, 16 × 12 + (16 × 3 + 2) × 2 = 292 MiB, and the world ring of
torchtitan's barrier after the first step, 292 MiB: 1,068 MiB; was 0.81 GB, two rings of 32
channels and no set-up), 1.04 % slower than the 56.064 s retry layout.

Both step times moved with NCCL's SM charge (``nccl_sm_charge``, on by default); neither layout did.
Each runs one micro-batch (m 1) and hides its ZeRO-3 gathers and reduce-scatters under that
micro-batch's computation, where only the last unit's share waited; charged, the computation runs on
1 − φ of the SMs while they run, φ = 1 − 1/1.314 = 0.238965 (model.comm_sms.collective_sm_share),
and φ × c waits (model.step_time.dp_exposed_seconds). The clean fit: c = 12.058369 s, 0.095701 →
2.881528 s exposed; compute 52.863186 + tp 1.204928 + dp 2.881528 + optimizer 0.002536 = 56.952 s
(54.166 s uncharged). The retry layout: c = 15.675083 s, 0.124405 → 3.745796 s; 53.168740 + 3.745796
+ 0.002536 = 56.917 s (53.296 s uncharged). The clean fit's margin over the retry layout shrinks
from 1.6 % to 0.06 %: the retry layout's tp 1 sends more dp traffic, which the charge prices.

Then each pass's gathers ran in calls of their own (126 units: 126 reduce-scatters and 2 × 126
all-gathers a micro-batch, 378 calls where 252 were counted) and NCCL's ring latency counted only
the steps between nodes at the network's 14 µs (model/nccl_latency.py): the clean fit's dp ring
over 256 nodes at 4 a node, 8.4 + 255 × 14 + 768 × 3.4 = 6,189.6 µs a call where 1,023 × 14 + 8.4
= 14,330.4 were charged: c = 12.058369 − 252 × 14.3304 ms + 378 × 6.1896 ms = 10.786777 s, φ × c
= 2.577662 s, 54.068135 (compute and tp) + 2.577662 + 0.002536 = 56.648 s; the retry layout's over
256 nodes at 8 a node, 8.4 + 255 × 14 + 1,792 × 3.4 = 9,671.2 µs where 28,666.4 were: c =
15.675083 − 252 × 28.6664 ms + 378 × 9.6712 ms = 12.106864 s, 2.893117 s, 56.064 s. The retry
layout is now 1.04 % faster; the search still answers the clean fit unless retries are accepted.

Then NCCL's tuner picked each call's protocol (model/nccl_tuner.py: ``ncclTopoTuneModel``,
``topoGetAlgoInfo``). The clean fit's c less its latency, 10.786777 − 378 × 6.1896 ms =
8.447108 s at 192 GB/s, is half its 126 reduce-scatters' bytes and half its 252 all-gathers':
6,435,891,884 and 3,217,945,942 B a call. In LL128 (14 + 255 × 4.0 + 768 × 1.9 = 2,493.2 µs,
the bytes at min(0.92 × 192, 8 channels × 36.7) = 176.64 GB/s) they take 38,928.3 and
20,710.7 µs against Simple's 39,709.9 and 22,949.7: both LL128, c = 10.124069 s, φ × c =
2.419298 s, 56.490 s. The retry layout's, 12.106864 − 378 × 9.6712 ms = 8.451150 s at 384 GB/s,
12,877,943,435 and 6,438,971,717 B a call; LL128 (14 + 255 × 4.0 + 1,792 × 1.9 = 4,438.8 µs, the
bytes at min(0.92 × 384, 8 × 36.7) = 293.6 GB/s) 48,301.0 and 26,369.9 µs against 43,207.5 and
26,439.4: the reduce-scatters stay Simple, the all-gathers LL128, c = 12.089362 s, 2.888934 s,
56.060 s. The retry layout is 0.77 % faster; the layouts and the answers are as before.

Then the last reduce-scatter call of the micro-batch, which runs after the backward's computation
and waits whole (model.dp_exposure.microbatch_exposed_seconds), was no longer charged φ like the
rest: the clean fit's 38,928.3 µs call, φ × (10.124069 − 0.038928) + 0.038928 = 2.448931 s,
56.520 s; the retry layout's 43,207.5 µs one (Simple), φ × (12.089362 − 0.043208) + 0.043208 =
2.921818 s, 56.093 s. The retry layout is 0.76 % faster; the answers are as before.

Then FSDP2's copies around its collectives on the compute stream were charged
(model.fsdp2_copies: 14 B an element a micro-batch, two all-gather copy-outs and the FP32
reduce-scatter copy-in, over the elements a GPU holds unsharded): the clean fit's 202.9e9 at
tp 2, + 0.957 s, 57.477 s; the retry layout's 405.9e9 at tp 1, + 1.913 s, 58.007 s. The clean
fit is now the faster, so a search that accepts retries answers it too; the retry layout is
what it answers with ``--tp 1 --micro-batch 1`` besides.

Then a ring across nodes moved at the slower of its NICs and its NVLink (model/nvlink_bound.py
``ring_busbw``): the clean fit's (4 ranks a node, 4 × 50 × 0.96 = 192 GB/s, under NVLink's 360)
unmoved; the retry layout's (8 a node) at min(384, 450 × 0.8) = 360 GB/s, its reduce-scatters
still Simple (LL128's crossover 8.329 GB a call), + 0.069 s exposed, 58.076 s.

Each search is its own process (``python -m trainplan``), at pp 1 and cp 1, where both answers are.
"""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many
from trainplan.model.op_rates import stream_triad_fraction

# pp 1, cp 1: both answers are there, and the other shapes' tables take ten times longer
ARGS = ("search", "--model", "llama3-405b", "--gpus", "2048", "--framework", "fsdp2", "--pp", "1",
        "--cp", "1", "--json")  # fmt: skip
CAPACITY = 83_210_009_600  # H100-SXM: 81,559 MiB as the driver reports it, less the reserve


def _ring_bytes(c: float, latency: float, busbw: float) -> tuple[float, float]:
    """A rank's bytes in one reduce-scatter and in one all-gather of the dp ring: ``c`` less
    its 378 calls' Simple latency is half the 126 reduce-scatters' bytes at ``busbw`` and half
    the 252 all-gathers'."""
    half = (c - 378 * latency) * busbw / 2
    return half / 126, half / 252


def test_405b_fsdp2_search_answers_the_clean_fit_unless_retries_are_accepted():
    runs = run_many(
        {
            "rule": ARGS,
            "retries": (*ARGS, "--allocator-retries-ok", "--tp", "1", "--micro-batch", "1"),
            "any": (*ARGS, "--allocator-retries-ok"),
            "none": (*ARGS, "--tp", "1", "--micro-batch", "1"),
            "megatron": ("search", "--model", "llama3-8b", "--gpus", "8", "--allocator-retries-ok"),
        }
    )
    for name in ("rule", "retries", "any"):
        assert runs[name].returncode == 0, runs[name].stderr[-2000:]
    clean, retried = json.loads(runs["rule"].stdout), json.loads(runs["retries"].stdout)

    lay = clean["layout"]
    assert (lay["dp"], lay["tp"], lay["pp"], lay["cp"]) == (1024, 2, 1, 1)
    assert (lay["zero_stage"], lay["recompute"], lay["micro_batch_size"]) == (3, "full", 2)
    phi = 1 - 1 / 1.314
    c = 12.058369 - 252 * 14330.4e-6 + 378 * 6189.6e-6
    assert round(c, 6) == 10.786777 and round(phi * c, 6) == 2.577662
    assert round(54.068135 + 2.577662 + 0.002536, 3) == 56.648  # before NCCL's tuner
    (rs, ag), simple = _ring_bytes(c, 6189.6e-6, 192e9), 6189.6e-6
    ll128 = 14e-6 + 255 * 4e-6 + 768 * 1.9e-6  # the bytes at 176.64 GB/s
    c -= 126 * (simple + rs / 192e9 - ll128 - rs / 176.64e9)
    c -= 252 * (simple + ag / 192e9 - ll128 - ag / 176.64e9)
    assert round(c, 6) == 10.124069 and round(phi * c, 6) == 2.419298
    assert round(54.068135 + 2.419298 + 0.002536, 3) == 56.490
    last = ll128 + rs / 176.64e9  # the last reduce-scatter call, after the backward: whole
    assert round(last * 1e6, 1) == 38928.3
    exposed = phi * (c - last) + last
    assert round(54.068135 + exposed + 0.002536, 3) == 56.520
    # FSDP2's copies around its collectives on the compute stream (model.fsdp2_copies): two
    # all-gather copy-outs of 4 B and the FP32 reduce-scatter copy-in of 6 B an element, one
    # micro-batch, over the 405,853,388,800 parameters less the 253 replicated norms of 16,384,
    # ÷ tp 2, plus the norms: 202,928,766,976 elements a GPU at 3.35 TB/s · 0.887
    elements = (405_853_388_800 - 253 * 16_384) // 2 + 253 * 16_384
    triad = 3.35e12 * stream_triad_fraction("H100-SXM")  # type: ignore[operator]
    copies = 14 * elements / triad
    assert round(copies, 4) == 0.9566
    assert round(54.068135 + exposed + 0.002536 + copies, 2) == 57.48
    assert round(clean["time"]["step_s"], 3) == 57.477
    m = clean["memory"]
    assert m["allocator_retries"] is False and m["reserved_over_bytes"] == 0
    assert m["reserved_bytes"] + m["communicator_bytes"] <= CAPACITY
    assert round(m["reserved_bytes"] / 1e9, 2) == 77.46  # what max_memory_reserved reads
    # the tp 2 ring in a node (484), the FSDP ring over 256 nodes at 4 a node (16 channels,
    # 292), the world ring (292) and torchtitan's "batch" and "loss" groups (dp 1024 each, cp
    # 1), placed as the FSDP ring, 2 × 292 (model/terms/comm_groups.py data_rings): 78.58 GB
    # with the first three, 2 × 306,184,192 B more with the last two; NVLink SHARP
    # (model/terms/nvls_memory.py): the tp 2 ring 2 MiB of credits (NCCL's tuner runs a 2-GPU
    # all-reduce of an H100 node as a ring, model/nccl_search.py: no buffers; 64 MiB more were
    # counted before), the four rings across nodes with ≥ 2 ranks a node 2 MiB each: 10 MiB
    nvls = 2 + 4 * 2
    assert m["communicator_bytes"] == (484 + 292 + 292 + 2 * 292 + nvls) * 2**20
    # 79.27 before; 79.20 before the next unit's copy-in buffer in the pool, 2 B × (3,187,671,040
    # / 2 + 32,768) / 1,024 = 3,113,024 B (model.terms.peak.stream_pool_term)
    assert round((m["reserved_bytes"] + m["communicator_bytes"]) / 1e9, 2) == 79.21
    assert any(
        a.startswith("search memory rule: a layout fits only where") for a in clean["assumptions"]
    )

    lay = retried["layout"]
    assert (lay["dp"], lay["tp"], lay["micro_batch_size"], lay["recompute"]) == (2048, 1, 1, "full")
    c = 15.675083 - 252 * 28666.4e-6 + 378 * 9671.2e-6
    assert round(c, 6) == 12.106864 and round(phi * c, 6) == 2.893117
    assert round(53.168740 + 2.893117 + 0.002536, 3) == 56.064  # before NCCL's tuner
    rs, ag = _ring_bytes(c, 9671.2e-6, 384e9)
    ll128 = 14e-6 + 255 * 4e-6 + 1792 * 1.9e-6  # the bytes at 293.6 GB/s
    c -= 252 * (9671.2e-6 + ag / 384e9 - ll128 - ag / 293.6e9)
    assert round(c, 6) == 12.089362 and round(phi * c, 6) == 2.888934
    assert round(53.168740 + 2.888934 + 0.002536, 3) == 56.060
    last = 9671.2e-6 + rs / 384e9  # its reduce-scatters run Simple
    assert round(last * 1e6, 1) == 43207.5
    exposed = phi * (c - last) + last
    assert round(53.168740 + exposed + 0.002536, 3) == 56.093
    assert round(56.093 + 14 * 405_853_388_800 / triad, 2) == 58.01  # with FSDP2's copies
    # NCCL's ring across nodes moves at the slower of its NICs and its NVLink
    # (model/nvlink_bound.py ring_busbw): dp 2048 at 8 ranks a node, min(8 × 50 × 0.96,
    # 450 × 0.8) = min(384, 360) = 360 GB/s, not the NICs' 384. LL128's crossover moves to
    # (9,671.2 − 4,438.8) µs ÷ (1/293.6 − 1/360) ns a byte = 8.329 GB: the reduce-scatters
    # (12.878 GB a call) stay Simple, now at 360; the all-gathers (6.439 GB) LL128 as before.
    # 126 × 12.878 GB × (1/360 − 1/384) = 0.2817 s more, φ of it but the last call's whole
    # share: 58.007 → 58.076 s.
    ring = 1 / 360e9 - 1 / 384e9
    assert round((9671.2e-6 - ll128) / (1 / 293.6e9 - 1 / 360e9) / 1e9, 3) == 8.329
    assert round(rs / 1e9, 3) == 12.878 and round(ag / 1e9, 3) == 6.439
    assert round(126 * rs * ring, 4) == 0.2817
    c, last = c + 126 * rs * ring, last + rs * ring
    exposed = phi * (c - last) + last
    assert round(53.168740 + exposed + 0.002536 + 14 * 405_853_388_800 / triad, 2) == 58.08
    assert round(retried["time"]["step_s"], 3) == 58.076
    assert json.loads(runs["any"].stdout)["layout"] == clean["layout"]  # now the faster
    m = retried["memory"]
    assert m["allocator_retries"] is True and m["fits"] is True
    # the communicators with their set-up: the world ring of torchtitan's barrier after step 1
    # over 256 nodes at 8 a node (16 channels), 192 + 100 = 292 MiB; the FSDP group of dp 2048,
    # and "batch" and "loss", are every GPU, so PyTorch's DeviceMesh hands them the default
    # group (model/terms/comm_groups.py own_group): 92 MiB less than the one dp ring of 32
    # channels without set-up counted before (12,495,946,368 B over then; 2 × 292 MiB, with a
    # dp ring of its own beside the world ring, until the default group was shared); and the
    # world ring's 2 MiB of NVLS credits (8 ranks a node); and in the side pool the next unit's
    # copy-in buffer, 2 B × 3,187,703,808 / 2,048 = 3,112,992 B (model.terms.peak.stream_pool_term)
    buffer = 2 * 3_187_703_808 // 2048
    assert buffer == 3_112_992
    assert m["reserved_over_bytes"] == 12_495_946_368 + (292 - 384 + 2) * 2**20 + buffer
    assert any("allocator_retries_ok" in a for a in retried["assumptions"])

    # only the retry layout left (tp 1, b 1): infeasible, and the message names the rule
    none = runs["none"]
    assert none.returncode == 1, none.stderr[-2000:]
    lines = json.loads(none.stdout)["explanation"]
    assert lines[0].startswith("memory: no layout's reserved bytes fit 83.21 GB per GPU; ")
    # its allocated peak 82,552,487,552 B and the world ring alone, 306,184,192 B + 2 MiB of NVLS
    # credits, 82,860,768,896 B (83.16 GB
    # with the FSDP group's ring of its own beside it, before it shared the default group's)
    assert "the least 82.86 GB: dp 2048, tp 1" in lines[0]
    assert lines[1].startswith("search memory rule: a layout fits only where its reserved bytes")

    # only fsdp2 reserves beyond the allocated peak: elsewhere the key changes nothing, refused
    assert refusal(runs["megatron"]).startswith(
        "--allocator-retries-ok: true changes nothing without fsdp2 or deepspeed among the "
        "frameworks searched"
    )
