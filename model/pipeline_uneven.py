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
the order run (:func:`interleaved_steps`) on the layout's own chunks: each rank's micro-batch
(its forward and its backward, :mod:`model.terms.pipeline_span`) spread over its chunks by their
layers (the embedding and the output layer with the rank's layers, in proportion). 80 layers,
pp 4, v 8, a layer's backward twice its forward, 8 micro-batches: every rank computes 480 layer
forwards and the step is 507, a bubble of 27 where equal chunks give 22.5 (1.2×). A rank that
gave a layer back (Llama 3 405B's 126 layers: the end stages hold one fewer) is the lighter for
it and makes nobody wait.

Every pass waits for the pass before it on its rank and for one pass of a neighbour, so the
passes run depth by depth (a pass's depth one more than the deeper of those two), every layout
of a batch at once (numpy). Up to :data:`EXACT_GROUPS` groups of pp micro-batches the order is
run whole; beyond, the bubble grows by the same time with every two further groups once the
steady phase runs (the tests check it against the whole order: the growth repeats with a period
of one or two groups), so the runs at 2 and 4 groups give every m.

torchtitan's interleaved schedule (``fsdp2``: torch.distributed.pipelining's
``ScheduleInterleaved1F1B``, rounds of pp micro-batches, warm-up ``(v − 1)·pp + 2·(pp − 1 −
rank)``) is taken as the same order.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from trainplan.model.pipeline import Schedule
from trainplan.model.split import stage_chunks

if TYPE_CHECKING:
    from trainplan.model.specs import Architecture

__all__ = [
    "EXACT_GROUPS",
    "interleaved_steps",
    "layout_bubbles",
    "chunk_counts",
    "chunk_recomputed",
    "uneven_chunks",
]

EXACT_GROUPS = 2
"""Groups of pp micro-batches up to which the order is run whole (:func:`layout_bubbles`);
beyond, the bubble is read off the runs at 2 and 4 groups."""
_BATCH_FLOATS = 1 << 21
"""Floats one batched run may hold (its ends: passes × layouts); larger batches run in parts."""


def _rank_passes(pp: int, v: int, m: int, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``rank``'s order (:func:`model.schedule.stage_order`) of its forwards and its
    backwards by index ``k`` (``m·v`` each): warm-up ``W`` forwards, then forward ``W + i`` and
    backward ``i`` in turn, then the rest of the backwards."""
    total = m * v
    warm = min(2 * (pp - rank - 1) + (v - 1) * pp, total)
    k = np.arange(total)
    forward = np.where(k < warm, k, warm + 2 * (k - warm))
    return forward, np.where(k < total - warm, warm + 2 * k + 1, total + k)


@lru_cache(maxsize=256)
def _program(pp: int, v: int, m: int) -> tuple[np.ndarray, ...]:
    """Megatron-Core's interleaved order on ``pp`` ranks, ``v`` chunks, ``m`` micro-batches (a
    multiple of pp) as arrays over its ``N = 2·pp·m·v`` passes (pass p of rank i numbered
    ``i·2·m·v + p``): each pass's chunk, whether it is a backward, the pass before it on its rank
    and the pass it waits for (``N``: none; :func:`model.pipeline_sim.dependency` under the loop
    placement, by index: forward k reads forward k of the rank before, the first rank's chunk
    c > 0 the last rank's forward k − pp; backward k reads backward k of the rank after, the
    last rank's chunk c < v − 1 the first rank's backward k − pp, its last chunk its own forward
    k + (v − 1)·pp), and the passes grouped by depth (one more than the deeper of those two):
    ``order`` and the bounds of its groups, so that a group's passes read only earlier groups."""
    size, total = 2 * m * v, m * v
    n = pp * size
    k = np.arange(total)
    ranks = [_rank_passes(pp, v, m, i) for i in range(pp)]
    chunk = np.empty(n, dtype=np.int64)
    backward = np.zeros(n, dtype=bool)
    dep = np.full(n, n, dtype=np.int64)
    for i, (fwd, bwd) in enumerate(ranks):
        f_at, b_at = i * size + fwd, i * size + bwd
        chunk[f_at], chunk[b_at] = (k // pp) % v, v - 1 - (k // pp) % v
        backward[b_at] = True
        if i:
            dep[f_at] = (i - 1) * size + ranks[i - 1][0]
        else:
            later = k >= pp
            dep[f_at[later]] = (pp - 1) * size + ranks[pp - 1][0][k[later] - pp]
        if i < pp - 1:
            dep[b_at] = (i + 1) * size + ranks[i + 1][1]
        else:
            wrap = (k // pp) % v > 0
            dep[b_at[wrap]] = ranks[0][1][k[wrap] - pp]
            own = k[~wrap] + (v - 1) * pp
            dep[b_at[~wrap]] = i * size + ranks[i][0][own]
    reads = dep.tolist()
    depth = [0] * (n + 1)
    placed = [False] * n + [True]
    pos, left = [0] * pp, n
    while left:  # the ranks in turn, each as far as its inputs are placed (pipeline_sim.run)
        moved = left
        for i in range(pp):
            t, end = i * size + pos[i], (i + 1) * size
            while t < end and placed[reads[t]]:
                depth[t] = 1 + max(depth[t - 1] if t > i * size else 0, depth[reads[t]])
                placed[t] = True
                t += 1
            left -= t - (i * size + pos[i])
            pos[i] = t - i * size
        if moved == left:  # pragma: no cover - Megatron-Core's order never deadlocks
            raise RuntimeError(f"interleaved order deadlocked (pp {pp}, v {v}, m {m})")
    prev = np.arange(-1, n - 1)
    prev[::size] = n
    levels = np.array(depth[:n])
    order = np.argsort(levels, kind="stable")  # the passes renumbered by depth
    renumber = np.empty(n + 1, dtype=np.int64)
    renumber[order], renumber[n] = np.arange(n), n
    bounds = np.searchsorted(levels[order], np.arange(1, levels.max() + 2))
    slot = np.repeat(np.arange(pp), size) * v + chunk  # rank i's chunk c at i·v + c
    return slot[order], backward[order], renumber[prev[order]], renumber[dep[order]], bounds


def interleaved_steps(pp: int, m: int, forward: np.ndarray, backward: np.ndarray) -> np.ndarray:
    """The step of Megatron-Core's interleaved order for each of a batch of layouts ``k``:
    ``forward[k]``, ``backward[k]`` (``[K, pp·v]``, rank i's chunk c at ``i·v + c``) the time of
    each rank's chunk's forward and backward of one micro-batch; ``[K]`` in their unit.

    Examples
    --------
    >>> chunks = np.array([[2, 2, 3, 3, 3, 3, 2, 2] * 4])  # 80 layers, pp 4, v 8
    >>> interleaved_steps(4, 8, chunks, 2 * chunks)  # in one layer's forward
    array([507.])
    """
    slot, is_backward, prev, dep, bounds = _program(pp, forward.shape[1] // pp, m)
    out = np.empty(len(forward))
    size = max(1, _BATCH_FLOATS // (len(slot) + 1))
    spans = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
    for lo in range(0, len(forward), size):
        k = slice(lo, lo + size)
        dur = np.where(is_backward[:, None], backward[k].T[slot], forward[k].T[slot])  # [N, K]
        ends = np.zeros((len(slot) + 1, dur.shape[1]))
        for a, b in spans:  # a depth's passes read only shallower ones
            start = ends[prev[a:b]]
            np.maximum(start, ends[dep[a:b]], out=start)
            np.add(start, dur[a:b], out=ends[a:b])
        out[k] = ends[:-1].max(axis=0)
    return out


def layout_bubbles(
    pp: int, m: np.ndarray, forward: np.ndarray, backward: np.ndarray, busy: np.ndarray
) -> np.ndarray:
    """The bubble of each layout ``k`` of a batch (``[K]``, the unit of the times): the step of
    :func:`interleaved_steps` less ``m[k]`` × ``busy[k]``, the slowest rank's micro-batch; up to
    :data:`EXACT_GROUPS` groups of pp micro-batches the order run whole, beyond from the runs at 2
    and 4 groups (module docstring).

    Examples
    --------
    >>> chunks = np.array([[2, 2, 3, 3, 3, 3, 2, 2] * 4])
    >>> layout_bubbles(4, np.array([8]), chunks, 2 * chunks, np.array([60]))  # 507 − 8 × 60
    array([27.])
    """
    m = np.broadcast_to(m, len(forward))
    busy = np.broadcast_to(np.asarray(busy, dtype=float), len(forward))
    out = np.empty(len(forward))
    big = m > EXACT_GROUPS * pp
    for m_run in sorted(set(m[~big].tolist())):
        k = m == m_run
        out[k] = interleaved_steps(pp, m_run, forward[k], backward[k]) - m_run * busy[k]
    if big.any():
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
) -> tuple[int, ...]:
    """Every stage's layers per model chunk, stage after stage (``pp·v`` counts, rank i's chunk c
    at ``i·v + c``; :func:`model.split.stage_chunks`), then as many of them MoE; empty without
    dimensions."""
    if arch is None:
        return ()
    chunks = [
        chunk for i in range(pp) for chunk in stage_chunks(arch, pp, v, rule, i, sizes, schedule)
    ]
    return (*map(len, chunks), *(sum(map(arch.is_moe_layer, chunk)) for chunk in chunks))


@lru_cache(maxsize=4096)
def chunk_recomputed(
    arch: Architecture | None,
    pp: int,
    v: int,
    rule: bool | str,
    sizes: tuple[int, ...] | None,
    schedule: Any,
    counts: tuple[int, ...] | None,
) -> tuple[int, ...]:
    """:func:`chunk_counts`' layout of the layers ``Layout.recompute_layers`` recomputes whole:
    the first ``counts[i]`` of each of rank i's chunks (:func:`model.split.recomputed_in_chunks`),
    ``pp·v`` counts, then as many of them MoE; zeros without counts."""
    if arch is None:
        return ()
    out: list[tuple[int, ...]] = []
    for i in range(pp):
        k = 0 if counts is None else counts[i]
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
