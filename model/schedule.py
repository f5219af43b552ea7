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

from dataclasses import dataclass
from fractions import Fraction

from trainplan.model.errors import InputError
from trainplan.model.pipeline import Schedule, check_schedule

__all__ = ["Slot", "Timeline", "simulate", "stage_order", "MAX_PASSES"]

MAX_PASSES = 400_000
"""Largest ``2 · p · m · v`` simulated (a few seconds of pure Python)."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One pass on one stage: ``[start, end)`` in forward-time units, ``kind`` "F" or "B"."""

    stage: int
    start: Fraction
    end: Fraction
    kind: str
    microbatch: int
    chunk: int = 0

    def to_dict(self) -> dict[str, object]:
        """JSON form (times as numbers)."""
        return {
            "start": _num(self.start),
            "end": _num(self.end),
            "pass": "forward" if self.kind == "F" else "backward",
            "microbatch": self.microbatch,
            "chunk": self.chunk,
        }


@dataclass(frozen=True, slots=True)
class Timeline:
    """A simulated schedule: slots per stage in order, step length, and activations held."""

    pp: int
    m: int
    v: int
    schedule: Schedule
    backward_ratio: Fraction
    slots: tuple[tuple[Slot, ...], ...]
    """``slots[i]`` — stage ``i``'s passes in time order."""

    @property
    def step_time(self) -> Fraction:
        """End of the last pass (the step starts at 0), in forward-time units."""
        return max(s.end for stage in self.slots for s in stage)

    def busy_time(self, stage: int) -> Fraction:
        """Time stage ``stage`` computes: ``m · (1 + backward_ratio)``."""
        return sum((s.end - s.start for s in self.slots[stage]), Fraction(0))

    def idle_fraction(self, stage: int) -> Fraction:
        """Idle share of the step on ``stage`` (the simulated bubble fraction)."""
        return 1 - self.busy_time(stage) / self.step_time

    def held_over_time(self, stage: int) -> list[tuple[Fraction, Fraction]]:
        """Micro-batches of activations held on ``stage`` as a step function ``[(t, held), …]``.

        A chunk's activations are held from its forward's start to its backward's end and count
        ``1/v`` of a micro-batch of the stage's layers.
        """
        events = [(s.start, 1) for s in self.slots[stage] if s.kind == "F"]
        events += [(s.end, -1) for s in self.slots[stage] if s.kind == "B"]
        held, series = 0, [(Fraction(0), Fraction(0))]
        for t, delta in sorted(events, key=lambda e: (e[0], e[1])):
            held += delta
            if series[-1][0] == t:
                series[-1] = (t, Fraction(held, self.v))
            else:
                series.append((t, Fraction(held, self.v)))
        return series

    def peak_held(self, stage: int) -> Fraction:
        """Most micro-batches of activations held at once on ``stage``."""
        return max(h for _, h in self.held_over_time(stage))


def _num(x: Fraction) -> int | float:
    return int(x) if x.denominator == 1 else float(x)


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
    schedule: Schedule | str = Schedule.ONE_F_ONE_B,
    v: int = 1,
    backward_ratio: Fraction | int = 2,
    stage_times: tuple[tuple[Fraction, Fraction], ...] | None = None,
) -> Timeline:
    """Simulate one step of a pipeline schedule on ``pp`` equally fast stages, or with
    ``stage_times`` on stages of their own speeds.

    Parameters
    ----------
    pp, m, v : int
        Stages, micro-batches per step, model chunks per GPU (interleaved only).
    schedule : Schedule or str
        ``gpipe``, ``1f1b`` or ``interleaved``.
    backward_ratio : Fraction
        Backward time over forward time (2 by default).
    stage_times : tuple of (forward, backward) per stage, optional
        Each stage's own forward and backward of one micro-batch (any time unit; its recomputed
        forward belongs to its backward), for unbalanced pipelines (per-stage layers or
        recomputation, :attr:`model.layout.Layout.recompute_layers`); replaces
        ``backward_ratio``. A chunk's passes take 1/v of its stage's.

    Returns
    -------
    Timeline
        Slots per stage; times in units of one stage's forward of one micro-batch.

    Raises
    ------
    LayoutError
        Broken schedule rules (``m < 1``, interleaved with ``m % pp != 0`` …).
    InputError
        ``backward_ratio <= 0`` or more than :data:`MAX_PASSES` passes.

    Examples
    --------
    >>> t = simulate(4, 8, "1f1b")
    >>> t.step_time, t.idle_fraction(0), t.peak_held(1)
    (Fraction(33, 1), Fraction(3, 11), Fraction(3, 1))
    """
    sched = check_schedule(pp, m, schedule, v)
    ratio = Fraction(backward_ratio)
    if ratio <= 0:
        raise InputError(f"backward_ratio: {backward_ratio} must be positive")
    if 2 * pp * m * v > MAX_PASSES:
        raise InputError(
            f"stages × microbatches × virtual_stages: {pp}·{m}·{v} is over the "
            f"{MAX_PASSES // 2:,} passes this timeline simulates; use fewer micro-batches"
        )
    if stage_times is not None and (
        len(stage_times) != pp or any(Fraction(t) <= 0 for ft in stage_times for t in ft)
    ):
        raise InputError(
            f"stage_times: {len(stage_times)} (forward, backward) pairs must be one per stage "
            f"(pp {pp}), each time positive"
        )
    times = stage_times or ((Fraction(1), ratio),) * pp
    durs = [{"F": Fraction(f) / v, "B": Fraction(b) / v} for f, b in times]
    orders = [stage_order(pp, m, sched, v, i) for i in range(pp)]
    last = pp * v - 1
    ends: dict[tuple[str, int, int], Fraction] = {}  # (kind, virtual stage, microbatch) -> end
    slots: list[list[Slot]] = [[] for _ in range(pp)]
    pos, free = [0] * pp, [Fraction(0)] * pp
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for i in range(pp):
            while pos[i] < len(orders[i]):
                kind, j, c = orders[i][pos[i]]
                u = c * pp + i
                if kind == "F":
                    dep = ("F", u - 1, j) if u > 0 else None
                else:
                    dep = ("B", u + 1, j) if u < last else ("F", u, j)
                if dep is not None and dep not in ends:
                    break
                start = max(free[i], ends[dep]) if dep is not None else free[i]
                free[i] = ends[(kind, u, j)] = start + durs[i][kind]
                slots[i].append(Slot(i, start, free[i], kind, j, c))
                pos[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the orders above never deadlock
            raise RuntimeError(f"schedule {sched} deadlocked at {pos}")
    return Timeline(pp, m, v, sched, ratio, tuple(tuple(s) for s in slots))
