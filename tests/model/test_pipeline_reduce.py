"""FSDP2's gradient reduce-scatter under PyTorch's pipeline schedules (model/pipeline_reduce.py):
``perform_reduce_grad`` runs it after the stage's last backward and ``finalize_backward`` makes
the compute stream wait for it (torch 2.13 ``torch/distributed/pipelining/stage.py``,
``schedules.py``; ``fsdp/_fully_shard/_fsdp_param_group.py``), so the first stage's — the step's
last backward — waits whole in a one-chunk schedule, its last chunk's 1/v in a multi-chunk one;
the weights' all-gather keeps its overlap with the next step's first forward."""

from __future__ import annotations

import pytest

from tests.model._shared import NO_STEP_MECHANISMS
from trainplan.model.op_rates import stream_triad_fraction
from trainplan.model.pipeline_reduce import reduce_waiting_share
from trainplan.model.step_time import dp_exposed_seconds
from trainplan.optimizer.case import Case

PHI_DP = 1 - 1 / 1.177
"""φ of a dp group with 2 GPUs on each node (400 Gb/s NICs): its reduce-scatters and all-gathers
run as rings on 2 search channels at 48 GB/s, duplicated to 4, doubled by ncclTopoPostset: 8
blocks (model.nccl_channels; tests/model/test_nccl_blocks.py), 1 − 1/1.177 on Hopper."""
PHI_TP = 1 - 1 / 1.350
"""φ of a tp group's reduce-scatters and all-gathers in an H100 node: the ring's 24 channels."""


def test_the_share_that_waits():
    """1 for 1F1B and GPipe, 1/v for interleaved (v 8) and ZB-V (v 2), none at pp 1 or under
    another framework."""
    assert reduce_waiting_share("fsdp2", 4, 1) == 1.0
    assert reduce_waiting_share("fsdp2", 16, 8) == 0.125
    assert reduce_waiting_share("fsdp2", 2, 2) == 0.5
    assert reduce_waiting_share("fsdp2", 1, 1) == 0.0
    assert reduce_waiting_share("megatron", 8, 1) == reduce_waiting_share("deepspeed", 8, 1) == 0


def test_megatron_interleaved_waits_for_chunk_zero():
    """Megatron-Core's interleaved schedule with ``align_grad_reduce`` (on by default) launches
    each chunk's reduction after its last backward on pipeline rank 0, whose chunk 0 runs the
    step's last backward: 1/v waits (schedules.py ``backward_step_helper_postprocess``). Its
    one-chunk schedule reduces the first stage's buckets under the last backward: none."""
    assert reduce_waiting_share("megatron", 4, 2) == 0.5
    assert reduce_waiting_share("megatron", 4, 8) == 0.125
    assert reduce_waiting_share("megatron", 4, 1) == 0.0
    assert reduce_waiting_share("megatron", 1, 1) == 0.0


def test_what_waits_beside_what_overlaps_by_hand():
    """Once-per-step traffic of 3 s, 2 s of it a reduction that waits, 1 s of gather under a
    1.5 s window at φ 0.25, tail 0.1: 2 + max(0.25 · 1, 1 − 1.5, 0.1 · 1) = 2.25 s. Not
    overlapped, all 3 s wait; without the waiting part max(0.25 · 3, 3 − 1.5, 0.3) = 1.5 s."""
    none = NO_STEP_MECHANISMS
    assert dp_exposed_seconds(3.0, 0.0, 8, 1.5, True, 0.1, True, 0.25, 2.0, **none) == 2.25
    assert dp_exposed_seconds(3.0, 0.0, 8, 1.5, False, 0.1, True, 0.25, 2.0, **none) == 3.0
    assert dp_exposed_seconds(3.0, 0.0, 8, 1.5, True, 0.1, True, 0.25, **none) == 1.5


LAYOUT = dict(model="llama3-70b", num_gpus=64, device="H100-SXM", framework="fsdp2", dp=4, tp=4,
              pp=4, zero_stage=2, schedule="1f1b", global_batch_size=256, seq_len=8192,
              recompute="selective")  # fmt: skip


def test_llama3_70b_1f1b_waits_for_the_whole_reduce_scatter_by_hand():
    """``trainplan search --model llama3-70b --gpus 64 --framework fsdp2 --pp 2 --pp 4 --pp 8
    --schedule 1f1b --global-batch 256``'s answer: dp 4 × tp 4 × pp 4, ZeRO-2, m 64. Its dp
    group spans 2 nodes (scale-out): each of the 20 blocks of the busiest stage reduce-scatters
    its FP32 gradients once a step and all-gathers its BF16 weights once (FSDP2, one call a
    block), 214.09 ms if nothing overlapped. Its 4 ranks lie 2 on each node, so NCCL's ring
    crosses the network in 1 of its 3 steps (``ncclTopoTuneModel``: ``nInterSteps = nNodes −
    1``): a call costs 8.4 µs + 14 µs + 2 × 3.4 µs = 29.2 µs of latency (50.4 µs with every
    step at 14 µs: 215.0 ms), 40 calls 1.168 ms; the bytes, 214.09 − 1.168 = 212.93 ms, split
    4 : 2: the reduce-scatter 0.584 + 141.95 = 142.5 ms, the all-gather 0.584 + 70.98 = 71.6 ms.

    Before: all of it overlapped, max(φ · 215.0, 215.0 / 20) = 51.4 ms waited (φ 0.239, NVLS's
    count, as charged then). Now the reduce-scatter waits whole after stage 0's last backward
    and the gather keeps its overlap, at φ = 1 − 1/1.177 = 0.15038 (the group's 2 GPUs a node:
    8 ring blocks): 142.5 + max(φ · 71.6 = 10.8, 71.6 / 20 = 3.6) = 153.3 ms (153.8 ms with
    every ring step at 14 µs, 160.2 ms at 0.239); the step 43.177 s (43.178 s, 43.184 s)."""
    est = Case.of(**LAYOUT).evaluate()
    dp = next(r for r in est.traffic if r.traffic.axis == "dp")
    c = dp.seconds
    assert c == pytest.approx(0.21494 - 40 * (50.4e-6 - 29.2e-6), abs=5e-6)  # 0.21494 before
    latency = 20 * (8.4e-6 + 14e-6 + 2 * 3.4e-6)
    reduce_s, gather_s = latency + (c - 2 * latency) * 2 / 3, latency + (c - 2 * latency) / 3
    assert (reduce_s, gather_s) == (
        pytest.approx(0.1425, abs=1e-4),
        pytest.approx(0.0716, abs=1e-4),
    )
    assert dp.exposed_seconds == pytest.approx(reduce_s + PHI_DP * gather_s, abs=5e-5)
    assert dp.exposed_seconds == pytest.approx(0.1533, abs=1e-4)
    # 43.177 s before 1F1B's bubble was the order's own on stages of unequal time
    # (model.pipeline_onef); 43.023 s before FSDP2's own optimizer-step passes (model.step_passes:
    # 6 B more an element stepped, the clip's scaling less the BF16 copy never written, over the
    # busiest stage's quarter, about 1.1e9 elements, at 2.97 TB/s: 2.2 ms); 44.062 s with FSDP2's
    # copies around its collectives on the compute stream (model.fsdp2_copies, ZeRO-2 under a
    # pipeline schedule: the first micro-batch 4 + 6 + 8 B an element, each later one the FP32
    # accumulation's 10 B; m + pp − 1 = 67 backwards) over stage 0's 20 layers of
    # 8192·(8192 + 1024 + 1024 + 8192)/4 + 3·8192·28672/4 + 2·8192 = 213,925,888 elements and
    # its quarter of the embedding, 128,256 · 8,192 / 4: 4,541,186,048, at 3.35 TB/s · 0.887
    stage0 = 20 * 213_925_888 + 128_256 * 8_192 // 4
    copies = (18 + 66 * 10) * stage0 / (3.35e12 * stream_triad_fraction("H100-SXM"))  # type: ignore[operator]
    assert copies == pytest.approx(1.0367, abs=1e-4)
    assert est.time_terms is not None
    assert est.time_terms.grad_accumulation_s == pytest.approx(copies)
    assert est.step_s == pytest.approx(43.025 + copies, abs=1e-3)


def test_interleaved_waits_for_its_last_chunk_only():
    """The same layout interleaved over v = 2 chunks a rank: the last chunk's half of the
    reduce-scatter waits, and so does the first chunk's half of the all-gather, which PyTorch's
    multi-stage runtime issues up front and waits for whole before the first forward
    (model.fsdp2_pipeline.upfront_gather; the other half hides under the first chunk's pp
    forwards); the rest keeps its overlap: c_r / 2 + c_g / 2 + φ · (c − c_r / 2 − c_g / 2), φ
    the dp group's (8 ring blocks). It was c_r / 2 + φ · (c − c_r / 2), the whole gather
    hidden unit by unit under the first forward."""
    est = Case.of(**{**LAYOUT, "schedule": "interleaved", "virtual_stages": 2}).evaluate()
    dp = next(r for r in est.traffic if r.traffic.axis == "dp")
    c = dp.seconds
    latency = 20 * (8.4e-6 + 3 * 14e-6)
    half = (latency + (c - 2 * latency) * 2 / 3) / 2
    first = (latency + (c - 2 * latency) / 3) / 2
    expected = half + first + PHI_DP * (c - half - first)
    assert dp.exposed_seconds == pytest.approx(expected, abs=5e-5)


MEGATRON = dict(model="llama3-70b", num_gpus=2048, device="H100-SXM", framework="megatron",
                dp=128, tp=4, pp=4, zero_stage=1, schedule="interleaved", global_batch_size=512,
                seq_len=8192, recompute="none", micro_batch_size=1)  # fmt: skip


@pytest.mark.parametrize(
    ("v", "exposed_ms", "step_s"),
    # steps 2.94178, 2.54260, 2.39780 s before the whole gradient buffer was zeroed at the step
    # (model.terms.optimizer_time.whole_buffer_zeroing_bytes): 6.06 ms more each; then
    # Megatron-Core's own optimizer-step passes (model.step_passes: 12 B more an element
    # stepped, over 4,541,718,528 / 128 at 2.97 TB/s): 0.14 ms more each
    [(2, 142.86, 2.94799), (4, 96.55, 2.54881), (8, 74.43, 2.40401)],
)
def test_megatron_interleaved_llama3_70b_by_hand(v, exposed_ms, step_s):
    """Llama 3 70B, dp 128 × tp 4 × pp 4 on 2,048 H100s, ZeRO-1 (the distributed optimizer:
    FP32 gradients reduce-scattered, BF16 weights all-gathered once a step). The busiest stage
    holds 20 layers of 855,654,400 / 4 and the embedding's 128,512 × 8,192 / 4 parameters per
    GPU: 4.5416e9, in ⌈4.5416e9 / max(4e7, 1e6 · 128)⌉ = 36 buckets. The 128-rank ring has 2
    ranks on each of 64 nodes (2 NICs, 96 GB/s at 0.96), 63 of its 127 steps across nodes.
    NCCL's tuner (model.nccl_tuner) runs each call, 250 to 500 MB a rank, as the ring in LL128:
    14 + 63 × 4.0 + 64 × 1.9 = 387.6 µs of latency a call and the bytes at min(0.92 × 96,
    4 × 36.7) = 88.32 GB/s (Simple's 8.4 + 63 × 14 + 64 × 3.4 = 1,108.0 µs at 96 GB/s is
    quicker only above 795 MB sent: 720.4 µs ÷ (1/88.32 − 1/96) ns a byte). 36 × 2 calls,
    L = 13.954 ms a collective; the bytes, 281.64 ms at 96 GB/s in Simple (the traffic table's
    361.42 ms then, less 2 × 39.888 ms of its latency), take 281.64 × 96/88.32 = 306.13 ms:
    334.04 ms of dp traffic, split 4 : 2 (FP32 gradients, BF16 weights): the reduce-scatter
    L + 204.09 = 218.04 ms.

    Chunk 0 of rank 0, 218.04 / v, waits whole and the rest keeps its overlap beside the
    computation, which loses φ of its SMs meanwhile — the dp group's 128 ranks lie 2 on each of
    64 nodes (tp 4 inside a node), so its reduce-scatters and all-gathers run as rings on 8
    blocks, φ = 1 − 1/1.177 = 0.15038: 218.04 / v + φ · (218.04 − 218.04 / v) and the
    all-gathers' below — v 2: 109.02 + 16.39 + 17.44 = 142.86 ms, v 4: 54.51 + 24.59 + 17.44 =
    96.55 ms, v 8: 27.25 + 28.69 + 18.49 = 74.43 ms (151.06, 102.70, 79.73 ms in Simple alone;
    168.78, 115.24, 88.47 ms with every ring step at 14 µs; 193.96, 146.00, 122.02 ms at NVLS's
    16 blocks, 0.239, as charged before that).

    The all-gathers, 334.04 − 218.04 = 116.00 ms, Megatron-Core's interleaved schedule launches
    chunk by chunk (model.pipeline_reduce.chunked_param_gathers: chunks 0 and 1 before the first
    forward, chunk k + 1 at chunk k's first forward, pp = 4 micro-batches a chunk at a time):
    116.00 / v a chunk, one micro-batch 513.92 ms (t), a chunk's forward t / (3v). At v 2 and 4
    every window holds its chunk (v 4: 29.00 ms under 42.83, 3 × 42.83 and 4 × 42.83), so each
    waits φ of itself, v × φ × 116.00 / v = 17.44 ms; at v 8 chunk 0's 14.50 ms fit its one
    forward of 21.41 ms, but its first bucket, 116.00 / 36 = 3.222 ms, waits whole (nothing
    runs before it) where φ × 14.50 = 2.181 ms was charged: 3.222 + 7 × 2.181 = 18.49 ms.

    NCCL's SM charge reaches the layers' and the output layer's asynchronous tp 4 collectives
    too (model.step_time.kind_parts): of the busiest stage's 265.14 ms of tp collectives a step
    (m = 512 / 128 = 4 micro-batches) 106.92 ms hid under their GEMMs uncharged (158.22 ms
    waited, as ``nccl_sm_charge=false`` still times them), each shorter than (1 − φ) of its
    GEMM; they are all-gathers and reduce-scatters (sequence parallelism) on the node's 24 ring
    channels, φ = 1 − 1/1.350 = 0.25926, so 0.25926 × 106.92 = 27.72 ms more waits: tp exposed
    158.22 → 185.94 ms at every v. The step pays it on every micro-batch and on the bubble,
    about (pp − 1)/v micro-batches, × (1 + 3/(4v)) — within 1 ms: the bubble is Megatron-Core's
    order run on the chunks as timed (model.pipeline_uneven), the embedding with rank 0's first
    chunk and the output layer with rank 3's last, at v 8 chunks of 2 and 3 layers — and the
    dp row's growth over the uncharged once: 2.942 s, 2.543 s and 2.398 s (2.950, 2.549 and
    2.403 s in Simple alone; the order's bubble
    732.7, 368.3 and 222.5 ms where the closed form (pp − 1)/(v·m) of the busy 2,055.7 ms gives
    770.9, 385.4 and 192.7 ms: at v 2 and 4 every chunk but the two end ones is one rank's
    micro-batch over v, shorter than the slowest rank's the closed form charged). (The
    cross-entropy's all-reduces over the 4 GPUs of tp run as rings, NCCL's tuner: NVLS's 240
    GB/s of bus bandwidth against the ring's 360, model.nccl_search: tp 265.04 → 265.14 ms,
    the steps 0.1 ms longer.)"""
    est = Case.of(**MEGATRON, virtual_stages=v).evaluate()
    dp = next(r for r in est.traffic if r.traffic.axis == "dp")
    c = dp.seconds
    latency = 36 * (14e-6 + 63 * 4.0e-6 + 64 * 1.9e-6)
    simple = 36 * (8.4e-6 + 63 * 14e-6 + 64 * 3.4e-6)
    assert 0.36142 - 2 * simple == pytest.approx(
        0.41026 - 2 * 36 * (8.4e-6 + 127 * 14e-6), abs=1e-5
    )
    assert c - 2 * latency == pytest.approx((0.36142 - 2 * simple) * 96 / 88.32, abs=1e-5)
    assert c == pytest.approx(0.33404, abs=1e-5)
    reduce_s = latency + (c - 2 * latency) * 2 / 3
    assert reduce_s == pytest.approx(0.21804, abs=1e-5)
    waits = reduce_s / v
    gathers = c - reduce_s
    chunk = gathers / v  # a chunk's all-gathers; each chunk's window holds it (docstring)
    chunked = max(PHI_DP * chunk, gathers / 36) + (v - 1) * PHI_DP * chunk
    assert dp.exposed_seconds == pytest.approx(
        waits + PHI_DP * (reduce_s - waits) + chunked, abs=2e-6
    )
    assert dp.exposed_seconds * 1e3 == pytest.approx(exposed_ms, abs=0.01)
    tp = next(r for r in est.traffic if r.traffic.axis == "tp")
    off = Case.of(**MEGATRON, virtual_stages=v, nccl_sm_charge=False).evaluate()
    tp_off = next(r for r in off.traffic if r.traffic.axis == "tp")
    dp_off = next(r for r in off.traffic if r.traffic.axis == "dp")
    assert (tp.seconds, tp_off.exposed_seconds) == (
        pytest.approx(0.26514, abs=1e-5),
        pytest.approx(0.15822, abs=1e-5),
    )
    hidden = tp.seconds - tp_off.exposed_seconds
    assert hidden == pytest.approx(0.10692, abs=1e-5)
    assert tp.exposed_seconds == pytest.approx(tp_off.exposed_seconds + PHI_TP * hidden, abs=1e-9)
    charged = PHI_TP * hidden * (1 + 3 / (4 * v))  # each of the m + (pp − 1)/v passes
    dp_moved = dp.exposed_seconds - dp_off.exposed_seconds
    # the bubble is the order's on the chunks as timed at every v (the end chunks differ), not
    # (pp − 1)/v micro-batches: the charge's share of it within 1 ms
    assert est.step_s == pytest.approx(off.step_s + dp_moved + charged, abs=1e-3)
    assert est.step_s == pytest.approx(step_s, abs=1e-5)


def test_megatron_1f1b_keeps_its_overlap():
    """The same layout under 1F1B: the first stage reduces under its last backward, so only the
    SMs of the collectives wait: φ · c at the dp group's 8 ring blocks."""
    est = Case.of(**{**MEGATRON, "schedule": "1f1b"}).evaluate()
    dp = next(r for r in est.traffic if r.traffic.axis == "dp")
    assert dp.exposed_seconds == pytest.approx(PHI_DP * dp.seconds, abs=1e-6)
