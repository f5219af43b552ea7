"""Pipeline timelines simulated from each schedule's dependency rules
(docs/concepts/conventions.md "Pipeline").

Every stage runs its own ordered list of passes; a pass starts when the stage is free and the pass
it depends on has ended. The dependency rules are the same for every schedule:

* forward of micro-batch ``j`` on virtual stage ``u`` needs its forward on ``u − 1``;
* backward on ``u`` needs the backward on ``u + 1``, and on the last virtual stage the forward.

Only the per-stage order differs: GPipe runs all forwards then all backwards (Huang et al. 2019);
1F1B (PipeDream-Flush, Harlap et al. 2018; Narayanan et al. 2021, arXiv 2104.04473, §2.2.1) runs
``p − i − 1`` warm-up forwards on stage ``i`` then alternates; interleaved 1F1B (§2.2.2) gives each
GPU ``v`` model chunks (virtual stage ``u = c·p + i``) in Megatron-LM's order. Every stage is
equally fast: one stage's forward takes 1 time unit, its backward ``backward_ratio`` (2); a chunk's
passes take ``1/v`` of that. Times are exact :class:`~fractions.Fraction`.

The idle time and the micro-batches held that come out are checked against the closed forms of
:mod:`model.pipeline` in the tests, never copied from them.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache
from math import lcm
from threading import Lock
from typing import Any, TypeAlias, cast

from trainplan.model.errors import InputError
from trainplan.model.pipeline import Schedule, check_schedule
from trainplan.model.pipeline_sim import MAX_PASSES, Entry, PassTimes, Step, run
from trainplan.model.pipeline_zb import (
    TIMELINE_SCHEDULES,
    SplitSchedule,
    check_split_schedule,
    default_virtual_stages,
)
from trainplan.model.schedule_zb import (
    dualpipe_order,
    dualpipe_stage,
    loop_stage,
    v_stage,
    zb_h1_order,
    zb_h2_orders,
    zb_v_order,
)
from trainplan.model.timeline import Slot, Timeline

__all__ = [
    "Slot",
    "Timeline",
    "simulate",
    "simulate_classic",
    "simulate_split",
    "split_step_time",
    "stage_order",
    "MAX_PASSES",
    "TIMELINE_SCHEDULES",
]


def stage_order(
    pp: int, m: int, schedule: Schedule | str, v: int = 1, stage: int = 0
) -> list[tuple[str, int, int]]:
    """The ordered passes ``(kind, microbatch, chunk)`` stage ``stage`` runs under ``schedule``.

    Interleaved order follows Megatron-LM's ``forward_backward_pipelining_with_interleaving``:
    ``2·(p − i − 1) + (v − 1)·p`` warm-up forwards, then one forward and one backward in turn.

    Raises
    ------
    LayoutError
        When the schedule's inputs break its rules (see :func:`model.pipeline.check_schedule`).

    Examples
    --------
    >>> stage_order(2, 2, "1f1b", stage=0)
    [('F', 0, 0), ('F', 1, 0), ('B', 0, 0), ('B', 1, 0)]
    """
    sched = check_schedule(pp, m, schedule, v)
    if sched is Schedule.GPIPE:
        return [("F", j, 0) for j in range(m)] + [("B", j, 0) for j in range(m)]
    total = m * v
    if sched is Schedule.ONE_F_ONE_B:
        warmup = min(pp - stage - 1, m)
    else:
        warmup = min(2 * (pp - stage - 1) + (v - 1) * pp, total)

    def which(k: int, forward: bool) -> tuple[int, int]:
        chunk = (k // pp) % v
        return (k // (pp * v)) * pp + k % pp, chunk if forward else v - 1 - chunk

    order = [("F", *which(k, True)) for k in range(warmup)]
    for i in range(total - warmup):
        order.append(("F", *which(warmup + i, True)))
        order.append(("B", *which(i, False)))
    order += [("B", *which(k, False)) for k in range(total - warmup, total)]
    return order


def simulate(
    pp: int,
    m: int,
    schedule: Schedule | SplitSchedule | str = Schedule.ONE_F_ONE_B,
    v: int | None = None,
    backward_ratio: Fraction | int | None = None,
    stage_times: tuple[tuple[Fraction, Fraction], ...] | None = None,
    times: PassTimes | None = None,
) -> Timeline:
    """Simulate one step of a pipeline schedule on ``pp`` ranks.

    Parameters
    ----------
    pp, m : int
        Pipeline ranks, micro-batches per step (DualPipe: both directions together).
    schedule : str
        ``gpipe``, ``1f1b``, ``interleaved`` or a split-backward schedule (``zb-h1``, ``zb-h2``,
        ``zb-v``, ``dualpipe``, ``dualpipev``: :mod:`model.schedule_zb`).
    v : int, optional
        Chunks per rank: interleaving's model chunks (``interleaved``, ``zb-h1``); fixed at 2 by
        ``zb-v``, ``dualpipe`` and ``dualpipev``. Default 1, or the schedule's fixed value.
    backward_ratio, stage_times : optional
        Classic schedules' pass times (:func:`simulate_classic`).
    times : PassTimes, optional
        Split-backward schedules' pass times (:func:`simulate_split`).

    Returns
    -------
    Timeline

    Raises
    ------
    LayoutError
        Broken schedule rules (``m < 1``, interleaved with ``m % pp != 0``, DualPipe with an odd
        ``pp`` …).
    InputError
        ``backward_ratio <= 0``, an option of the other family of schedules, or more than
        :data:`MAX_PASSES` passes.

    Examples
    --------
    >>> t = simulate(4, 8, "1f1b")
    >>> t.step_time, t.idle_fraction(0), t.peak_held(1)
    (Fraction(33, 1), Fraction(3, 11), Fraction(3, 1))
    >>> t = simulate(4, 8, "zb-h1")
    >>> t.step_time, t.peak_chunks_held(3), t.peak_w_pending(3)
    (Fraction(27, 1), 4, 4)
    """
    if str(schedule).lower() in {s.value for s in SplitSchedule}:
        return simulate_split(
            pp, m, SplitSchedule(str(schedule).lower()), v, times, backward_ratio, stage_times
        )
    if times is not None:
        raise InputError(
            f"times: per-pass durations apply to split-backward schedules, not {schedule}; give backward_ratio"
        )
    return simulate_classic(pp, m, schedule, 1 if v is None else v, backward_ratio, stage_times)


def simulate_classic(
    pp: int,
    m: int,
    schedule: Schedule | str,
    v: int = 1,
    backward_ratio: Fraction | int | None = None,
    stage_times: tuple[tuple[Fraction, Fraction], ...] | None = None,
) -> Timeline:
    """:func:`simulate` for the classic schedules (``gpipe``, ``1f1b``, ``interleaved``: each
    stage's order from :func:`stage_order`).

    ``backward_ratio`` is the backward time over the forward time (2 by default): a stage's
    forward of one micro-batch is the time unit; a chunk's passes take ``1/v`` of it.
    ``stage_times``, each stage's own (forward, backward) of one micro-batch (any time unit; its
    recomputed forward belongs to its backward), for unbalanced pipelines
    (:attr:`model.layout.Layout.recompute_layers`), replaces ``backward_ratio``.

    Raises
    ------
    LayoutError
        Broken schedule rules (:func:`model.pipeline.check_schedule`).
    InputError
        ``backward_ratio <= 0``, ``stage_times`` not one positive pair per stage, or more than
        :data:`MAX_PASSES` passes.

    GPipe on 2 stages, 2 micro-batches: two forwards fill the pipe (3 units until the last stage
    has run both), its backwards 2 × 2, then the first stage's last backward 2: 9.

    >>> simulate_classic(2, 2, "gpipe").step_time
    Fraction(9, 1)
    """
    sched = check_schedule(pp, m, schedule, v)
    ratio = Fraction(2 if backward_ratio is None else backward_ratio)
    if ratio <= 0:
        raise InputError(f"backward_ratio: {backward_ratio} must be positive")
    if 2 * pp * m * v > MAX_PASSES:
        raise InputError(
            f"stages × microbatches × virtual_stages: {int(pp):,}·{int(m):,}·{int(v):,} is over the "
            f"{MAX_PASSES // 2:,} passes this timeline simulates; use fewer stages, micro-batches or virtual stages"
        )
    if stage_times is not None and (
        len(stage_times) != pp or any(Fraction(t) <= 0 for ft in stage_times for t in ft)
    ):
        raise InputError(
            f"stage_times: {len(stage_times)} (forward, backward) pairs must be one per stage "
            f"(pp {pp}), each time positive"
        )
    per_stage = stage_times or ((Fraction(1), ratio),) * pp
    durs = [{"F": Fraction(f) / v, "B": Fraction(b) / v} for f, b in per_stage]
    orders = [
        [(Step(kind, j, c),) for kind, j, c in stage_order(pp, m, sched, v, i)] for i in range(pp)
    ]
    slots = run(pp, pp * v, loop_stage(pp), lambda i, e: durs[i][e[0].kind], orders=orders)
    return Timeline(pp, m, v, sched, PassTimes(Fraction(1), ratio, Fraction(0)), slots)


def simulate_split(
    pp: int,
    m: int,
    sched: SplitSchedule,
    v: int | None,
    times: PassTimes | None,
    backward_ratio: object,
    stage_times: object,
) -> Timeline:
    """:func:`simulate` for the split-backward schedules (:mod:`model.schedule_zb`'s orders).

    ``times``: one chunk's forward, input-gradient and weight-gradient backward, and DualPipe's
    overlapped block (:class:`model.pipeline_sim.PassTimes`; default 1, 1, 1, no overlap gain).
    ``v`` defaults to the schedule's (:func:`model.pipeline_zb.default_virtual_stages`).

    Raises
    ------
    LayoutError
        Broken schedule rules (:func:`model.pipeline_zb.check_split_schedule`).
    InputError
        ``backward_ratio`` or ``stage_times`` given (the classic schedules' options), or more than
        :data:`MAX_PASSES` passes.
    """
    for name, value in (("backward_ratio", backward_ratio), ("stage_times", stage_times)):
        if value is not None:
            raise InputError(
                f"{name}: does not apply to {sched}, whose backward is split; give the pass "
                "times t_f, t_b (input gradient) and t_w (weight gradient)"
            )
    v = default_virtual_stages(sched) if v is None else v
    times = times or PassTimes()
    return Timeline(pp, m, v, sched, times, _split_slots(pp, m, sched, v, _durations(times)))


def split_step_time(
    pp: int, m: int, sched: SplitSchedule | str, v: int, times: PassTimes
) -> Fraction:
    """``simulate_split(pp, m, sched, v, times).step_time`` (:func:`simulate_split`; the same
    rules, errors, orders and engine), for the cost model, which asks it of one shape at many
    ratios of pass times. The engine only adds the pass times and takes maxima
    (:func:`model.pipeline_sim.run`), so the run of a shape is recorded once as those
    operations (:func:`_recorded_run`) and replayed on whole numbers: every pass time times the
    least common multiple ``D`` of their denominators, the step the last end over ``D``. Exact,
    and equal: one positive scale keeps every sum and every comparison, where Fractions cost a
    greatest common divisor at every addition.

    Examples
    --------
    >>> times = PassTimes(Fraction(1), Fraction(3, 2), Fraction(2, 3))
    >>> split_step_time(4, 8, "zb-v", 2, times) == simulate(4, 8, "zb-v", times=times).step_time
    True
    """
    parts = [times.of(kind) for kind in KIND_CODES] + [times.overlapped]
    scale = lcm(*(Fraction(x).denominator for x in parts))
    whole = [int(Fraction(x) * scale) for x in parts]
    first, second, code, ends = _recorded_run(pp, m, SplitSchedule(str(sched)), v)
    value = [0]
    for a, b, k in zip(first, second, code, strict=True):
        if k < 0:  # a maximum, the engine's join: max(x, y) (the first where equal)
            x, y = value[a], value[b]
            value.append(x if x >= y else y)
        else:  # a pass: its start plus its time
            value.append(value[a] + whole[k])
    return Fraction(max(map(value.__getitem__, ends)), scale)


KIND_CODES = "FBIW"
"""A pass kind's code in :func:`_recorded_run` (its index); 4 an overlapped F&B block."""


class _Recorded:
    """A time of the recorded run (:func:`_recorded_run`): operation ``i`` of ``ops``."""

    __slots__ = ("i", "ops")

    def __init__(self, i: int, ops: list[tuple[int, int, int]]) -> None:
        self.i, self.ops = i, ops

    def __add__(self, code: int) -> _Recorded:  # a block's end: its start plus its time
        self.ops.append((self.i, -1, code))
        return _Recorded(len(self.ops), self.ops)


def _join(a: _Recorded, b: _Recorded) -> _Recorded:
    a.ops.append((a.i, b.i, -1))
    return _Recorded(len(a.ops), a.ops)


Recorded: TypeAlias = "tuple[array[int], array[int], array[int], array[int]]"
"""A recorded run (:func:`_recorded_run`): ``first``, ``second``, ``code``, ``ends``."""

RECORDED_OPS = 16 * MAX_PASSES
"""The most operations the recorded runs kept at once hold in all (:func:`_recorded_run`; 24
bytes each): eight runs of the largest timeline (two operations a pass, :data:`model.
pipeline_sim.MAX_PASSES` passes), the memory eight cached runs of any size once took, and every
run a search reads at common sizes. A search's tables ask for two runs per pipeline depth (the
timelines :func:`model.schedule_cost.simulated_span` reads) at each recompute mode and launch
order in turn: eight runs of any size were fewer than its depths (Llama 3 405B on 1,024 GPUs
under fsdp2 recorded its 12 runs 36 times, three seconds of its tables)."""

_RUNS: OrderedDict[tuple[int, int, SplitSchedule, int], Recorded] = OrderedDict()
_RUNS_LOCK = Lock()


def _recorded_run(pp: int, m: int, sched: SplitSchedule, v: int) -> Recorded:
    """:func:`_record`, remembered: the least recently read runs are dropped once the runs kept
    hold over :data:`RECORDED_OPS` operations (the last one recorded is always kept)."""
    key = (pp, m, sched, v)
    with _RUNS_LOCK:
        if key in _RUNS:
            _RUNS.move_to_end(key)
            return _RUNS[key]
    recorded = _record(pp, m, sched, v)
    with _RUNS_LOCK:
        _RUNS[key] = recorded
        _RUNS.move_to_end(key)
        held = sum(len(kept[0]) for kept in _RUNS.values())
        while held > RECORDED_OPS and len(_RUNS) > 1:
            _, dropped = _RUNS.popitem(last=False)
            held -= len(dropped[0])
    return recorded


def _record(pp: int, m: int, sched: SplitSchedule, v: int) -> Recorded:
    """The engine's run of ``sched``'s order (:func:`_split_slots`: its rules and errors) as the
    operations it made on times, in the order it made them (each reads only earlier ones):
    value ``i + 1`` is ``max(value[first[i]], value[second[i]])`` where ``code[i]`` is −1, else
    ``value[first[i]]`` plus the time of pass kind ``code[i]`` (:data:`KIND_CODES`, 4 an
    overlapped block); value 0 is the start, 0. ``ends``: the value of every slot's end."""
    ops: list[tuple[int, int, int]] = []
    codes = {kind: KIND_CODES.index(kind) for kind in KIND_CODES}
    slots = _split_slots(pp, m, sched, v, (codes, 4), zero=_Recorded(0, ops), join=_join)
    first, second, code = zip(*ops, strict=True) if ops else ((), (), ())
    ends = [cast(_Recorded, s.end).i for rank in slots for s in rank]  # the run's own times
    return array("q", first), array("q", second), array("q", code), array("q", ends)


def _durations(times: PassTimes) -> tuple[dict[str, Fraction], Fraction]:
    """(each pass kind's time, an overlapped F&B block's) of ``times``."""
    return {kind: times.of(kind) for kind in "FBIW"}, times.overlapped


def _split_slots(
    pp: int,
    m: int,
    sched: SplitSchedule,
    v: int,
    durations: tuple[dict[str, Any], Any],
    zero: Any = None,
    join: Callable[..., Any] = max,
) -> tuple[tuple[Slot, ...], ...]:
    """Every rank's slots of ``sched``'s order run on the engine (:func:`simulate_split`'s rules
    and errors), ``durations`` each pass kind's time and an overlapped block's
    (:func:`_durations`), every rank starting at ``zero``, ``join`` the engine's maximum
    (:func:`model.pipeline_sim.run`)."""
    check_split_schedule(pp, m, sched, v)
    if 3 * pp * m * v > MAX_PASSES:
        raise InputError(
            f"stages × microbatches × virtual_stages: {int(pp):,}·{int(m):,}·{int(v):,} is over the "
            f"{MAX_PASSES // 3:,} passes this timeline simulates; use fewer stages, micro-batches or virtual stages"
        )
    of, block = durations

    def duration(rank: int, entry: Entry) -> Any:
        return block if len(entry) > 1 else of[entry[0].kind]

    orders = _split_orders(pp, m, sched, v)
    if sched is SplitSchedule.ZB_H2:
        return run(pp, pp, loop_stage(pp), duration, orders=orders, zero=zero, join=join)
    if sched is SplitSchedule.ZB_H1:
        return run(pp, pp * v, loop_stage(pp), duration, orders=orders, zero=zero, join=join)
    if sched is SplitSchedule.ZB_V:
        return run(pp, 2 * pp, v_stage(pp), duration, orders=orders, zero=zero, join=join)
    v_shape = sched is SplitSchedule.DUALPIPE_V
    place = v_stage(pp) if v_shape else dualpipe_stage(pp)
    return run(pp, 2 * pp if v_shape else pp, place, duration, orders=orders, zero=zero, join=join)


@lru_cache(maxsize=32)  # bounded: pp and m are a user's; each entry holds the step's passes
def _split_orders(pp: int, m: int, sched: SplitSchedule, v: int) -> tuple[tuple[Entry, ...], ...]:
    """Every rank's order under ``sched`` (:mod:`model.schedule_zb`), built once for every
    timeline of that shape (the cost model runs one per ratio of pass times)."""
    if sched is SplitSchedule.ZB_H2:
        return zb_h2_orders(pp, m)
    if sched is SplitSchedule.ZB_H1:
        return tuple(tuple(zb_h1_order(pp, m, v, r)) for r in range(pp))
    if sched is SplitSchedule.ZB_V:
        return tuple(tuple(zb_v_order(pp, m, r)) for r in range(pp))
    v_shape = sched is SplitSchedule.DUALPIPE_V
    return tuple(tuple(dualpipe_order(pp, m, r, v_shape)) for r in range(pp))
