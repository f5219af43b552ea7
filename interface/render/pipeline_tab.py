"""The pipeline tab for the split-backward schedules (ZB-H1, ZB-H2, ZB-V, DualPipe, DualPipeV):
the simulated timeline, its bubble, step and micro-batches held per rank, each figure with its
source and, where a paper gives one, its closed form checked against the simulation.

:func:`interface.tabs.pipeline_report` hands these schedules here; the JSON keys of the classic
report (``bubble_fraction``, ``held_per_stage``…) keep their meaning.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from trainplan.model.errors import InputError, check_applicable
from trainplan.model.pipeline_sim import PassTimes
from trainplan.model.pipeline_zb import (
    SplitSchedule,
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
from trainplan.model.schedule_support import IMPLEMENTATIONS, SCHEDULE_SUPPORT
from trainplan.model.timeline import Timeline
from trainplan.model.units import parse_number, parse_positive

__all__ = ["split_report", "pass_times", "ORDER_SOURCES"]

ORDER_SOURCES = {
    SplitSchedule.ZB_H1: "PyTorch torch/distributed/pipelining/schedules.py "
    "ScheduleInterleavedZeroBubble (Qi et al. 2024, arXiv 2401.10241, §2.1 ZB-H1)",
    SplitSchedule.ZB_H2: "Qi et al. 2024 §2.2 ZB-H2: its rule (warm-up forwards up to 2p − 1 in "
    "flight, I first, W to fill) at equal pass times",
    SplitSchedule.ZB_V: "PyTorch ScheduleZBVZeroBubble (Qi et al. 2024 §6 ZB-V)",
    SplitSchedule.DUALPIPE: "deepseek-ai/DualPipe dualpipe/dualpipe.py DualPipe.step() "
    "(DeepSeek-V3 report, arXiv 2412.19437, §3.2.1)",
    SplitSchedule.DUALPIPE_V: "deepseek-ai/DualPipe dualpipe/dualpipev.py DualPipeV.step()",
}
"""Where each schedule's per-rank order comes from."""

_SIM = "simulated timeline (model.schedule.simulate: each rank's order run against the dataflow)"


def pass_times(sched: SplitSchedule, t_f: Any, t_b: Any, t_w: Any, t_fb: Any) -> PassTimes:
    """The durations of one chunk's passes from the tab's inputs (1, 1, 1 by default; ``t_fb``
    only under DualPipe and DualPipeV).

    Raises
    ------
    InputError
        A duration not a number, not positive (``t_w`` may be 0), or ``t_fb`` under a schedule
        without overlapped blocks.
    """
    dual = sched in (SplitSchedule.DUALPIPE, SplitSchedule.DUALPIPE_V)
    check_applicable(
        {"t_fb": t_fb}, {} if dual else {"t_fb": f"{sched} has no overlapped F&B block"}
    )
    w = Fraction(1) if t_w is None else parse_number(t_w, "t_w")
    if w < 0:
        raise InputError(f"t_w: {t_w} must not be negative")
    return PassTimes(
        Fraction(1) if t_f is None else parse_positive(t_f, "t_f"),
        Fraction(1) if t_b is None else parse_positive(t_b, "t_b"),
        w,
        None if t_fb is None else parse_positive(t_fb, "t_fb"),
    )


def _closed_form(t: Timeline, times: PassTimes) -> dict[str, Any]:
    """The schedule's bubble in closed form where its source gives one and the inputs are in its
    domain: value, formula, source; checked against the simulation."""
    sched, p, m = t.schedule, t.pp, t.m
    f, b, w = times.t_f, times.t_b, times.t_w
    idle = max(t.step_time - t.busy_time(i) for i in range(p))
    equal = f == b == w
    if sched is SplitSchedule.ZB_H1 and t.v == 1 and m >= p:
        value, sim = zb_h1_bubble(p, times), idle
        text = f"(p − 1)·max(T_F, T_B, T_F + T_B − T_W) = {p - 1}·{max(f, b, f + b - w)}"
        source = "Qi et al. 2024 Table 2: (p − 1)(T_F + T_B − T_W) when T_W ≤ min(T_F, T_B)"
    elif sched is SplitSchedule.ZB_H2 and m >= 2 * p - 1 and w <= f:
        value, sim = zb_h2_bubble(p, times)[0], t.span_bubble
        text = f"(p − 1)·max(0, T_F + T_B − 2·T_W) = {p - 1}·{max(0, f + b - 2 * w)} (span)"
        source = "Qi et al. 2024 Table 2 (ZB-H2), T_W ≤ T_F"
    elif sched is SplitSchedule.ZB_V and m >= 2 * p - 1 and equal:
        value, sim = zb_v_bubble(p, f)[0], t.span_bubble
        text = "0 at T_F = T_B = T_W (span)"
        source = "Qi et al. 2024 §6 (ZB-V)"
    elif (
        sched in (SplitSchedule.DUALPIPE, SplitSchedule.DUALPIPE_V)
        and equal
        and max(f, b + w) <= times.overlapped
    ):
        stages = p if sched is SplitSchedule.DUALPIPE else 2 * p
        value, sim = dualpipe_bubble(stages, times), idle
        text = (
            f"(PP/2 − 1)(F&B + B − 3W) = ({stages}/2 − 1)({times.overlapped} + {b + w} − {3 * w})"
        )
        source = "DeepSeek-V3 report Table 2; deepseek-ai/DualPipe README (B the full backward)"
    else:
        return {"applies": False, "why": "outside the domain of the published closed form"}
    if value != sim:
        raise AssertionError(f"simulated bubble {sim} ≠ closed form {value}")  # pragma: no cover
    return {"applies": True, "value": value, "formula": text, "source": source}


def split_report(
    p: int,
    m: int,
    schedule: str,
    v: int | None,
    times: PassTimes,
) -> dict[str, Any]:
    """The pipeline tab's report for a split-backward schedule (see :func:`interface.tabs.
    pipeline_report`; Fractions, made JSON there).

    Raises
    ------
    LayoutError
        The schedule's rules (:func:`model.pipeline_zb.check_split_schedule`).
    """
    t = simulate(p, m, schedule, v, times=times)
    sched: SplitSchedule = t.schedule
    idle = [t.step_time - t.busy_time(i) for i in range(p)]
    held = _held_closed_form(sched, p, m, t.v)
    if held is not None and (
        held["chunks_held"] != [t.peak_chunks_held(i) for i in range(p)]
        or held["w_pending"] != [t.peak_w_pending(i) for i in range(p)]
    ):
        raise AssertionError(f"simulated memory ≠ closed form {held}")  # pragma: no cover
    worst = max(range(p), key=lambda i: idle[i])
    return {**_split_time(t, times, m, idle, worst), **_split_memory(t, held, p)}


def _split_time(
    t: Timeline, times: PassTimes, m: int, idle: list[Any], worst: int
) -> dict[str, Any]:
    """The split-backward report's schedule, pass times, bubble (on the rank idle longest,
    ``worst``) and step, from the simulated timeline ``t``."""
    sched: SplitSchedule = t.schedule
    p = len(idle)
    return {
        "tab": "pipeline",
        "stages": p,
        "microbatches": m,
        "schedule": str(sched),
        "virtual_stages": t.v,
        "backward_ratio": (times.t_b + times.t_w) / times.t_f,
        "pass_times": {
            "t_f": times.t_f,
            "t_b": times.t_b,
            "t_w": times.t_w,
            "t_fb": times.overlapped if sched.value.startswith("dualpipe") else None,
        },
        "bubble_fraction": idle[worst] / t.step_time,
        "bubble_fraction_exact": _exact(idle[worst] / t.step_time),
        "bubble_fraction_formula": f"idle ÷ step on rank {worst} = {idle[worst]} ÷ {t.step_time}",
        "bubble_ratio": idle[worst] / t.busy_time(worst),
        "bubble_ratio_formula": f"idle ÷ compute on rank {worst} = {idle[worst]} ÷ "
        f"{t.busy_time(worst)}",
        "bubble_time_units": idle[worst],
        "bubble_source": _SIM + "; every rank starts the step together",
        "span_bubble_units": t.span_bubble,
        "span_bubble_source": "Qi et al. 2024 §5: the longest rank's execution time minus its "
        "compute (consecutive steps overlap under optimizer post-validation, §4)",
        "closed_form": _closed_form(t, times),
        "step_time_units": t.step_time,
        "busy_time_units": t.busy_time(worst),
        "busy_time_per_stage": [t.busy_time(i) for i in range(p)],
        "step_source": _SIM + "; order from " + ORDER_SOURCES[sched],
        "time_unit": "the pass times given: one pass runs one chunk (1/v of a rank's layers; "
        "DualPipe: one of the rank's two stages)",
    }


def _split_memory(t: Timeline, held: dict[str, Any] | None, p: int) -> dict[str, Any]:
    """The split-backward report's memory (micro-batches and chunks held, W buffers pending,
    beside their closed form ``held``), placement, frameworks and timeline."""
    sched: SplitSchedule = t.schedule
    return {
        "held_per_stage": [t.peak_held(i) for i in range(p)],
        "chunks_held_per_stage": [t.peak_chunks_held(i) for i in range(p)],
        "chunks_held_closed_form": held,
        "w_pending_per_stage": [t.peak_w_pending(i) for i in range(p)],
        "held_source": _SIM + ": chunk micro-batches between a forward's start and its last "
        "backward's end (held_per_stage: of the rank's layers); W buffers between I and W",
        "parameter_copies": parameter_copies(sched),
        "stage_placement": [list(s) for s in stage_placement(sched, p, t.v)],
        "frameworks": sorted(f.value for f in SCHEDULE_SUPPORT[sched.value]),
        "implementations": list(IMPLEMENTATIONS[sched.value]),
        "timeline": [
            {
                "stage": i,
                "slots": [s.to_dict() for s in t.slots[i]],
                "held_over_time": [list(e) for e in t.held_over_time(i)],
            }
            for i in range(p)
        ],
    }


def _held_closed_form(sched: SplitSchedule, p: int, m: int, v: int) -> dict[str, Any] | None:
    """Chunk micro-batches in flight and W buffers per rank in closed form, where they hold."""
    minimum = {
        SplitSchedule.ZB_H1: p,
        SplitSchedule.ZB_H2: 2 * p - 1,
        SplitSchedule.ZB_V: 2 * p - 1,
    }
    if (sched is SplitSchedule.ZB_H1 and v != 1) or m < minimum.get(sched, 2 * p):
        return None
    return {
        "chunks_held": [chunks_in_flight(sched, p, m, r) for r in range(p)],
        "w_pending": [w_pending(sched, p, m, r) for r in range(p)],
        "source": "model.pipeline_zb.chunks_in_flight / w_pending (Qi et al. 2024 Table 2: pM_B, "
        "(2p − 1)M_B; DualPipe README: PP + 1)",
    }


def _exact(x: Fraction) -> str:
    return f"{x.numerator}/{x.denominator}"
