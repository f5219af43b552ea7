"""DeepSpeed's pipeline engine as it runs a step, derived by hand from
``deepspeed/runtime/pipe/schedule.py`` (``TrainSchedule``), ``p2p.py`` (blocking ``send`` /
``recv``) and ``engine.py`` (``PartitionedTensor.full`` before the passes): model/deepspeed_pipe.py
and model/step_time.py ``pipe_engine_seconds``."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.model.deepspeed_pipe import (
    pipe_engine_counts,
    train_schedule_span,
    train_schedule_step,
)
from trainplan.model.roofline import Collective, RooflineParams, collective_time
from trainplan.model.step_time import pipe_engine_seconds


def test_train_schedule_order_by_hand() -> None:
    """pp 3, m 2: 2(m + pp − 1) = 8 steps. Stage 0 (forwards on even steps) runs F0 · F1 · · B0
    · B1 … with its backward ids ⌊(k + 1)/2⌋ − 3: B0 at step 5, B1 at step 7; stage 1 (forwards
    on odd steps, id ⌊k/2⌋) F0 at 1, F1 at 3, backward ⌊(k + 1)/2⌋ − 3 + 1: B0 at 4, B1 at 6;
    stage 2 F0 at 2, B0 at 3, F1 at 4, B1 at 5 — 1F1B with every stage in lock-step, each
    backward one step after the one below it sent its input gradient."""
    runs = {
        s: [(k, *train_schedule_step(k, s, 3)) for k in range(8)] for s in range(3)
    }  # (step, micro-batch, forward)
    valid = {s: [(k, i, f) for k, i, f in r if 0 <= i < 2] for s, r in runs.items()}
    assert valid[0] == [(0, 0, True), (2, 1, True), (5, 0, False), (7, 1, False)]
    assert valid[1] == [(1, 0, True), (3, 1, True), (4, 0, False), (6, 1, False)]
    assert valid[2] == [(2, 0, True), (3, 0, False), (4, 1, True), (5, 1, False)]


@pytest.mark.parametrize("pp", [2, 3, 5, 12])
@pytest.mark.parametrize("m", [1, 2, 7, 24])
def test_lock_step_adds_no_bubble(pp: int, m: int) -> None:
    """With free transfers the blocking lock-step takes (m + pp − 1)(F + B), 1F1B's closed form
    (Narayanan et al. 2021 §2.2, what the model charges): a rendezvous pairs a stage running its
    backward with its neighbour running its forward, and the phase each pair settles into lets
    a middle stage run F and B back to back (F 1, B 3: the recomputing backward)."""
    one, three = Fraction(1), Fraction(3)
    assert train_schedule_span(m, pp, one, three, Fraction(0), Fraction(0)) == (m + pp - 1) * 4


def test_critical_transfers_and_gathers_by_hand() -> None:
    """pp 3, m 2, F 1, B 2, transfers s, gathers g (a forward on stages 1, 2 is preceded by one
    gather, a backward on stages 0, 1 by two). The path that ends the step: stage 0 F0 [0, 1]
    → s (RecvActivation on stage 1) → stage 1 g + F0 → s (to stage 2) → stage 2 g + F0, B0
    (no gather: the last stage's output is whole) → the exchange with stage 1 at step 4, 2s (F1's
    input, B0's gradient) → stage 2 g + F1, B1 → s (B1's gradient) → stage 1 2g + B1 → s → stage 0
    2g + B1: F + F + F + B + F + B + B + B = 12 = (m + pp − 1)(F + B), 6 transfers and 7
    gathers; 4m + 2pp − 8 = 6, 3m + 3pp − 8 = 7."""
    s, g = Fraction(1, 100), Fraction(1, 1000)
    span = train_schedule_span(2, 3, Fraction(1), Fraction(2), s, g)
    assert span == 12 + 6 * s + 7 * g
    assert pipe_engine_counts(2, 3) == (6, 7)


def test_counts_match_the_timeline_over_a_grid() -> None:
    """pipe_engine_counts against the timeline over pp 2 … 12, m 1 … 24 and two F:B ratios:
    short transfers and gathers add exactly their counts' time."""
    s, g = Fraction(1, 1000), Fraction(3, 10000)
    for pp in range(2, 13):
        for m in (1, 2, 3, 5, 8, 24):
            for f, b in ((1, 2), (1, 3)):
                extra = train_schedule_span(m, pp, Fraction(f), Fraction(b), s, g)
                extra -= (m + pp - 1) * (f + b)
                transfers, gathers = pipe_engine_counts(m, pp)
                assert extra == transfers * s + gathers * g, (pp, m, f, b)


def test_counts_against_the_former_per_cycle_charge() -> None:
    """The former rule charged 4 transfers and 3 gathers for each of the m + pp − 1 cycles: at
    MT-NLG's pp 35, m 240 that is 1,096 and 822; the critical path holds 1,022 and 817 (the end
    stages exchange with one neighbour only)."""
    assert pipe_engine_counts(240, 35) == (1022, 817)
    assert (4 * (240 + 35 - 1), 3 * (240 + 35 - 1)) == (1096, 822)


def test_pipe_engine_seconds_written_out() -> None:
    """A 64 MiB stage output, tp 8, m 16 on pp 4 (4·16 + 8 − 8 = 64 transfers, 3·16 + 12 − 8 = 52
    gathers), 25 GB/s across nodes: each transfer its 8 MiB share (``PartitionedTensor`` over tp,
    once), each gather rebuilding 64 MiB over NVLink and, on an A100-80GB, its zeros and clone,
    3 × 64 MiB at 0.9 of 2.039 TB/s + 2 launches of 3 µs."""
    p = RooflineParams(gemm_efficiency=0.7)
    out = 64 * 2**20
    send = collective_time(Collective.SEND_RECV, 2, out / 8, 25e9, False, p)
    gather = collective_time(Collective.ALL_GATHER, 8, out * 7 / 8, 300e9, True, p)
    assert send == pytest.approx(8.4e-6 + 14e-6 + 8 * 2**20 / (0.96 * 25e9))
    copies = 3 * out / (0.9 * 2.039e12) + 2 * 3e-6
    t = pipe_engine_seconds(out / 8, 8, 16, 4, 0.0, 25e9, False, 300e9, True, p, 2.039e12)
    assert t == pytest.approx(64 * send + 52 * (gather + copies))
    # tp 1: the whole tensor, no gather, no copies
    whole = collective_time(Collective.SEND_RECV, 2, out, 25e9, False, p)
    t1 = pipe_engine_seconds(out, 1, 16, 4, 0.0, 25e9, False, 1.0, True, p, 2.039e12)
    assert t1 == pytest.approx(64 * whole)
