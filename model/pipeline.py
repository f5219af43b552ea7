"""Pipeline bubble and micro-batches in flight, as closed forms
(docs/concepts/conventions.md "Pipeline").

Two conventions are both named in every output:

* ``bubble_fraction`` — idle share of the whole step, ``(pp − 1)/(v·m + pp − 1)`` (GPipe, Huang et
  al. 2019; the pipeline tab's form).
* ``bubble_ratio`` — bubble time over ideal compute time, ``(pp − 1)/(v·m)`` (Narayanan et al.
  2021, arXiv 2104.04473, §2.2; Llama 3 Table 4's form).

The timelines themselves are simulated in :mod:`model.schedule`; its tests check the simulated idle
time against these formulas.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.xp import exact, maximum, minimum, namespace, where

__all__ = [
    "Schedule",
    "SPLIT_BACKWARD",
    "LAYOUT_CHUNKS",
    "timeline_chunks",
    "bubble_fraction",
    "bubble_ratio",
    "microbatches_in_flight",
    "check_schedule",
    "check_counts",
    "check_virtual_stages",
    "interleaved_chunks_held",
    "interleaved_chunks_held_simulated",
    "interleaved_peak",
    "flat_in_flight",
    "interleaved_in_flight",
]


class Schedule(StrEnum):
    """Pipeline schedules: GPipe (all forwards, then all backwards), 1F1B (PipeDream-Flush,
    Harlap et al. 2018 / Narayanan et al. 2021) and interleaved 1F1B with ``v`` model chunks per
    GPU (Narayanan et al. 2021 §2.2.2); and the split-backward schedules
    (:data:`SPLIT_BACKWARD`, :mod:`model.pipeline_zb`): ZB-H1, ZB-H2, ZB-V (Qi et al., "Zero
    Bubble Pipeline Parallelism", ICLR 2024), DualPipe and DualPipeV (DeepSeek-V3 report, arXiv
    2412.19437, §3.2.1; deepseek-ai/DualPipe)."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    ZB_H1 = "zb-h1"
    ZB_H2 = "zb-h2"
    ZB_V = "zb-v"
    DUALPIPE = "dualpipe"
    DUALPIPE_V = "dualpipev"


SPLIT_BACKWARD = frozenset(
    {Schedule.ZB_H1, Schedule.ZB_H2, Schedule.ZB_V, Schedule.DUALPIPE, Schedule.DUALPIPE_V}
)
"""The schedules whose backward is split into an input-gradient and a weight-gradient pass."""

LAYOUT_CHUNKS = {
    Schedule.ZB_H1: 1,
    Schedule.ZB_H2: 1,
    Schedule.ZB_V: 2,
    Schedule.DUALPIPE: 1,
    Schedule.DUALPIPE_V: 2,
}
"""``virtual_stages`` of a layout under each split-backward schedule: the model is cut into
``pp·v`` chunks. ZB-V and DualPipeV cut it into ``2·pp`` and place two per rank in V order;
DualPipe cuts it into ``pp`` stages and each rank holds two of them, its own and the mirror
stage ``pp − 1 − rank`` (a second copy of that stage's parameters: ``v = 1`` here, two chunks
per rank in the timeline). ZB-H1 and ZB-H2 at one chunk per rank (the closed forms' domain;
PyTorch's interleaved zero bubble at ``v > 1`` is simulated by the pipeline tab only)."""


def timeline_chunks(schedule: Schedule | str, v: int) -> int:
    """Chunks per rank of the timeline (:func:`model.schedule.simulate`'s ``v``) for a layout's
    ``virtual_stages`` ``v``: 2 under DualPipe (a rank runs two stages), else ``v``.

    Examples
    --------
    >>> timeline_chunks("dualpipe", 1), timeline_chunks("zb-v", 2)
    (2, 2)
    """
    return 2 if str(schedule) == Schedule.DUALPIPE.value else v


def check_schedule(pp: int, m: int, schedule: Schedule | str, v: int = 1) -> Schedule:
    """Validate a schedule's inputs; return it as a :class:`Schedule`.

    Rules: ``pp >= 1``, ``m >= 1``, ``v >= 1``; ``v > 1`` only with the interleaved schedule;
    interleaving needs ``m`` to be a multiple of ``pp`` (Narayanan et al. 2021 §2.2.2); a
    split-backward schedule its :data:`LAYOUT_CHUNKS` (the rest of its rules:
    :func:`model.pipeline_zb.check_split_schedule`).

    Raises
    ------
    LayoutError
        Naming the parameter, its value and the rule.

    Examples
    --------
    >>> check_schedule(4, 8, "1f1b")
    <Schedule.ONE_F_ONE_B: '1f1b'>
    """
    try:
        sched = Schedule(str(schedule).lower())
    except ValueError:
        raise LayoutError(
            f"schedule: {schedule!r} is not one of {', '.join(s.value for s in Schedule)}"
        ) from None
    check_counts(pp, m, v)
    if sched in SPLIT_BACKWARD:
        if v != LAYOUT_CHUNKS[sched]:
            raise LayoutError(
                f"virtual_stages: {v} must be {LAYOUT_CHUNKS[sched]} under schedule {sched} "
                "(model chunks per pipeline rank)"
            )
        return sched
    check_virtual_stages(v, (sched,))
    if sched is Schedule.INTERLEAVED and m % pp:
        raise LayoutError(
            f"num_microbatches: {m} must be a multiple of `pp` = {pp} for the interleaved schedule"
        )
    return sched


def check_counts(pp: int, m: int, v: int) -> None:
    """The rule every schedule shares: ``pp``, ``num_microbatches`` and ``virtual_stages`` at
    least 1.

    Raises
    ------
    LayoutError
        ``num_microbatches: 0 must be at least 1``.

    Examples
    --------
    >>> check_counts(4, 8, 1)
    """
    for name, value in (("pp", pp), ("num_microbatches", m), ("virtual_stages", v)):
        if value < 1:
            raise LayoutError(f"{name}: {value} must be at least 1")


def check_virtual_stages(v: int, schedules: tuple[Schedule, ...]) -> None:
    """The rule that ties virtual stages to a schedule, for one layout (``evaluate``) and for the
    schedules a search may choose (``search --schedule …``): ``v > 1`` needs the interleaved
    schedule among ``schedules`` (Narayanan et al. 2021 §2.2.2; model chunks exist only there).

    Raises
    ------
    LayoutError
        ``virtual_stages: 3 > 1 needs schedule 'interleaved', not 1f1b``.

    Examples
    --------
    >>> check_virtual_stages(3, (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED))
    """
    if v > 1 and not {Schedule.INTERLEAVED, Schedule.ZB_V, Schedule.DUALPIPE_V} & set(schedules):
        names = " or ".join(str(s) for s in schedules)
        raise LayoutError(
            f"virtual_stages: {v} > 1 needs schedule 'interleaved', 'zb-v' or 'dualpipev', not {names}"
        )


def bubble_fraction(pp: int, m: int, v: int = 1) -> Fraction:
    """Idle share of one step's time on every stage: ``(pp − 1)/(v·m + pp − 1)``.

    Dimensionless, exact. Same for GPipe and 1F1B (v = 1); interleaving divides the bubble by v.

    References: Huang et al. 2019 (GPipe), §2.3; Narayanan et al. 2021, §2.2.

    Examples
    --------
    >>> bubble_fraction(4, 8)
    Fraction(3, 11)
    >>> float(bubble_fraction(8, 64))
    0.09859154929577464
    """
    return Fraction(pp - 1, v * m + pp - 1)


def bubble_ratio(pp: Any, m: Any, v: Any = 1) -> Any:
    """Bubble time over ideal compute time: ``(pp − 1)/(v·m)`` (Narayanan et al. 2021, §2.2.1).
    Exact for ints; element-wise for arrays of layouts.

    Examples
    --------
    >>> bubble_ratio(16, 16)
    Fraction(15, 16)
    """
    return exact(pp - 1) / (v * m)


def flat_in_flight(pp: Any, m: Any, stage: Any, gpipe: Any) -> Any:
    """Micro-batches held at the peak by a GPipe stage (``m``: every forward before any
    backward) or a 1F1B stage (``min(pp − stage, m)``: its warm-up forwards; Narayanan et al.
    2021 §2.2.1).

    Examples
    --------
    >>> flat_in_flight(4, 8, 1, False), flat_in_flight(4, 8, 1, True)
    (3, 8)
    """
    return where(gpipe, m, minimum(pp - stage, m))


def interleaved_in_flight(pp: Any, m: Any, v: int, stage: Any) -> Any:
    """Micro-batches of a whole stage held at the peak under the interleaved schedule when its
    chunks are equal: Megatron-LM's warm-up runs ``2·(pp − i − 1) + (v − 1)·pp`` chunk forwards
    before the first backward, so one more chunk is held at the peak, capped at m·v, each 1/v of
    the stage — ``pp·(1 + (pp − 1)/(pp·v))`` on the first stage (Korthikanti et al. 2022
    §4.2.3).

    Examples
    --------
    >>> interleaved_in_flight(4, 8, 2, 0)
    Fraction(11, 2)
    """
    return exact(minimum(2 * (pp - stage - 1) + (v - 1) * pp + 1, m * v)) / v


def microbatches_in_flight(
    pp: int, m: int, schedule: Schedule | str, v: int = 1, stage: int = 0
) -> Fraction:
    """Micro-batches of activations held at the peak by pipeline stage ``stage`` (0 = first).

    * GPipe: ``m`` on every stage (all forwards run before any backward).
    * 1F1B: ``min(pp − stage, m)`` (warm-up forwards before the first backward).
    * Interleaved 1F1B: Megatron-LM's warm-up runs ``2·(pp − i − 1) + (v − 1)·pp`` model-chunk
      forwards on stage i before its first backward, so ``2·(pp − i − 1) + (v − 1)·pp + 1`` chunks
      (each 1/v of the stage's layers) are held at the peak, capped at ``m·v``. On the first stage
      that is ``pp · (1 + (pp − 1)/(pp · v))`` micro-batches' worth (Korthikanti et al. 2022, arXiv
      2205.05198, §4.2.3); :mod:`model.schedule`'s simulation confirms every stage.

    Unit: micro-batches of the stage's full set of layers (exact; may be fractional).

    Examples
    --------
    >>> microbatches_in_flight(4, 8, "1f1b", stage=1)
    Fraction(3, 1)
    >>> microbatches_in_flight(4, 8, "interleaved", v=2)
    Fraction(11, 2)
    """
    sched = check_schedule(pp, m, schedule, v)
    if not 0 <= stage < pp:
        raise LayoutError(f"stage: {stage} must be in [0, {pp})")
    if sched is Schedule.INTERLEAVED and pp > 1:
        return interleaved_in_flight(pp, m, v, stage)
    return Fraction(flat_in_flight(pp, m, stage, sched is Schedule.GPIPE))


def _chunk_counts(
    done: Any,
    pp: Any,
    v: int,
    low: Callable[..., Any] = minimum,
    high: Callable[..., Any] = maximum,
) -> list[Any]:
    """How many of ``done`` forwards (or backwards) ran the chunk at each position of the block
    order: they run in blocks of pp, block q on position q mod v, so after ``done`` of them
    position k has ``pp·⌊done/(v·pp)⌋ + clamp(done mod (v·pp) − k·pp, 0, pp)`` (``low``,
    ``high``: the min and max; Python's own where every value is a number)."""
    period = v * pp
    laps = done // period
    rest = done - laps * period
    base = laps * pp
    return [base + low(high(rest - k * pp, 0), pp) for k in range(v)]


def interleaved_peak(
    pp: Any, m: Any, v: int, stage: Any, chunk_weights: Sequence[Any]
) -> tuple[Any, list[Any]]:
    """(peak weight, micro-batches held per local chunk at that peak) of pipeline stage ``stage``
    under Megatron-LM's interleaved 1F1B schedule, in closed form: the same states as
    :func:`interleaved_chunks_held_simulated` without walking the m·v steps.

    Forward k runs chunk ``⌊k/pp⌋ mod v`` and backward k chunk ``v − 1 − ⌊k/pp⌋ mod v``
    (Narayanan et al. 2021 §2.2.2; ``megatron/core/pipeline_parallel/schedules.py``); after
    ``W = min(2·(pp − i − 1) + (v − 1)·pp, m·v)`` warm-up forwards each step adds a forward and
    then retires a backward. The held count of chunk j after F forwards and B backwards is
    ``F_j(F) − B_j(B)`` (:func:`_chunk_counts`); in the steady phase both advance together, so
    the held vector repeats every v·pp steps, and the weight ``Σ_j held_j·w_j`` is linear between
    the steps where a forward or a backward block starts. The peak is therefore among: the
    warm-up states at block ends and at W; the steady states at block starts, the first and the
    last of one period (about 2·v + 4 states). Ties go to the earliest state, as the simulation.

    Scalars (``pp``, ``m``, ``stage`` ints; weights exact) or arrays of layouts (every state at
    once, :func:`_peak_of_arrays`); ``v`` is one whole number for all.

    Examples
    --------
    >>> interleaved_peak(4, 8, 2, 0, (1, 1)), interleaved_peak(16, 32, 4, 0, (1, 2, 2, 2))[1]
    ((11, [7, 4]), [31, 16, 16, 16])
    """
    total = m * v
    warmup = minimum(2 * (pp - stage - 1) + (v - 1) * pp, total)
    steady = total - warmup
    last = maximum(minimum(steady, v * pp) - 1, 0)
    # (time, forwards done, backwards done, valid) of each candidate state
    states: list[tuple[Any, Any, Any, Any]] = []
    for f in [warmup, 1, *(minimum(q * pp, warmup) for q in range(1, v + 1))]:
        states.append((f, f, 0, f >= 1))
    steps = [0, last]
    shift = (-(warmup + 1)) % pp
    for q in range(v + 1):
        steps += [minimum(q * pp, last), minimum(shift + q * pp, last)]
    for t in steps:
        states.append((warmup + 1 + t, warmup + 1 + t, t, steady > 0))
    if namespace(pp, m, stage, *chunk_weights) is not None:
        return _peak_of_arrays(pp, v, states, chunk_weights)
    best_w: Any = None
    best_time: Any = None
    best_held: list[Any] | None = None
    for time, fwd, bwd, valid in states:  # numbers only (xp.minimum, maximum, where of numbers)
        forwards, backwards = (
            _chunk_counts(fwd, pp, v, min, max),
            _chunk_counts(bwd, pp, v, min, max),
        )
        held = [forwards[j] - backwards[v - 1 - j] for j in range(v)]
        weight = sum((h * w for h, w in zip(held, chunk_weights, strict=True)), 0)
        if best_w is None:
            best_w, best_time, best_held = weight if valid else -1, time, held
            continue
        assert best_held is not None
        if valid & ((weight > best_w) | ((weight == best_w) & (time < best_time))):
            best_w, best_time, best_held = weight, time, held
    assert best_held is not None
    return best_w, list(best_held)


def _peak_of_arrays(
    pp: Any, v: int, states: list[tuple[Any, Any, Any, Any]], chunk_weights: Sequence[Any]
) -> tuple[Any, list[Any]]:
    """:func:`interleaved_peak`'s choice among its candidate ``states`` (time, forwards done,
    backwards done, valid) for arrays of layouts, every state at once (the arrays' own
    namespace, :func:`model.xp.namespace`): the largest weight of a valid state (the first
    state's weight, or −1 when it is not valid, else none), then the earliest time, then the
    first state — the scalar loop's choice, each weight summed chunk by chunk in the same
    order."""
    xp = namespace(pp, *(x for st in states for x in st), *chunk_weights)
    shape = xp.broadcast_shapes(*(xp.asarray(x).shape for st in states for x in st))
    time, fwd, bwd, valid = (
        xp.stack([xp.broadcast_to(xp.asarray(st[i]), shape) for st in states]) for i in range(4)
    )
    pp_ = xp.asarray(pp)[..., None]
    k, period = pp_ * xp.arange(v), v * pp_

    def counts(done: Any) -> Any:  # _chunk_counts of every state: [S, ..., v]
        laps = done[..., None] // period
        rest = done[..., None] - laps * period
        return laps * pp_ + xp.minimum(xp.maximum(rest - k, 0), pp_)

    held = counts(fwd) - xp.flip(counts(bwd), axis=-1)
    weight: Any = 0
    for j, w in enumerate(chunk_weights):
        weight = weight + held[..., j] * w
    weight = xp.astype(xp.broadcast_to(weight, held.shape[:-1]), xp.float64)
    first = xp.where(valid[0], weight[0], -1.0)
    weight = xp.where(valid, weight, -xp.inf)
    weight[0] = first
    best = xp.max(weight, axis=0)
    tied = weight == best
    earliest = xp.min(xp.where(tied, time, xp.inf), axis=0)
    pick = xp.argmax(tied & (time == earliest), axis=0)
    chosen = xp.take_along_axis(held, pick[None, ..., None], axis=0)[0]
    return best, [chosen[..., j] for j in range(v)]


@lru_cache(maxsize=4096)
def interleaved_chunks_held(
    pp: int, m: int, v: int, stage: int, chunk_layers: tuple[int | Fraction, ...]
) -> tuple[int, ...]:
    """Micro-batches of each local model chunk that stage ``stage`` holds at its activation peak
    under Megatron-LM's interleaved 1F1B schedule, when its ``v`` chunks weigh ``chunk_layers``
    each per micro-batch — layers, or bytes (uneven chunks: the ends of an uneven split, Llama 3's
    smaller first and last chunks; an empty last chunk still weighs its output layer's bytes).
    The closed form :func:`interleaved_peak`; :func:`interleaved_chunks_held_simulated` is its
    oracle.

    Raises
    ------
    LayoutError
        The schedule's rules (:func:`check_schedule`).

    Examples
    --------
    >>> interleaved_chunks_held(4, 8, 2, 0, (1, 1))
    (7, 4)
    """
    check_schedule(pp, m, Schedule.INTERLEAVED, v)
    _, held = interleaved_peak(pp, m, v, stage, chunk_layers)
    return tuple(int(h) for h in held)


def interleaved_chunks_held_simulated(
    pp: int, m: int, v: int, stage: int, chunk_layers: tuple[int | Fraction, ...]
) -> tuple[int, ...]:
    """The schedule simulated forward by forward: the test oracle of
    :func:`interleaved_chunks_held` (a closed form; the search never runs this loop).

    Micro-batches of each local model chunk that stage ``stage`` holds at its activation peak
    under Megatron-LM's interleaved 1F1B schedule, when its ``v`` chunks weigh ``chunk_layers``
    each per micro-batch — layers, or bytes (uneven chunks: the ends of an uneven split, Llama 3's
    smaller first and last chunks; an empty last chunk still weighs its output layer's bytes).

    The schedule (Narayanan et al. 2021 §2.2.2; ``megatron/core/pipeline_parallel/schedules.py``,
    micro-batch groups of ``pp``): forward k runs chunk ``(k // pp) % v``; backward k runs chunk
    ``v − 1 − (k // pp) % v``; ``2·(pp − stage − 1) + (v − 1)·pp`` warm-up forwards, then one
    forward and one backward at a time. The peak is taken over the weight held (Σ count × weight;
    the first such state on ties), so with equal chunks the total count is
    :func:`microbatches_in_flight` × v.

    Examples
    --------
    >>> interleaved_chunks_held_simulated(4, 8, 2, 0, (1, 1))
    (7, 4)
    >>> interleaved_chunks_held_simulated(16, 32, 4, 0, (1, 2, 2, 2))
    (31, 16, 16, 16)
    """
    check_schedule(pp, m, Schedule.INTERLEAVED, v)
    total = m * v
    warmup = min(2 * (pp - stage - 1) + (v - 1) * pp, total)

    def chunk(k: int, backward: bool) -> int:
        j = (k // pp) % v
        return v - 1 - j if backward else j

    held = [0] * v
    best: tuple[int | Fraction, tuple[int, ...]] = (-1, tuple(held))

    def note() -> None:
        nonlocal best
        weight = sum(c * n for c, n in zip(held, chunk_layers, strict=True))
        if weight > best[0]:
            best = (weight, tuple(held))

    for k in range(warmup):
        held[chunk(k, False)] += 1
        note()
    for k in range(warmup, total):
        held[chunk(k, False)] += 1
        note()
        held[chunk(k - warmup, True)] -= 1
    return best[1]
