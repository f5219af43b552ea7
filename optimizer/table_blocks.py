"""The blocks in which :func:`optimizer.tables.build_tables` fills the cost tables under a time
limit: their sizes (growing from a small first round, :func:`round_shapes`), their round-robin
order over the jobs (:func:`blocks`, :func:`rounds`), and where a deadline stops them
(:func:`block_would_pass`, :func:`may_cut`, :func:`rest_fits`). These decide which rows are
filled and when the filling stops, never a row's value.

Under a deadline the blocks grow (:func:`round_shapes`: 64, 128, 256, then :func:`block_shapes`
shapes, shared by the jobs; :func:`rounds`); each job's rest goes in one block once the pace says
all of it ends well before the deadline (:func:`rest_fits`); blocks of :func:`block_shapes` go at
once while a block would end past the deadline but the rows hold no answer yet (no cut may come
before one, so the pace need not be learnt: Llama 3 70B at 8,192 tokens on 16 H100s, whose first
allowed shape is the 309th of 348, took blocks of 64, 128 and 156 under a 1 s limit, 3.0 s of CPU
against 2.1 s in one block of 512); and no block is started that would end past the deadline at
the last one's pace (:func:`block_would_pass`) once an answer is held (:class:`Pace`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BLOCK_SHAPES",
    "MIN_BLOCK_SHAPES",
    "FIRST_BLOCK_SHAPES",
    "WHOLE_REST_MARGIN",
    "block_shapes",
    "round_shapes",
    "blocks",
    "rounds",
    "block_would_pass",
    "may_cut",
    "rest_fits",
    "Pace",
]

BLOCK_SHAPES = 512
"""Shapes of a job whose rows are filled at once under a time limit, between two looks at its
deadline (:func:`optimizer.tables.build_tables`), once the first rounds have grown to it (:func:`round_shapes`).
Every term is evaluated shape by shape
(:func:`optimizer.columns.tabulate` groups the shapes only to look each figure up once), so a row
does not depend on the block it is filled in; but each block looks its groups' figures up again:
Mixtral 8x7B on 64 H100s (1,948 shapes, megatron and fsdp2) took 3.6 s of CPU whole and 6.2 s in
blocks of 512 (25 s in blocks of 37), so without a time limit a job is filled whole."""


def block_would_pass(
    deadline: float | None, per_shape_s: float, shapes: int, now: float | None = None
) -> bool:
    """Whether a block of ``shapes`` shapes started at ``now`` (default: the clock's reading)
    would end past ``deadline`` (:func:`time.perf_counter` seconds; None: never), at the last
    block's ``per_shape_s`` seconds per shape (0 before the first): a block not started cannot
    overrun the limit, a block started can by
    all its seconds (:func:`optimizer.tables.build_tables` measured 5.4 s of tables under a 5 s limit for
    DeepSeek-V3 on 1,024 H100s under fsdp2, its 512-shape blocks about 0.5 s each on a
    two-core machine). The estimate only decides where the build stops; it changes no row.

    >>> block_would_pass(10.0, 0.01, 64, 9.0), block_would_pass(10.0, 0.02, 64, 9.0)
    (False, True)
    >>> block_would_pass(10.0, 0.0, 64, 10.5), block_would_pass(None, 1.0, 64, 10.5)
    (True, False)
    """
    if deadline is None:
        return False
    return (time.perf_counter() if now is None else now) + per_shape_s * shapes > deadline


MIN_BLOCK_SHAPES = 64
"""The fewest shapes :func:`block_shapes` gives a job's block under a time limit: each block
looks its groups' figures up again (:data:`BLOCK_SHAPES`), so smaller blocks cost more in all."""


def block_shapes(jobs: int) -> int:
    """Shapes in a block of each of ``jobs`` jobs with shapes under a time limit
    (:func:`optimizer.tables.build_tables`): ``max(MIN_BLOCK_SHAPES, BLOCK_SHAPES // jobs)``, so that the first
    round (every job's first block, which a deadline does not cut) costs about one block of
    :data:`BLOCK_SHAPES` shapes however many jobs there are, instead of a whole block per job
    (llama3-405b on 512..2048 H100s, 4 jobs, 1,696 shapes: the first round held 1,633 of them).

    >>> [block_shapes(n) for n in (0, 1, 2, 4, 8, 16)]
    [512, 512, 256, 128, 64, 64]
    """
    return max(MIN_BLOCK_SHAPES, BLOCK_SHAPES // max(1, jobs))


FIRST_BLOCK_SHAPES = 64
"""Shapes of the first round of blocks under a time limit, shared by the jobs with shapes
(:func:`round_shapes`); each round after doubles its blocks up to :func:`block_shapes`. The first
round is never cut (no pace is known before it), so it is kept small: DeepSeek-V3 on 1,024 H100s
under fsdp2 filled its first 512-shape block in 0.75 s of CPU (1.5 s of wall clock, the tables
of a ``--time-limit 2`` search, on a loaded two-core machine), its first 64 in 0.28 s and 16 in
0.12 s; Llama 3 405B on 512..2,048 H100s (5 jobs) 0.46 s for 16 shapes of a job, 0.96 s for 128:
a block costs a part fixed (each block looks its groups' figures up again, :data:`BLOCK_SHAPES`)
and a part per shape."""
WHOLE_REST_MARGIN = 2.0
"""Under a time limit, every job's shapes not yet filled go in one block each once the last
block's pace says they all end by the deadline this many times over (:func:`rest_fits`): a
limit that does not bind then costs about what no limit does (blocks of 512 took Mixtral 8x7B on
64 H100s, megatron and fsdp2, 4.9 s of CPU against 2.15 s whole). The pace of a small block
overstates a large one's per shape (its fixed part is spread over fewer shapes)."""


def round_shapes(jobs: int, k: int) -> int:
    """Shapes in each job's block of round ``k`` (0: the first) under a time limit, ``jobs`` the
    jobs with shapes (:func:`optimizer.tables.build_tables`): :data:`FIRST_BLOCK_SHAPES` shared by the jobs (at
    least 1 each), doubled each round, at most :func:`block_shapes` ``(jobs)``, so that the pace
    is known after a small first round and the limit binds within a block about the first
    round's size.

    >>> [round_shapes(1, k) for k in range(5)], [round_shapes(4, k) for k in range(5)]
    ([64, 128, 256, 512, 512], [16, 32, 64, 128, 128])
    >>> [round_shapes(16, k) for k in range(6)]
    [4, 8, 16, 32, 64, 64]
    """
    first = max(1, FIRST_BLOCK_SHAPES // max(1, jobs))
    return min(block_shapes(jobs), first << k)


def rest_fits(deadline: float | None, per_shape_s: float, left: int) -> bool:
    """Whether the ``left`` shapes not yet filled, at the last block's ``per_shape_s`` seconds a
    shape (0: none filled yet, unknown), end by ``deadline`` :data:`WHOLE_REST_MARGIN` times over
    (:func:`optimizer.tables.build_tables` then fills each job's rest whole). Decides blocks only, never a row.

    >>> rest_fits(None, 0.01, 10), rest_fits(float("inf"), 0.0, 10)
    (False, False)
    """
    if deadline is None or per_shape_s <= 0 or WHOLE_REST_MARGIN == float("inf"):
        return False
    return time.perf_counter() + per_shape_s * left * WHOLE_REST_MARGIN <= deadline


def rounds(
    per_job: list[tuple[Any, tuple[Any, ...]]], filled: list[int], size: Callable[[int, int], int]
) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """Under a time limit, each job's index with its next run of shapes, round-robin (each job's
    block of round 0, then of round 1, …): ``size(j, k)`` shapes from job j's ``filled[j]``, read
    as each block is asked for (:func:`optimizer.tables.build_tables` adds each block it fills to ``filled``, and
    stops asking at a cut). A job without shapes left has none.

    >>> filled = [0, 0]
    >>> for j, b in rounds([(None, (1, 2, 3)), (None, (4,))], filled, lambda j, k: k + 1):
    ...     filled[j] += len(b)
    ...     print(j, b)
    0 (1,)
    1 (4,)
    0 (2, 3)
    """
    k = 0
    while any(f < len(found) for f, (_, found) in zip(filled, per_job, strict=True)):
        for j, (_, found) in enumerate(per_job):
            if filled[j] < len(found):
                yield j, found[filled[j] : filled[j] + size(j, k)]
        k += 1


def may_cut(filled: list[int], totals: tuple[int, ...]) -> bool:
    """Whether a deadline may cut the build now: every job holds its first block (or has no
    shape), so that each job of a cut search has a share (:func:`optimizer.tables.build_tables`)."""
    return all(f or not t for f, t in zip(filled, totals, strict=True))


def blocks(
    per_job: list[tuple[Any, tuple[Any, ...]]], size: int | None
) -> list[tuple[int, tuple[Any, ...]]]:
    """Each job's index with a run of its shapes: with ``size``, runs of at most ``size``
    shapes taken round-robin (each job's first run, then each job's second, …; a job's runs in
    its shapes' order), so that a time limit's cut leaves every job a share; None: each job
    whole, job after job. A job without shapes has none.

    >>> jobs = [(None, (1, 2, 3)), (None, ()), (None, (4,))]
    >>> [(j, b) for j, b in blocks(jobs, 2)], [(j, b) for j, b in blocks(jobs, None)]
    ([(0, (1, 2)), (2, (4,)), (0, (3,))], [(0, (1, 2, 3)), (2, (4,))])
    """
    if size is None:
        return [(j, found) for j, (_, found) in enumerate(per_job) if found]
    longest = max((len(found) for _, found in per_job), default=0)
    return [
        (j, found[a : a + size])
        for a in range(0, longest, size)
        for j, (_, found) in enumerate(per_job)
        if a < len(found)
    ]


@dataclass
class Pace:
    """The state of one :func:`optimizer.tables.build_tables` fill under a deadline: each job's
    ``totals`` and ``filled`` shapes (the list the fill updates), the last block's
    ``per_shape_s`` seconds per shape, and whether the rows so far hold an answer
    (:meth:`answer`: ``found()`` asked once for each count of filled rows, kept once true).
    Decides block sizes and cuts only, never a row's value."""

    deadline: float | None
    totals: tuple[int, ...]
    filled: list[int]
    found: Callable[[], bool]
    per_shape_s: float = 0.0
    _answered: list[Any] = field(default_factory=lambda: [False, -1])

    def answer(self) -> bool:
        """Whether the filled rows hold an answer (unfilled rows: fits False)."""
        done = sum(self.filled)
        if not self._answered[0] and self._answered[1] != done:
            self._answered[:] = [bool(self.found()), done]
        return bool(self._answered[0])

    def would_cut(self, shapes: int) -> bool:
        """Whether a block of ``shapes`` may be cut: every job holds its first block
        (:func:`may_cut`) and the block would end past the deadline (:func:`block_would_pass`)."""
        return may_cut(self.filled, self.totals) and block_would_pass(
            self.deadline, self.per_shape_s, shapes
        )

    def size(self, j: int, k: int) -> int:
        """Job ``j``'s block in round ``k``: the rest where the pace says all of it ends well
        before the deadline (:func:`rest_fits`), :func:`block_shapes` while a block would pass
        the deadline with no answer yet (no cut before one: no growth either), else
        :func:`round_shapes`."""
        left = self.totals[j] - self.filled[j]
        if rest_fits(self.deadline, self.per_shape_s, sum(self.totals) - sum(self.filled)):
            return left
        jobs = sum(1 for t in self.totals if t)
        n = min(left, round_shapes(jobs, k))
        if self.would_cut(n) and not self.answer():
            return min(left, block_shapes(jobs))
        return n
