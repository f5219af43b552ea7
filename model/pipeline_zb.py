"""Split-backward pipeline schedules — zero-bubble ZB-H1, ZB-H2, ZB-V, DualPipe, DualPipeV — as
closed forms: bubble, micro-batches in flight, weight-gradient buffers, parameter copies, the
placement of stages on ranks, and which framework runs each schedule.

The timelines are simulated in :mod:`model.schedule` (orders in :mod:`model.schedule_zb`); the
tests check every closed form here against them, exactly, on the domain each form states.
Durations are those of one chunk's passes (:class:`model.pipeline_sim.PassTimes`): ``t_f``
forward, ``t_b`` input-gradient backward (``I``), ``t_w`` weight-gradient backward (``W``),
``t_fb`` DualPipe's overlapped forward-and-backward block.

The cost model reads them through :mod:`model.schedule_cost` (the pipeline span from per-chunk
pass times, the activations held, the parameter copies).
"""

from __future__ import annotations

from enum import StrEnum
from fractions import Fraction

from trainplan.model.errors import LayoutError
from trainplan.model.pipeline import Schedule, check_counts
from trainplan.model.pipeline_sim import PassTimes

__all__ = [
    "SplitSchedule",
    "TIMELINE_SCHEDULES",
    "check_split_schedule",
    "default_virtual_stages",
    "zb_h1_bubble",
    "zb_h2_bubble",
    "zb_v_bubble",
    "dualpipe_bubble",
    "chunks_in_flight",
    "w_pending",
    "parameter_copies",
    "stage_placement",
]


class SplitSchedule(StrEnum):
    """Schedules that split the backward into an input-gradient pass ``I`` and a weight-gradient
    pass ``W`` (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, arXiv 2401.10241; Qi et
    al., "Pipeline Parallelism with Controllable Memory", arXiv 2405.15362; DeepSeek-V3 technical
    report, arXiv 2412.19437, §3.2.1)."""

    ZB_H1 = "zb-h1"
    ZB_H2 = "zb-h2"
    ZB_V = "zb-v"
    DUALPIPE = "dualpipe"
    DUALPIPE_V = "dualpipev"


TIMELINE_SCHEDULES = tuple(s.value for s in Schedule)
"""Every schedule the pipeline tab simulates."""

_FIXED_V = {
    SplitSchedule.ZB_H2: 1,
    SplitSchedule.ZB_V: 2,
    SplitSchedule.DUALPIPE: 2,
    SplitSchedule.DUALPIPE_V: 2,
}
"""Chunks per rank a schedule fixes (ZB-H1 takes any v: torch's interleaved zero bubble)."""


def default_virtual_stages(schedule: SplitSchedule) -> int:
    """Chunks per rank when none is given: 2 for the V placements and DualPipe, else 1."""
    return _FIXED_V.get(schedule, 1)


def check_split_schedule(pp: int, m: int, schedule: SplitSchedule | str, v: int) -> SplitSchedule:
    """Validate a split-backward schedule's inputs; return it as a :class:`SplitSchedule`.

    Rules: ``pp, m, v >= 1``; interleaved ZB-H1 (``v > 1``) ``m`` a multiple of
    ``max(1, m // pp)`` (PyTorch ``ScheduleInterleavedZeroBubble``'s rounds, without which its
    order deadlocks); ZB-H2 ``v = 1``; ZB-V, DualPipe and DualPipeV exactly two chunks per
    rank (``v = 2``: PyTorch ``ScheduleZBVZeroBubble``/``ScheduleDualPipeV`` raise "requires
    exactly 2 stages per rank"); DualPipe an even ``pp`` and an even ``m >= 2·pp``
    (``dualpipe/dualpipe.py`` ``step()``: ``num_ranks % 2 == 0``, ``num_chunks % 2 == 0 and
    num_chunks >= num_ranks * 2``); DualPipeV ``m >= 2·pp`` (``dualpipe/dualpipev.py``).

    Raises
    ------
    LayoutError
        Naming the parameter, its value and the rule.

    Examples
    --------
    >>> check_split_schedule(4, 8, "dualpipe", 2)
    <SplitSchedule.DUALPIPE: 'dualpipe'>
    """
    try:
        sched = SplitSchedule(str(schedule).lower())
    except ValueError:
        names = ", ".join(TIMELINE_SCHEDULES)
        raise LayoutError(f"schedule: {schedule!r} is not one of {names}") from None
    check_counts(pp, m, v)
    rounds = max(1, m // pp)
    if sched is SplitSchedule.ZB_H1 and v > 1 and m % rounds:
        raise LayoutError(
            f"num_microbatches: {m} must be a multiple of max(1, {m} // pp {pp}) = {rounds} under "
            "interleaved zb-h1 (its rounds of micro-batches)"
        )
    fixed = _FIXED_V.get(sched)
    if fixed is not None and v != fixed:
        raise LayoutError(f"virtual_stages: {v} must be {fixed} under schedule {sched}")
    if sched is SplitSchedule.DUALPIPE and pp % 2:
        raise LayoutError(f"pp: {pp} must be even under DualPipe (the ranks pair up)")
    if sched is SplitSchedule.DUALPIPE and m % 2:
        raise LayoutError(f"num_microbatches: {m} must be even under DualPipe (half from each end)")
    if sched in (SplitSchedule.DUALPIPE, SplitSchedule.DUALPIPE_V) and m < 2 * pp:
        raise LayoutError(f"num_microbatches: {m} must be at least 2·pp = {2 * pp} under {sched}")
    return sched


def zb_h1_bubble(pp: int, times: PassTimes) -> Fraction:
    """Idle time of every rank under ZB-H1 (``v = 1``, ``m >= pp``), synchronised step and
    span alike: ``(pp − 1)·max(t_f, t_b, t_f + t_b − t_w)``.

    Qi et al. 2024 Table 2 gives ``(p − 1)(T_F + T_B − T_W)``, which it is when
    ``t_w <= min(t_f, t_b)`` (their assumption); against 1F1B's ``(p − 1)(T_F + T_B + T_W)`` a
    third at equal times. The max is read off the order (the step time is a maximum of linear
    forms ``m·(t_f + t_b + t_w) + i·t_f + (pp − 1 − i)·t_b + k·(t_b − t_w)``, ``0 <= k <= i <=
    pp − 1``; tests/model/test_pipeline_zb.py derives them symbolically).

    Examples
    --------
    >>> zb_h1_bubble(4, PassTimes(1, 1, 1))
    Fraction(3, 1)
    """
    f, b, w = Fraction(times.t_f), Fraction(times.t_b), Fraction(times.t_w)
    return (pp - 1) * max(f, b, f + b - w)


def zb_h2_bubble(pp: int, times: PassTimes) -> tuple[Fraction, Fraction]:
    """(span bubble, synchronised idle) under ZB-H2, ``m >= 2·pp − 1``, ``t_w <= t_f``:
    ``(pp − 1)·max(0, t_f + t_b − 2·t_w)`` — Qi et al. 2024 Table 2's ``(p − 1)(T_F + T_B −
    2T_W)``, zero at equal times, when steps overlap through optimizer post-validation — and
    ``(pp − 1)·max(t_f, t_f + t_b − 2·t_w)`` when every rank starts the step together. With
    ``t_w > t_f`` the handcrafted order idles more: the simulation.

    Examples
    --------
    >>> zb_h2_bubble(4, PassTimes(1, 1, 1))
    (Fraction(0, 1), Fraction(3, 1))
    """
    f, b, w = Fraction(times.t_f), Fraction(times.t_b), Fraction(times.t_w)
    return (pp - 1) * max(Fraction(0), f + b - 2 * w), (pp - 1) * max(f, f + b - 2 * w)


def zb_v_bubble(pp: int, t: Fraction) -> tuple[Fraction, Fraction]:
    """(span bubble, synchronised idle) under ZB-V with equal pass times ``t_f = t_b = t_w = t``
    and ``m >= 2·pp − 1``: ``(0, (pp − 1)·t)`` — Qi et al. 2024 §6: "zero bubble" when the three
    passes take the same time (PyTorch ``ScheduleZBVZeroBubble``: "only if time forward == time
    backward input == time backward weights"). Other durations: the simulation.

    Examples
    --------
    >>> zb_v_bubble(4, Fraction(1))
    (Fraction(0, 1), Fraction(3, 1))
    """
    return Fraction(0), (pp - 1) * Fraction(t)


def dualpipe_bubble(stages: int, times: PassTimes) -> Fraction:
    """Idle time of the idlest rank of a synchronised step under DualPipe (``stages`` = its
    ``pp`` ranks) or DualPipeV (``stages`` = ``2·pp``): ``(stages/2 − 1)(F&B + B − 3W)`` with ``B``
    the full backward ``t_b + t_w`` — DeepSeek-V3 report Table 2 and deepseek-ai/DualPipe's
    README. Exact on the domain of its figure: ``t_f = t_b = t_w`` and ``max(t_f, t_b + t_w) <=
    t_fb <= t_f + t_b + t_w``, ``m >= 2·pp``; elsewhere the simulation differs (at ``t_f = 2``,
    ``t_b = t_w = 1``, ``t_fb = 4`` on 8 ranks it idles 12, the formula says 9).

    Examples
    --------
    >>> dualpipe_bubble(8, PassTimes(1, 1, 1, 2))
    Fraction(3, 1)
    """
    full = Fraction(times.t_b) + Fraction(times.t_w)
    return (Fraction(stages, 2) - 1) * (times.overlapped + full - 3 * Fraction(times.t_w))


def chunks_in_flight(schedule: SplitSchedule | str, pp: int, m: int, rank: int) -> int:
    """Most chunk micro-batches rank ``rank`` holds between a forward and the end of its
    backward (its ``W``): ZB-H1 ``min(pp, m)`` on every rank (``v = 1``; Qi et al. 2024 Table 2:
    ``pM_B``, 1F1B's first stage); ZB-H2 ``2·pp − 1`` (``(2p − 1)M_B``; ``m >= 2·pp − 1``); ZB-V
    ``2·pp`` (``m >= 2·pp − 1``: ``pp`` micro-batches of the rank's layers, 1F1B's first stage, on
    every rank); DualPipe ``pp + 1`` and DualPipeV ``2·pp + 1`` (the README's ``PP + 1``).

    Examples
    --------
    >>> chunks_in_flight("dualpipe", 16, 64, 3)
    17
    """
    sched = SplitSchedule(schedule)
    return {
        SplitSchedule.ZB_H1: min(pp, m),
        SplitSchedule.ZB_H2: 2 * pp - 1,
        SplitSchedule.ZB_V: 2 * pp,
        SplitSchedule.DUALPIPE: pp + 1,
        SplitSchedule.DUALPIPE_V: 2 * pp + 1,
    }[sched]


def w_pending(schedule: SplitSchedule | str, pp: int, m: int, rank: int) -> int:
    """Most chunk micro-batches on rank ``rank`` whose input gradient is done and whose ``W`` is
    not — the weight-gradient buffers (inputs of the weight GEMMs and their output gradients)
    held between ``I`` and ``W``: ZB-H1 ``min(rank + 1, m)`` (rank ``r`` defers ``r`` of them;
    ``ScheduleInterleavedZeroBubble``'s ``num_1f1b_microbatches = rank``); ZB-V ``2·rank + 1``;
    DualPipe ``h + 1`` with ``h = min(rank, pp − 1 − rank)``; DualPipeV ``rank + 1``; ZB-H2
    ``min(2·rank + 1 + m − (2·pp − 1), pp + rank)`` (``m >= 2·pp − 1``). Read off the orders, so
    the same at any durations.

    Examples
    --------
    >>> [w_pending("dualpipe", 8, 16, r) for r in range(8)]
    [1, 2, 3, 4, 4, 3, 2, 1]
    """
    sched = SplitSchedule(schedule)
    return {
        SplitSchedule.ZB_H1: min(rank + 1, m),
        SplitSchedule.ZB_H2: min(2 * rank + 1 + m - (2 * pp - 1), pp + rank),
        SplitSchedule.ZB_V: 2 * rank + 1,
        SplitSchedule.DUALPIPE: min(rank, pp - 1 - rank) + 1,
        SplitSchedule.DUALPIPE_V: rank + 1,
    }[sched]


def parameter_copies(schedule: Schedule | SplitSchedule | str) -> int:
    """Copies of each stage's parameters across the pipeline: 2 under DualPipe (every rank holds
    its forward-direction stage and the reverse direction's mirror stage: DeepSeek-V3 Table 2
    "Parameter 2×"), else 1 (DualPipeV's "2×" in the README is per device of ``PP/2`` devices:
    each of its ranks holds two of ``2·pp`` stages, the layers 1F1B puts on one rank of ``pp``).

    Examples
    --------
    >>> parameter_copies("dualpipe"), parameter_copies("dualpipev")
    (2, 1)
    """
    return 2 if str(schedule) == SplitSchedule.DUALPIPE.value else 1


def stage_placement(
    schedule: Schedule | SplitSchedule | str, pp: int, v: int = 1
) -> tuple[tuple[int, ...], ...]:
    """The model stages each rank holds, in chunk order (``placement[rank][chunk]``), the model
    cut into ``pp·v`` stages (DualPipe: ``pp`` stages, two per rank).

    * loop (1F1B, interleaved, ZB-H1/H2): chunk ``c`` of rank ``r`` is stage ``c·pp + r``
      (Narayanan et al. 2021 §2.2.2; PyTorch ``style="loop"``);
    * V (ZB-V, DualPipeV): stages ``r`` and ``2·pp − 1 − r`` (PyTorch
      ``generate_stage_to_rank_mapping(style="v")``), so rank 0 holds the first and the last
      stage — the embedding and the output layer on one rank;
    * DualPipe: stages ``r`` and ``pp − 1 − r`` of the same ``pp``-stage model (two directions):
      ranks 0 and ``pp − 1`` each hold a copy of the embedding's and the output layer's stages.

    Examples
    --------
    >>> stage_placement("zb-v", 4, 2)
    ((0, 7), (1, 6), (2, 5), (3, 4))
    >>> stage_placement("dualpipe", 4, 2)
    ((0, 3), (1, 2), (2, 1), (3, 0))
    """
    name = str(schedule)
    if name in (SplitSchedule.ZB_V.value, SplitSchedule.DUALPIPE_V.value):
        return tuple((r, 2 * pp - 1 - r) for r in range(pp))
    if name == SplitSchedule.DUALPIPE.value:
        return tuple((r, pp - 1 - r) for r in range(pp))
    return tuple(tuple(c * pp + r for c in range(v)) for r in range(pp))
