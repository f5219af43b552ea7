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
of its order, so the order itself can make ranks wait every group of micro-batches. The step is
the order run (:func:`interleaved_steps`) on the layout's own chunks, each timed by its layers
of each kind, the embedding on the first rank's first chunk and the output layer on the last
rank's last, its forward and its backward as the cost model splits them
(:mod:`model.terms.pipeline_span`). 80 layers,
pp 4, v 8, a layer's backward twice its forward, 8 micro-batches: every rank computes 480 layer
forwards and the step is 507, a bubble of 27 where equal chunks give 22.5 (1.2×). A rank that
gave a layer back (Llama 3 405B's 126 layers: the end stages hold one fewer) is the lighter for
it and makes nobody wait.

Every pass waits for the pass before it on its rank and for one pass of a neighbour: one
layout runs pass by pass in the order :func:`model.pipeline_sim.run` places them (the ranks in
turn, each as far as its inputs are placed: :func:`_passes`), a batch depth by depth (a pass's
depth one more than the deeper of those two), every layout at once (their array namespace). Up to :data:`EXACT_GROUPS`
groups of pp micro-batches the order is run whole; beyond, the bubble grows by the same time
with every two further groups once the steady phase runs (the tests check it against the whole
order: the growth repeats with a period of one or two groups), so the runs at 2 and 4 groups give every m.

torchtitan's interleaved schedule (``fsdp2``: torch.distributed.pipelining's
``ScheduleInterleaved1F1B``, PyTorch 2.13.0 ``_calculate_single_rank_operations``: rounds of pp
micro-batches, warm-up ``(v − 1)·pp + 2·(pp − 1 − rank)`` from ``_get_warmup_ops``, then
``_get_1f1b_rank_ops``' forward and backward in turn, stage ``c·pp + rank``) is the same order:
every rank's list, its empty slots dropped, equals :func:`model.schedule.stage_order`'s at pp
2–8, v 2–8, 1–6 rounds (``tests/model/test_fsdp2_runtime_gathers.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from trainplan.model.pipeline import SPLIT_BACKWARD, Schedule, bubble_fraction, bubble_ratio
from trainplan.model.split import stage_chunks
from trainplan.model.xp import namespace

if TYPE_CHECKING:
    from trainplan.model.specs import Architecture

__all__ = [
    "EXACT_GROUPS",
    "interleaved_steps",
    "layout_bubbles",
    "chunk_counts",
    "uneven_chunks",
    "reported_bubble",
]

EXACT_GROUPS = 2
"""Groups of pp micro-batches up to which the order is run whole (:func:`layout_bubbles`);
beyond, the bubble is read off the runs at 2 and 4 groups."""
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
            last = (pp - 1) * size
            f_dep = [n] * min(pp, total) + [last + at for at in ranks[pp - 1][0][: total - pp]]
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
    xp = namespace(forward)
    if xp is None:
        return _one_layout(pp, m, forward, backward)
    width = forward.shape[1]
    slot, is_backward, prev, dep, bounds = _program(pp, width // pp, m)
    spans = list(zip(bounds[:-1], bounds[1:], strict=True))
    slot_a, back_a, prev_a, dep_a = _program_arrays(pp, width // pp, m, xp)
    out = []
    size = max(1, _BATCH_FLOATS // (len(slot) + 1))
    for lo in range(0, forward.shape[0], size):
        k = slice(lo, lo + size)
        dur = xp.where(back_a[:, None], backward[k].T[slot_a], forward[k].T[slot_a])  # [N, K]
        ends = xp.zeros((len(slot) + 1, dur.shape[1]))
        for a, b in spans:  # a depth's passes read only shallower ones
            ends[a:b] = xp.maximum(ends[prev_a[a:b]], ends[dep_a[a:b]]) + dur[a:b]
        out.append(xp.max(ends[:-1], axis=0))
    return xp.concat(out)


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
    """The bubble, in the unit of the times: the step of :func:`interleaved_steps` less ``m`` ×
    ``busy``, the slowest rank's micro-batch — for one layout (``m``, ``busy`` numbers) or a batch
    (``[K]`` each, ``[K, pp·v]`` times); up to :data:`EXACT_GROUPS` groups of pp micro-batches
    the order run whole, beyond from the runs at 2 and 4 groups (module docstring).

    Examples
    --------
    >>> chunks = [2, 2, 3, 3, 3, 3, 2, 2] * 4
    >>> layout_bubbles(4, 8, chunks, [2 * c for c in chunks], 60)  # 507 − 8 × 60
    27.0
    """
    xp = namespace(forward)
    if xp is None:
        if m <= EXACT_GROUPS * pp:
            return interleaved_steps(pp, m, forward, backward) - m * busy
        two, four = (interleaved_steps(pp, g * pp, forward, backward) - g * pp * busy
                     for g in (2, 4))  # fmt: skip
        return two + (four - two) * (m - 2 * pp) / (2 * pp)
    out = xp.zeros(forward.shape[0])
    big = m > EXACT_GROUPS * pp
    for m_run in sorted(set(m[~big].tolist())):
        k = m == m_run
        out[k] = interleaved_steps(pp, m_run, forward[k], backward[k]) - m_run * busy[k]
    if xp.any(big):
        two, four = (
            interleaved_steps(pp, g * pp, forward[big], backward[big]) - g * pp * busy[big]
            for g in (2, 4)
        )
        out[big] = two + (four - two) * (m[big] - 2 * pp) / (2 * pp)
    return out


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
    at ``i·v + c``; :func:`model.split.stage_chunks`), then as many of them MoE; with ``counts``
    (``Layout.recompute_layers``) only those it recomputes whole, the first ``counts[i]`` of each
    of rank i's chunks (:func:`model.split.recomputed_in_chunks`); empty without dimensions."""
    if arch is None:
        return ()
    out: list[tuple[int, ...]] = []
    for i in range(pp):
        k = None if counts is None else counts[i]
        out += [chunk[:k] for chunk in stage_chunks(arch, pp, v, rule, i, sizes, schedule)]
    return (*map(len, out), *(sum(map(arch.is_moe_layer, chunk)) for chunk in out))


@lru_cache(maxsize=4096)
def uneven_chunks(
    arch: Architecture | None,
    pp: int,
    v: int,
    rule: bool | str,
    sizes: tuple[int, ...] | None,
    schedule: Any,
) -> bool:
    """Whether some rank's model chunks hold unequal counts of the model's L layers under the
    interleaved schedule (:func:`model.split.stage_chunks`; a multi-token-prediction block rides
    in the last chunk as the output layer does, timed with it but no cause of unequal chunks);
    False for every other schedule and without dimensions."""
    if arch is None or str(schedule) != Schedule.INTERLEAVED.value or v == 1 or pp == 1:
        return False
    for i in range(pp):
        chunks = stage_chunks(arch, pp, v, rule, i, sizes, schedule)
        if len({sum(j < arch.num_layers for j in chunk) for chunk in chunks}) > 1:
            return True
    return False


def reported_bubble(
    schedule: Any, m: int, pp: int, v: int, uneven: bool, terms: Any
) -> tuple[Fraction, Fraction]:
    """(bubble over the pipeline section, bubble over its compute) as the estimate reports them:
    the closed forms of GPipe, 1F1B and interleaved 1F1B (:func:`model.pipeline.bubble_fraction`,
    :func:`model.pipeline.bubble_ratio`); under a split-backward schedule, or interleaving with
    ``uneven`` chunks, the bubble of the time ``terms`` (:class:`model.estimate.TimeTerms`: its
    ``bubble_s`` over the section, or over ``busy_s`` = m × the slowest stage's micro-batch), to
    1/10⁶."""

    def frac(x: float) -> Fraction:
        return Fraction(x).limit_denominator(10**6)

    if terms is not None and schedule in SPLIT_BACKWARD:
        bubble = max(terms.bubble_s, 0.0)
        whole = terms.compute_and_pipeline_s
        return frac(bubble / whole), frac(bubble / (whole - bubble))
    if terms is not None and terms.busy_s and uneven:
        ratio = frac(terms.bubble_s / terms.busy_s)
        return ratio / (1 + ratio), ratio
    return bubble_fraction(pp, m, v), bubble_ratio(pp, m, v)
