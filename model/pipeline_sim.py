"""The event-driven engine every pipeline timeline runs on (SPEC.md "Pipeline tab").

A schedule gives each pipeline rank either a fixed order of passes or a rule that picks the next
pass when the rank is free (:class:`Policy`); the engine runs them against the dataflow and returns
every pass's start and end. The dataflow is the same for every schedule, per direction ``d`` of a
pipeline of ``S`` stages (DualPipe feeds micro-batches from both ends, everything else has one
direction):

* the forward ``F`` of micro-batch ``j`` on stage ``s`` needs its forward on stage ``s − 1``;
* a backward (``B``, or ``I`` when the weight gradient is split off) on stage ``s`` needs the
  input gradient of stage ``s + 1``, and on the last stage the forward there;
* the weight-gradient pass ``W`` needs the ``I`` of the same stage and micro-batch.

Pass names are torch.distributed.pipelining's (``torch/distributed/pipelining/schedules.py``,
``_ComputationType``): ``F`` forward, ``B`` full backward (input and weight gradients in one pass),
``I`` backward for the input only (Qi et al. 2024's ``B``), ``W`` backward for the weights. An
entry of two passes is DualPipe's overlapped chunk (DeepSeek-V3 report, arXiv 2412.19437,
§3.2.1): one micro-batch's forward and another's backward run as one block of ``t_fb``; both
outputs leave when it ends.

Pipeline point-to-point transfers take no time here unless a ``latency`` is given (the time from a
pass's end until its output reaches the next rank, :func:`run`; a send the rank waits on belongs
in the pass's duration instead), and a pass starts as soon as its rank is free and its input has
arrived (the idealisation of the papers' figures and bubble formulas); times are
exact :class:`~fractions.Fraction`. Durations come in per pass of one *chunk* (the layers one
pass runs: a stage's under 1F1B, one of a rank's two chunks under the V and DualPipe schedules),
so a cost model can feed measured op times.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, Protocol

from trainplan.model.errors import InputError

__all__ = [
    "PASS_NAMES",
    "MAX_PASSES",
    "PassTimes",
    "Step",
    "Slot",
    "Policy",
    "Engine",
    "run",
    "dependency",
]

MAX_PASSES = 400_000
"""Largest number of passes one timeline simulates (a few seconds of pure Python)."""

PASS_NAMES = {"F": "forward", "B": "backward", "I": "backward_input", "W": "backward_weight"}
"""Each pass letter and its name in JSON (torch.distributed.pipelining's letters)."""


@dataclass(frozen=True, slots=True)
class PassTimes:
    """Durations of one chunk's passes for one micro-batch, any time unit (exact).

    ``t_f`` forward; ``t_b`` backward for the input (``I``; Qi et al. 2024's T_B); ``t_w``
    backward for the weights (``W``; T_W); a full backward ``B`` takes ``t_b + t_w``. ``t_fb`` is
    DualPipe's overlapped forward-and-backward block (the report's F&B); ``None`` means no
    overlap gain, ``t_f + t_b + t_w``.

    Raises
    ------
    InputError
        ``t_f``, ``t_b`` not positive, ``t_w`` negative, or ``t_fb`` outside
        ``[max(t_f, t_b + t_w), t_f + t_b + t_w]`` (two passes overlapped take at least the longer
        one and at most both in turn).
    """

    t_f: Fraction = Fraction(1)
    t_b: Fraction = Fraction(1)
    t_w: Fraction = Fraction(1)
    t_fb: Fraction | None = None

    def __post_init__(self) -> None:
        for name in ("t_f", "t_b"):
            if Fraction(getattr(self, name)) <= 0:
                raise InputError(f"{name}: {getattr(self, name)} must be positive")
        if Fraction(self.t_w) < 0:
            raise InputError(f"t_w: {self.t_w} must not be negative")
        if self.t_fb is not None:
            f, full = Fraction(self.t_f), Fraction(self.t_b) + Fraction(self.t_w)
            if not max(f, full) <= Fraction(self.t_fb) <= f + full:
                raise InputError(
                    f"t_fb: {self.t_fb} must be between max(t_f, t_b + t_w) = {max(f, full)} and "
                    f"t_f + t_b + t_w = {f + full} (an overlapped forward and backward take at "
                    "least the longer one and at most both in turn)"
                )

    @property
    def overlapped(self) -> Fraction:
        """Duration of one overlapped F&B block: ``t_fb``, else ``t_f + t_b + t_w``."""
        serial = Fraction(self.t_f) + Fraction(self.t_b) + Fraction(self.t_w)
        return serial if self.t_fb is None else Fraction(self.t_fb)

    def of(self, kind: str) -> Fraction:
        """Duration of one pass ``F``, ``B``, ``I`` or ``W``."""
        return {
            "F": Fraction(self.t_f),
            "B": Fraction(self.t_b) + Fraction(self.t_w),
            "I": Fraction(self.t_b),
            "W": Fraction(self.t_w),
        }[kind]


@dataclass(frozen=True, slots=True)
class Step:
    """One planned pass: ``kind`` (F, B, I, W) of ``microbatch`` on local ``chunk`` of a rank, in
    pipeline ``direction`` (0, or 1 for DualPipe's reverse feed)."""

    kind: str
    microbatch: int
    chunk: int = 0
    direction: int = 0


@dataclass(frozen=True, slots=True)
class Slot:
    """One pass on one rank: ``[start, end)`` in the durations' unit. ``overlap`` marks the two
    halves of one overlapped F&B block (same start and end)."""

    stage: int
    start: Fraction
    end: Fraction
    kind: str
    microbatch: int
    chunk: int = 0
    direction: int = 0
    overlap: bool = False

    def to_dict(self) -> dict[str, object]:
        """JSON form (times as numbers; ``pass`` named as :data:`PASS_NAMES`)."""
        out: dict[str, object] = {
            "start": _num(self.start),
            "end": _num(self.end),
            "pass": PASS_NAMES[self.kind],
            "microbatch": self.microbatch,
            "chunk": self.chunk,
        }
        if self.direction:
            out["direction"] = self.direction
        if self.overlap:
            out["overlapped"] = True
        return out


def _num(x: Fraction) -> int | float:
    return int(x) if x.denominator == 1 else float(x)


NO_INPUT = Fraction(0)
"""What :meth:`Engine.arrival` returns for a block with no input (the first stage's forward)."""

Entry = tuple[Step, ...]
"""One block of a rank's order: one pass, or DualPipe's overlapped (forward, backward) pair."""


class Policy(Protocol):
    """A rule that picks a rank's next block when the rank is free (zero-bubble handcrafted
    schedules whose order depends on which input has arrived)."""

    def next(self, rank: int, t: Fraction, engine: Engine) -> Entry | None | Literal[True]:
        """The block to start at ``t``; ``None`` to wait for the next event; ``True`` when the
        rank has nothing left."""
        ...


def dependency(step: Step, stage: int, stages: int) -> tuple[str, int, int, int] | None:
    """The output ``step`` on pipeline position ``stage`` waits for, as a key ``(what, direction,
    stage, microbatch)`` with ``what`` "F" (activations) or "G" (input gradient); None for the
    first forward. The rule of the module docstring."""
    d, j = step.direction, step.microbatch
    if step.kind == "F":
        return ("F", d, stage - 1, j) if stage > 0 else None
    if step.kind == "W":
        return ("G", d, stage, j)
    return ("G", d, stage + 1, j) if stage < stages - 1 else ("F", d, stage, j)


class Engine:
    """The running state of one simulation (see :func:`run`): outputs released so far
    (``ready``: key → time), each rank's slots."""

    def __init__(
        self,
        ranks: int,
        stages: int,
        stage_of: Callable[[int, Step], int],
        duration: Callable[[int, Entry], Any],
        latency: Callable[[int, Entry], Any] | None = None,
    ) -> None:
        self.ranks, self.stages = ranks, stages
        self.stage_of, self.duration, self.latency = stage_of, duration, latency
        self.ready: dict[tuple[str, int, int, int], Any] = {}
        self.slots: list[list[Slot]] = [[] for _ in range(ranks)]
        self.ends: list[Fraction] | None = None  # heap of pass ends, kept for a policy

    def dep(self, rank: int, step: Step) -> tuple[str, int, int, int] | None:
        """The key ``step`` on ``rank`` waits for (:func:`dependency`)."""
        return dependency(step, self.stage_of(rank, step), self.stages)

    def arrival(self, rank: int, entry: Entry, join: Callable[..., Any] = max) -> Any:
        """When every input of ``entry`` on ``rank`` has arrived (``join`` of their release
        times; :data:`NO_INPUT` for a first forward); None while one is unknown."""
        t: Any = NO_INPUT
        for step in entry:
            key = self.dep(rank, step)
            if key is not None:
                if key not in self.ready:
                    return None
                t = self.ready[key] if t is NO_INPUT else join(t, self.ready[key])
        return t

    def start(self, rank: int, entry: Entry, at: Any) -> Any:
        """Run ``entry`` on ``rank`` from ``at``; its outputs are released at its end (plus the
        ``latency`` of their transfer, when one is given)."""
        end = at + self.duration(rank, entry)
        release = end if self.latency is None else end + self.latency(rank, entry)
        overlap = len(entry) > 1
        slots = self.slots[rank]
        for step in entry:
            kind = step.kind
            if kind == "F" or kind == "B" or kind == "I":
                stage = self.stage_of(rank, step)
                what = "F" if kind == "F" else "G"
                self.ready[what, step.direction, stage, step.microbatch] = release
            slots.append(
                Slot(rank, at, end, kind, step.microbatch, step.chunk, step.direction, overlap)
            )
        if self.ends is not None:
            heapq.heappush(self.ends, end)
        return end


def run(
    ranks: int,
    stages: int,
    stage_of: Callable[[int, Step], int],
    duration: Callable[[int, Entry], Any],
    orders: Sequence[Sequence[Entry]] | None = None,
    policy: Policy | None = None,
    join: Callable[..., Any] = max,
    latency: Callable[[int, Entry], Any] | None = None,
    zero: Any = None,
) -> tuple[tuple[Slot, ...], ...]:
    """Simulate one step: each rank runs ``orders[rank]`` (or what ``policy`` picks) as the
    dataflow allows; returns each rank's slots in time order. ``latency(rank, entry)``, when
    given: how long after ``entry`` ends its outputs reach the passes that need them (a send run
    beside the rank's next pass); none by default. ``zero``: the time every rank starts at (a
    fixed order's), of the durations' kind: ``Fraction(0)`` (None, the default), or ``0`` for
    whole-number durations (:func:`model.schedule.split_step_time`).

    A fixed order needs no clock: every block starts at ``join`` (max) of its rank's free time
    and its inputs' arrival, so ``join`` and the durations may be any max-plus values (the tests
    run the orders on symbolic durations to read off the exact step time as a maximum of linear
    forms). A policy decides by the clock: ranks are taken in the order they become free, so when
    a rank decides at ``t`` every pass that ends by ``t`` is known (a pass not yet placed starts at
    or after ``t``); a rank with nothing to run waits until the next pass ends.

    Raises
    ------
    InputError
        More than :data:`MAX_PASSES` passes.
    RuntimeError
        A deadlock (an order whose inputs never arrive): a bug in a schedule, never user input.
    """
    engine = Engine(ranks, stages, stage_of, duration, latency)
    if orders is None:
        assert policy is not None
        return _run_policy(engine, policy)
    total = sum(len(e) for o in orders for e in o)
    if total > MAX_PASSES:
        raise InputError(
            f"passes: {total:,} is over the {MAX_PASSES:,} this timeline simulates; "
            "use fewer micro-batches or stages"
        )
    pos, free = [0] * ranks, [Fraction(0) if zero is None else zero] * ranks
    while total:
        progressed = False
        for rank in range(ranks):
            order = orders[rank]
            while pos[rank] < len(order):
                arrived = engine.arrival(rank, order[pos[rank]], join)
                if arrived is None:
                    break
                at = free[rank] if arrived is NO_INPUT else join(free[rank], arrived)
                free[rank] = engine.start(rank, order[pos[rank]], at)
                pos[rank] += 1
                total -= len(order[pos[rank] - 1])
                progressed = True
        if not progressed:
            raise RuntimeError(f"pipeline schedule deadlocked at positions {pos}")
    return tuple(tuple(s) for s in engine.slots)


def _run_policy(engine: Engine, policy: Policy) -> tuple[tuple[Slot, ...], ...]:
    """:func:`run` for a policy: ranks decide in the order they become free."""
    engine.ends = []
    free = [(Fraction(0), r) for r in range(engine.ranks)]
    waiting: list[int] = []  # ranks with nothing to start at t_wait
    t_wait = Fraction(0)
    placed = 0
    while free or waiting:
        if free and (not waiting or free[0][0] <= t_wait):
            t, rank = heapq.heappop(free)
            choice = policy.next(rank, t, engine)
            if choice is None:
                waiting, t_wait = [*waiting, rank], t
            elif choice is not True:
                placed += len(choice)
                if placed > MAX_PASSES:
                    raise InputError(
                        f"passes: more than the {MAX_PASSES:,} this timeline simulates; "
                        "use fewer micro-batches or stages"
                    )
                at = max(t, engine.arrival(rank, choice) or Fraction(0))
                heapq.heappush(free, (engine.start(rank, choice, at), rank))
            continue
        nxt = _next_event(engine, t_wait, free)
        if nxt is None:
            raise RuntimeError(f"pipeline schedule deadlocked at ranks {waiting}")
        for rank in waiting:
            heapq.heappush(free, (nxt, rank))
        waiting = []
    return tuple(tuple(s) for s in engine.slots)


def _next_event(engine: Engine, t: Fraction, free: list[tuple[Fraction, int]]) -> Fraction | None:
    """The first time after ``t`` a pass ends or a busy rank frees up."""
    assert engine.ends is not None
    while engine.ends and engine.ends[0] <= t:
        heapq.heappop(engine.ends)
    candidates = [engine.ends[0]] if engine.ends else []
    candidates += [f for f, _ in free if f > t]
    return min(candidates) if candidates else None
