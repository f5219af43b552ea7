"""The cost of a split-backward schedule (model.schedule_cost): the pipeline span against the
full timeline of model.schedule (exact at whole-number ratios), the pass times split from a
stage's micro-batch, DualPipe's overlapped block, and the activations held."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.model.errors import LayoutError
from trainplan.model.pipeline import LAYOUT_CHUNKS, Schedule, check_schedule, timeline_chunks
from trainplan.model.pipeline_sim import PassTimes
from trainplan.model.schedule import simulate, split_step_time
from trainplan.model.schedule_cost import (
    check_schedule_domain,
    dualpipe_block,
    in_flight_units,
    pass_times,
    split_span,
)

SPLIT = ("zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev")


def _timeline(name: str, pp: int, m: int, f: int, b: int, w: int, fb: int | None) -> Fraction:
    v = timeline_chunks(name, LAYOUT_CHUNKS[Schedule(name)])
    return simulate(pp, m, name, v, times=PassTimes(f, b, w, fb)).step_time


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(SPLIT),
    half_pp=st.integers(1, 4),
    extra=st.integers(0, 6),
    b=st.fractions(1, 4, max_denominator=4),
    fb_cut=st.integers(0, 2),
)
def test_span_is_the_timeline(
    name: str, half_pp: int, extra: int, b: Fraction, fb_cut: int
) -> None:
    """Pass times f = w = 1 ≤ b (the cost model's domain: recomputation joins B), any m of the
    schedule's domain: the closed forms (ZB-H1, ZB-H2, ZB-V) and the two-point extrapolation of
    the cached timelines (DualPipe, DualPipeV) equal the full timeline exactly."""
    pp = 2 * half_pp
    m = 2 * pp + 2 * extra
    fb = None
    if name.startswith("dualpipe"):
        fb = max(1 + b + 1 - fb_cut, b + 1)
    expected = _timeline(name, pp, m, 1, b, 1, fb)
    got = split_span(name, pp, m, 1.0, float(b), 1.0, None if fb is None else float(fb))
    assert got == pytest.approx(float(expected), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(SPLIT),
    half_pp=st.integers(1, 4),
    extra=st.integers(0, 6),
    b=st.fractions(Fraction(1, 10**6), 5, max_denominator=10**6),
    w=st.fractions(0, 5, max_denominator=10**6),
    fb_at=st.fractions(0, 1, max_denominator=1000),
)
def test_whole_number_run_is_the_fraction_timeline(
    name: str, half_pp: int, extra: int, b: Fraction, w: Fraction, fb_at: Fraction
) -> None:
    """The cost model's timelines run on whole numbers (model.schedule.split_step_time: every
    time times the least common multiple of the denominators, the ratios' up to 10⁶ as
    schedule_cost._ratio rounds them) give exactly the Fraction timeline's step, the same type."""
    pp, v = 2 * half_pp, timeline_chunks(name, LAYOUT_CHUNKS[Schedule(name)])
    m = 2 * pp + 2 * extra
    fb = None
    if name.startswith("dualpipe"):  # within [max(1, b + w), 1 + b + w]
        low = max(Fraction(1), b + w)
        fb = low + (1 + b + w - low) * fb_at
    times = PassTimes(Fraction(1), b, w, fb)
    got = split_step_time(pp, m, name, v, times)
    assert type(got) is Fraction
    assert got == simulate(pp, m, name, v, times=times).step_time


def test_whole_number_run_by_hand() -> None:
    """ZB-H1 at pp 4, m 8 with t_f = 1, t_b = 3/2, t_w = 1/2 (scaled by 2: 2, 3, 1): 8·3 busy
    + 3·max(1, 3/2, 1 + 3/2 − 1/2) = 24 + 6 = 30 (Qi et al. 2024 Table 2), as the timeline."""
    times = PassTimes(Fraction(1), Fraction(3, 2), Fraction(1, 2))
    assert split_step_time(4, 8, "zb-h1", 1, times) == 30
    assert simulate(4, 8, "zb-h1", 1, times=times).step_time == 30


def test_zb_h1_span_by_hand() -> None:
    """ZB-H1 at pp 4, m 8, t_f = t_b = t_w = 1: 8·3 busy + 3·max(1, 1, 1) = 27 (Qi et al. 2024
    Table 2: (p − 1)(T_F + T_B − T_W) = 3), against 1F1B's 8·3 + 3·3 = 33."""
    assert split_span("zb-h1", 4, 8, 1.0, 1.0, 1.0) == 27.0
    assert simulate(4, 8, "1f1b").step_time == 33


def test_dualpipe_overlap_shortens_the_step() -> None:
    """DualPipe on 8 ranks, 16 micro-batches, F = B = W = 1: the serial block (F&B = 3) takes
    54; overlapping to F&B = 2 takes 44 — 16 blocks one unit shorter and a shorter drain."""
    assert split_span("dualpipe", 8, 16, 1.0, 1.0, 1.0, None) == 54.0
    assert split_span("dualpipe", 8, 16, 1.0, 1.0, 1.0, 2.0) == 44.0


def test_span_over_columns() -> None:
    """Arrays of layouts give each layout's scalar span."""
    f = np.array([1.0, 2.0])
    got = split_span("zb-v", 4, 8, f, 2 * f, f)
    assert list(got) == [
        split_span("zb-v", 4, 8, 1.0, 2.0, 1.0),
        2 * split_span("zb-v", 4, 8, 1.0, 2.0, 1.0),
    ]


def test_pass_times() -> None:
    """A 12 s micro-batch, 9 s without recomputation, 2 chunks: F = W = 9/3/2 = 1.5 s, B =
    (12 − 6)/2 = 3 s (the 3 s recomputed forward joins B)."""
    assert pass_times(12.0, 9.0, 2) == (1.5, 3.0, 1.5)


def test_dualpipe_block() -> None:
    """F = B = W = 1 with 0.5 of all-to-all exposed and 0.8 in all: the block is 3 − 0.5 = 2.5;
    with 2.8 of all-to-all the communication paces it (3.5: above the serial 3); never below
    max(F, B + W) = 2."""
    assert dualpipe_block(1.0, 1.0, 1.0, 0.5, 0.8) == 2.5
    assert dualpipe_block(1.0, 1.0, 1.0, 0.5, 2.8) == 2.8
    assert dualpipe_block(1.0, 1.0, 1.0, 0.5, 3.5) == 3.5
    assert dualpipe_block(1.0, 1.0, 1.0, 1.5, 0.0) == 2.0


@pytest.mark.parametrize(
    ("name", "pp", "m", "units"),
    [
        ("zb-h1", 4, 8, 4),
        ("zb-h2", 4, 8, 7),
        ("zb-v", 4, 8, 4),
        ("dualpipe", 16, 64, 17),
        ("dualpipev", 16, 64, Fraction(33, 2)),
    ],
)
def test_in_flight_units(name: str, pp: int, m: int, units: Fraction) -> None:
    """The timeline's most chunks held (peak_chunks_held on every rank) over the chunks a rank's
    layers make: ZB-V 2·pp half-rank chunks = pp; DualPipe pp + 1 one-stage chunks (DeepSeek-V3
    Table 2 "PP + 1"); DualPipeV 2·pp + 1 half-rank chunks."""
    assert in_flight_units(name, pp, m) == units
    if pp <= 4:
        v = timeline_chunks(name, LAYOUT_CHUNKS[Schedule(name)])
        t = simulate(pp, m, name, v)
        per_rank = 1 if name == "dualpipe" else v
        assert max(t.peak_chunks_held(r) for r in range(pp)) == units * per_rank


def test_layout_rules() -> None:
    """The layout's chunks per rank and the forms' domain are refused by name."""
    assert check_schedule(4, 8, "zb-v", 2) is Schedule.ZB_V
    with pytest.raises(LayoutError, match="virtual_stages: 1 must be 2 under schedule zb-v"):
        check_schedule(4, 8, "zb-v", 1)
    with pytest.raises(LayoutError, match="virtual_stages: 2 must be 1 under schedule dualpipe"):
        check_schedule(4, 8, "dualpipe", 2)
    with pytest.raises(LayoutError, match=r"num_microbatches: 4 must be at least 2·pp − 1 = 7"):
        check_schedule_domain("zb-v", 4, 4)
