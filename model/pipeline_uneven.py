"""The bubble of Megatron-Core's interleaved 1F1B when a rank's model chunks hold unequal layers.

Megatron-Core (NVIDIA/Megatron-LM d98e8a64dd) ``megatron/core/pipeline_parallel/schedules.py``
``forward_backward_pipelining_with_interleaving`` runs on each rank a fixed order
(:func:`model.schedule.stage_order`): ``get_pp_rank_microbatches``' warm-up of
``(pp − rank − 1)·2 + (v − 1)·pp`` forwards (``microbatch_group_size_per_vp_stage`` = pp, its
default), then one forward and one backward in turn, then the cool-down backwards;
``get_schedule_table`` takes the model chunks in groups of pp micro-batches (chunk 0 for
micro-batches 0 … pp − 1, chunk 1 for the same, …; backwards the chunks in reverse). A rank's
forward of chunk c waits for the previous rank's (the last rank's chunk c − 1 on the first rank),
its backward for the next rank's (the first rank's chunk c + 1 on the last rank, the last chunk
for its own forward): :func:`model.pipeline_sim.dependency` under the loop placement. With every
chunk of equal time ``t/v`` the step is ``m·t + (pp − 1)·t/v`` (Narayanan et al. 2021 §2.2.2,
:func:`model.pipeline.bubble_ratio`), which the cost model takes with ``t`` the slowest stage's.

When a rank's layers do not split evenly over its v chunks (80 layers, pp 4, v 8: chunks of 2
and 3 layers on every rank, :func:`model.split.default_chunk_sizes`) no closed form holds: the
warm-up and the cool-down wait on the chunks they pass chunk by chunk, and in the steady phase a
forward and the backward beside it can be longer than the pair the next rank runs at that point
of its order, so the order itself can make ranks wait every group of micro-batches; so can
chunks of equal counts whose layers' attention spans differ (Gemma 3's global layers, one in
every six, two in one chunk and one in the next). The step is the order run
(:func:`interleaved_steps`) on the layout's own chunks, each timed by its layers of each span
group (:func:`model.core_spans.group_counts`), the embedding on the first rank's first chunk and the output layer on the last
rank's last, its forward and its backward as the cost model splits them
(:mod:`model.terms.pipeline_span`). 80 layers,
pp 4, v 8, a layer's backward twice its forward, 8 micro-batches: every rank computes 480 layer
forwards and the step is 507, a bubble of 27 where equal chunks give 22.5 (1.2×). A rank that
gave a layer back (Llama 3 405B's 126 layers: the end stages hold one fewer) is the lighter for
it and makes nobody wait.

Every pass waits for the pass before it on its rank and for one pass of a neighbour, one
layout runs pass by pass in the order :func:`model.pipeline_sim.run` places them (the ranks in
turn, each as far as its inputs are placed: :func:`_passes`), a batch depth by depth (a pass's
depth one more than the deeper of those two), every layout at once (their array namespace). Past its warm-up the order
is cut into blocks of one group of pp micro-batches: block b holds on rank i the 2·pp·v passes
from forward ``W_i + i + b·pp·v`` and backward ``i + b·pp·v`` on (:func:`_blocks`, ``W_i`` the
rank's warm-up). Forward k waits for forward k of the rank before (the first rank's chunk c > 0
for the last rank's k − pp, its chunk 0 for none: the model's input; until 2026-12 this model
had it wait for the last rank's k − pp there too, a wait Megatron-Core's order does not have,
which made some steps about 1 % long in random trials (pp 2–5, v 2–3) — ``tests/model/test_interleaved_order.py`` holds the order
to an event simulation written from Megatron-Core's rules), backward k for the next rank's (the
last rank's for the first rank's k − pp, or
its own forward k + (v − 1)·pp), each one index off the block's bounds at most, so every pass
waits only for its own block or the one before, the same way in every block: block b + 1's ends
are one max-plus function of block b's (Baccelli, Cohen, Olsder & Quadrat, *Synchronization and
Linearity*, Wiley 1992, ch. 3), and the step at G groups (the rest of the steady phase and the
cool-down) one function of block ``G − 3``'s for every G ≥ 3. If block b + p ends c after block
b at every pass, so does every later block, and the step moves by exactly c every p groups from
any G ≥ b + 3; if only by at most ``c_max``, by at most ``c_max`` (the functions are monotone and
shift with their input): an upper bound, never below the whole order. :func:`_extend` reads
both off one run (p = 1 and 2, :data:`PERIODS`): every m of 3 groups or more from the run at 5
(or 6, of m's parity) groups where its steady phase repeats by then; where not, the order run
whole at m up to 32 groups, beyond from the run at 32 (33) groups, past which the bound
(:data:`RUN_GROUPS`). A bubble that shrinks while the lighter ranks' slack absorbs the fill
settles to a constant (a line through the runs at 2 and 4 groups, as this model once drew it,
crossed zero: a step under the busiest rank's own work); one that grows grows by the same time
every group, or every two.

torchtitan's interleaved schedule (``fsdp2``: torch.distributed.pipelining's
``ScheduleInterleaved1F1B``, PyTorch 2.13.0 ``_calculate_single_rank_operations``: rounds of pp
micro-batches, warm-up ``(v − 1)·pp + 2·(pp − 1 − rank)`` from ``_get_warmup_ops``, then
``_get_1f1b_rank_ops``' forward and backward in turn, stage ``c·pp + rank``) is the same order:
every rank's list, its empty slots dropped, equals :func:`model.schedule.stage_order`'s at pp
2–8, v 2–8, 1–6 rounds (``tests/model/test_fsdp2_runtime_gathers.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from trainplan.model.core_spans import group_counts, span_groups
from trainplan.model.split import stage_chunks
from trainplan.model.xp import minimum, namespace, where

if TYPE_CHECKING:
    from trainplan.model.specs import Architecture

__all__ = [
    "RUN_GROUPS",
    "PERIODS",
    "PERIODIC_TOLERANCE",
    "interleaved_steps",
    "layout_bubbles",
    "chunk_counts",
    "chunks_alike",
    "order_graph",
]

RUN_GROUPS = (5, 32)
"""Groups of pp micro-batches of the runs the steady phase is read off (:func:`layout_bubbles`):
every m of 3 groups or more from the run at 5 (or 6, of m's parity) groups where its steady phase
repeats by then; where it does not, the order run whole at m up to 32 groups, and beyond from the
run at 32 (33) groups: exact where it repeats by then, else a proven upper bound (module
docstring). 5 is the fewest with a shift to read (blocks 0 … G − 3); more would settle more
layouts at the first run but cost every search's batch its depth-by-depth run."""
PERIODS = (1, 2)
"""Periods, in groups of pp micro-batches, the steady phase is checked for (:func:`_extend`)."""
PERIODIC_TOLERANCE = 1e-9
"""Spread, relative to the step, within which two blocks' shifts count as one: far above the
rounding of float sums along the order, far below any time the cost model reports."""
_BATCH_FLOATS = 1 << 21
"""Floats one batched run may hold (its ends: passes × layouts); larger batches run in parts."""


def _rank_passes(pp: int, v: int, m: int, rank: int) -> tuple[list[int], list[int]]:
    """Positions in ``rank``'s order (:func:`model.schedule.stage_order`) of its forwards and its
    backwards by index ``k`` (``m·v`` each): warm-up ``W`` forwards, then forward ``W + i`` and
    backward ``i`` in turn, then the rest of the backwards."""
    total = m * v
    warm = min(2 * (pp - rank - 1) + (v - 1) * pp, total)
    forward = [k if k < warm else warm + 2 * (k - warm) for k in range(total)]
    return forward, [warm + 2 * k + 1 if k < total - warm else total + k for k in range(total)]


@lru_cache(maxsize=16)
def _passes(
    pp: int, v: int, m: int
) -> tuple[list[int], list[bool], list[int], list[int], list[int]]:
    """Megatron-Core's interleaved order on ``pp`` ranks, ``v`` chunks, ``m`` micro-batches (a
    multiple of pp), its ``N = 2·pp·m·v`` passes numbered rank after rank (rank i's position p in
    its order at ``i·size + p``, ``size = 2·m·v``): each pass's slot (rank i's chunk c at
    ``i·v + c``), whether it is a backward, the pass before it on its rank and the pass it waits
    for (``N``: none), and a topological order of the passes (every pass after both), the one
    :func:`model.pipeline_sim.run` places them in: the ranks in turn, each as far as its inputs
    are placed. The wait is :func:`model.pipeline_sim.dependency`'s under the loop placement, by
    index: forward k reads forward k of the rank before (the first rank's chunk c > 0 the last
    rank's forward k − pp); backward k reads backward k of the rank after (the last rank's chunk
    c < v − 1 the first rank's backward k − pp, its last chunk its own forward k + (v − 1)·pp).
    Lists, each built by one comprehension or one pass (pure Python: ``model/`` imports no array
    library), so pp 128, v 8 (half a million passes) takes a fraction of a second."""
    size, total = 2 * m * v, m * v
    n = pp * size
    chunk = [(k // pp) % v for k in range(total)]
    ranks = [_rank_passes(pp, v, m, i) for i in range(pp)]
    slot: list[int] = []
    backward: list[bool] = []
    dep: list[int] = []
    for i in range(pp):
        base, warm = i * v, min(2 * (pp - i - 1) + (v - 1) * pp, total)
        steady = total - warm  # forwards warm … total − 1 beside backwards 0 … total − warm − 1
        f_slot = [base + c for c in chunk]
        b_slot = [base + v - 1 - c for c in chunk]
        if i:
            f_dep = [(i - 1) * size + at for at in ranks[i - 1][0]]
        else:
            last, ahead = (pp - 1) * size, ranks[pp - 1][0]  # chunk 0 reads no rank
            f_dep = [last + ahead[k - pp] if c else n for k, c in enumerate(chunk)]
        if i < pp - 1:
            b_dep = [(i + 1) * size + at for at in ranks[i + 1][1]]
        else:
            own, first = i * size, ranks[0][1]
            ahead = ranks[i][0]
            b_dep = [first[k - pp] if c else own + ahead[k + (v - 1) * pp]
                     for k, c in enumerate(chunk)]  # fmt: skip
        for f_row, b_row, out in ((f_slot, b_slot, slot), (f_dep, b_dep, dep)):
            out += f_row[:warm]  # warm-up forwards, then forward warm + j beside backward j
            out += [x for pair in zip(f_row[warm:], b_row[:steady], strict=True) for x in pair]
            out += b_row[steady:]  # cool-down backwards
        backward += [False] * warm + [False, True] * steady + [True] * warm
    prev: list[int] = []
    for i in range(pp):  # a rank's first pass follows none
        prev += [n, *range(i * size, (i + 1) * size - 1)]
    return slot, backward, prev, dep, _placement(pp, size, dep)


def order_graph(
    pp: int, v: int, m: int
) -> tuple[list[int], list[bool], list[int], list[int], list[int]]:
    """The order's graph on ``pp`` ranks, ``v`` chunks, ``m`` micro-batches (a multiple of pp),
    as :func:`interleaved_steps` runs it (:func:`_passes`: each pass's slot, whether it is a
    backward, the pass before it on its rank, the pass it waits for, ``N`` none, and a
    topological order): what :mod:`model.interleaved_paths` walks back. Kept (shared lists, not
    to be changed) up to :data:`_KEPT_PASSES` passes, built afresh above (about 200 MB a
    million passes)."""
    if 2 * pp * v * m <= _KEPT_PASSES:
        return _passes(pp, v, m)
    return _passes.__wrapped__(pp, v, m)


_KEPT_PASSES = 1 << 18
""":func:`order_graph`'s largest graph kept between calls (2·pp·v·m passes: about 50 MB)."""


def _placement(pp: int, size: int, dep: list[int]) -> list[int]:
    """The passes (rank i's at ``i·size`` on, each waiting for the pass before it on its rank and
    for ``dep[t]``, ``N = pp·size`` none) in the order :func:`model.pipeline_sim.run` places
    them: the ranks in turn, each as far as its inputs are placed.

    Raises
    ------
    RuntimeError
        An order that deadlocks (never Megatron-Core's).
    """
    n = pp * size
    placed = bytearray(n + 1)
    placed[n] = 1
    pos = [i * size for i in range(pp)]
    order: list[int] = []
    while len(order) < n:  # the ranks in turn, each as far as its inputs are placed
        moved = len(order)
        for i in range(pp):
            t = start = pos[i]
            end = (i + 1) * size
            while t < end and placed[dep[t]]:
                placed[t] = 1
                t += 1
            order += range(start, t)
            pos[i] = t
        if moved == len(order):  # pragma: no cover - Megatron-Core's order never deadlocks
            raise RuntimeError(f"interleaved order deadlocked (pp {pp}, {size} passes a rank)")
    return order


@lru_cache(maxsize=256)
def _program(pp: int, v: int, m: int) -> tuple[tuple[int, ...], ...]:
    """:func:`_passes`' order grouped by depth (a pass's depth one more than the deeper of the
    pass before it on its rank and the pass it waits for, so a group's passes read only earlier
    groups) and numbered in that order (by depth, then by number): each pass's slot, whether it
    is a backward, the pass before it on its rank and the pass it waits for (``N``: none), and
    the bounds of the groups."""
    slot, backward, prev, dep, topo = _passes(pp, v, m)
    n = len(slot)
    depth = [0] * (n + 1)
    for t in topo:  # every pass after both it reads
        a, b = depth[prev[t]], depth[dep[t]]
        depth[t] = (a if a >= b else b) + 1
    groups: list[list[int]] = [[] for _ in range(max(depth) + 1)]
    for t in range(n):  # by depth, then number
        groups[depth[t]].append(t)
    order = [t for group in groups for t in group]
    renumber = [0] * (n + 1)
    for new, old in enumerate(order):
        renumber[old] = new
    renumber[n] = n
    bounds = [0, *accumulate(len(group) for group in groups if group)]
    new_number = renumber.__getitem__
    return (
        tuple(map(slot.__getitem__, order)), tuple(map(backward.__getitem__, order)),
        tuple(map(new_number, map(prev.__getitem__, order))),
        tuple(map(new_number, map(dep.__getitem__, order))), tuple(bounds),
    )  # fmt: skip


@lru_cache(maxsize=256)
def _program_arrays(pp: int, v: int, m: int, xp: Any) -> tuple[Any, ...]:
    """:func:`_program` as arrays of the namespace ``xp``."""
    return tuple(xp.asarray(part) for part in _program(pp, v, m)[:4])


@lru_cache(maxsize=64)
def _blocks(pp: int, v: int, groups: int) -> tuple[tuple[int, ...], ...]:
    """The passes of the steady phase's blocks 0 … ``groups − 3`` in :func:`_program`'s numbering,
    each rank's in its order: block b holds, on rank i, the 2·pp·v passes from position
    ``2(pp − 1) + (v − 1)·pp + 2b·pp·v`` of its order (forwards ``W_i + i + b·pp·v`` on,
    backwards ``i + b·pp·v`` on, ``W_i`` its warm-up). Every pass waits only for passes of its
    own block or the one before (module docstring), and these blocks run as in an order of any
    more groups."""
    slot = _program(pp, v, groups * pp)[0]
    order: list[list[int]] = [[] for _ in range(pp)]
    for t, s in enumerate(slot):  # a rank's passes come in its order (each waits for the last)
        order[s // v].append(t)
    width = 2 * pp * v
    first = 2 * (pp - 1) + (v - 1) * pp
    return tuple(
        tuple(t for row in order for t in row[first + b * width : first + (b + 1) * width])
        for b in range(groups - 2)
    )


@lru_cache(maxsize=64)
def _block_arrays(pp: int, v: int, groups: int, xp: Any) -> Any:
    """:func:`_blocks` as one ``[groups − 2, 2·pp·pp·v]`` array of the namespace ``xp``."""
    return xp.asarray(_blocks(pp, v, groups))


def _run(pp: int, m: int, forward: Any, backward: Any, keep: bool = False) -> tuple[Any, Any]:
    """(the step, the ends of :func:`_blocks`' passes) of the order on ``m`` micro-batches
    (:func:`interleaved_steps`' times and shapes; the ends ``[G − 2][2·pp·pp·v]`` floats, or a
    ``[G − 2, 2·pp·pp·v, K]`` array, G = m/pp; None unless ``keep``)."""
    xp = namespace(forward)
    width = forward.shape[1] if xp is not None else len(forward)
    v = width // pp
    if xp is None and not keep:  # one layout, in the engine's placement order
        return _one_layout(pp, m, forward, backward), None
    slot, is_backward, prev, dep, bounds = _program(pp, v, m)
    if xp is None:  # one layout, pass by pass in the depth order, its blocks' ends kept
        ends = [0.0] * (len(slot) + 1)
        for t, (s, b, p, d) in enumerate(zip(slot, is_backward, prev, dep, strict=True)):
            ends[t] = max(ends[p], ends[d]) + float(backward[s] if b else forward[s])
        kept = [[ends[t] for t in block] for block in _blocks(pp, v, m // pp)] if keep else None
        return max(ends[:-1]), kept
    spans = list(zip(bounds[:-1], bounds[1:], strict=True))
    slot_a, back_a, prev_a, dep_a = _program_arrays(pp, v, m, xp)
    picks = _block_arrays(pp, v, m // pp, xp) if keep else None
    out, parts = [], []
    size = max(1, _BATCH_FLOATS // (len(slot) + 1))
    for lo in range(0, forward.shape[0], size):
        k = slice(lo, lo + size)
        dur = xp.where(back_a[:, None], backward[k].T[slot_a], forward[k].T[slot_a])  # [N, K]
        ends = xp.zeros((len(slot) + 1, dur.shape[1]))
        for a, b in spans:  # a depth's passes read only shallower ones
            ends[a:b] = xp.maximum(ends[prev_a[a:b]], ends[dep_a[a:b]]) + dur[a:b]
        out.append(xp.max(ends[:-1], axis=0))
        if picks is not None:
            parts.append(ends[picks])
    return xp.concat(out), (xp.concat(parts, axis=2) if keep else None)


def interleaved_steps(pp: int, m: int, forward: Any, backward: Any) -> Any:
    """The step of Megatron-Core's interleaved order, in the unit of the times: ``forward``,
    ``backward`` the time of each rank's chunk's forward and backward of one micro-batch (rank
    i's chunk c at ``i·v + c``) — a sequence of ``pp·v`` numbers for one layout (a float back),
    or ``[K, pp·v]`` arrays for a batch (``[K]`` back, every layout run at once).

    Examples
    --------
    >>> chunks = [2, 2, 3, 3, 3, 3, 2, 2] * 4  # 80 layers, pp 4, v 8
    >>> interleaved_steps(4, 8, chunks, [2 * c for c in chunks])  # in one layer's forward
    507.0
    """
    return _run(pp, m, forward, backward)[0]


def _extend(step: Any, groups: Any, run: int, kept: Any, xp: Any) -> tuple[Any, Any]:
    """(the step on ``groups`` groups of pp micro-batches, whether exact) from the run at ``run``
    groups: its step and its blocks' ends ``kept`` (:func:`_run`; one layout or ``[K]`` each).

    Block b + 1's ends are the same max-plus function of block b's in every group (every pass
    waits for its block or the one before), and the step at G groups the same function of block
    ``G − 3``'s (the rest of the steady phase and the cool-down). So if block b + p ends ``c``
    after block b at every pass, and so every block after it (:data:`PERIODS` p = 1, 2; the
    earliest such b), the step moves by ``c`` every p groups from any G ≥ b + 3: exact at
    ``groups`` ≥ b + 3 (of ``run``'s parity for p = 2). Otherwise, past ``run``, by at most
    the most any pass of the last block ends after the one p before, ``c_max`` (the function
    is monotone and shifts with its input): ``step + min_p c_max(p)·(groups − run)/p`` bounds
    it above, and is exact where one p repeats."""
    blocks = len(kept)
    tolerance = PERIODIC_TOLERANCE * step
    repeats, growth = [], []
    for p in PERIODS:
        if xp is None:
            shifts = [[a - b for a, b in zip(kept[j + p], kept[j], strict=True)]
                      for j in range(blocks - p)]  # fmt: skip
            spread = [max(d) - min(d) for d in shifts]
            top = max(shifts[-1])
        else:
            shifts = kept[p:] - kept[:-p]  # [blocks − p, passes, K]
            spread = xp.max(shifts, axis=1) - xp.min(shifts, axis=1)
            top = xp.max(shifts[-1], axis=0)
        settled, steady = blocks - p, True  # the earliest block every later one repeats from
        for j in reversed(range(blocks - p)):
            steady = steady & (spread[j] <= tolerance)
            settled = where(steady, j, settled)
        repeats.append((settled < blocks - p) & (groups >= settled + 3) & ((groups - run) % p == 0))
        growth.append(top * (groups - run) / p)
    (one, two), (by_one, by_two) = repeats, growth
    value = step + where(one, by_one, where(two, by_two, minimum(by_one, by_two)))
    return value, one | two


def _step(pp: int, groups: int, forward: Any, backward: Any) -> float:
    """The step of one layout's order on ``groups`` groups of pp micro-batches, by
    :data:`RUN_GROUPS` (:func:`layout_bubbles`)."""
    first, most = RUN_GROUPS
    for run in (first, first + 1):  # the second, of m's parity, where a period of 2 needs it
        if groups >= 3 and (run == first or (groups - run) % 2 == 0):
            step, kept = _run(pp, run * pp, forward, backward, keep=True)
            value, exact = _extend(step, groups, run, kept, None)
            if exact:
                return float(value)
    if groups <= most:
        return float(_run(pp, groups * pp, forward, backward)[0])
    run = most + (groups - most) % 2
    step, kept = _run(pp, run * pp, forward, backward, keep=True)
    return float(_extend(step, groups, run, kept, None)[0])


def _steps(pp: int, groups: Any, forward: Any, backward: Any) -> Any:
    """:func:`_step` of a batch (``groups`` ``[K]``, times ``[K, pp·v]``): the layouts that take
    each run, together."""
    xp = namespace(forward)
    first, most = RUN_GROUPS
    out = xp.zeros(forward.shape[0])
    todo = xp.ones(forward.shape[0], dtype=bool)

    def extend(k: Any, run: int, last: bool) -> Any:
        step, kept = _run(pp, run * pp, forward[k], backward[k], keep=True)
        out[k], exact = _extend(step, groups[k], run, kept, xp)
        settled = xp.zeros_like(todo)
        settled[k] = exact | last
        return todo & ~settled

    for run in (first, first + 1):
        k = todo & (groups >= 3) & ((groups - run) % 2 == 0 if run > first else True)
        if xp.any(k):
            todo = extend(k, run, False)
    small = todo & (groups <= most)
    for g in sorted(set(groups[small].tolist())):
        k = small & (groups == g)
        out[k] = _run(pp, int(g) * pp, forward[k], backward[k])[0]
    todo = todo & ~small
    for run in (most, most + 1):
        k = todo & ((groups - run) % 2 == 0)
        if xp.any(k):
            todo = extend(k, run, True)
    return out


def _one_layout(pp: int, m: int, forward: Sequence[Any], backward: Sequence[Any]) -> float:
    """:func:`interleaved_steps` of one layout: its passes in the order the engine places them
    (:func:`_passes`, every pass after both it reads), each ending at the later of the two ends
    it waits for (the first where equal, as ``max``) plus its time."""
    slot, is_backward, prev, dep, topo = _passes(pp, len(forward) // pp, m)
    f, b = [float(x) for x in forward], [float(x) for x in backward]
    dur = [b[s] if back else f[s] for s, back in zip(slot, is_backward, strict=True)]
    ends = [0.0] * (len(slot) + 1)
    for t in topo:
        x, y = ends[prev[t]], ends[dep[t]]
        ends[t] = (x if x >= y else y) + dur[t]
    return max(ends[:-1])


def layout_bubbles(pp: int, m: Any, forward: Any, backward: Any, busy: Any) -> Any:
    """The bubble, in the unit of the times: the step of Megatron-Core's interleaved order
    (:func:`interleaved_steps`) less ``m`` × ``busy``, the slowest rank's micro-batch — for one
    layout (``m``, ``busy`` numbers) or a batch (``[K]`` each, ``[K, pp·v]`` times), m a multiple
    of pp. Read off the steady phase of the runs of :data:`RUN_GROUPS` (:func:`_extend`) or the
    order run whole: exact wherever the steady phase repeats by 32 groups (every layout the
    tests draw), else a proven upper bound; never below 0 (no rank finishes before its own m
    micro-batches).

    Examples
    --------
    >>> chunks = [2, 2, 3, 3, 3, 3, 2, 2] * 4
    >>> layout_bubbles(4, 8, chunks, [2 * c for c in chunks], 60)  # 507 − 8 × 60
    27.0
    """
    if namespace(forward) is None:
        return _step(pp, m // pp, forward, backward) - m * busy
    return _steps(pp, m // pp, forward, backward) - m * busy


@lru_cache(maxsize=4096)
def chunk_counts(
    arch: Architecture | None,
    pp: int,
    v: int,
    rule: bool | str,
    sizes: tuple[int, ...] | None,
    schedule: Any,
    counts: tuple[int, ...] | None = None,
) -> tuple[int, ...]:
    """Every stage's layers per model chunk, stage after stage (``pp·v`` counts, rank i's chunk c
    at ``i·v + c``; :func:`model.split.stage_chunks`), then, for each span group in turn
    (:func:`model.core_spans.span_groups`), as many of them in that group (group g of chunk j at
    ``(1 + g)·pp·v + j``); with ``counts`` (``Layout.recompute_layers``) only those it
    recomputes whole, the first ``counts[i]`` of each of rank i's chunks
    (:func:`model.recompute_counts.recomputed_in_chunks`); empty without dimensions."""
    if arch is None:
        return ()
    out: list[tuple[int, ...]] = []
    for i in range(pp):
        k = None if counts is None else counts[i]
        out += [chunk[:k] for chunk in stage_chunks(arch, pp, v, rule, i, sizes, schedule)]
    groups = [group_counts(arch, chunk) for chunk in out]
    return (*map(len, out), *(n[g] for g in range(len(span_groups(arch))) for n in groups))


@lru_cache(maxsize=4096)
def chunks_alike(
    arch: Architecture | None,
    pp: int,
    v: int,
    rule: bool | str,
    sizes: tuple[int, ...] | None,
    schedule: Any,
) -> bool:
    """Whether every model chunk of every rank (``pp·v`` of them; v = 1 under the one-chunk
    schedules) holds the same layers of each span group (:func:`chunk_counts`): under the single
    model, where no embedding or output layer is timed apart, chunks of equal time, whose step
    is the closed form (:func:`model.pipeline.bubble_ratio`); False without dimensions.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("llama3-70b").model.arch  # 80 layers
    >>> [chunks_alike(arch, 4, v, True, None, "interleaved") for v in (2, 8)]  # 10s; 2s and 3s
    [True, False]
    """
    if arch is None:
        return False
    counts = chunk_counts(arch, pp, v, rule, sizes, schedule)
    width = len(counts) // (1 + len(span_groups(arch)))
    return all(len(set(counts[g : g + width])) == 1 for g in range(0, len(counts), width))
