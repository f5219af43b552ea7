"""GB200/GB300 NVL72 jobs placed in Slurm segments as NVIDIA's benchmark launcher places them
(model.segments; Megatron-Bridge ``scripts/performance/utils/executors.py`` ``slurm_executor``):
the whole job in one rack up to 18 nodes, else segments of the largest divisor of its nodes at
most 18, each segment in one rack's NVLink domain (the same 16 nodes, 64 GPUs, that NVIDIA's
developer blog on Slurm topology-aware scheduling advises for jobs of 128+ GPUs). Every figure
derived by hand below or printed by the planner under an explicit ``nvlink_domain`` that states
the same placement."""

from __future__ import annotations

import pytest

from trainplan.api import evaluate
from trainplan.model.errors import InputError
from trainplan.model.rank_groups import in_one_domain
from trainplan.model.segments import advised_segment_gpus, placed_for
from trainplan.topology.accelerators import get_accelerator

DSV3 = dict(
    model="deepseek-v3", gpu="GB200", num_gpus=4096, dp=1024, pp=4, ep=64, zero_stage=1,
    recompute="none", micro_batch_size=1, schedule="1f1b",
)  # fmt: skip


def _ep(est):
    return next(r for r in est.traffic if r.traffic.axis == "ep")


def test_the_advice_by_job_size():
    """4 GPUs a GB200 compute tray, 18 trays a rack: 4,096 GPUs are 1,024 nodes, the largest
    divisor of 1,024 at most 18 is 16 → 64 GPUs; 128 GPUs (32 nodes) → 16 = 64; 64 GPUs (16
    nodes ≤ 18) → the whole job, 64; 16 GPUs → 16; 72 GPUs (18 nodes) → one rack, 72; 144 GPUs
    (36 nodes) → 18 = 72; 136 GPUs (34 nodes: 17 divides 34) → 68."""
    got = [advised_segment_gpus(g, 4, 72) for g in (4096, 128, 64, 16, 72, 144, 136)]
    assert got == [64, 64, 64, 16, 72, 72, 68]


def test_deepseek_v3_ep64_on_4096_gb200_rides_nvlink_in_segments_of_64():
    """ep 64 after tp 1, cp 1: groups of 64 consecutive ranks. Segments of 64 hold whole groups
    (in_one_domain(64, 4096, 64)); 72-GPU racks filled edge to edge do not (72 % 64 ≠ 0: ranks
    64–127 straddle ranks 71|72). The ep time is the one the validation rows' explicit
    ``nvlink_domain = 64`` gives: 443.93 GB at NVLink's 900 GB/s × 0.8 is 616.6 ms plus NCCL's
    latency per all-to-all, 644.3 ms (8.271 s on the 50 GB/s NIC); step 5.449 s (14.442 s;
    5.450 and 14.444 s before NCCL's tuner chose the data-parallel collectives' protocol,
    model.nccl_tuner). The dp ring, 64 ranks in each of 16 segments, is bound by NVLink (64 ×
    50 GB/s over 900): NCCL's 16 channels at 45.1 GB/s, LL128 at min(0.92 × 720, 16 × 40) = 640
    GB/s where 32 channels at 864 gave 794.88 (model.nvlink_bound; the search test below): dp
    66.73 → 77.11 ms, of which the dense group's φ 1/6 waits, +1.73 ms: 5.4472 → 5.4489 s."""
    assert in_one_domain(64, 4096, 64) and not in_one_domain(64, 4096, 72)
    est = evaluate(**DSV3)
    assert est.device.placement_domain == 64 and est.device.nvlink_domain == 72
    ep = _ep(est)
    assert ep.link == "nvlink" and ep.bandwidth_bytes_per_s == 900e9
    assert ep.seconds == pytest.approx(0.6443, abs=5e-5)
    assert (
        ep.seconds
        > float(ep.traffic.bytes_per_step) / (900e9 * 0.8)
        == pytest.approx(0.6166, abs=1e-4)
    )
    assert est.step_s == pytest.approx(5.4535, abs=5e-4)  # 5.449 before the whole gradient
    # buffer was zeroed at the step (model.terms.optimizer_time.whole_buffer_zeroing_bytes)
    same = evaluate(**DSV3, nvlink_domain=64)
    assert (same.step_s, _ep(same).seconds) == (est.step_s, ep.seconds)
    racks = evaluate(**DSV3, nvlink_domain=72)  # a user who owns whole racks: no segments
    assert _ep(racks).link == "scale-out"
    # 8.271 s, 14.447 s: the straddling groups' latency over the 2 nodes NCCL counts (14.442 s
    # before the whole gradient buffer was zeroed at the step, 14.446 s before Megatron-Core's
    # own optimizer-step passes, model.step_passes: 12 B more an element stepped)
    assert (round(_ep(racks).seconds, 3), round(racks.step_s, 3)) == (8.271, 14.447)
    note = next(n for n in est.notes if "Slurm segments" in n)
    assert note.startswith("ep 64 on NVLink: ranks fill Slurm segments of 64 GPUs")
    assert "NVIDIA's launcher places a job of 4096 GPUs: --segment=16" in note
    assert not any("Slurm segments" in n for n in racks.notes)


def test_qwen3_30b_ep64_on_128_gb200():
    """128 GPUs = 32 nodes → segments of 16 nodes = 64 GPUs: ep 64 (dp 128) on NVLink, 326.2
    ms; filling 72-GPU racks, ranks 64–127 straddle → scale-out, 3.838 s. The racks' dp 128
    (72 + 56 a rack) counts its ranks in the NVLink clique, NCCL's node under MNNVL
    (model.rank_groups.nccl_node_size): 56 a node, 16 search channels at 45.1 GB/s (NVLink 5's
    721.8 GB/s), 32 channels, not the tray's 4 a node's 16 (4.717 s then). The racks' step
    4.724 s (4.723 s before NVLink bound the dp ring's graph and bus bandwidth,
    model.nvlink_bound: 56 × 50 GB/s over NVLink's 900, so NCCL's 16 channels at 45.1, LL128 at
    min(0.92 × 720, 16 × 40) = 640 GB/s where 32 channels at 864 gave 794.88: the 13 buckets'
    reduce-scatters of 470.5 MB a rank and all-gathers of 235.2 MB, each after 14 + 126 × 1.9
    + 1 × 4.0 = 257.4 µs, 18.23 → 21.03 ms, of which the same 31.2 % waits, +0.87 ms)."""
    args = dict(model="qwen3-30b-a3b", gpu="GB200", num_gpus=128, ep=64)
    est, racks = evaluate(**args), evaluate(**args, nvlink_domain=72)
    assert (_ep(est).link, round(_ep(est).seconds, 4)) == ("nvlink", 0.3262)
    assert (_ep(racks).link, round(_ep(racks).seconds, 3)) == ("scale-out", 3.838)
    # 1.205 and 4.724 s before the whole gradient buffer was zeroed at the step; 1.206 s before
    # Megatron-Core's own optimizer-step passes (model.step_passes: 12 B more an element stepped)
    assert (round(est.step_s, 3), round(racks.step_s, 3)) == (1.207, 4.725)


def test_a_job_of_one_rack_or_less_lies_in_one_rack():
    """64 GPUs = 16 nodes ≤ 18: NVIDIA's launcher gives the whole job one segment, so it lies in
    one rack and ep 32 rides NVLink (628.6 ms) as when the job owns its rack; given segments of
    16 GPUs (``segment_gpus`` = 16, e.g. a cluster whose policy is the blog's 4-node segments for
    32–64-GPU jobs), ep 32 spans two segments that may lie in two racks: scale-out, 4.429 s."""
    args = dict(model="qwen3-30b-a3b", gpu="GB200", num_gpus=64)
    est, rack = evaluate(**args, ep=32), evaluate(**args, ep=32, nvlink_domain=72)
    assert est.device.placement_domain == 64
    assert (_ep(est).link, round(_ep(est).seconds, 4)) == ("nvlink", 0.6286)
    assert est.step_s == rack.step_s
    small = evaluate(**args, ep=32, segment_gpus=16)
    assert (_ep(small).link, round(_ep(small).seconds, 3)) == ("scale-out", 4.429)
    note = next(n for n in small.notes if "Slurm segments" in n)
    assert note.startswith("ep 32 on scale-out, dp 64 on scale-out")
    assert "`segment_gpus` as given" in note
    assert not any("Slurm segments" in n for n in est.notes)


def test_parts_with_one_node_domains_keep_their_placement():
    """An H100, B200 or TPU job has no segments: its domain is the node's (or the pod's)."""
    for part in ("H100-SXM", "B200", "TPUv5e"):
        device = get_accelerator(part)
        placed = placed_for(device, 4096)
        assert placed.placement_segment == 0 and placed.placement_domain == device.nvlink_domain


def test_a_segment_slurm_could_not_place_is_refused():
    gb200 = get_accelerator("GB200")
    with pytest.raises(InputError, match=r"^segment_gpus: 72 must divide the job's 4096 GPUs"):
        placed_for(gb200.with_links(segment_gpus=72), 4096)
    with pytest.raises(InputError, match=r"^segment_gpus: 6 must be a whole number"):
        placed_for(gb200.with_links(segment_gpus=6), 4096)
    with pytest.raises(InputError, match=r"^segment_gpus: 128 must be at most the NVLink"):
        placed_for(gb200.with_links(segment_gpus=128), 4096)
    assert gb200.with_links(nvlink_domain=72).segment_gpus == 0  # whole racks
    with pytest.raises(InputError, match=r"^segment_gpus: 24 must divide the job's 64 GPUs"):
        evaluate(model="qwen3-30b-a3b", gpu="GB200", num_gpus=64, ep=32, segment_gpus=24)


@pytest.mark.slow
def test_search_deepseek_v3_on_4096_gb200_keeps_ep_on_nvlink():
    """``trainplan search --model deepseek-v3 --gpus 4096 --gpu GB200``: 7.198 s (dp 512 × pp
    8, ep 8) when ranks filled 72-GPU racks; in segments of 64 the expert group rides NVLink:
    dp 1024 × pp 4 at ep 64 (the layout above, 5.450 s), now ep 32, 5.444 s (5.434 s before
    NVLink bound the dp ring, below).

    ep 64 led ep 32 by 0.64 ms (5.44988 against 5.45051 s) before NCCL's tuner
    (model/nccl_tuner.py: ``ncclTopoTuneModel``, ``topoGetAlgoInfo``). Both layouts' dp ring,
    1,024 ranks, 64 in each of 16 segments, runs its 6 buckets' reduce-scatters (3.786 GB a
    rank) and all-gathers (1.893 GB) in LL128: 14 + 15 × 4.0 + 1,008 × 1.9 = 1,989.2 µs and the
    bytes at 0.92 × 864 = 794.88 GB/s, 6,751.8 and 4,370.5 µs, against Simple's 8.4 + 15 × 14
    + 1,008 × 3.4 = 3,645.6 µs at 864 GB/s, 8,027.2 and 5,836.4 µs: 16.45 ms less dp in each
    (83.18 → 66.73 ms; the expert groups stay Simple). At ep 32 the dp and expert traffic
    exceeds its window (``max(φ·a, a − window)``, model.comm_sms.contended_wait, at a − window:
    0.42777 − 0.29485 s exposed 0.13292), so all 16.45 ms leave the step, 5.43408 s; at ep 64
    it waits φ·a, the dense group's seconds at its φ 1/6, so 2.74 ms do, 5.44715 s (the pp
    row's embedding all-reduce, two nodes a rank each, +14.6 µs in both: the Simple ring's
    36.4 µs × 1.4, the multi-node ring's plateau, where the tree's latency was charged).

    64 ranks a segment × 50 GB/s is over NVLink's 900, so NVLink binds the dp ring
    (model.nvlink_bound): NCCL's graph is 16 channels at 45.1 GB/s (721.6 of the GPU's 18 ×
    40.1 = 721.8), not 32, and the Simple ring's bus bandwidth 900 × 0.8 = 720, not 864. LL128
    still runs, at min(0.92 × 720, 16 × 40) = 640 GB/s: 6 × (1,989.2 + 3,786 ÷ 0.640 +
    1,989.2 + 1,893 ÷ 0.640) µs = 77.11 ms (Simple: 3,645.6 + 3,786 ÷ 0.72 µs = 8.90 ms a
    reduce-scatter, more). At ep 32 all 10.37 ms more leave the step: 5.4341 → 5.4445 s; at
    ep 64 φ 1/6 of them, 1.73 ms: 5.4489 s. ep 32 stays the best. The optimizer step writing
    Megatron-Core's whole gradient buffers to zero, dense and expert, not the distributed
    optimizer's shard (model.terms.optimizer_time.whole_buffer_zeroing_bytes): 5.4445 →
    5.4506 s, ep 64 5.4489 → 5.4535 s, ep 32 still the best. Megatron-Core's own
    optimizer-step passes, 38 → 50 B an element (the clip's scaling +8, the master's re-read
    +4, model.step_passes.step_pass_bytes): +12 B × 182 M owned elements / (8 TB/s × 0.9) =
    +0.30 ms in both: ep 32 5.4509 s, ep 64 5.4538 s, ep 32 still the best."""
    from trainplan.api import search

    result = search(model="deepseek-v3", gpus=4096, gpu="GB200")
    best = result.best
    lay = best.estimate.layout
    assert (lay.dp, lay.tp, lay.pp, lay.ep) == (1024, 1, 4, 32)
    assert best.estimate.step_s == pytest.approx(5.4509, abs=5e-4)
    assert _ep(best.estimate).link == "nvlink"
    ep64 = evaluate(**DSV3)
    assert ep64.step_s == pytest.approx(5.4538, abs=5e-5) and ep64.step_s > best.estimate.step_s
