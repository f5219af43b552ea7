"""The pipeline section of a step under a classic schedule (GPipe, 1F1B, interleaved 1F1B): the
slowest stage's ``m`` micro-batches ``m·t_mb`` plus the bubble the schedule's own order leaves on
the layout's stages (1F1B, GPipe: :mod:`model.pipeline_onef`) or model chunks (interleaved 1F1B
at pp > 1, every layout: Megatron-Core's order, :mod:`model.pipeline_uneven`; Megatron-LM
d98e8a64dd ``megatron/core/pipeline_parallel/schedules.py``
``forward_backward_pipelining_with_interleaving``): each stage or chunk timed by its layers of
each kind, the embedding on the first and the output layer on the last
(:func:`model.terms.roofline.kind_seconds`), its forward a third of its time without
recomputation and the backward the rest (the cost model's split of a micro-batch,
:func:`model.schedule_cost.pass_times`); per-stage recomputation counts
(``Layout.recompute_layers``) recompute the first layers of each chunk whole. The closed form
``m·t_mb·(1 + (pp − 1)/(v·m))`` (Narayanan et al. 2021 §2.2: every chunk a v-th of the slowest
stage's micro-batch) where no order runs (pp 1) and, under the single model, where every stage
or chunk holds the same layers (the order's step there).
"""

from __future__ import annotations

from typing import Any

from trainplan.model.core_spans import span_groups
from trainplan.model.layout import Recompute
from trainplan.model.pipeline import Schedule, bubble_ratio
from trainplan.model.pipeline_onef import one_chunk, onef_bubble
from trainplan.model.pipeline_report import interleaved_order
from trainplan.model.pipeline_uneven import chunk_counts, chunks_alike, layout_bubbles
from trainplan.model.terms.activation_fields import LAYER_FIELDS
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.roofline import kind_seconds
from trainplan.model.xp import as_float, namespace, where

__all__ = [
    "classic_span",
    "uneven_bubble",
    "one_chunk_bubble",
    "stage_passes",
    "stage_seconds",
    "chunk_seconds",
]


def stage_passes(total: Any, plain: Any) -> tuple[Any, Any]:
    """(forward, backward) seconds of one micro-batch on a stage or model chunk from its time
    ``total`` (forward, backward and recomputation) and the same without recomputation
    ``plain``: the forward a third of ``plain``, the backward the rest of ``total`` (the cost
    model's split of a micro-batch, :func:`model.schedule_cost.pass_times` with one chunk: the
    forward ``t_f``, the backward ``t_b + t_w``). Numbers or arrays of one shape; what the
    order's step reads (:func:`one_chunk_bubble`) and the per-stage search's paths
    (:attr:`optimizer.stage_tables.StageOption.forward_ns`).

    >>> stage_passes(4.0, 3.0)
    (1.0, 3.0)
    """
    forward = plain / 3
    return forward, total - forward


def _chunk_times(
    width: int, counts: Any, again: Any, kinds: Any, plain: Any, full: Any
) -> tuple[Any, Any, Any]:
    """Each chunk's (time, forward, backward) of one micro-batch (rank i's chunk c at
    ``i·v + c``, ``width`` = pp·v of them): its layers of each span group (``counts``:
    :func:`chunk_counts`' totals, then group after group; numbers or ``[n, 1]`` columns), those
    of them recomputed whole (``again``, the same layout, or None) timed ``full``, the embedding
    on the first and the output layer on the last; its passes by :func:`stage_passes` (the
    forward a third of the same without recomputation, ``plain``). ``kinds``, ``plain``,
    ``full``: :func:`model.terms.roofline.kind_seconds`' (one layer of each group, the
    embedding, the output layer)."""
    (groups, e, o), (plain_groups, ep, op) = kinds, plain
    redone = groups if full is None else full[0]
    total, forward, backward = [], [], []
    for j in range(width):
        ends = (e if j == 0 else 0) + (o if j == width - 1 else 0)
        plain_ends = (ep if j == 0 else 0) + (op if j == width - 1 else 0)
        busy: Any = 0.0
        ahead: Any = 0.0
        for g, (k, kp, kf) in enumerate(zip(groups, plain_groups, redone, strict=True)):
            n = counts[(1 + g) * width + j]
            redo = 0 if again is None else again[(1 + g) * width + j]
            busy = busy + (n - redo) * k + redo * kf
            ahead = ahead + n * kp
        passes = stage_passes(busy + ends, ahead + plain_ends)
        total.append(busy + ends)
        forward.append(passes[0])
        backward.append(passes[1])
    return total, forward, backward


def uneven_bubble(
    pp: int, v: int, m: int, counts: Any, kinds: Any, plain: Any, full: Any, again: Any
) -> Any:
    """Seconds of the bubble Megatron-Core's interleaved order leaves on one layout's chunks
    (:func:`model.pipeline_uneven.layout_bubbles`; :func:`_chunk_times`, ``counts`` and ``again``
    the lookups' tuples, the kinds numbers)."""
    total, forward, backward = _chunk_times(pp * v, counts, again, kinds, plain, full)
    busy = max(sum(total[i * v : (i + 1) * v]) for i in range(pp))
    return layout_bubbles(pp, m, forward, backward, busy)


def _flat(kinds: Any) -> list[Any]:
    """:func:`model.terms.roofline.kind_seconds`' figures in one list (groups, embedding,
    output)."""
    return [*kinds[0], kinds[1], kinds[2]]


def _nested(flat: list[Any]) -> tuple[tuple[Any, ...], Any, Any]:
    """:func:`_flat`'s inverse."""
    return tuple(flat[:-2]), flat[-2], flat[-1]


def _uneven_bubbles(
    xp: Any, pp: int, v: Any, m: Any, counts: Any, kinds: Any, plain: Any, full: Any, again: Any
) -> Any:
    """:func:`uneven_bubble` of many layouts (``[n, 1]`` seconds): rows grouped by v, each group's
    chunks run at once (their array namespace ``xp``)."""
    n = m.shape[0]
    v = xp.reshape(xp.broadcast_to(xp.asarray(v), (n, 1)), (n,))
    width_k = len(_flat(kinds))
    columns = [xp.reshape(xp.broadcast_to(xp.asarray(x, dtype=xp.float64), (n, 1)), (n,))
               for x in (*_flat(kinds), *_flat(plain), *(_flat(full) if full else ()))]  # fmt: skip
    out = xp.zeros(n)
    groups = len(kinds[0])
    for vi in sorted(set(v.tolist())):
        rows = v == vi
        width = pp * vi
        take = [x[rows] for x in columns]

        def column(x: Any, rows: Any = rows) -> Any:
            return xp.reshape(xp.broadcast_to(xp.asarray(x), (n, 1)), (n,))[rows]

        # each row's tuple: its pp·v totals, then each group's pp·v counts (padded with zeros)
        table = [column(x) for x in counts[: (1 + groups) * width]]
        redo = None if again is None else [column(x) for x in again[: (1 + groups) * width]]
        total, forward, backward = (xp.stack(x, axis=1) for x in _chunk_times(
            width, table, redo, _nested(take[:width_k]), _nested(take[width_k : 2 * width_k]),
            None if full is None else _nested(take[2 * width_k :]),
        ))  # fmt: skip
        busy = xp.max(xp.sum(xp.reshape(total, (-1, pp, vi)), axis=2), axis=1)
        mr = xp.reshape(xp.broadcast_to(xp.asarray(m), (n, 1)), (n,))[rows]
        out[rows] = layout_bubbles(pp, mr, forward, backward, busy)
    return out[:, None]


def one_chunk_bubble(
    pp: int, m: Any, schedule: str, counts: Any, kinds: Any, plain: Any, full: Any, again: Any
) -> Any:
    """Seconds of the bubble the one-chunk order (1F1B, GPipe) leaves on one layout's stages, or
    many layouts' (``[n, 1]`` back; rows grouped by m): :func:`model.pipeline_onef.onef_bubble`
    of each stage's forward and backward of one micro-batch (:func:`_chunk_times` with v = 1:
    its layers of each span group, those recomputed whole, the embedding on the first stage and
    the output layer on the last; the forward a third of the same without recomputation)."""
    total, forward, backward = _chunk_times(pp, counts, again, kinds, plain, full)
    xp = namespace(m, *total, *forward)
    if xp is None:
        return onef_bubble(pp, int(m), [float(x) for x in forward],
                           [float(x) for x in backward], schedule)  # fmt: skip
    n = max(int(xp.asarray(x).shape[0]) if xp.asarray(x).ndim else 1 for x in (m, *total))

    def column(x: Any) -> Any:
        return xp.reshape(xp.broadcast_to(xp.asarray(x, dtype=xp.float64), (n, 1)), (n,))

    fw, bw, mr = [column(x) for x in forward], [column(x) for x in backward], column(m)
    out = xp.zeros(n)
    # 1F1B's rows with m ≥ pp − 1 in one call, each its own m (the same figures as one call per
    # m: model.pipeline_onef.onef_steps); the rest a call per m
    together = (mr >= pp - 1) & (str(schedule) != Schedule.GPIPE.value)
    if bool(xp.any(together)):
        out[together] = onef_bubble(pp, xp.astype(mr[together], xp.int64),
                                    [x[together] for x in fw], [x[together] for x in bw], schedule)  # fmt: skip
    for mi in sorted(set(mr[~together].tolist())):
        rows = mr == mi
        out[rows] = onef_bubble(pp, int(mi), [x[rows] for x in fw], [x[rows] for x in bw], schedule)
    return out[:, None]


def classic_span(c: Context, f: Fields, t_mb: Any, t_plain: Any, roofline: bool) -> Any:
    """Seconds of the pipeline section under GPipe, 1F1B or interleaved 1F1B: ``m·t_mb`` (the
    slowest stage's ``m`` micro-batches) plus the bubble the schedule's own order leaves on the
    stages (1F1B, GPipe: :func:`one_chunk_bubble`, :mod:`model.pipeline_onef`) or on the model
    chunks (interleaved 1F1B at pp > 1: :func:`uneven_bubble`, Megatron-Core's order,
    :mod:`model.pipeline_uneven`) as timed — every layout at pp > 1, since the embedding on the
    first stage's first chunk and the output layer and loss on the last stage's last make them
    unequal even where every chunk holds the same layers. The closed form ``m·t_mb·(1 + (pp −
    1)/(v·m))`` (Narayanan et al. 2021 §2.2) where there is no order to run (pp 1, no
    dimensions) and under the single model where every stage (every model chunk) holds the same
    layers: there the order's step is the closed form
    (``tests/model/test_interleaved_order.py``). The stages or chunks are timed by the roofline
    model's kinds (``roofline``; per-stage counts' layers fully recomputed) or, under the single
    model, every layer as long as one of the stage with the most (``t_mb`` and ``t_plain`` over
    its layers). Control: schedule, pp."""
    m, pp = f.m, f.pp
    closed = m * t_mb * (1 + as_float(bubble_ratio(pp, m, f.virtual_stages)))
    onef = one_chunk(f.schedule, pp)
    if c.arch is None or not (onef or interleaved_order(f.schedule, pp)):
        return closed
    counts = f.lookup(chunk_counts, (c.arch,), *LAYER_FIELDS)
    full = again = None
    alike: Any = False
    if roofline:
        kinds, plain, full, again = _roofline_kinds(c, f)
    else:  # the single model: no layer kinds, every layer the busiest stage's share
        most = f.lookup(_most_layers, (c.arch,), *LAYER_FIELDS)
        groups = len(span_groups(c.arch))
        kinds, plain = (((x / most,) * groups, 0.0, 0.0) for x in (t_mb, t_plain))
        alike = f.lookup(chunks_alike, (c.arch,), *LAYER_FIELDS)
        if alike is True:
            return closed  # chunks alike: the closed form is the order's step
    xp = namespace(alike, t_mb, m, *_flat(kinds))
    if onef:
        bubble = one_chunk_bubble(pp, m, str(f.schedule), counts, kinds, plain, full, again)
    elif xp is None:
        bubble = uneven_bubble(pp, f.virtual_stages, m, counts, kinds, plain, full, again)
    else:
        bubble = _uneven_bubbles(xp, pp, f.virtual_stages, m, counts, kinds, plain, full, again)
    return where(alike, closed, m * t_mb + bubble)


def _roofline_kinds(c: Context, f: Fields) -> tuple[Any, Any, Any, Any]:
    """(kinds, plain, full, again) of :func:`_chunk_times` under the roofline model: one layer of
    each span group, the embedding and the output layer as the layout runs them, without
    recomputation, fully recomputed (where ``recompute_layers`` is given, else None) and the
    chunks' layers so recomputed (None)."""
    kinds, plain = kind_seconds(c, f), kind_seconds(c, f, Recompute.NONE)
    if f.recompute_layers is None:
        return kinds, plain, None, None
    again = f.lookup(chunk_counts, (c.arch,), *LAYER_FIELDS, "recompute_layers")
    return kinds, plain, kind_seconds(c, f, Recompute.FULL), again


def stage_seconds(c: Context, f: Fields) -> tuple[tuple[float, float], ...]:
    """Each pipeline rank's (forward, backward) seconds of one micro-batch under the roofline
    model, its model chunks summed (:func:`chunk_seconds`): the passes the GPipe, 1F1B and
    interleaved orders run (:func:`classic_span`), for one layout, so that a reader can check
    the bubble. Empty where :func:`chunk_seconds` is."""
    chunks, v = chunk_seconds(c, f), int(f.virtual_stages)
    return tuple(
        (sum(x[0] for x in chunks[i * v : (i + 1) * v]),
         sum(x[1] for x in chunks[i * v : (i + 1) * v]))
        for i in range(len(chunks) // v)
    )  # fmt: skip


def chunk_seconds(c: Context, f: Fields) -> tuple[tuple[float, float], ...]:
    """Each model chunk's (forward, backward) seconds of one micro-batch under the roofline
    model, rank i's chunk c at ``i·v + c`` (``pp·v`` pairs; v = 1 under GPipe and 1F1B): its
    layers of each span group, those recomputed whole, the embedding on the first rank's first
    chunk and the output layer on the last rank's last, split by :func:`stage_passes`
    (:func:`_chunk_times`) — the times :func:`classic_span`'s orders run, for one layout (the
    per-stage search's rows, :attr:`optimizer.stage_option.StageOption.chunk_forward`). Empty
    without dimensions, at pp = 1 or under the other schedules (zero-bubble and DualPipe split
    the backward and place the chunks their own way)."""
    if c.arch is None or f.pp == 1 or str(f.schedule) not in _CLASSIC:
        return ()
    pp, v = int(f.pp), int(f.virtual_stages)
    counts = f.lookup(chunk_counts, (c.arch,), *LAYER_FIELDS)
    kinds, plain, full, again = _roofline_kinds(c, f)
    _, forward, backward = _chunk_times(pp * v, counts, again, kinds, plain, full)
    return tuple((float(x), float(y)) for x, y in zip(forward, backward, strict=True))


_CLASSIC = ("gpipe", "1f1b", "interleaved")
"""The schedules :func:`classic_span` times (:class:`model.pipeline.Schedule` values)."""


def _most_layers(arch: Any, pp: int, v: int, rule: Any, sizes: Any, schedule: Any) -> int:
    """The most layers a rank holds (:func:`model.pipeline_uneven.chunk_counts`)."""
    counts = chunk_counts(arch, pp, v, rule, sizes, schedule)[: pp * v]
    return max(sum(counts[i * v : (i + 1) * v]) for i in range(pp))
