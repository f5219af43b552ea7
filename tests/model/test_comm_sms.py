"""The SMs DeepEP's kernels hold while they run beside computation (model/comm_sms.py) and what
that costs the overlapped blocks: hand-derived cases, Megatron-Core's overlaps and DualPipe's
F&B block in evaluate()."""

from __future__ import annotations

import pytest

import tests.optimizer.test_tables_exact as exact
from tests.model._shared import NO_STEP_MECHANISMS
from trainplan.model.comm_sms import (
    collective_sm_share,
    contended_wait,
    dispatcher_sm_share,
    measured_sm_share,
)
from trainplan.model.estimate import evaluation_context
from trainplan.model.moe_run import Dispatcher, EpOverlap, MoERun, exposed_all_to_all
from trainplan.model.nccl_search import nvlink_node
from trainplan.model.schedule_cost import dualpipe_block
from trainplan.model.step_time import dp_exposed_seconds
from trainplan.model.terms.fields import LayoutFields
from trainplan.model.terms.roofline import ep_sm_share
from trainplan.model.timing import CostOptions
from trainplan.optimizer.case import Case, links_for
from trainplan.topology.accelerators import get_accelerator

QWEN_OWN = 12 * (1_541_093_376 / 64 + 3_623_878_656 / 8) / 2.97e12
"""Megatron-Core's own optimizer-step passes on Qwen3-30B-A3B at dp 64 × ep 8 (model.step_passes:
the clip's scaling of every FP32 gradient and the master's second read, 12 B an element
stepped): 1,541,093,376 dense elements a GPU ÷ 64 and 3,623,878,656 expert ones ÷ the expert
dp 8, at H100's 2.97 TB/s: 1.93 ms."""


def test_phi_is_the_measured_cost_of_the_blocks_taken() -> None:
    """The H200 medians (GEMM_SLOWDOWN_BESIDE_BLOCKS; tests/fidelity/test_device_h200_contention
    derives them from the data): φ = 1 − 1/s — 8 blocks 1 − 1/1.177 = 0.15038, 16: 1 − 1/1.314
    = 0.23896, 24: 1 − 1/1.350 = 0.25926, 32: 0.35149, 64: 0.55830. Between: 20 blocks
    (0.23896 + 0.25926) / 2 = 0.24911; 4 blocks 0.15038 / 2 = 0.07519 (from φ = 0 at none);
    100 blocks 0.55830 + (36/68)·(1 − 0.55830) = 0.79214 (to φ = 1 at all 132). Another part
    at the same fraction of its SMs: 24 of 148 is 24·132/148 = 21.405 H200 blocks,
    0.23896 + (5.405/8)·0.02030 = 0.25267."""
    assert measured_sm_share(16, 132) == pytest.approx(1 - 1 / 1.314)
    assert measured_sm_share(20, 132) == pytest.approx(0.24911, abs=1e-5)
    assert measured_sm_share(4, 132) == pytest.approx(0.07519, abs=1e-5)
    assert measured_sm_share(100, 132) == pytest.approx(0.79214, abs=1e-5)
    assert measured_sm_share(24, 148) == pytest.approx(0.25267, abs=1e-5)
    assert measured_sm_share(0, 132) == 0.0 and measured_sm_share(132, 132) == 1.0


def test_deepep_costs_its_20_blocks_measured_phi() -> None:
    """DeepSeek-V3 §3.5.1: 20 of the H800's 132 SMs, φ = 0.24911 (20 blocks, above; the SM
    share 20/132 = 0.1515); DeepEP's Buffer.num_sms = 20 on a B200 (148 SMs, gemm.toml) and a
    GB200 (the B200's GPU): 20·132/148 = 17.838 blocks, 0.23896 + (1.838/8)·0.02030 = 0.24363;
    of 160 on GB300 (NVIDIA's Blackwell Ultra blog): 16.5 blocks, 0.23896 + (0.5/8)·0.02030 =
    0.24023. DeepEP's own kernels are charged whatever nccl_sm_charge says (the rule takes no
    option); a part without a sourced count: nothing."""
    assert dispatcher_sm_share("deepep", "H800") == pytest.approx(0.24911, abs=1e-5)
    assert dispatcher_sm_share("deepep", "B200") == pytest.approx(0.24363, abs=1e-5)
    assert dispatcher_sm_share("deepep", "GB200") == dispatcher_sm_share("deepep", "B200")
    assert dispatcher_sm_share("deepep", "GB300") == pytest.approx(0.24023, abs=1e-5)
    assert dispatcher_sm_share("deepep", "B300") == dispatcher_sm_share("deepep", "GB300")
    assert dispatcher_sm_share("deepep", "MI300X") == 0.0


def test_nccls_all_to_all_holds_its_point_to_point_channels() -> None:
    """NCCL's all-to-all is grouped send/recv on p2pnChannels blocks (NVIDIA/nccl 5067397c
    src/graph/paths.cc ncclTopoComputeP2pChannels: pow2Up(min(nChannels, 64)); a large one
    touches every channel, src/enqueue.cc scheduleP2pTasksToPlan). In an H100 node: the ring's
    24 → 32, φ(32) = 1 − 1/1.542 = 0.35149; in an A100 node the same 32 of 108 SMs, 32·132/108 =
    39.111 H200 blocks, 0.35149 + (7.111/32)·(0.55830 − 0.35149) = 0.39745; in a B200 node
    (NVLink 5: 32 collective channels, 32 p2p) 32·132/148 = 28.541 blocks, 0.25926 +
    (4.541/8)·(0.35149 − 0.25926) = 0.31161. An ep group of 64 H100s over 8 nodes (8 a node,
    400 Gb/s NICs): 16 collective channels (8 at 48 GB/s, Postset ×2), pow2Up(16) = 16,
    φ(16) = 1 − 1/1.314 = 0.23896. Off under nccl_sm_charge=false; the dispatcher rule
    charges nothing of NCCL's (it is not a dispatcher's own kernel)."""
    node = (8, 8, 8, 8, True, 0.0, nvlink_node("H100-SXM", 450e9))
    a2a = "send-recv"
    assert collective_sm_share(a2a, "H100-SXM", True, True, *node) == pytest.approx(1 - 1 / 1.542)
    a100 = (*node[:-1], nvlink_node("A100-80GB", 300e9))
    assert collective_sm_share(a2a, "A100-80GB", True, True, *a100) == pytest.approx(
        0.39745, abs=1e-5
    )
    b200 = (*node[:-1], nvlink_node("B200", 900e9))
    assert collective_sm_share(a2a, "B200", True, True, *b200) == pytest.approx(0.31161, abs=1e-5)
    across = (64, 64, 8, 64, False, 50e9, node[-1])
    assert collective_sm_share(a2a, "H100-SXM", True, True, *across) == pytest.approx(1 - 1 / 1.314)
    assert collective_sm_share(a2a, "H800", False, True, *node) == 0.0
    assert dispatcher_sm_share("alltoall", "H800") == 0.0


def test_hybridep_costs_its_default_sms_by_the_same_rule() -> None:
    """HybridEP's dispatch and combine default to 24 SMs each when the expert-parallel group lies
    in one NVLink domain and 8 across domains (deepseek-ai/DeepEP hybrid-ep 94a9f8f6
    csrc/hybrid_ep/config.cuh Configurer: value_or((num_of_nodes == 1) ? 24 : 8)), which
    Megatron-Core leaves in force (moe_flex_dispatcher_num_sms None). On Hopper's 132 SMs:
    φ(24) = 1 − 1/1.350 = 0.25926, φ(8) = 1 − 1/1.177 = 0.15038; on a GB200 (148): 24·132/148 =
    21.405 H200 blocks, 0.25267 (the NVLS collectives' figure: the same count), and 8 → 7.135
    blocks, 0.15038·7.135/8 = 0.13412. Charged whatever nccl_sm_charge says (its kernels are
    not NCCL's: the rule takes no option); nothing on a part without a sourced SM count."""
    assert dispatcher_sm_share("hybridep", "H800") == pytest.approx(1 - 1 / 1.350)
    assert dispatcher_sm_share("hybridep", "H100-SXM", False) == pytest.approx(1 - 1 / 1.177)
    assert dispatcher_sm_share("hybridep", "GB200") == pytest.approx(0.25267, abs=1e-5)
    assert dispatcher_sm_share("hybridep", "GB200", False) == pytest.approx(0.13412, abs=1e-5)
    assert dispatcher_sm_share("hybridep", "MI300X") == 0.0
    assert dispatcher_sm_share("deepep", "H800", False) == dispatcher_sm_share(
        "deepep", "H800"
    )  # DeepEP's 20 either way


@pytest.mark.parametrize(
    ("gpu", "ep", "phi"),
    [("H100-SXM", 8, 1 - 1 / 1.350), ("H100-SXM", 16, 1 - 1 / 1.177), ("GB200", 32, 0.25267)],
)
def test_hybrideps_sms_follow_the_groups_span(gpu: str, ep: int, phi: float) -> None:
    """The term the evaluator and the search read (model.terms.roofline.ep_sm_share): HybridEP's
    expert-parallel group of 8 H100s lies in one 8-GPU NVLink domain (24 SMs, 0.25926), of 16
    it spans two (8 SMs, 0.15038); of 32 GB200s it lies in one 72-GPU NVL72 domain (24 of 148,
    0.25267)."""
    run = MoERun(dispatcher=Dispatcher.HYBRIDEP)
    # the 64 GB200s own their rack (nvlink_domain=72; by default Slurm segments of 16 GPUs)
    device = get_accelerator(gpu).with_links(nvlink_domain=72) if gpu == "GB200" else gpu
    case = Case.of("qwen3-30b-a3b", device, num_gpus=64, dp=64, ep=ep, moe_run=run)
    c = evaluation_context(case.model, case.training, case.device, case.options)
    links = links_for(case.layout, case.links, case.fabric)
    share = ep_sm_share(c, LayoutFields(case.layout, case.training.global_batch_size, 0, links))
    assert share == pytest.approx(phi, abs=1e-5)


def test_combined_1f1b_pays_hybrideps_sms() -> None:
    """The combined-1F1B case below (Qwen3-30B-A3B, 64 H100s, dp 64, ep 8, m = 16, 1/16
    unpaired, every paired phase hidden) under HybridEP: its 24 SMs in one NVLink domain,
    φ = 0.25926, so exposed = T·(1 + 15·φ)/16 = 0.30556·T (T = 0.81715 s: 0.24969 s), with or
    without the NCCL charge: the step 4.3823 s (4.3835 s before NCCL's tuner ran the dp
    group's all-gathers, 121,361,103 B a rank, as the ring in LL128: 14 + 7 × 4.0 + 56 × 1.9 =
    148.4 µs and the bytes at min(0.92 × 384, 8 × 36.7) = 293.6 GB/s, 561.76 µs a call where
    Simple took 296.8 µs + the bytes at 384 GB/s, 612.84 µs, model.nccl_tuner; its
    reduce-scatters, 242.7 MB, and the expert group's, one rank a node, stay Simple; 4.4132 s
    while the dp group's ring calls
    charged all 63 steps the network's 14 µs where its 64 ranks lie 8 on each of 8 nodes and
    NCCL's model charges 7: 8.4 + 7 × 14 + 56 × 3.4 = 296.8 µs a call, not 890.4; 4.4034 s
    before the rows' probabilities, T = 0.78282 s; 4.3811 s when T was NCCL's rule, 0.70511
    s; NCCL's charged all-to-all on its 32 point-to-point blocks: 4.8059 s, DeepEP's 20 SMs:
    4.3660 s).
    T: HybridEP sends a token once to each rank holding one of its experts
    (model.moe_dispatch): R = 8·(1 − C(112, 8)/C(128, 8)) = 8·(1 − 475,491,062,970 /
    1,429,702,652,400) = 5.33936 ranks of 16 experts where NCCL sends 8 copies, R/k = 0.66742 of
    the bytes: of the 1.00216 s of bytes timed as every routed copy at NCCL's 0.8 × 450 GB/s,
    0.66742 × 1.00216 s × 360 GB/s are sent to other ranks, × 8/7 the rows HybridEP's kernels
    count (its own included), half in the 1,536 dispatches and half in the 1,536 combines
    (16 micro-batches × 48 layers, forward and backward), at HybridEP's B200 kernel-only rates
    scaled to the H100's NVLink (model.ep_kernels: 734.95 and 673.84 GB/s × 450/900 = 367.475
    and 336.92 GB/s), no latency added: 0.66742 × 1.00216 × 360e9 × 8/7 / 2 ×
    (1/367.475e9 + 1/336.92e9) = 0.78282 s of hidden vectors. The forward dispatch and the
    backward combine also carry each token's probability row, 16 experts × 8 ranks × 4 =
    512 bytes beside its 4,096 (model.moe_dispatch.side_bytes), and the benchmark's rows
    carried theirs, 8 × 8 × 4 = 256 beside 14,336, so the kernels moved 14,592/14,336 of the
    published rates: T = 0.78282 × (1 + 4,608/4,096)/2 / (14,592/14,336) = 0.81715 s."""
    phi = 1 - 1 / 1.350
    run = MoERun(dispatcher=Dispatcher.HYBRIDEP, ep_overlap=EpOverlap.COMBINED_1F1B)
    case = dict(model="qwen3-30b-a3b", device="H100-SXM", num_gpus=64, dp=64, ep=8, moe_run=run)
    for options in ({}, {"nccl_sm_charge": False}):
        est = Case.of(**case, **options).evaluate()
        row = _axis(est, "ep")
        sent = 0.66742 * 1.00216 * 360e9 * 8 / 7 / 2
        hidden = sent * (1 / 367.475e9 + 1 / 336.92e9)
        assert hidden == pytest.approx(0.78282, abs=5e-6)
        moved = (1 + 4608 / 4096) / 2 / (14592 / 14336)
        assert row.seconds == pytest.approx(hidden * moved, abs=5e-6)
        assert row.seconds == pytest.approx(0.81715, abs=5e-6)
        assert row.exposed_seconds == pytest.approx(row.seconds * (1 + 15 * phi) / 16, rel=1e-5)
        assert est.step_s == pytest.approx(4.3896 + QWEN_OWN, abs=5e-5)  # 4.3823 before the
        # whole gradient buffer was zeroed (model.terms.optimizer_time.whole_buffer_zeroing_bytes),
        # 4.3886 before the optimizer step's own passes (QWEN_OWN) and before the dp group's
        # Simple reduce-scatters ran at NVLink's 450 × 0.8 = 360 GB/s, not the NICs' 384
        # (model.nvlink_bound.ring_busbw: the slower of the two bounds)


def _axis(est, axis: str):  # noqa: ANN001, ANN202 - an Estimate's traffic row
    return next(r for r in est.traffic if r.traffic.axis == axis)


@pytest.mark.parametrize(("dispatcher", "phi_on", "phi_off"), [
    ("alltoall", 1 - 1 / 1.542, 0.0),  # NCCL's 32 p2p blocks: under the option
    ("deepep", 0.24911, 0.24911),  # DeepEP's 20 blocks: always
])  # fmt: skip
def test_combined_1f1b_pays_the_dispatchers_sms(
    dispatcher: str, phi_on: float, phi_off: float
) -> None:
    """Qwen3-30B-A3B on 64 H100s, dp 64, ep 8, b 1, B 1024, so m = 1024 / 64 = 16 micro-batches
    without a pipeline; Megatron-Core's overlap_moe_expert_parallel_comm pairs them, leaving
    1/m = 1/16 unpaired (moe_run.unpaired_fraction), which waits whole. The paired phases are
    all hidden (each all-to-all shorter than its computation, so at φ = 0 only the unpaired
    sixteenth waits); at φ each waits max(φ·a, a − c) = φ·a. So of the ep row's T seconds
    (dispatch + combine) exposed = T·(1/16 + 15/16·φ): NCCL's all-to-all in one H100 node on
    its 32 point-to-point blocks (the ring's 24 rounded up), φ = 1 − 1/1.542 = 0.35149 with the
    charge, T/16 without (T = 1.06507 s: 1.06507 × 6.27237/16 = 0.41753 s against 0.06657 s,
    the step 4.4756 → 4.8047 s; 4.4769 → 4.8059 s before NCCL's tuner ran the dp group's
    all-gathers in LL128, above; 4.5066 → 4.8356 s with every dp ring step at 14 µs; 4.7303 s
    when it was charged NVLS's 16 blocks, 0.23896);
    DeepEP's at 0.24911 either way (T = 0.78014 s, a token sent once to each rank holding one
    of its experts, at DeepEP's H800 kernel rate scaled to the H100's NVLink, model.ep_kernels,
    its forward dispatch's rows with 8 int64 indices and 8 float32 weights, 96 bytes, its
    backward combine's with the weights' gradient, 32, beside 4,096: 0.77409 × (4 × 4,096 +
    128)/(4 × 4,096); 0.23095 s)."""
    run = MoERun(dispatcher=Dispatcher(dispatcher), ep_overlap=EpOverlap.COMBINED_1F1B)
    case = dict(model="qwen3-30b-a3b", device="H100-SXM", num_gpus=64, dp=64, ep=8, moe_run=run)
    on = Case.of(**case).evaluate()
    off = Case.of(**case, nccl_sm_charge=False).evaluate()
    t = _axis(on, "ep").seconds
    assert _axis(off, "ep").seconds == t
    assert _axis(on, "ep").exposed_seconds == pytest.approx(t * (1 + 15 * phi_on) / 16, rel=1e-5)
    assert _axis(off, "ep").exposed_seconds == pytest.approx(t * (1 + 15 * phi_off) / 16, rel=1e-5)
    if dispatcher == "deepep":
        assert t == pytest.approx(0.77409 * (4 * 4096 + 128) / (4 * 4096), abs=5e-6)
    if dispatcher == "alltoall":
        assert t == pytest.approx(1.06507, abs=5e-6)
        # 4.4756 and 4.8047 s before the whole gradient buffer was zeroed at the step
        # (model.terms.optimizer_time.whole_buffer_zeroing_bytes), 4.4820 and 4.8110 s before
        # the optimizer step's own passes (QWEN_OWN), 4.4820 and 4.8110 s before the dp group's
        # Simple reduce-scatters ran at NVLink's 360 GB/s, not the NICs' 384
        # (model.nvlink_bound.ring_busbw)
        assert (off.step_s, on.step_s) == (pytest.approx(4.4830 + QWEN_OWN, abs=5e-5),
                                           pytest.approx(4.8120 + QWEN_OWN, abs=5e-5))  # fmt: skip


def test_every_layer_kind_pays_the_async_tp_charge() -> None:
    """Llama 3 70B (80 dense layers) on 64 H100s, dp 32 × tp 2 with sequence parallelism,
    Megatron-Core's asynchronous tp collectives (the default): in each layer's backward, per
    half (attention, MLP), the input all-gathered again under the column-parallel dgrad GEMM
    and the input gradient reduce-scattered under its wgrad GEMM run beside computation (4 a
    layer), the output layer's pair likewise (2); the forward ones, each half's output-gradient
    gather, the embedding's and the cross-entropy's exchanges wait. At tp 2 every one of those
    is shorter than its GEMM, so uncharged they are hidden whole: the hidden seconds are
    T − exposed_off, (4·80 + 2)/(10·80 + 5) = 322/805 of the tp row's T (10 equal collectives
    a layer, 3 of the output layer, 2 of the embedding; the cross-entropy's few bytes a token
    aside). Charged, each waits φ·a: under sequence parallelism they are all-gathers and
    reduce-scatters, which NCCL runs as rings on the node's 24 channels (NVLS's bus bandwidth for
    them is about half the ring's: model.nccl_channels), φ = 1 − 1/1.350 = 0.25926, so
    exposed_on = exposed_off + φ·(T − exposed_off): 0.21008 + 0.25926 × 0.13995 = 0.24636 s
    (0.24349 s when NVLS's 16 blocks were charged, 0.23896). Before the dense layers' and the
    output layer's clocks carried the share (step_time kind_parts), the charge moved nothing
    here. The cross-entropy's all-reduces over the 2 GPUs run as rings (NCCL's tuner: NVLS's
    102 GB/s of bus bandwidth against the ring's 360, model.nccl_search), the published NVLS
    curve ÷ 480/370: T 0.35000 → 0.35003 s."""
    case = dict(model="llama3-70b", device="H100-SXM", num_gpus=64, dp=32, tp=2,
                global_batch_size=64, micro_batch_size=1)  # fmt: skip
    on = _axis(Case.of(**case).evaluate(), "tp")
    off = _axis(Case.of(**case, nccl_sm_charge=False).evaluate(), "tp")
    t = on.seconds
    assert off.seconds == t == pytest.approx(0.35003, abs=5e-6)
    assert t - off.exposed_seconds == pytest.approx(322 / 805 * t, rel=1e-3)
    phi = 1 - 1 / 1.350
    expected = off.exposed_seconds + phi * (t - off.exposed_seconds)
    assert on.exposed_seconds == pytest.approx(expected, rel=1e-9)
    assert (off.exposed_seconds, on.exposed_seconds) == (pytest.approx(0.21008, abs=5e-6),
                                                         pytest.approx(0.24636, abs=5e-6))  # fmt: skip


def test_a_block_computes_on_the_sms_the_communication_leaves() -> None:
    """3 s of computation beside 2 s of all-to-all holding a quarter of the SMs: for 2 s the
    computation runs at 3/4 of its rate (1.5 s of it done), the other 1.5 s after — 3.5 s,
    0.5 s beyond the computation. A 4 s all-to-all paces the block: 1 s beyond."""
    assert contended_wait(2.0, 3.0, 0.25) == pytest.approx(0.5)
    assert contended_wait(4.0, 3.0, 0.25) == pytest.approx(1.0)
    assert contended_wait(2.0, 3.0, 0.0) == 0.0
    # DualPipe's block: 3 s of passes, 0.5 s of it exposed communication, 0.8 s hideable of
    # which 0.6 s DeepEP's at φ = 1/4: 2.5 + 0.15
    assert dualpipe_block(1.0, 1.0, 1.0, 0.5, 0.8, 0.25 * 0.6) == pytest.approx(2.65)


def test_megatrons_overlaps_pay_for_the_sms_they_hide_under() -> None:
    """moe_shared_expert_overlap: forward dispatch and combine of 1 s each beside the shared
    experts' 1.5 s and 0.2 s, φ = 0.2: max(0.2, −0.5) + max(0.2, 0.8) + backward 4 = 5.0; the
    combined 1F1B at φ = 0 is unchanged."""
    got = exposed_all_to_all(EpOverlap.SHARED_EXPERT, 2.0, 4.0, shared=(1.5, 0.2), share=0.2)
    assert got == pytest.approx(0.2 + 0.8 + 4.0)
    split = (3.0, 6.0, 1.0, 1.5)
    plain = exposed_all_to_all(EpOverlap.COMBINED_1F1B, 2.0, 4.0, split, unpaired=0.25)
    assert exposed_all_to_all(EpOverlap.COMBINED_1F1B, 2.0, 4.0, split, (0, 0), 0.25, 0.0) == plain


def test_dualpipe_charges_deepeps_sms_on_deepseek_v3() -> None:
    """DeepSeek-V3's published layout (DualPipe, DeepEP, M = 4, 2,048 H800): the F&B blocks hide
    the expert all-to-all whole, and its 20 blocks cost the computation beside it φ = 0.24911
    of the all-to-all's seconds (measured at 20 of 132 SMs, above) — the ep row's exposed
    time, in the step."""
    case = dict(model="deepseek-v3", num_gpus=2048, device="H800", dp=128, pp=16, ep=64,
                global_batch_size=15360, seq_len=4096, framework="textbook",
                schedule="dualpipe", moe_run=MoERun(dispatcher=Dispatcher.DEEPEP, node_limit=4))  # fmt: skip
    est = Case.of(**case).evaluate()
    ep = next(r for r in est.traffic if r.traffic.axis == "ep")
    assert ep.exposed_seconds == pytest.approx(ep.seconds * 0.24911, rel=1e-4)


def test_nccl_holds_the_channels_of_the_algorithm_it_runs() -> None:
    """NCCL runs a collective on one block per channel of its algorithm (model.nccl_channels;
    NVIDIA/nccl 5067397c): an all-reduce of a communicator with NVLS (≥ 2 GPUs a node of an
    NVLS part) on src/transport/nvls.cc ncclNvlsTuning's NVLS_NCHANNELS_SM90 = 16 on Hopper
    (132 SMs): φ = 1 − 1/1.314 = 0.23896 (the SM share 16/132 = 0.1212); NVLS_NCHANNELS_SM100_NVL
    = 24 on Blackwell (148 SMs): 24·132/148 = 21.405 blocks, 0.25267 (24/148 = 0.1622);
    Blackwell Ultra (160): 19.8 blocks, 0.23896 + (3.8/8)·0.02030 = 0.24860 (24/160 = 0.15).
    A reduce-scatter or all-gather runs as a ring on the node's 24 collective channels
    (search.cc ncclTopoCompute: 6 rings at 60 GB/s on an H100's 18 × 20.6 GB/s, or at 40 GB/s
    on an A100's 12 × 20 GB/s; DupChannels ×2; connect.cc ncclTopoPostset ×2): 1 − 1/1.350 =
    0.25926 on Hopper. An A100 has no NVLS: its all-reduce runs as a ring or tree on the same
    24 channels, 24·132/108 = 29.333 H200 blocks, 0.25926 + (5.333/8)·(0.35149 − 0.25926) =
    0.32075 (it was charged nothing). NCCL_NVLS_ENABLE=0 (nccl_nvls=false): the H100's
    all-reduce on the ring's 24 too. Across nodes (400 Gb/s NICs, one rank a node: 1 search
    channel at 48 GB/s, DupChannels 2 at 24, Postset 4): 4 blocks, 0.15038/2 = 0.07519, NVLS
    or not (NVLS needs 2 GPUs of the communicator on a node). Not charged: 0 — and the cost
    options charge it unless nccl_sm_charge=false is given (on by default:
    :func:`test_the_charge_prices_megatron_fsdp_per_micro_batch_traffic` says why)."""
    h100 = nvlink_node("H100-SXM", 450e9)
    node = (8, 8, 8, 8, True, 0.0, h100)
    ar, ring = "all-reduce", "ring"
    hopper = 1 - 1 / 1.314
    for part in ("H100-SXM", "H100-96GB-500W", "H200"):
        assert collective_sm_share(ar, part, True, True, *node) == pytest.approx(hopper)
        assert collective_sm_share(ring, part, True, True, *node) == pytest.approx(1 - 1 / 1.350)
    # 4 of an H100 node: NCCL's tuner runs the all-reduce as a ring (NVLS 240 GB/s of bus
    # bandwidth against the ring's 360, model.nccl_search), on the ring's 24 blocks
    four = (4, 4, 8, 8, True, 0.0, h100)
    assert collective_sm_share(ar, "H100-SXM", True, True, *four) == pytest.approx(1 - 1 / 1.350)
    # the H800 (8 NVLinks, 164.8 GB/s as NCCL counts them): the ring's 16 collective channels
    # (4 search channels at 40 GB/s, doubled twice: tests/model/test_nccl_channels.py), φ(16)
    # = 1 − 1/1.314 as NVLS's 16; its 8-GPU all-reduce NVLS (8 × min(15 × 0.85 × 7/8 × 2, 30) =
    # 178.5 GB/s against the ring's 8 × 20 = 160), its 4-GPU one a ring (153 against 160): 16
    # blocks either way; the all-to-all on pow2Up(16) = 16, 0.23896 where an H100's is 0.35149
    h800 = (*node[:-1], nvlink_node("H800", 200e9))
    for kind in (ar, ring, "send-recv"):
        assert collective_sm_share(kind, "H800", True, True, *h800) == pytest.approx(hopper)
    four800 = (4, 4, 8, 8, True, 0.0, h800[-1])
    assert collective_sm_share(ar, "H800", True, True, *four800) == pytest.approx(hopper)
    nvl5 = (*node[:-1], nvlink_node("B200", 900e9))
    assert collective_sm_share(ar, "B200", True, True, *nvl5) == pytest.approx(0.25267, abs=1e-5)
    assert collective_sm_share(ar, "GB200", True, True, *nvl5) == pytest.approx(0.25267, abs=1e-5)
    assert collective_sm_share(ar, "GB300", True, True, *nvl5) == pytest.approx(0.24860, abs=1e-5)
    a100 = (*node[:-1], nvlink_node("A100-80GB", 300e9))
    for kind in (ar, ring):
        assert collective_sm_share(kind, "A100-80GB", True, True, *a100) == pytest.approx(
            0.32075, abs=1e-5
        )
    assert collective_sm_share(ar, "H100-SXM", True, False, *node) == pytest.approx(1 - 1 / 1.350)
    one_a_node = (16, 128, 8, 128, False, 50e9, h100)
    for kind in (ar, ring):
        assert collective_sm_share(kind, "H100-SXM", True, True, *one_a_node) == pytest.approx(
            0.07519, abs=1e-5
        )
    mi300x = (*node[:-1], nvlink_node("MI300X", 448e9))
    assert collective_sm_share(ar, "MI300X", True, True, *mi300x) == 0.0
    assert collective_sm_share(ar, "H100-SXM", False, True, *node) == 0.0
    assert collective_sm_share(ring, "H100-SXM", True, True, 1, 1, 8, 8, True, 0.0, h100) == 0.0
    assert CostOptions().nccl_sm_charge
    assert Case.of("llama3-8b", "H100-SXM").options.nccl_sm_charge
    assert not Case.of("llama3-8b", "H100-SXM", nccl_sm_charge=False).options.nccl_sm_charge


def test_an_overlapped_dp_collective_pays_for_the_sms_it_holds() -> None:
    """A once-per-step reduce-scatter of 1 s under a 1.5 s window at φ = 16/132: the window's
    computation runs on 116 of 132 SMs for 1 s, so 16/132 s of it is left when the collective
    ends (the last unit's tail, 0.1 s, is less). Per-micro-batch gathers of 0.5 s, 0.25 s in
    each pass, under 0.4 s micro-batches (forward 0.4/3, backward 0.8/3), m = 4: the forward
    waits max(φ·0.25, 0.25 − 0.1333) = 0.1167 (the communication paces), the backward
    max(φ·0.25, 0.25 − 0.2667) = φ·0.25 (the SMs it holds)."""
    phi = 16 / 132
    none = NO_STEP_MECHANISMS
    assert dp_exposed_seconds(1.0, 0.0, 8, 1.5, True, 0.1, True, phi, **none) == pytest.approx(phi)
    assert dp_exposed_seconds(1.0, 0.0, 8, 1.5, True, 0.1, **none) == pytest.approx(0.1)
    got = dp_exposed_seconds(
        0.0,
        0.5,
        4,
        0.4,
        True,
        0.05,
        True,
        phi,
        **{**none, "forward_s": 0.25},
    )
    assert got == pytest.approx(4 * (max(phi * 0.25, 0.25 - 0.4 / 3) + phi * 0.25))


@pytest.mark.parametrize("case", [c for c in exact.CASES if c[0] == "llama3-8b"],
                         ids=lambda c: c[0])  # fmt: skip
def test_the_uncharged_tables_stay_exact(case) -> None:
    """With the NCCL charge off (a cost option, carried by the case; on by default, which the
    exact cases themselves check, Llama 3 70B among them), the search's tables still equal the
    evaluator on the H100 case of Llama 3 8B (one rule, over arrays)."""
    name, model, gpus, gpu, space, options = case
    exact.test_tables_equal_the_exact_evaluation(name, model, gpus, gpu, space,
                                                 {**options, "nccl_sm_charge": False})  # fmt: skip


HELD_SMS_CASES = [
    # HybridEP's SMs by the ep group's span (ep 8 in one H800 node: 24; ep 16 over two: 8),
    # under the combined-1F1B overlap (megatron only; the rest masked)
    ("deepseek-v3-hybridep", "deepseek-v3", 64, "H800", {"ep": (8, 16)},
     {"global_batch_size": 64, "seq_len": 4096,
      "moe_run": MoERun(dispatcher=Dispatcher.HYBRIDEP, ep_overlap=EpOverlap.COMBINED_1F1B)}),
    # Transformer Engine 1.8's userbuffers: bulk and pipeline kernels on 16 SMs, no margin
    ("llama3-70b-te-1", "llama3-70b", 32, "H100-SXM", {},
     {"global_batch_size": 64, "seq_len": 8192, "tp_comm_overlap": "full",
      "tp_comm_overlap_cfg": "te-1"}),
]  # fmt: skip


@pytest.mark.parametrize("case", HELD_SMS_CASES, ids=lambda c: c[0])
def test_the_held_sms_tables_stay_exact(case) -> None:
    """The search's tables equal the evaluator where the SMs held depend on the layout
    (HybridEP's by the ep group's NVLink span) or on the GEMM (userbuffers' margin-less
    kernels): one rule, over arrays."""
    exact.test_tables_equal_the_exact_evaluation(*case)


def test_the_charge_moves_the_step_by_its_rule() -> None:
    """Llama 3 8B on 16 H100s, dp 16 (ZeRO-1 under Megatron-Core, its gradient reduce-scatter
    overlapped): charged (the default), the data-parallel row's exposed seconds grow over the
    uncharged; nothing else of the estimate moves but the time."""
    base = Case.of("llama3-8b", "H100-SXM", dp=16, global_batch_size=32, seq_len=4096,
                   nccl_sm_charge=False)  # fmt: skip
    on = Case.of("llama3-8b", "H100-SXM", dp=16, global_batch_size=32, seq_len=4096)
    off, charged = base.evaluate(), on.evaluate()
    dp_off = next(r for r in off.traffic if r.traffic.axis == "dp")
    dp_on = next(r for r in charged.traffic if r.traffic.axis == "dp")
    assert dp_on.seconds == dp_off.seconds
    assert dp_on.exposed_seconds > dp_off.exposed_seconds
    assert charged.step_s > off.step_s
    assert [s.reserved_total_bytes for s in charged.stages] == [
        s.reserved_total_bytes for s in off.stages
    ]


def test_the_charge_prices_megatron_fsdp_per_micro_batch_traffic() -> None:
    """Why the charge is on by default: Llama 3 70B on 64 H100s, dp 16 ×
    tp 4, Megatron-FSDP (ZeRO-3), b 1, B 2048, so m = 2048 / 16 = 128. Megatron-FSDP
    reduce-scatters every micro-batch under optim_grads_params and all-gathers each unit in
    forward and again in backward (Megatron-LM d98e8a64dd megatron_fsdp.py, ``no_sync``), on
    side streams beside the layers' GEMMs: 198.105 s of dp traffic a step beside 228.833 s of
    computation (199.080 s before NCCL's tuner ran the all-gathers in LL128, below). Each
    micro-batch sends 1.3782 s of bytes (2 B a parameter gathered for the forward, 2 B again
    for the backward, 4 B of FP32 gradients) in 442 reduce-scatter buckets
    and 442 all-gather calls a pass, each call 8.4 + 7 × 14 + 8 × 3.4 = 133.6 µs of NCCL
    latency (the dp group's 16 ranks 2 on each of 8 nodes: 7 of the ring's 15 steps cross the
    network): 1.3782 + 1326 × 133.6 µs = 1.5553 s (1.5712 s, 201.117 s a step, when both
    passes' gathers shared 442 calls at 8.4 + 15 × 14 = 218.4 µs). NCCL's tuner
    (model.nccl_tuner) runs the all-gathers, 74,832,287 B a rank, as the ring in LL128: 14 + 7
    × 4.0 + 8 × 1.9 = 57.2 µs and the bytes at min(0.92 × 96, 4 × 36.7) = 88.32 GB/s, 904.49 µs
    a call against Simple's 913.12; the reduce-scatters, 149,664,573 B, stay Simple: a
    micro-batch 1.3782/2 + 442 × 133.6 µs + 1.3782/2 × 96/88.32 + 884 × 57.2 µs = 1.5477 s,
    198.105 s a step. The figures below are those of Simple alone. Its forward's gathers,
    1.3782/4 + 442 × 133.6 µs = 0.4036 s, under the forward's third of the 1.9453 s
    micro-batch (operations and exposed tp, no recomputation: 0.6484 s), the backward's
    gathers and reduce-scatter, 1.1517 s, under its two thirds, 1.2969 s. Uncharged both hide,
    and each micro-batch waits only for the reduce-scatter of its last of 442 buckets,
    1.3782/2 + 442 × 133.6 µs = 0.7481 s of it, 0.7481/442 = 1.693 ms (Megatron-FSDP waits for
    every backward's reduce-scatters: ``_root_post_backward`` →
    ``grad_reduce_pipeline.reset()``), the last micro-batch its last bucket's whole share,
    1.5553/442 = 3.519 ms: 127 × 1.693 + 3.519 ms = 0.218 s.
    Charged, each pass waits φ of its traffic (max(φ·0.3928, 0.3928 − 0.6484), max(φ·1.1784,
    1.1784 − 1.2969)) but the backward's last bucket, which runs after the backward's
    computation and so waits whole (model.dp_exposure.microbatch_exposed_seconds), with φ of
    the blocks NCCL runs the dp group's all-gathers and
    reduce-scatters on: at tp 4 the dp group of 16 has 2 ranks on each of 8 nodes, a ring of
    2 search channels at 48 GB/s (400 Gb/s NICs behind PCIe Gen5), duplicated to 4 at 24 GB/s,
    doubled by Postset: 8 blocks, φ = 1 − 1/1.177 = 0.15038 (NVLS does not run a reduce-scatter
    or all-gather across nodes), so 0.15038 × (198.105 − 128 × 1.693 ms) + 128 × 1.693 ms =
    29.976 s exposed of the 198.105 s the tuner's protocols give (29.792 s when the last bucket
    was charged only φ like the rest; 48.06 s at NVLS's 16 blocks, 0.23896, as charged
    before). The tp 4 layers' asynchronous all-gathers and reduce-scatters (sequence
    parallelism) run as rings on the node's 24 channels, φ = 1 −
    1/1.350 = 0.25926: of the tp row's 33.603 s, 20.168 s wait uncharged and the other 13.436 s
    are hidden whole, so charged 20.168 + 0.25926 × 13.436 = 23.651 s wait (+3.483 s). The
    step 249.233 → 282.473 s (+29.757 + 3.483 s; each 4.5 ms more with the optimizer step's own
    passes). (The cross-entropy's
    all-reduces over the 4 GPUs run as rings, NCCL's tuner: NVLS's 240 GB/s of bus bandwidth
    against the ring's 360, model.nccl_search; tp 33.600 → 33.603 s.) The tp figures are the
    async overlap asked for (``tp_comm_overlap = async``): by default Megatron-FSDP on H100s
    runs without CUDA_DEVICE_MAX_CONNECTIONS=1 and the planner credits no async overlap
    (model.launch_order), so every tp collective waits, 33.603 s, charged or not, and the step
    is 228.833 + 33.603 + 29.976 (+ the optimizer step and the rest) = 292.426 s charged,
    262.668 s uncharged (tests/model/test_launch_order.py)."""
    case = dict(dp=16, tp=4, zero_stage=3, micro_batch_size=1, global_batch_size=2048,
                framework="megatron", tp_comm_overlap="async")  # fmt: skip
    on = Case.of("llama3-70b", "H100-SXM", **case).evaluate()
    off = Case.of("llama3-70b", "H100-SXM", nccl_sm_charge=False, **case).evaluate()
    plain = {k: v for k, v in case.items() if k != "tp_comm_overlap"}
    waits = Case.of("llama3-70b", "H100-SXM", **plain).evaluate()
    waits_off = Case.of("llama3-70b", "H100-SXM", nccl_sm_charge=False, **plain).evaluate()
    tp_waits = next(r for r in waits.traffic if r.traffic.axis == "tp")
    assert tp_waits.exposed_seconds == tp_waits.seconds == pytest.approx(33.603, abs=5e-4)
    # 292.4255 s before Megatron-FSDP's own optimizer-step passes (model.step_passes: 12 B more
    # an element stepped, 70,553,706,496 / 4 / 16 at 2.97 TB/s, 4.5 ms)
    own = 12 * 70_553_706_496 / 4 / 16 / 2.97e12
    assert waits.step_s == pytest.approx(292.4255 + own, abs=5e-4)
    assert waits_off.step_s == pytest.approx(262.668 + own, abs=5e-4)
    assert waits.step_s - on.step_s == pytest.approx(33.603 - 23.651, abs=1e-3)
    dp_on = next(r for r in on.traffic if r.traffic.axis == "dp")
    dp_off = next(r for r in off.traffic if r.traffic.axis == "dp")
    latency = (8.4 + 7 * 14 + 8 * 3.4) * 1e-6
    wire = 1.57123 - 2 * 442 * (8.4 + 15 * 14) * 1e-6  # a micro-batch's bytes, as before
    reduce_s = wire / 2 + 442 * latency
    assert 128 * (wire + 3 * 442 * latency) == pytest.approx(199.080, abs=5e-3)  # Simple alone
    microbatch = reduce_s + wire / 2 * 96 / 88.32 + 2 * 442 * 57.2e-6
    assert dp_on.seconds == dp_off.seconds == pytest.approx(128 * microbatch, abs=5e-3)
    assert dp_on.seconds == pytest.approx(198.105, abs=5e-4)
    assert dp_off.exposed_seconds == pytest.approx((127 * reduce_s + microbatch) / 442, abs=5e-5)
    last = reduce_s / 442  # the backward's last bucket: after its computation, waited whole
    phi = 1 - 1 / 1.177
    assert dp_on.exposed_seconds == pytest.approx(
        128 * (phi * (microbatch - last) + last), abs=5e-4
    )
    assert dp_on.exposed_seconds == pytest.approx(29.976, abs=5e-4)
    assert off.step_s == pytest.approx(249.233 + own, abs=5e-4)
    tp_on = next(r for r in on.traffic if r.traffic.axis == "tp")
    tp_off = next(r for r in off.traffic if r.traffic.axis == "tp")
    assert tp_on.seconds == tp_off.seconds == pytest.approx(33.603, abs=5e-4)
    assert tp_off.exposed_seconds == pytest.approx(20.168, abs=5e-4)
    hidden = tp_on.seconds - tp_off.exposed_seconds
    assert tp_on.exposed_seconds == pytest.approx(tp_off.exposed_seconds + (1 - 1 / 1.350) * hidden)
    assert on.step_s == pytest.approx(282.473 + own, abs=5e-4)
