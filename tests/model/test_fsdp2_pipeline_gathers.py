"""FSDP2 under PyTorch's pipeline schedules as torchtitan runs it (model/fsdp2_pipeline.py,
model/mechanisms.py ``_fsdp2_pipelined``).

* torchtitan b5bcd76c6 ``get_fsdp_reshard_after_forward_policy``: the default policy
  ``"default"`` is ``not pp_enabled``, so with pp > 1 torchtitan runs ZeRO-2
  (``reshard_after_forward=False``); ``"always"`` is ZeRO-3.
* PyTorch 2.13.0 ``PipelineStage.backward_maybe_with_nosync`` turns the reshard after backward
  off before every backward; FSDP's ``unshard`` returns at once for a unit already whole. So
  under ZeRO-3 a forward frees each unit, a backward leaves it whole, and a pass gathers only the
  units it finds freed: the first forward, each forward after a forward, each backward after a
  forward — m + 1 a step, not the 2m of a step without a pipeline.
"""

from __future__ import annotations

import pytest

import trainplan
from trainplan.model.dp_exposure import microbatch_exposed_seconds
from trainplan.model.estimate import evaluation_context
from trainplan.model.fsdp2_pipeline import default_zero_stage, regather_forward_share
from trainplan.model.layout import Layout
from trainplan.model.mechanisms import mechanism
from trainplan.model.op_rates import stream_triad_fraction
from trainplan.model.terms.dp_time import dp_group_seconds
from trainplan.model.terms.fields import LayoutFields
from trainplan.model.terms.roofline import window_seconds
from trainplan.optimizer.case import Case, links_for

OWN = 6 * (16 * 218_112_000 + 525_336_576) / 16 / (2.039e12 * 0.83)
"""FSDP2's own optimizer-step passes (model.step_passes: the clip's scaling of every FP32
gradient less the BF16 copy torchtitan never writes, 6 B an element) over Llama 3 8B's busiest
stage ÷ dp 16 at A100's BabelStream triad, 2.039 TB/s × 0.83: 0.89 ms."""

COPIES = (
    (22 + 16 * 14)
    * (16 * 218_112_000 + 525_336_576)
    / (
        2.039e12 * stream_triad_fraction("A100-80GB")  # type: ignore[operator]
    )
)
"""FSDP2's copies around its collectives on the compute stream (model.fsdp2_copies), ZeRO-3
under a pipeline schedule, m 16: the first micro-batch the step's gather and its re-gather
(copy-outs of 4 B each), the FP32 upcast (6 B) and the reduce-scatter's copy-in (8 B), each later
one a re-gather's copy-out and the FP32 accumulation (4 + 10 B); m + pp − 1 = 17 backwards over
the busiest stage's 4,015,128,576 unsharded elements at the triad: 0.581 s."""


def _gathers(passes: str, reshard_after_forward: bool) -> tuple[int, int]:
    """(gathers by forwards, by backwards) of one chunk's passes in order ("F", "B" a full
    backward or "I" its input-gradient half, "W" the weight-gradient half, "U" the runtime's
    UNSHARD), replayed with FSDP2's rules: a pass gathers the units it finds freed; a forward
    frees them under ``reshard_after_forward``, a backward (``reshard_after_backward`` off)
    leaves them whole, ``W`` runs no FSDP hook."""
    freed, forward, backward = True, 0, 0
    for p in passes.split():
        if p == "U":
            forward += freed  # the runtime gathers the first forward's units ahead of it
            freed = False
        elif p == "F":
            forward += freed
            freed = reshard_after_forward
        elif p in ("B", "I"):
            backward += freed
            freed = False
    return forward, backward


SCHEDULE_1F1B_STAGE0 = "F F F F B F B F B F B F B B B B"
"""``Schedule1F1B._step_microbatches`` on stage 0 of 4, m = 8: ``min(8, 4 − 0)`` warm-up
forwards, then a backward and a forward in turn until the forwards are done, then the last
three backwards."""
SCHEDULE_1F1B_STAGE3 = "F B F B F B F B F B F B F B F B"
"""The same on stage 3: one warm-up forward."""
ZBV_RANK0_CHUNK0 = "U F F F F F F F F I W I W I W I W I W I W I W I W"
"""``ScheduleZBVZeroBubble`` (pp 4, m 8), rank 0's first chunk (stage 0) from its
``pipeline_order_with_comms`` (``0UNSHARD 7UNSHARD 0F0 … 0F6 7F0 … 0F7 0I0 0W0 … 0I7 0W7``)."""
ZBV_RANK0_CHUNK1 = "U F I W F I W F I W F I W F I W F I W F I W F I W"
"""… and its second (stage 7)."""
INTERLEAVED_RANK0_CHUNK1 = "U F F F F B B F B F B F F B B B B"
"""``ScheduleInterleaved1F1B`` (pp 4, m 8, v 2), rank 0's second chunk (stage 4):
``4F0 4F1 4F2 4F3 … 4B0 … 4B1 4F4 4B2 4F5 4B3 4F6 … 4F7 … 4B4 4B5 4B6 4B7``."""


@pytest.mark.parametrize(
    ("passes", "by_hand"),
    [
        (
            SCHEDULE_1F1B_STAGE0,
            (4, 5),
        ),  # the 4 warm-up forwards, then each backward after a forward
        (SCHEDULE_1F1B_STAGE3, (1, 8)),  # the first forward, then every backward
        (ZBV_RANK0_CHUNK0, (8, 1)),  # UNSHARD + the 7 forwards after a forward, the first I
        (ZBV_RANK0_CHUNK1, (1, 8)),
        (INTERLEAVED_RANK0_CHUNK1, (5, 4)),  # 4 runs of backwards; F6 F7: F7 gathers
    ],
)
def test_m_plus_one_gathers_whatever_the_order(passes, by_hand):
    """m = 8 micro-batches: 9 gathers on every chunk, split between forwards and backwards as
    the schedule orders them; one without the reshard after forward."""
    assert _gathers(passes, True) == by_hand
    assert sum(by_hand) == 8 + 1
    assert _gathers(passes, False) == (1, 0)


def test_mechanism_counts_and_bytes():
    """ZeRO-3 under pp: 1 gather a step (the first forward's) + 1 a micro-batch, and the FP32
    reduce-scatter once: (4 + 2, 2) bytes per parameter; ZeRO-2 one gather a step."""
    z3, z2 = mechanism("fsdp2", 3, pipelined=True), mechanism("fsdp2", 2, pipelined=True)
    assert (z3.gathers_per_step, z3.gathers_per_microbatch, z3.traffic_terms()) == (1, 1, (6, 2))
    assert (z2.gathers_per_step, z2.gathers_per_microbatch, z2.traffic_terms()) == (1, 0, (6, 0))
    assert z3.regathers_after_forward and not z2.regathers_after_forward
    assert z3.step_gathers_in_forward and z2.step_gathers_in_forward
    assert 'fsdp_reshard_after_forward "always"' in z3.name
    assert '"default" (= "never" with pp > 1)' in z2.name
    assert z3.memory_terms(800, 8, 100) == z2.memory_terms(800, 8, 100)  # the same buffers


def test_llama3_8b_pp2_zero3_traffic_by_hand():
    """Llama 3 8B, dp 4 × pp 2, b 1, B 32: m = 8. The busiest stage holds 16 blocks of
    218,112,000, the final norm (4,096) and the output layer (128,256 × 4,096 = 525,336,576):
    P = 4,015,132,672. Ring share 3/4; per parameter the FP32 reduce-scatter once (4 B) and
    m + 1 = 9 BF16 gathers (18 B): 3/4 · P · 22 = 66,249,689,088 B a step (it was
    3/4 · P · (4 + 2 · 8 · 2) = 108,408,582,144 B with two gathers a micro-batch)."""
    P = 16 * 218_112_000 + 4_096 + 128_256 * 4_096
    assert P == 4_015_132_672
    est = Case.of(
        "llama3-8b", "H100-SXM", framework="fsdp2", dp=4, pp=2, zero_stage=3,
        global_batch_size=32, seq_len=8192,
    ).evaluate()  # fmt: skip
    dp = next(r for r in est.traffic if r.traffic.axis == "dp").traffic
    assert dp.bytes_per_step * 4 == 3 * P * 22 == 4 * 66_249_689_088
    assert dp.microbatch_bytes * 4 == 3 * P * 2
    assert (
        dp.collective
        == "reduce-scatter (fp32) + all-gather m + 1 times a step (freed after each forward)"
    )


def test_forward_share_by_schedule():
    """GPipe: every forward but the first gathers, (m − 1)/m of the m; 1F1B and the V schedules
    gather in their backwards; interleaved counted in forwards."""
    assert regather_forward_share("gpipe", 16) == 15 / 16
    assert regather_forward_share("1f1b", 16) == regather_forward_share("zb-v", 16) == 0
    assert regather_forward_share("dualpipev", 16) == 0
    assert regather_forward_share("interleaved", 16) == 1


def dp_parts(schedule: str, zero_stage: int = 3, **layout):  # type: ignore[no-untyped-def]
    """(the dp group's :class:`~model.dp_exposure.DpSeconds`, its calls, a micro-batch's window,
    the dp traffic row, the estimate) of Llama 3 8B on A100-80GB, dp 16 × pp 2, s 512, B 256,
    NCCL's SM charge off, under ``schedule``."""
    case = Case.of(
        "llama3-8b", "A100-80GB", framework="fsdp2", dp=16, pp=2, zero_stage=zero_stage,
        seq_len=512, global_batch_size=256, schedule=schedule, nccl_sm_charge=False, **layout,
    )  # fmt: skip
    est = case.evaluate()
    c = evaluation_context(case.model, case.training, case.device, case.options)
    links = links_for(est.layout, case.links, case.fabric)
    f = LayoutFields(est.layout, case.training.global_batch_size, 0, links)
    (d, calls), _ = dp_group_seconds(c, f)
    dp = next(r for r in est.traffic if r.traffic.axis == "dp")
    return d, calls, window_seconds(c, f), dp, est


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_exposure_by_hand_a100(schedule):
    """Llama 3 8B on A100-80GB (NCCL's SM charge off, φ = 0: ``nccl_sm_charge=false``), dp 16 × pp 2, s 512, B 256: m = 16.
    The busiest stage's 16 blocks (16 calls a collective, tail 1/16) reduce-scatter their FP32
    gradients once, R = 79.54 ms, and gather their BF16 weights 17 times, a = 40.33 ms each.
    The dp group's 16 ranks lie 8 on each of 2 nodes: NCCL's ring crosses the network in 1 of
    its 15 steps, a call's latency 8.4 + 14 + 14 × 3.4 = 70.0 µs (218.4 µs with every step at
    the network's 14 µs: R = 81.91 ms, a = 42.70 ms, 16 × 148.4 µs more each).
    A micro-batch's window t = 79.47 ms: its forward t/3 = 26.49 ms, its backward 52.98 ms.

    * R waits whole after stage 0's last backward (model.pipeline_reduce).
    * The first forward's gather: max(a − t/3, a/16) = 13.84 ms.
    * 1F1B, each backward's gather: under 2t/3, hidden; the last micro-batch waits a/16 =
      2.52 ms. Exposed: 79.54 + 13.84 + 2.52 = 95.90 ms; step 1.4588 s.
    * GPipe, 15/16 of the m gathers in forwards: (15/16)·a − t/3 = 11.32 ms waits in each of
      the 16 micro-batches, 181.1 ms: 274.49 ms; step 1.6374 s.

    Both sent 255.96 GB and left 313.4 ms exposed with two gathers a micro-batch (step
    1.676 s); they send 143.04 GB now."""
    d, calls, t, dp, est = dp_parts(schedule)
    a, reduce_s = d.microbatch_s, d.step_reduce_s
    assert calls == 16 and d.step_forward_s == a  # one gather of the stage's units
    assert (reduce_s, a, t) == (
        pytest.approx(0.07954, abs=1e-5),
        pytest.approx(0.04033, abs=1e-5),
        pytest.approx(0.07947, abs=1e-5),
    )
    latency = (8.4 + 14 + 14 * 3.4) * 1e-6
    assert latency == pytest.approx(70.0e-6)
    old = (8.4 + 15 * 14) * 1e-6
    assert (reduce_s + 16 * (old - latency), a + 16 * (old - latency)) == (
        pytest.approx(0.08191, abs=1e-5),
        pytest.approx(0.04270, abs=1e-5),
    )
    first = max(a - t / 3, a / 16)
    assert first == pytest.approx(0.01384, abs=1e-5)
    share = 15 / 16 if schedule == "gpipe" else 0.0
    per_mb = microbatch_exposed_seconds(a, a * share, 0.0, 16, t, 1 / 16)
    if schedule == "gpipe":
        assert per_mb == pytest.approx(16 * (a * 15 / 16 - t / 3))
        assert dp.exposed_seconds == pytest.approx(0.27449, abs=1e-5)
        # 1.6374 before GPipe's bubble was the order's own (model.pipeline_onef); 1.6274 before
        # FSDP2's own optimizer-step passes (OWN), both before its copies (COPIES)
        assert est.step_s == pytest.approx(1.6274 + OWN + COPIES, abs=1e-4)
    else:
        assert per_mb == pytest.approx(a / 16)
        assert dp.exposed_seconds == pytest.approx(0.09590, abs=1e-5)
        assert est.step_s == pytest.approx(1.4488 + OWN + COPIES, abs=1e-4)  # 1.4588 before 1F1B's
        # bubble was the order's own on stages of unequal time (model.pipeline_onef), 1.4488
        # before FSDP2's own optimizer-step passes (OWN), both before its copies (COPIES)
    assert dp.exposed_seconds == pytest.approx(reduce_s + first + per_mb, abs=1e-9)


def test_default_zero_stage_follows_torchtitan():
    """With pp > 1 a layout without a ZeRO stage gets torchtitan's "default" policy, ZeRO-2; a
    stage given is kept; pp 1 and the other profiles keep theirs."""
    assert default_zero_stage("fsdp2", 1) == 3 and default_zero_stage("fsdp2", 2) == 2
    assert Layout.of(framework="fsdp2", dp=8, pp=4).zero_stage == 2
    assert Layout.of(framework="fsdp2", dp=8, pp=4, zero_stage=3).zero_stage == 3
    assert Layout.of(framework="fsdp2", dp=8).zero_stage == 3
    assert Layout.of(framework="megatron", dp=8, pp=4).zero_stage == 1


def test_evaluate_says_which_policy():
    """``trainplan evaluate --model llama3-405b --framework fsdp2 --dp 32 --tp 8 --pp 4
    --recompute full`` now runs ZeRO-2 (135.925 s on H100-SXM; it ran ZeRO-3, 151.759 s) and
    its assumptions name the policy; ``--zero 3`` keeps ZeRO-3, now m + 1 = 65 gathers a step
    (144.013 s). Since NCCL's SM charge follows the algorithm NCCL runs (model.nccl_channels),
    the dp group at tp 8, one rank a node, holds 4 ring blocks (φ 0.075) where NVLS's 16 were
    charged (0.239): ZeRO-2 135.838 s, ZeRO-3 138.383 s. With FSDP2's copies around its
    collectives on the compute stream (model.fsdp2_copies; m 64, m + pp − 1 = 67 backwards)
    over the busiest stage's 32 layers of 16384·(16384 + 1024 + 1024 + 16384)/8 +
    3·16384·53248/8 + 2·16384 = 398,491,648 elements: ZeRO-2 18 + 66 × 10 = 678 B an element,
    2.911 s; ZeRO-3 22 + 66 × 14 = 946 B, 4.062 s."""
    base = dict(model="llama3-405b", framework="fsdp2", dp=32, tp=8, pp=4, recompute="full")
    stage = 32 * 398_491_648
    triad = 3.35e12 * stream_triad_fraction("H100-SXM")  # type: ignore[operator]
    est = trainplan.evaluate(**base)
    assert est.layout.zero_stage == 2
    copies = 678 * stage / triad
    assert copies == pytest.approx(2.911, abs=1e-3)
    assert est.step_s == pytest.approx(135.709 + copies, abs=1e-3)  # 135.838 before 1F1B's
    # bubble was the order's own on stages of unequal time (model.pipeline_onef)
    z3 = trainplan.evaluate(**base, zero_stage=3)
    assert z3.step_s == pytest.approx(138.254 + 946 * stage / triad, abs=1e-3)  # 138.383 before
