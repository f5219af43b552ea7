"""The replay of one rank's ``ScheduleInterleaved1F1B`` order under PyTorch's multi-stage pipeline
runtime with FSDP2, in runs: what :func:`model.fsdp2_pipeline.chunk_gathers` counts (the
all-gathers of a chunk a step) and what the memory term reads (which chunks are held gathered
at once, :func:`held_chunk_sets`).

The rules (PyTorch 2.13.0, git cf30153c4c, ``torch/distributed/pipelining/schedules.py``
``_add_unshard_reshard`` with ``max_active_stages=3``; ``torch/distributed/fsdp/_fully_shard/
_fsdp_param_group.py``; :mod:`model.fsdp2_pipeline`'s docstring): before each pass the next
:data:`~model.fsdp2_pipeline.MAX_ACTIVE_STAGES` distinct chunks the rank computes are kept; one
that leaves is freed (``RESHARD``: ``FSDPParamGroup.reshard`` → ``_to_sharded`` →
``FSDPParam.free_unsharded_param``), one that enters is gathered if freed (``UNSHARD``); then
the pass's own hooks gather its chunk if freed; a forward frees it under
``reshard_after_forward``, a backward leaves it whole (``set_reshard_after_backward(False)``).

**Runs.** The order (:func:`model.schedule.stage_order`, Megatron-Core's, which is PyTorch's:
``tests/model/test_fsdp2_runtime_gathers.py``) is warm-up forwards, then a forward and a
backward in turn, then the cool-down backwards; a pass's chunk changes only where its index
crosses a multiple of pp. :func:`order_runs` writes it as runs of one repeated pattern (one
pass, a forward–backward pair, or one period of v·pp pairs) without listing the passes: O(v·m/pp)
runs a rank where the order holds 2·v·m passes, O(v) where the periods are folded (DeepSeek-V3
at pp 2, v 31, m 15,360: 4.7 s a rank replayed in pairs' runs, a period's 124 passes folded).
Inside a run the window of kept chunks is the same at every pass but
the last (the chunks ahead, in the order they first come, begin with the run's own), so after
its first occurrence every occurrence but the last leaves the state as it found it and gathers
what the second did: :func:`replay_runs` replays the first, the second and the last occurrence
and counts the middle ones as the second (checked: the state after the second is the state
after the first, else the rank's passes are replayed one by one). The replay of the runs cut
to three occurrences is cached (:func:`_shape`): the ranks of a half of the pipeline, but
those near its ends, cut to the same runs, at every pp, so a pp-128 layout replays a handful
of shapes, not 128 orders (``chunk_gathers`` at pp 128, v 8, m 1,024, both ZeRO stages: 3.3 s
pass by pass in an earlier version, 0.05 s). Equal to the pass-by-pass replay
(:func:`replay_passes`) over every pp, v, m (a hypothesis property test,
``tests/model/test_fsdp2_replay.py``).

Units: counts of all-gathers of one chunk's units; chunk indices 0…v − 1 (local to the rank).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any

from trainplan.model.pipeline import check_schedule

__all__ = ["WINDOW", "order_runs", "expand_runs", "replay_passes", "replay_runs", "rank_replay"]

WINDOW = 3
"""``_add_unshard_reshard``'s ``max_active_stages`` default (:data:`model.fsdp2_pipeline.
MAX_ACTIVE_STAGES`, which is this value)."""

Pass = tuple[str, int]
"""(kind ``"F"`` or ``"B"``, chunk)."""
Run = tuple[tuple[Pass, ...], int]
"""(pattern, occurrences)."""


def _chunk_runs(start: int, stop: int, pp: int, v: int) -> Iterator[tuple[int, int]]:
    """(chunk, count) runs of the pass indices ``start…stop − 1``: index k on chunk
    ``(k // pp) % v``."""
    k = start
    while k < stop:
        end = min(stop, (k // pp + 1) * pp)
        yield (k // pp) % v, end - k
        k = end


def order_runs(pp: int, m: int, v: int, rank: int) -> tuple[Run, ...]:
    """Rank ``rank``'s ``interleaved`` order (:func:`model.schedule.stage_order`: warm-up
    ``min(2·(pp − 1 − rank) + (v − 1)·pp, m·v)`` forwards; forward k on chunk ``(k // pp) % v``,
    backward k on ``v − 1 − (k // pp) % v``) as runs of a repeated pattern, micro-batches left
    out (the replay does not read them). The steady forward–backward pairs repeat every
    ``v·pp`` pairs (both chunks and both run boundaries advance by v a period); where four
    periods or more come and one run of the period's passes replays cheaper than its pairs'
    runs (:func:`_folds`), they are written as one run whose pattern is one period's passes.

    >>> order_runs(2, 2, 4, 0)[:3]
    (((('F', 0),), 2), ((('F', 1),), 2), ((('F', 2),), 2))
    >>> order_runs(2, 4, 4, 0)[4]
    ((('F', 0), ('B', 3)), 2)
    >>> pattern, periods = order_runs(2, 64, 4, 0)[4]
    >>> len(pattern), periods
    (16, 31)
    """
    check_schedule(pp, m, "interleaved", v)
    total = m * v
    warmup = min(2 * (pp - rank - 1) + (v - 1) * pp, total)
    runs: list[Run] = [((("F", c),), n) for c, n in _chunk_runs(0, warmup, pp, v)]
    steady, period = total - warmup, v * pp
    full = steady // period
    one = _pair_runs(0, period, warmup, pp, v)
    if _folds(one, full):
        runs.append((tuple(expand_runs(one)), full))
        runs += _pair_runs(full * period, steady, warmup, pp, v)
    else:
        runs += _pair_runs(0, steady, warmup, pp, v)
    runs += [((("B", v - 1 - c),), n) for c, n in _chunk_runs(total - warmup, total, pp, v)]
    return tuple(runs)


def _pair_runs(start: int, stop: int, warmup: int, pp: int, v: int) -> list[Run]:
    """The runs of the steady pairs ``start…stop − 1`` (pair i: forward ``warmup + i``,
    backward i), cut where either pass's chunk changes."""
    runs: list[Run] = []
    i = start
    while i < stop:
        end = min(stop, (i // pp + 1) * pp, ((warmup + i) // pp + 1) * pp - warmup)
        f, b = ((warmup + i) // pp) % v, v - 1 - (i // pp) % v
        runs.append(((("F", f), ("B", b)), end - i))
        i = end
    return runs


def _folds(period: list[Run], count: int) -> bool:
    """Whether ``count`` repeats of ``period`` replay cheaper as one run of its passes (three
    occurrences of them, :func:`replay_runs`) than as its runs (each cut to three occurrences):
    four periods or more, and fewer passes stepped."""
    cut = sum(min(n, 3) * len(pattern) for pattern, n in period)
    return count >= 4 and 3 * sum(n * len(pattern) for pattern, n in period) < count * cut


def expand_runs(runs: Iterable[Run]) -> list[Pass]:
    """The passes ``runs`` stand for, in order."""
    return [p for pattern, n in runs for _ in range(n) for p in pattern]


class _State:
    """The replay's state: the kept window, which chunks are freed, gathers so far, and the
    sets of chunks held whole seen during a pass."""

    __slots__ = ("active", "freed", "gathers", "held", "raf")

    def __init__(self, reshard_after_forward: bool) -> None:
        self.active: frozenset[int] = frozenset()
        self.freed: dict[int, bool] = {}
        self.gathers = 0
        self.held: set[frozenset[int]] = set()
        self.raf = reshard_after_forward

    def step(self, kind: str, chunk: int, window: frozenset[int]) -> None:
        """One pass on ``chunk`` with ``window`` the chunks kept before it."""
        freed = self.freed
        if window != self.active:
            for c in self.active - window:
                freed[c] = True  # RESHARD
            for c in window - self.active:
                self.gathers += freed.get(c, True)  # UNSHARD
                freed[c] = False
            self.active = window
        self.gathers += freed.get(chunk, True)  # the pass's own hooks
        freed[chunk] = False
        # held whole during the pass: the kept chunks not freed, the pass's own among them
        self.held.add(frozenset([c for c in window if not freed.get(c, True)] + [chunk]))
        freed[chunk] = self.raf and kind == "F"

    def key(self) -> tuple[frozenset[int], tuple[tuple[int, bool], ...]]:
        return self.active, tuple(sorted(self.freed.items()))


def _windows(passes: list[Pass]) -> list[frozenset[int]]:
    """The window kept before each of ``passes``: the next :data:`WINDOW` distinct chunks from
    it on."""
    out: list[frozenset[int]] = []
    # the first WINDOW of the chunks from a pass on, in the order they first come: moving a
    # chunk to the front keeps the others' order, so the first WINDOW after it are the chunk
    # and the first of those before it — the chunks further back never matter
    first: list[int] = []
    window: frozenset[int] = frozenset()
    for _, chunk in reversed(passes):
        if not first or first[0] != chunk:
            first = [chunk, *(c for c in first if c != chunk)][:WINDOW]
            window = frozenset(first)
        out.append(window)
    out.reverse()
    return out


def replay_passes(passes: list[Pass], reshard_after_forward: bool) -> tuple[int, frozenset]:
    """(all-gathers of a chunk, the distinct sets of chunks held whole during a pass) of one
    rank's ``passes`` replayed pass by pass (the module docstring's rules). The reference that
    :func:`replay_runs` equals.

    >>> from trainplan.model.schedule import stage_order
    >>> passes = [(k, c) for k, _, c in stage_order(2, 4, "interleaved", 4, 0)]
    >>> replay_passes(passes, False)[0], replay_passes(passes, True)[0]
    (11, 22)
    """
    state = _State(reshard_after_forward)
    for (kind, chunk), window in zip(passes, _windows(passes), strict=True):
        state.step(kind, chunk, window)
    return state.gathers, frozenset(state.held)


def _replay_shape(runs: tuple[Run, ...], reshard_after_forward: bool) -> tuple[Any, ...]:
    """(all-gathers, each run's gathers of one middle occurrence — None where the run's second
    occurrence does not leave the state as its first did —, the held sets) of ``runs`` with
    every run cut to at most three occurrences (first, second, last)."""
    # the windows of the kept passes are those of the whole order (a removed occurrence repeats
    # chunks its neighbours hold, in the same order)
    kept: list[Pass] = []
    spans: list[tuple[int, int, int]] = []  # (start in kept, pattern length, occurrences shown)
    for pattern, n in runs:
        spans.append((len(kept), len(pattern), min(n, 3)))
        kept += list(pattern) * min(n, 3)
    windows = _windows(kept)
    state = _State(reshard_after_forward)
    middle: list[int | None] = []
    for start, width, shown in spans:
        delta: int | None = None
        for occurrence in range(shown):
            before = state.key() if occurrence == 1 else None  # only the second is compared
            gathers = state.gathers
            for i in range(start + occurrence * width, start + (occurrence + 1) * width):
                state.step(kept[i][0], kept[i][1], windows[i])
            if occurrence == 1 and state.key() == before:
                delta = state.gathers - gathers
        middle.append(delta)
    return state.gathers, tuple(middle), frozenset(state.held)


@lru_cache(maxsize=4096)
def _shape(runs: tuple[Run, ...], reshard_after_forward: bool) -> tuple[Any, ...]:
    """:func:`_replay_shape`, cached on the runs cut to three occurrences: ranks whose orders
    differ only in how long runs of four or more last share it (every rank of a half of the
    pipeline but those near its ends; and the same pp-independent pattern at every pp)."""
    return _replay_shape(runs, reshard_after_forward)


def replay_runs(runs: tuple[Run, ...], reshard_after_forward: bool) -> tuple[int, frozenset]:
    """:func:`replay_passes` of the passes ``runs`` stand for, each run's middle occurrences
    counted as its second (the module docstring): the replay of the runs cut to three
    occurrences (cached: :func:`_shape`) and, for a run of n > 3, n − 3 times its second
    occurrence's gathers. Where a second occurrence does not leave the state as it found it
    (not met in Megatron-Core's order), the passes replayed one by one.

    >>> runs = order_runs(2, 4, 4, 0)
    >>> replay_runs(runs, False) == replay_passes(expand_runs(runs), False)
    True
    """
    cut = tuple((pattern, min(n, 3)) for pattern, n in runs)
    gathers, middle, held = _shape(cut, reshard_after_forward)
    for (_, n), delta in zip(runs, middle, strict=True):
        if n > 3:
            if delta is None:
                return replay_passes(expand_runs(runs), reshard_after_forward)
            gathers += delta * (n - 3)
    return gathers, held


@lru_cache(maxsize=4096)
def rank_replay(
    pp: int, v: int, m: int, rank: int, reshard_after_forward: bool
) -> tuple[int, frozenset]:
    """:func:`replay_runs` of rank ``rank``'s :func:`order_runs`: (all-gathers of a chunk a
    step, the distinct sets of its chunks held whole during a pass). Cached.

    >>> rank_replay(2, 4, 4, 0, False)[0], rank_replay(2, 4, 4, 1, True)[0]
    (11, 23)
    """
    return replay_runs(order_runs(pp, m, v, rank), reshard_after_forward)
