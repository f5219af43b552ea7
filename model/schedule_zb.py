"""The per-rank orders of the split-backward schedules: zero-bubble ZB-H1 (and its interleaved
form), ZB-H2, ZB-V, DualPipe and DualPipeV, run by :mod:`model.pipeline_sim`.

Each order is written from the framework code that runs the schedule (read, then written anew):

* ZB-H1 — ``ScheduleInterleavedZeroBubble`` (PyTorch ``torch/distributed/pipelining/
  schedules.py`` at 00722e6, ``_calculate_single_rank_operations`` with ``multiply_factor=1`` and
  ``_get_1f1b_rank_ops(..., enable_zero_bubble=True)``; "implementing the ZB1P schedule" of Qi et
  al., "Zero Bubble Pipeline Parallelism", ICLR 2024, arXiv 2401.10241, §2.1). Rank ``r`` runs
  ``(v − 1)·k + pp − 1 − r`` warm-up forwards (``k`` micro-batches per round), then a forward and
  an input-gradient backward ``I`` at a time, the ``W`` of the oldest ``I`` after each from the
  ``(r + 1)``-th on, and the held-back ``W`` at the end.
* ZB-H2 — Qi et al. 2024 §2.2 describes it by its rule and its figure, not code: "more F passes
  during the warm-up phase", W passes reordered at the tail into a parallelogram, at most
  ``2p − 1`` micro-batches in flight. :class:`ZbH2` runs that rule at equal pass times (the
  figure's): an ``I`` as soon as its gradient has arrived, else a forward while fewer than
  ``2·pp − 1`` micro-batches are in flight, else the oldest ``W``; :func:`zb_h2_orders` keeps the
  order it produces, which then runs at any durations (as the handcrafted schedule does).
* ZB-V — ``ScheduleZBVZeroBubble._calculate_single_rank_operations`` (same file; Qi et al. 2024
  §6): two chunks per rank in V order, ``2·(pp − r) − 1`` chunk-0 forwards, ``r`` (F1, F0) pairs,
  ``pp − r`` (F1, I1, W1), the steady (F0, I0, W0, F1, I1, W1), then the cool-down.
* DualPipe and DualPipeV — deepseek-ai/DualPipe ``dualpipe/dualpipe.py`` and
  ``dualpipe/dualpipev.py`` ``step()`` at 3da1bbe, its eight steps per rank (nF0, nF0F1, nB1W1F1,
  nF0B1F1B0, nB1F1B0, nB1B0, nWB0, nW; the overlapped ``_forward_backward_chunk`` blocks; the
  weight gradients of a ``enable_zb`` backward queued FIFO in ``WeightGradStore`` and popped by
  ``_weight_chunk``). DualPipe has ``pp`` ranks, each holding stage ``r`` of the forward direction
  and stage ``pp − 1 − r`` of the reverse one, ``m/2`` micro-batches fed from each end; DualPipeV
  is its "cut-in-half": ``pp`` ranks, ``2·pp`` stages in V order, all ``m`` micro-batches from
  rank 0, the same eight steps as DualPipe's rank with ``m`` per direction.

Chunk numbering: the loop placement's chunk ``c`` of rank ``r`` is virtual stage ``c·pp + r``; the
V placement's chunk 0 is stage ``r`` and chunk 1 stage ``2·pp − 1 − r``; DualPipe's chunk is the
direction (module 0 the forward-direction stage, module 1 the reverse one).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache
from typing import Literal

from trainplan.model.pipeline_sim import Engine, Entry, Step, run

__all__ = [
    "zb_h1_order",
    "ZbH2",
    "zb_h2_orders",
    "zb_v_order",
    "dualpipe_order",
    "loop_stage",
    "v_stage",
    "dualpipe_stage",
]


def loop_stage(pp: int) -> Callable[[int, Step], int]:
    """Pipeline position of a rank's chunk under the loop placement: ``chunk·pp + rank``."""
    return lambda rank, step: step.chunk * pp + rank


def v_stage(pp: int) -> Callable[[int, Step], int]:
    """Pipeline position under the V placement: chunk 0 at ``rank``, chunk 1 at
    ``2·pp − 1 − rank`` (PyTorch ``generate_stage_to_rank_mapping(style="v")``)."""
    return lambda rank, step: rank if step.chunk == 0 else 2 * pp - 1 - rank


def dualpipe_stage(pp: int) -> Callable[[int, Step], int]:
    """Pipeline position under DualPipe: stage ``rank`` of the forward direction (0), stage
    ``pp − 1 − rank`` of the reverse one (1)."""
    return lambda rank, step: rank if step.direction == 0 else pp - 1 - rank


def zb_h1_order(pp: int, m: int, v: int, rank: int) -> list[Entry]:
    """Rank ``rank``'s order under ZB-H1 (``v = 1``) or interleaved ZB-H1 (``v`` chunks, loop
    placement), as PyTorch's ``ScheduleInterleavedZeroBubble`` lays it out.

    Examples
    --------
    >>> " ".join(f"{e[0].kind}{e[0].microbatch}" for e in zb_h1_order(2, 3, 1, 1))
    'F0 I0 F1 I1 W0 F2 I2 W1 W2'
    """
    per_round = m // max(1, m // pp)
    warmup = min((v - 1) * per_round + pp - 1 - rank, m * v)
    total = m * v
    counts = {"F": [0] * v, "I": [0] * v, "W": [0] * v}

    def chunk(op: int, backward: bool) -> int:
        if backward:
            return v - 1 - ((op - warmup) // per_round) % v
        return (op // per_round) % v

    def take(kind: str, c: int) -> Entry:
        counts[kind][c] += 1
        return (Step(kind, counts[kind][c] - 1, c),)

    order = [take("F", chunk(op, False)) for op in range(warmup)]
    backwards: list[int] = []  # chunk of each I so far, in order
    for op in range(warmup, warmup + total):
        if op < total:
            order.append(take("F", chunk(op, False)))
        backwards.append(chunk(op, True))
        order.append(take("I", backwards[-1]))
        if op - warmup >= rank:
            order.append(take("W", backwards[sum(counts["W"])]))
    while sum(counts["W"]) < len(backwards):
        order.append(take("W", backwards[sum(counts["W"])]))
    return order


class ZbH2:
    """ZB-H2 as Qi et al. 2024 §2.2 states it, for ``pp`` stages and ``m`` micro-batches: when a
    rank is free it runs the next input-gradient backward ``I`` if its gradient has arrived, else
    the next forward if it has arrived and fewer than ``in_flight`` (``2·pp − 1``) micro-batches
    are between their forward and their ``W``, else the oldest pending ``W``; else it waits.

    With equal pass times stage ``i`` runs ``2·(pp − i) − 1`` warm-up forwards and computes
    without a gap from ``i·t_f`` on: the paper's parallelogram (tests/model/test_pipeline_zb.py);
    its Table 2 bubble ``(p − 1)(T_F + T_B − 2T_W)`` holds for any durations."""

    def __init__(self, pp: int, m: int) -> None:
        self.m, self.in_flight = m, 2 * pp - 1
        self.done = {k: [0] * pp for k in "FIW"}

    def next(self, rank: int, t: Fraction, engine: Engine) -> Entry | None | Literal[True]:
        """The block rank ``rank`` starts at ``t`` (see the class docstring)."""
        f, i, w = (self.done[k][rank] for k in "FIW")
        if w == self.m:
            return True
        candidates = []
        if i < f:
            candidates.append(Step("I", i))
        if f < self.m and f - w < self.in_flight:
            candidates.append(Step("F", f))
        for step in candidates:
            arrived = engine.arrival(rank, (step,))
            if arrived is not None and arrived <= t:
                self.done[step.kind][rank] += 1
                return (step,)
        if w < i:
            self.done["W"][rank] += 1
            return (Step("W", w),)
        return None


@lru_cache(maxsize=64)  # bounded: pp and m are a user's; each entry holds pp·m passes
def zb_h2_orders(pp: int, m: int) -> tuple[tuple[Entry, ...], ...]:
    """Every rank's ZB-H2 order: :class:`ZbH2`'s rule run at equal pass times.

    Examples
    --------
    >>> " ".join(f"{e[0].kind}{e[0].microbatch}" for e in zb_h2_orders(2, 3)[0])
    'F0 F1 F2 I0 W0 I1 W1 I2 W2'
    """
    slots = run(pp, pp, loop_stage(pp), lambda rank, entry: Fraction(1), policy=ZbH2(pp, m))
    return tuple(tuple((Step(s.kind, s.microbatch),) for s in rank) for rank in slots)


def zb_v_order(pp: int, m: int, rank: int) -> list[Entry]:
    """Rank ``rank``'s order under ZB-V (PyTorch ``ScheduleZBVZeroBubble``): built for
    ``max(2·pp − 1, m)`` micro-batches, the extra ones then dropped, as PyTorch does.

    Examples
    --------
    >>> " ".join(f"{e[0].kind}{e[0].microbatch}.{e[0].chunk}" for e in zb_v_order(1, 2, 0))
    'F0.0 F0.1 I0.1 W0.1 F1.0 I0.0 W0.0 F1.1 I1.1 W1.1 I1.0 W1.0'
    """
    n = max(2 * pp - 1, m)
    counts = {(k, c): 0 for k in "FIW" for c in (0, 1)}
    order: list[Entry] = []

    def add(*passes: tuple[str, int]) -> None:
        for kind, c in passes:
            order.append((Step(kind, counts[kind, c], c),))
            counts[kind, c] += 1

    add(*[("F", 0)] * (2 * (pp - rank) - 1))
    for _ in range(rank):
        add(("F", 1), ("F", 0))
    for _ in range(pp - rank):
        add(("F", 1), ("I", 1), ("W", 1))
    while counts["F", 1] < counts["F", 0] or counts["F", 0] < n:
        if counts["F", 0] < n:
            add(("F", 0))
        add(("I", 0), ("W", 0), ("F", 1), ("I", 1), ("W", 1))
    for _ in range(rank):
        add(("I", 0), ("I", 1))
    for _ in range(pp - rank):
        add(("I", 0), ("W", 0))
    add(*[("W", 1)] * (counts["I", 1] - counts["W", 1]))
    add(*[("W", 0)] * (counts["I", 0] - counts["W", 0]))
    return [e for e in order if e[0].microbatch < m]


def dualpipe_order(pp: int, m: int, rank: int, v_shape: bool = False) -> list[Entry]:
    """Rank ``rank``'s order under DualPipe (``pp`` ranks, ``m`` micro-batches, ``m/2`` from each
    end) or, with ``v_shape``, DualPipeV (``pp`` ranks, ``2·pp`` stages, ``m`` micro-batches):
    DualPipe's ``step()``, step by step (module docstring).

    Examples
    --------
    >>> [len(e) for e in dualpipe_order(2, 4, 0)]
    [1, 1, 1, 1, 2, 1, 1, 1]
    """
    if v_shape:
        half_ranks, h, per_direction = pp, rank, m
        where = {0: (0, 0), 1: (1, 0)}  # local phase -> (chunk, direction)
    else:
        half_ranks, h, per_direction = pp // 2, min(rank, pp - 1 - rank), m // 2
        second = int(rank >= pp // 2)  # "phase ^= is_in_second_half"
        where = {0: (second, second), 1: (1 - second, 1 - second)}
    counts = {("F", 0): 0, ("F", 1): 0, ("B", 0): 0, ("B", 1): 0}
    weights: deque[Step] = deque()  # WeightGradStore's FIFO

    def f(phase: int) -> Step:
        counts["F", phase] += 1
        return Step("F", counts["F", phase] - 1, *where[phase])

    def b(phase: int, zb: bool = False) -> Step:
        counts["B", phase] += 1
        j, (c, d) = counts["B", phase] - 1, where[phase]
        if zb:
            weights.append(Step("W", j, c, d))
        return Step("I" if zb else "B", j, c, d)

    rest = half_ranks - h - 1
    order: list[Entry] = [(f(0),) for _ in range(2 * rest)]  # step 1: nF0
    for _ in range(h + 1):  # step 2: nF0F1
        order += [(f(0),), (f(1),)]
    for _ in range(rest):  # step 3: nB1W1F1, zero bubble
        order += [(b(1, True),), (weights.popleft(),), (f(1),)]
    for i in range(per_direction - 2 * half_ranks + h + 1):  # step 4: nF0B1F1B0
        if i == 0 and h == half_ranks - 1:  # the middle rank does not overlap its first pair
            order += [(f(0),), (b(1),)]
        else:
            order.append((f(0), b(1)))
        order.append((f(1), b(0)))
    for _ in range(rest):  # step 5: nB1F1B0
        order += [(b(1),), (f(1), b(0))]
    zb = False
    for i in range(h + 1):  # step 6: nB1B0, the second half with zero bubble
        zb = zb or (i == (h + 1) // 2 and h % 2 == 1)
        order.append((b(1, zb),))
        zb = zb or (i == (h + 1) // 2 and h % 2 == 0)
        order.append((b(0, zb),))
    for _ in range(rest):  # step 7: nWB0
        order += [(weights.popleft(),), (b(0, True),)]
    order += [(weights.popleft(),) for _ in range(h + 1)]  # step 8: nW
    return order
