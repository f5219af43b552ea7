"""Split-backward schedules: the papers' worked examples, the closed forms of model.pipeline_zb
against the simulations of model.schedule (exact, Fractions), and the timelines' invariants."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.model._maxplus import evaluate, step_forms
from trainplan.model.errors import InputError, LayoutError
from trainplan.model.pipeline_sim import PassTimes
from trainplan.model.pipeline_zb import (
    check_split_schedule,
    chunks_in_flight,
    dualpipe_bubble,
    parameter_copies,
    stage_placement,
    w_pending,
    zb_h1_bubble,
    zb_h2_bubble,
    zb_v_bubble,
)
from trainplan.model.schedule import simulate
from trainplan.model.schedule_support import check_schedule_framework
from trainplan.model.schedule_zb import dualpipe_order, dualpipe_stage, loop_stage, zb_h1_order

EQUAL = PassTimes(1, 1, 1)
TIME = st.fractions(Fraction(1, 4), 4).map(lambda x: x.limit_denominator(8))


def sync_idle(t, rank):
    return t.step_time - t.busy_time(rank)


# ------------------------------------------------------------------ Qi et al. 2024, Table 2
def test_zero_bubble_paper_table_2_at_equal_pass_times():
    """Qi et al. 2024 Table 2 with T_F = T_B = T_W = 1 and p = 4 (their Figures 2 and 3):
    1F1B's bubble (p − 1)(T_F + T_B + T_W) = 9, ZB-H1's (p − 1)(T_F + T_B − T_W) = 3 — a third —
    ZB-H2's (p − 1)(T_F + T_B − 2T_W) = 0; peak memory p·M_B, p·M_B and (2p − 1)·M_B."""
    p, m = 4, 8
    one_f_one_b = simulate(p, m, "1f1b", backward_ratio=2)  # a full backward is T_B + T_W
    assert one_f_one_b.step_time - one_f_one_b.busy_time(0) == 9
    assert one_f_one_b.peak_held(0) == p
    h1 = simulate(p, m, "zb-h1", times=EQUAL)
    assert [sync_idle(h1, r) for r in range(p)] == [3] * p
    assert h1.span_bubble == 3 == zb_h1_bubble(p, EQUAL)
    assert [h1.peak_chunks_held(r) for r in range(p)] == [p] * p  # "the same as 1F1B"
    h2 = simulate(p, m, "zb-h2", times=EQUAL)
    assert h2.span_bubble == 0  # the parallelogram: zero bubble
    assert [sync_idle(h2, r) for r in range(p)] == [3] * p  # (p − 1)·T_F when steps synchronise
    assert [h2.peak_chunks_held(r) for r in range(p)] == [2 * p - 1] * p


def test_zb_h2_is_a_parallelogram():
    """§2.2 of Qi et al. 2024: "more F passes during the warm-up phase" — stage i runs
    2(p − i) − 1 forwards before its first B — and the W passes reordered at the tail into a
    parallelogram: stage i computes without a gap from i·T_F to 3m + i."""
    p, m = 4, 8
    t = simulate(p, m, "zb-h2", times=EQUAL)
    for i, slots in enumerate(t.slots):
        warmup = next(k for k, s in enumerate(slots) if s.kind != "F")
        assert warmup == 2 * (p - i) - 1
        assert slots[0].start == i and slots[-1].end == 3 * m + i
        assert all(a.end == b.start for a, b in zip(slots, slots[1:], strict=False))


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(0, 6), TIME, TIME, TIME)
def test_zb_h1_bubble_closed_form(p, extra, t_f, t_b, t_w):
    """(p − 1)·max(T_F, T_B, T_F + T_B − T_W) idle on every rank of a synchronised step for
    m >= p; on the paper's domain T_W <= min(T_F, T_B) it is (p − 1)(T_F + T_B − T_W), the span
    bubble too."""
    times = PassTimes(t_f, t_b, t_w)
    t = simulate(p, p + extra, "zb-h1", times=times)
    want = zb_h1_bubble(p, times)
    assert all(sync_idle(t, r) == want for r in range(p))
    if t_w <= min(t_f, t_b):
        assert want == (p - 1) * (t_f + t_b - t_w) == t.span_bubble


@pytest.mark.parametrize("p, m", [(2, 2), (3, 5), (4, 4), (4, 9), (6, 7)])
def test_zb_h1_step_time_as_linear_forms(p, m):
    """The step time of ZB-H1's order on symbolic durations: exactly the forms
    m·(F + B + W) + i·F + (p − 1 − i)·B + k·(B − W), 0 <= k <= i <= p − 1, whose maximum is
    zb_h1_bubble's (p − 1)·max(F, B, F + B − W)."""
    forms = step_forms(p, p, loop_stage(p), [zb_h1_order(p, m, 1, r) for r in range(p)])
    want = {(m + i, m + p - 1 - i + k, m - k, 0) for i in range(p) for k in range(i + 1)}
    assert set(forms) == want


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(0, 5), TIME, TIME, TIME)
def test_zb_h2_bubble(p, extra, t_f, t_b, t_w):
    """Table 2's (p − 1)(T_F + T_B − 2T_W) as the span bubble (floored at 0) and
    (p − 1)·max(T_F, T_F + T_B − 2T_W) idle in a synchronised step, whenever T_W <= T_F."""
    times = PassTimes(max(t_f, t_w), t_b, t_w)
    t = simulate(p, 2 * p - 1 + extra, "zb-h2", times=times)
    span, sync = zb_h2_bubble(p, times)
    assert t.span_bubble == span
    assert max(sync_idle(t, r) for r in range(p)) == sync


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("extra", [0, 1, 2, 4, 9])
def test_zb_h2_memory(p, extra):
    """(2p − 1) micro-batches in flight on every rank (Table 2's (2p − 1)·M_B), the W buffers
    min(2r + 1 + m − (2p − 1), p + r)."""
    m = 2 * p - 1 + extra
    t = simulate(p, m, "zb-h2")
    for r in range(p):
        assert t.peak_chunks_held(r) == chunks_in_flight("zb-h2", p, m, r) == 2 * p - 1
        assert t.peak_w_pending(r) == w_pending("zb-h2", p, m, r)


# ------------------------------------------------------------------ ZB-V (Qi et al. 2024 §6)
@pytest.mark.parametrize("p", [1, 2, 3, 4, 6, 8])
@pytest.mark.parametrize("extra", [0, 1, 5])
def test_zb_v_zero_bubble_at_equal_times(p, extra):
    """§6: zero bubble when T_F = T_B = T_W, the peak of 1F1B's first stage on every rank
    (2p chunk micro-batches = p of the rank's layers)."""
    m = 2 * p - 1 + extra
    for unit in (Fraction(1), Fraction(3, 2)):
        t = simulate(p, m, "zb-v", times=PassTimes(unit, unit, unit))
        span, sync = zb_v_bubble(p, unit)
        assert t.span_bubble == span == 0
        assert all(sync_idle(t, r) == sync for r in range(p))
    for r in range(p):
        assert t.peak_chunks_held(r) == chunks_in_flight("zb-v", p, m, r) == 2 * p
        assert t.peak_held(r) == p
        assert t.peak_w_pending(r) == w_pending("zb-v", p, m, r)


def test_zb_v_puts_embedding_and_output_on_rank_0():
    t = simulate(4, 8, "zb-v")
    assert stage_placement("zb-v", 4, 2)[0] == (0, 7)
    first = {(s.chunk, s.microbatch) for s in t.slots[0] if s.kind == "F"}
    assert (0, 0) in first and (1, 0) in first  # rank 0 runs stage 0 and stage 7


# ------------------------------------------------------------------ DualPipe (DeepSeek-V3)
@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(
        [("dualpipe", 2), ("dualpipe", 4), ("dualpipe", 6), ("dualpipe", 8)]
        + [("dualpipev", p) for p in (1, 2, 3, 4)]
    ),
    st.integers(0, 3),
    TIME,
    st.fractions(0, 1),
)
def test_dualpipe_bubble_on_its_domain(name_pp, extra, t, share):
    """DeepSeek-V3 Table 2 / DualPipe README: (PP/2 − 1)(F&B + B − 3W), B the full backward,
    with F = B_input = W and the overlapped block between its longer half (2t) and serial (3t)."""
    name, pp = name_pp
    m = 2 * pp + 2 * extra
    t_fb = 2 * t + share.limit_denominator(8) * t
    times = PassTimes(t, t, t, t_fb)
    sim = simulate(pp, m, name, times=times)
    stages = pp if name == "dualpipe" else 2 * pp
    assert max(sync_idle(sim, r) for r in range(pp)) == dualpipe_bubble(stages, times)
    for r in range(pp):
        assert sim.peak_chunks_held(r) == chunks_in_flight(name, pp, m, r) == stages + 1
        assert sim.peak_w_pending(r) == w_pending(name, pp, m, r)


def test_dualpipe_readme_examples():
    """The README's figures: DualPipe on 8 ranks with 20 micro-batches (10 from each end) and
    DualPipeV on 4 ranks (8 stages) with 10; every rank runs every micro-batch of each of its two
    stages forward and backward once."""
    for name, pp, m in (("dualpipe", 8, 20), ("dualpipev", 4, 10)):
        t = simulate(pp, m, name)
        for rank in t.slots:
            forwards = [s for s in rank if s.kind == "F"]
            backwards = [s for s in rank if s.kind in "BI"]
            assert len(forwards) == len(backwards) == 2 * (m if name == "dualpipev" else m // 2)
            assert any(s.overlap for s in rank)  # the F&B blocks of the steady phase
    both = {s.direction for rank in simulate(8, 20, "dualpipe").slots for s in rank}
    assert both == {0, 1}


def test_dualpipe_formula_differs_off_its_domain():
    """Off F = B = W the README formula is not the simulated idle: T_F = 2, T_B = T_W = 1,
    F&B = 4 on 8 ranks idles 12 on its idlest rank; the formula says 9."""
    times = PassTimes(2, 1, 1, 4)
    sim = simulate(8, 20, "dualpipe", times=times)
    assert max(sync_idle(sim, r) for r in range(8)) == 12
    assert dualpipe_bubble(8, times) == 9


def test_dualpipe_step_grows_by_two_overlapped_blocks_per_pair():
    """Past the minimum, each extra micro-batch from each end adds one F&B block to every rank's
    steady phase per direction: the step time is the minimum's plus (m − 2·pp)·t_fb."""
    pp = 4
    base = step_forms(
        pp, pp, dualpipe_stage(pp), [dualpipe_order(pp, 2 * pp, r) for r in range(pp)]
    )
    more = step_forms(
        pp, pp, dualpipe_stage(pp), [dualpipe_order(pp, 2 * pp + 6, r) for r in range(pp)]
    )
    assert set(more) == {(a, b, c, d + 6) for a, b, c, d in base}
    assert (
        evaluate(more, 1, 1, 1, 2)
        == simulate(pp, 2 * pp + 6, "dualpipe", times=PassTimes(1, 1, 1, 2)).step_time
    )


def test_parameter_copies_and_placement():
    """DeepSeek-V3 Table 2: DualPipe 2× parameters (each stage on two ranks), DualPipeV and the
    rest 1× of their own stages."""
    assert parameter_copies("dualpipe") == 2
    assert [parameter_copies(s) for s in ("1f1b", "zb-h1", "zb-v", "dualpipev")] == [1] * 4
    placement = stage_placement("dualpipe", 8)
    held = sorted(s for rank in placement for s in rank)
    assert held == sorted(list(range(8)) * 2)  # every stage twice
    assert stage_placement("interleaved", 4, 2) == ((0, 4), (1, 5), (2, 6), (3, 7))


# ------------------------------------------------------------------ invariants of every timeline
@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev", "zb-h1 v2", "zb-h1 v3"]),
    st.integers(1, 5),
    st.integers(0, 6),
    TIME,
    TIME,
    TIME,
)
def test_timelines_respect_the_dataflow(name, pp, extra, t_f, t_b, t_w):
    """Every pass once, a rank never runs two at once (but an F&B pair), every input before its
    use; interleaved ZB-H1 (v = 2, 3) included."""
    name, _, v = name.partition(" v")
    if name == "dualpipe":
        pp = 2 * ((pp + 1) // 2)
    m = 2 * pp + 2 * extra
    if v:
        m = pp * (1 + extra)  # whole rounds of pp micro-batches
    t = simulate(pp, m, name, int(v) if v else None, times=PassTimes(t_f, t_b, t_w))
    placement = stage_placement(name, pp, t.v)
    stages = pp if name == "dualpipe" else pp * t.v
    ends = {}
    for rank, slots in enumerate(t.slots):
        for a, b in zip(slots, slots[1:], strict=False):
            assert a.end <= b.start or (a.overlap and b.overlap and a.start == b.start)
        for s in slots:
            stage = placement[rank][s.chunk]
            key = (s.kind, s.direction, stage, s.microbatch)
            assert key not in ends
            ends[key] = s
    count = m if name != "dualpipe" else m // 2
    directions = (0, 1) if name == "dualpipe" else (0,)
    for d in directions:
        for j in range(count):
            for u in range(stages):
                f = ends["F", d, u, j]
                if u:
                    assert ends["F", d, u - 1, j].end <= f.start
                grad = ends.get(("B", d, u, j)) or ends["I", d, u, j]
                after = (
                    ends["F", d, u, j]
                    if u == stages - 1
                    else (ends.get(("B", d, u + 1, j)) or ends["I", d, u + 1, j])
                )
                assert after.end <= grad.start
                if grad.kind == "I":
                    assert ends["W", d, u, j].start >= grad.end


# ------------------------------------------------------------------ rules and frameworks
@pytest.mark.parametrize(
    "args, message",
    [
        ((3, 8, "dualpipe", 2), "pp: 3 must be even"),
        ((4, 6, "dualpipe", 2), "must be at least 2·pp = 8"),
        ((4, 9, "dualpipe", 2), "must be even under DualPipe"),
        ((4, 7, "dualpipev", 2), "must be at least 2·pp = 8"),
        ((4, 8, "zb-v", 3), "virtual_stages: 3 must be 2"),
        ((4, 8, "zb-h2", 2), "virtual_stages: 2 must be 1"),
        ((4, 8, "zigzag", 1), "schedule: 'zigzag' is not one of"),
        ((2, 5, "zb-h1", 2), "num_microbatches: 5 must be a multiple of max"),
    ],
)
def test_schedule_rules(args, message):
    with pytest.raises(LayoutError, match=message):
        check_split_schedule(*args)


def test_options_of_the_other_family_are_refused():
    with pytest.raises(InputError, match="backward_ratio: does not apply to zb-h1"):
        simulate(4, 8, "zb-h1", backward_ratio=2)
    with pytest.raises(InputError, match="times: per-pass durations apply"):
        simulate(4, 8, "1f1b", times=EQUAL)


@pytest.mark.parametrize(
    "schedule, framework, ok",
    [
        ("zb-h1", "textbook", True),
        ("zb-v", "fsdp2", True),
        ("dualpipev", "fsdp2", True),
        ("zb-h1", "megatron", False),
        ("zb-h2", "fsdp2", False),
        ("dualpipe", "fsdp2", False),
        ("dualpipe", "textbook", True),
        ("zb-v", "deepspeed", False),
        ("interleaved", "deepspeed", False),
        ("gpipe", "megatron", False),
    ],
)
def test_framework_support(schedule, framework, ok):
    if ok:
        check_schedule_framework(schedule, framework, 4, 8)
    else:
        with pytest.raises(
            LayoutError, match=f"{schedule} does not run under framework {framework}"
        ):
            check_schedule_framework(schedule, framework, 4, 8)


def test_torch_multi_stage_schedules_need_two_stages_per_rank():
    """torchtitan b5bcd76 pipeline_parallel.py _get_pipeline_metadata: a PipelineScheduleMulti
    ("Multi-stage schedule requires at least 2 stages per rank"): InterleavedZeroBubble at
    ZB-H1's one chunk per rank and Interleaved1F1B at v = 1 are refused under fsdp2."""
    with pytest.raises(LayoutError, match="zb-h1 does not run under framework fsdp2: torchtitan"):
        check_schedule_framework("zb-h1", "fsdp2", 4, 10)
    with pytest.raises(LayoutError, match="virtual_stages: 1 under schedule interleaved"):
        check_schedule_framework("interleaved", "fsdp2", 4, 8, 1)
    check_schedule_framework("interleaved", "fsdp2", 4, 8, 2)
    check_schedule_framework("interleaved", "megatron", 4, 8, 2)


def test_interleaved_at_one_chunk_is_refused_everywhere():
    """Megatron-LM d98e8a6 arguments.py validate_args sets virtual_pipeline_model_parallel_size
    1 to None (the one-chunk 1F1B runs): ``interleaved`` at v = 1 is refused under megatron and
    textbook too, naming ``virtual_stages``, since the interleaved order at v = 1 holds
    2(p − 1 − r) + 1 micro-batches on rank r (7 on rank 0 at p = 4) where 1F1B holds p − r (4)."""
    for fw in ("megatron", "textbook"):
        with pytest.raises(LayoutError, match="virtual_stages: 1 under schedule interleaved needs"):
            check_schedule_framework("interleaved", fw, 4, 8, 1)
    check_schedule_framework("interleaved", "textbook", 4, 8, 2)
