"""The step of the one-chunk schedules (1F1B and GPipe) when pipeline stages take unequal time.

The order every framework runs for 1F1B, rank ``i`` of ``pp`` with ``m`` micro-batches: a
warm-up of ``w_i = min(pp − i − 1, m)`` forwards, then forward ``w_i + q`` and backward ``q`` in
turn (q = 0 … m − w_i − 1), then the cool-down's backwards.

* Megatron-Core (NVIDIA/Megatron-LM d98e8a64dd) ``megatron/core/pipeline_parallel/schedules.py``
  ``forward_backward_pipelining_without_interleaving``: ``num_warmup_microbatches =
  min(pipeline_parallel_size − rank − 1, num_microbatches)``, then
  ``num_microbatches_remaining`` rounds of ``forward_step`` and ``backward_step``, then the
  cool-down's ``backward_step``\\ s.
* PyTorch 2.13.0 (cf30153c4c) ``torch/distributed/pipelining/schedules.py`` ``Schedule1F1B``
  (torchtitan's ``1F1B``, the ``fsdp2`` profile): ``min(m, pp − r)`` warm-up forwards, then a
  backward and a forward in turn: the same passes in the same order (one more warm-up forward,
  one fewer forward in the first round).
* DeepSpeed (deepspeedai/DeepSpeed edaa72212) ``deepspeed/runtime/pipe/schedule.py``
  ``TrainSchedule`` (:mod:`model.deepspeed_pipe`): its lock-step's passes on each stage come in
  the same order (``tests/model/test_pipeline_onef.py``), and with its transfers taken as
  instantaneous rendezvous its step equals this one (the same test, on random stage times);
  the transfers are charged apart, as for every profile
  (:func:`model.step_time.pipe_engine_seconds`).

GPipe (``ScheduleGPipe``; Megatron-Core has none) is the same recursion with ``w_i = m``: every
forward, then every backward.

Each pass waits for the pass before it on its rank and for its micro-batch's pass on the
neighbouring stage (a forward the rank before's forward, a backward the rank after's backward;
the last rank's backward its own forward, before it in its order), the pipeline messages
charged apart as the cost model charges them (:func:`model.terms.roofline.pp_seconds_term`).
The step is the longest path of that graph from the first forward to the first rank's last
backward. :func:`onef_steps` computes it exactly, round by round: round q holds on rank i the
forward ``w_i + q`` and the backward ``q`` (those that exist). A forward of round q waits only
for its rank's previous pass (round q − 1) and for the rank before's forward of the same
micro-batch, in round ``q + w_i − w_{i−1}`` ≤ q (ranks taken in rising order); a backward of
round q for its rank's forward of the same round, or its backward of round q − 1, and for the
rank after's backward of round q (ranks in falling order). So one sweep of the rounds, forwards
rising then backwards falling, meets every pass after both its inputs: the recursion
``end = max(rank's last end, neighbour's end) + own time`` is the longest path.

What it gives. With stages alike (forward f, backward b) it is the closed form
``(m + pp − 1)(f + b)`` (Narayanan et al. 2021 §2.2). With stage times ``T_i = f_i + b_i``:

* it never falls below ``m·T_k + Σ_{i<k} T_i`` for any stage k: the path down the first
  micro-batch's forwards to rank k, every pass of rank k, up the last micro-batch's backwards;
* it can fall below ``m·T_k + Σ_{i≠k} T_i``: a stage's warm-up forwards cover the round trip
  through the faster stages after it (pp 2, stage 0 f = b = 10, stage 1 f = b = 1: ``20·m``,
  not ``20·m + 2``);
* past the warm-up each round is one max-plus function of the round before (Baccelli, Cohen,
  Olsder & Quadrat 1992, ch. 3), so once a round's ends all move by the same ``c`` from the
  round before they do in every later round of the steady phase: the sweep jumps there
  (exact); its slope, ``max_i T_i`` once settled, is reached only after a transient (its
  rounds can move by less while the slowest stage's slack absorbs the fill), so no
  ``max_k (a_k + m·T_k)`` holds in general.

Pure Python numbers (one layout) or arrays of the same shapes (many layouts at once, the
namespace's element-wise ``maximum``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainplan.model.pipeline import Schedule
from trainplan.model.xp import maximum, namespace

__all__ = ["ONE_CHUNK", "one_chunk", "warmup", "onef_steps", "onef_bubble", "SETTLE_TOLERANCE"]

ONE_CHUNK = (Schedule.ONE_F_ONE_B.value, Schedule.GPIPE.value)
"""The schedules :func:`onef_steps` times (``Schedule`` values)."""
SETTLE_TOLERANCE = 1e-12
"""Spread of a round's shifts, relative to the largest end, within which the steady phase
counts as settled (:func:`onef_steps`): above the rounding of float sums along the order, far
below any time the cost model reports."""


def one_chunk(schedule: Any, pp: int) -> bool:
    """Whether a layout's pipeline section is the one-chunk order's step (1F1B or GPipe with
    pp > 1: :func:`onef_steps`).

    >>> one_chunk("1f1b", 4), one_chunk("gpipe", 1), one_chunk("interleaved", 4)
    (True, False, False)
    """
    return str(schedule) in ONE_CHUNK and pp > 1


def warmup(pp: int, m: int, rank: int, schedule: str = Schedule.ONE_F_ONE_B.value) -> int:
    """Forwards ``rank`` runs before its first backward: ``min(pp − rank − 1, m)`` under 1F1B
    (Megatron-Core's ``num_warmup_microbatches``), ``m`` under GPipe.

    >>> [warmup(4, 8, r) for r in range(4)], warmup(4, 2, 0), warmup(4, 8, 0, "gpipe")
    ([3, 2, 1, 0], 2, 8)
    """
    return m if schedule == Schedule.GPIPE.value else min(pp - rank - 1, m)


def onef_steps(
    pp: int,
    m: int,
    forward: Sequence[Any],
    backward: Sequence[Any],
    schedule: str = "1f1b",
    settle: bool = True,
) -> Any:
    """The step of the one-chunk order (module docstring), in the unit of the times:
    ``forward``, ``backward`` each stage's forward and backward of one micro-batch (``pp`` numbers,
    or ``pp`` arrays ``[K]``); ``m`` one int for all, or, with arrays under 1F1B and every
    ``m ≥ pp − 1``, an int array ``[K]``: each layout's own (to the bit a call with its m alone).
    ``settle`` False: every round run, no jump nor GPipe's closed form (:func:`_gpipe`).

    Raises
    ------
    ValueError
        ``pp`` or ``m`` below 1, or not ``pp`` times; ``m`` an array elsewhere.

    Examples
    --------
    Stages alike give ``(m + pp − 1)(f + b)``; a slow first stage's warm-up hides the fast
    stage after it (20·m, not 20·m + 2):

    >>> onef_steps(4, 8, [1.0] * 4, [2.0] * 4)
    33.0
    >>> onef_steps(2, 5, [10.0, 1.0], [10.0, 1.0])
    100.0
    >>> onef_steps(2, 5, [10.0, 1.0], [10.0, 1.0], "gpipe")  # 5 forwards, 1 + 1, 5 backwards
    102.0
    """
    xp = namespace(*forward, *backward)
    if _every_round(xp, pp, m, forward, backward, schedule):
        return _rounds(xp, pp, m, xp.stack(list(forward)), xp.stack(list(backward)))
    if schedule == Schedule.GPIPE.value and settle:
        return _gpipe(m, forward) + _gpipe(m, backward)
    warm = [warmup(pp, m, i, schedule) for i in range(pp)]
    zero: Any = 0.0 if xp is None else xp.zeros_like(forward[0] + backward[0])
    last = [zero] * pp  # each rank's last end
    ends: dict[tuple[int, int], Any] = {}  # (rank, micro-batch): forward ends still awaited
    final = m - warm[0] - 1  # the last round of the steady phase (every rank both passes)
    q = -max(warm)
    while q < m:
        before = (list(last), dict(ends))
        for i in range(pp):  # forwards, ranks rising
            j = q + warm[i]
            if 0 <= j < m:
                start = last[i] if i == 0 else maximum(last[i], ends.pop((i - 1, j)))
                last[i] = start + forward[i]
                if i < pp - 1:
                    ends[(i, j)] = last[i]
        below: Any = None
        for i in reversed(range(pp)):  # backwards, ranks falling
            if 0 <= q < m:
                start = last[i] if below is None else maximum(last[i], below)
                last[i] = below = start + backward[i]
        if settle and 1 <= q < final and schedule != Schedule.GPIPE.value:
            last, ends, q = _jump(before, last, ends, q, final, xp)
        q += 1
    return last[0]


def _gpipe(m: int, times: Sequence[Any]) -> Any:
    """One phase of GPipe's step in :func:`onef_steps`' recursion: ``m`` passes of equal time
    through stages of ``times`` in order, ``Σ_i t_i + (m − 1)·max_i t_i``. The recursion's
    longest path runs from the first pass on the first stage to the last pass on the last,
    one stage or one pass further at a time: it meets every stage, and m + pp − 1 passes in
    all, so its m − 1 beyond one a stage go to the slowest. The backward phase is the same
    from the last rank's last forward (each rank's forwards end before the last rank's:
    a forward waits for the rank before's), so GPipe's step is the sum of the two phases.
    Equal to the round-by-round sweep (``settle`` False; ``tests/model/test_pipeline_onef.py``).

    >>> _gpipe(5, [10.0, 1.0]) + _gpipe(5, [10.0, 1.0])
    102.0
    """
    slowest = times[0]
    for t in times[1:]:
        slowest = maximum(slowest, t)
    return sum(times[1:], times[0]) + (m - 1) * slowest


def _jump(before: Any, last: list[Any], ends: dict[Any, Any], q: int, final: int, xp: Any) -> Any:
    """(last, ends, q) of :func:`onef_steps` after round ``q``: where every end moved by the
    same shift from ``before`` (:func:`_settled`), every later steady round moves by it too,
    so the state jumps to round ``final``; else as they are."""
    shift = _settled(before, (last, ends), xp)
    if shift is None:
        return last, ends, q
    rounds = final - q
    last = [x + rounds * shift for x in last]
    return last, {(i, j + rounds): x + rounds * shift for (i, j), x in ends.items()}, final


def _every_round(
    xp: Any, pp: int, m: Any, forward: Sequence[Any], backward: Sequence[Any], schedule: str
) -> bool:
    """Whether :func:`onef_steps` takes :func:`_rounds` (arrays, 1F1B, every ``m ≥ pp − 1``);
    its ValueErrors."""
    least = m if xp is None or isinstance(m, int) else int(xp.min(xp.asarray(m)))
    if pp < 1 or least < 1 or len(forward) != pp or len(backward) != pp:
        raise ValueError(f"onef_steps: pp {pp}, m {m}, {len(forward)}/{len(backward)} times")
    if xp is not None and schedule != Schedule.GPIPE.value and least >= pp - 1:
        return True
    if not isinstance(m, int):
        raise ValueError(f"onef_steps: one m for {schedule} at pp {pp} with some m below pp − 1")
    return False


def _rounds(xp: Any, pp: int, m: Any, f: Any, b: Any) -> Any:
    """:func:`onef_steps` of many layouts under 1F1B with ``m ≥ pp − 1`` (every warm-up
    ``pp − i − 1``), a round at a time over every rank (``f``, ``b``: ``[pp, K]``; ``m`` one int,
    or ``[K]`` ints, one a layout): rank i's forward waits for rank i − 1's of the round before;
    the backwards of a round, ranks falling, ``B_i = max_{l ≥ i} (e_l + Σ_{r=i}^{l} b_r)``
    (``e_l`` rank l's end after its forward), a running maximum from the last rank (numpy's
    ``maximum.accumulate``; ⌈log₂ pp⌉ doublings in another namespace: a max rounds nothing).
    The steady phase's jump as :func:`onef_steps`', taken by the layouts of one m together once
    all of them have settled (as a call with that m alone would); rounds up to each m's last
    steady one (``m − pp``) run for every layout at once (every forward exists there whatever
    m), then the cool-down's ``pp − 1`` rounds, counted from each layout's own m, likewise."""
    width = f.shape[1]
    groups: dict[int, Any] = {}
    for k, mk in enumerate(xp.broadcast_to(xp.asarray(m), (width,)).tolist()):
        groups.setdefault(int(mk), []).append(k)
    groups = {mk: xp.asarray(cols) for mk, cols in groups.items()}
    total = xp.concat([xp.zeros((1, width)), xp.cumulative_sum(b, axis=0)])  # Σ_{r<i} b_r
    warm = xp.reshape(xp.asarray(list(range(pp - 1, -1, -1))), (pp, 1))
    last = xp.zeros((pp, width))
    ahead = xp.zeros((pp, width))  # each rank's forward end of the round before
    done_last, done_ahead = xp.zeros((pp, width)), xp.zeros((pp, width))
    waiting = dict(groups)  # m → its layouts, not yet at their last steady round
    q = -(pp - 1)
    while waiting:
        before = (last, ahead)
        wait = xp.concat([xp.zeros((1, width)), ahead[:-1]])
        ahead = xp.maximum(last, wait) + f
        last = xp.where(q + warm >= 0, ahead, last)
        if 0 <= q:
            last = _backwards(xp, total, last)
        settled: Any = None
        shift: Any = None
        if 1 <= q:  # each layout's spread of shifts from the round before
            moved = xp.concat([last - before[0], ahead - before[1]])
            spread = xp.max(moved, axis=0) - xp.min(moved, axis=0)
            settled, shift = spread <= SETTLE_TOLERANCE * xp.max(last, axis=0), moved[0]
        for mk, cols in list(waiting.items()):
            final = mk - pp  # the last round of the steady phase
            if q == final:
                done_last[:, cols], done_ahead[:, cols] = last[:, cols], ahead[:, cols]
                del waiting[mk]
            elif 1 <= q < final and bool(xp.all(settled[cols])):
                rounds = final - q  # every later steady round moves by the same: jump there
                done_last[:, cols] = last[:, cols] + rounds * shift[cols]
                done_ahead[:, cols] = ahead[:, cols] + rounds * shift[cols]
                del waiting[mk]
        q += 1
    last, ahead = done_last, done_ahead
    for t in range(-(pp - 1), 0):  # the cool-down: round m + t, forward j = m + t + w_i < m
        wait = xp.concat([xp.zeros((1, width)), ahead[:-1]])
        ahead = xp.maximum(last, wait) + f
        last = _backwards(xp, total, xp.where(t + warm < 0, ahead, last))
    return last[0]


def _backwards(xp: Any, total: Any, last: Any) -> Any:
    """A round's backwards, ranks falling (:func:`_rounds`): ``B_i = max_{l ≥ i} (e_l + Σ_{r<l+1}
    b_r) − Σ_{r<i} b_r`` (``last`` [pp, K] the ends ``e``, ``total`` [pp + 1, K] the sums)."""
    y = last + total[1:]
    running = getattr(getattr(xp, "maximum", None), "accumulate", None)  # numpy's ufunc
    if running is not None:  # y_i = max_{l ≥ i} y_l, from the last rank up (exact: a max)
        return xp.flip(running(xp.flip(y, axis=0), axis=0), axis=0) - total[:-1]
    step = 1
    while step < y.shape[0]:  # the same in ⌈log₂ pp⌉ doublings
        y = xp.concat([xp.maximum(y[:-step], y[step:]), y[-step:]])
        step *= 2
    return y - total[:-1]


def _settled(before: Any, after: Any, xp: Any) -> Any:
    """The shift ``c`` where every end of a round's state (each rank's last end, the forward
    ends the next round awaits) moved by the same ``c`` from ``before`` to ``after`` for every
    layout, else None."""
    (last0, ends0), (last1, ends1) = before, after
    keys = sorted(ends1)
    if sorted((i, j + 1) for i, j in ends0) != keys:
        return None
    new = [*last1, *(ends1[k] for k in keys)]
    old = [*last0, *(ends0[(i, j - 1)] for i, j in keys)]
    shifts = [a - b for a, b in zip(new, old, strict=True)]
    if xp is None:
        scale = max(abs(x) for x in new) or 1.0
        if max(shifts) - min(shifts) <= SETTLE_TOLERANCE * scale:
            return shifts[0]
        return None
    stacked = xp.stack(shifts)
    scale = max(float(xp.max(xp.abs(xp.stack(new)))), 1e-300)
    spread = xp.max(stacked, axis=0) - xp.min(stacked, axis=0)
    return stacked[0] if bool(xp.all(spread <= SETTLE_TOLERANCE * scale)) else None


def onef_bubble(
    pp: int, m: int, forward: Sequence[Any], backward: Sequence[Any], schedule: str = "1f1b"
) -> Any:
    """The bubble, in the unit of the times: :func:`onef_steps` less ``m`` × the slowest
    stage's ``forward + backward``; never below 0.

    >>> onef_bubble(4, 8, [1.0] * 4, [2.0] * 4)  # (pp − 1)(f + b)
    9.0
    """
    busy = forward[0] + backward[0]
    for f, b in zip(forward[1:], backward[1:], strict=True):
        busy = maximum(busy, f + b)
    return onef_steps(pp, m, forward, backward, schedule) - m * busy
