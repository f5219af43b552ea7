"""DeepSpeed's pipeline engine as it runs a step: ``TrainSchedule``'s lock-step order
(:func:`train_schedule_step`), its timeline with every transfer a blocking rendezvous
(:func:`train_schedule_span`, the oracle) and, read off it, how many transfers and all-gathers lie
on the step's critical path (:func:`pipe_engine_counts`, what
:func:`model.step_time.pipe_engine_seconds` charges).

The code (``deepspeed/runtime/pipe/``, read at deepspeedai/DeepSpeed edaa72212 and at
microsoft/DeepSpeed 29bee73f0 of 2021-10, MT-NLG's, and 56c522386 of 2022-04, BLOOM's; the
schedule is the same in all three):

* ``schedule.py`` ``TrainSchedule.steps``: ``2(m + pp − 1)`` steps; at step k stage s runs a
  forward when k and s have the same parity, else a backward (``_step_to_micro_batch``), of
  micro-batch ``⌊k/2⌋ − ⌊s/2⌋`` forward and ``⌊(k + 1)/2⌋ − pp + ⌈s/2⌉`` backward; an id
  outside [0, m) idles. A forward step first receives its input from s − 1 and sends s − 1 the
  gradient of the backward it ran the step before (``RecvActivation``, ``SendGrad``); a backward
  step sends s + 1 the output of the forward it ran the step before and receives its output
  gradient (``SendActivation``, ``RecvGrad``; the 2021 order, the later code swaps each pair);
  then the pass. So in every step neighbours s and s + 1 exchange, the one running its backward
  with the one running its forward.
* ``p2p.py`` ``send``/``recv``: ``dist.send``/``dist.recv`` (a broadcast in a two-rank group
  before torch 1.8), ``async_op`` asserted False; NCCL's point-to-point kernel holds the
  stream until its peer's runs, so each transfer is a rendezvous that keeps both stages for its
  time. The engine then waits on the host too (``PartitionedTensor.from_meta`` reads the meta
  with ``tolist()`` in 2021; ``ThroughputTimer.start`` synchronises each forward), which moves no
  stream dependency.
* ``engine.py``: with tp > 1 the stage output and its gradient go as 1/tp shares
  (``is_pipe_partitioned``, ``is_grad_partitioned``) and ``PartitionedTensor.full`` all-gathers
  one before the forward (the received input, stages 1 …) and two before the backward (the
  stage's own output, the received gradient; stages … pp − 2).

The lock-step adds no bubble: a forward-backward cycle of a middle stage is F + B + its
transfers, and the step ``(m + pp − 1)(F + B)`` plus the transfers and gathers on its critical
path, as 1F1B (Narayanan et al. 2021). Stages are taken alike (the slowest one's passes).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from trainplan.model.xp import where

__all__ = ["train_schedule_step", "train_schedule_span", "pipe_engine_counts"]


def train_schedule_step(k: int, s: int, pp: int) -> tuple[int, bool]:
    """(micro-batch, forward) stage ``s`` of ``pp`` runs at step ``k`` of ``TrainSchedule``
    (the module's docstring); a micro-batch outside [0, m) means the stage idles.

    >>> [train_schedule_step(k, 0, 3) for k in range(6)]
    [(0, True), (-2, False), (1, True), (-1, False), (2, True), (0, False)]
    >>> [train_schedule_step(k, 2, 3) for k in range(2, 6)]
    [(0, True), (0, False), (1, True), (1, False)]
    """
    if k % 2 == s % 2:
        return k // 2 - s // 2, True
    return (k + 1) // 2 - pp + (s + 1) // 2, False


def _stage_ops(m: int, pp: int, s: int) -> list[tuple[Any, ...]]:
    """Stage ``s``'s operations in order: ``("x", peer, what, micro-batch)`` transfers (what:
    ``act`` or ``grad``) and ``("F" | "B", micro-batch)`` passes."""
    ops: list[tuple[Any, ...]] = []
    prev = -1
    for k in range(2 * (m + pp - 1)):
        i, forward = train_schedule_step(k, s, pp)
        peer = s - 1 if forward else s + 1
        if 0 <= peer < pp:
            first, second = (
                (("act", i), ("grad", prev)) if forward else (("act", prev), ("grad", i))
            )
            for what, j in (first, second):
                if 0 <= j < m:
                    ops.append(("x", peer, what, j))
        if 0 <= i < m:
            ops.append(("F" if forward else "B", i))
        prev = i
    return ops


def train_schedule_span(
    m: int, pp: int, t_f: Fraction, t_b: Fraction, send: Fraction, gather: Fraction
) -> Fraction:
    """The step of ``TrainSchedule`` with m micro-batches on pp stages alike: forward ``t_f``,
    backward ``t_b``, every transfer a rendezvous holding both stages ``send``, each forward of
    stages 1 … pp − 1 preceded by one all-gather and each backward of stages 0 … pp − 2 by two,
    ``gather`` each (the module's docstring). Exact for Fractions.

    Examples
    --------
    pp 3, m 2, F 1, B 2, no transfers: (m + pp − 1)(F + B) = 12, as 1F1B. With transfers of 1/10
    and gathers of 1/100: 6 transfers and 7 gathers lie on the critical path
    (:func:`pipe_engine_counts`), 12 + 0.6 + 0.07.

    >>> train_schedule_span(2, 3, Fraction(1), Fraction(2), Fraction(0), Fraction(0))
    Fraction(12, 1)
    >>> train_schedule_span(2, 3, Fraction(1), Fraction(2), Fraction(1, 10), Fraction(1, 100))
    Fraction(1267, 100)
    """
    ops = [_stage_ops(m, pp, s) for s in range(pp)]
    at, clock = [0] * pp, [Fraction(0)] * pp
    while any(at[s] < len(ops[s]) for s in range(pp)):
        moved = False
        for s in range(pp):
            while at[s] < len(ops[s]):
                op = ops[s][at[s]]
                if op[0] != "x":
                    forward = op[0] == "F"
                    gathers = (s > 0) if forward else 2 * (s < pp - 1)
                    clock[s] += (t_f if forward else t_b) + gathers * gather
                    at[s] += 1
                    moved = True
                    continue
                peer = op[1]
                if at[peer] >= len(ops[peer]) or ops[peer][at[peer]] != ("x", s, *op[2:]):
                    break  # the peer has not reached the matching transfer yet
                clock[s] = clock[peer] = max(clock[s], clock[peer]) + send
                at[s] += 1
                at[peer] += 1
                moved = True
        if not moved:
            raise AssertionError("TrainSchedule deadlocked")  # the schedule never does
    return max(clock)


def pipe_engine_counts(m: Any, pp: Any) -> tuple[Any, Any]:
    """(blocking transfers, all-gathers over tp) on the critical path of a ``TrainSchedule``
    step with pp > 1, stages alike and transfers short against a pass, read off
    :func:`train_schedule_span` (tests/model/test_deepspeed_train_schedule.py checks it over
    pp 2 … 12, m 1 … 24):

    * pp ≥ 3, m ≥ 2: ``4m + 2pp − 8`` transfers and ``3m + 3pp − 8`` gathers — a middle stage's
      four transfers and three gathers a cycle over the steady state, one transfer and one (up)
      or two (down) gathers a stage on the fill and the drain;
    * pp = 2, m ≥ 2: ``2m`` and ``2m`` (no middle stage: each exchange is every other step);
    * m = 1: ``2(pp − 1)`` and ``3(pp − 1)``, the one micro-batch up and down.

    Element-wise in ``m`` (``pp`` too).

    >>> pipe_engine_counts(240, 35), pipe_engine_counts(8, 2), pipe_engine_counts(1, 4)
    ((1022, 817), (16, 16), (6, 9))
    """
    transfers = where(pp == 2, 2 * m, 4 * m + 2 * pp - 8)
    gathers = where(pp == 2, 2 * m, 3 * m + 3 * pp - 8)
    return where(m == 1, 2 * (pp - 1), transfers), where(m == 1, 3 * (pp - 1), gathers)
