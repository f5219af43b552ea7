"""The pipeline section of a step under a classic schedule (GPipe, 1F1B, interleaved 1F1B): the
slowest stage's ``m`` micro-batches and the bubble, ``m·t_mb·(1 + (pp − 1)/(v·m))`` (Narayanan et
al. 2021 §2.2: every rank taken as the slowest stage, its chunks of equal time), and, where a
rank's model chunks hold unequal layers under interleaving, ``m·t_mb`` plus the bubble
Megatron-Core's order leaves on the layout's own chunks (:mod:`model.pipeline_uneven`): each
chunk timed by its layers of each kind, the embedding on the first and the output layer on the
last (:func:`model.terms.roofline.kind_seconds`), its forward a third of its time without
recomputation and the backward the rest (the cost model's split of a micro-batch,
:func:`model.schedule_cost.pass_times`); per-stage recomputation counts
(``Layout.recompute_layers``) recompute the first layers of each chunk whole.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.core_spans import span_groups
from trainplan.model.layout import Recompute
from trainplan.model.pipeline import bubble_ratio
from trainplan.model.pipeline_uneven import (
    chunk_counts,
    layout_bubbles,
    uneven_chunks,
)
from trainplan.model.terms.activation_fields import LAYER_FIELDS
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.roofline import kind_seconds
from trainplan.model.xp import as_float, namespace

__all__ = ["classic_span", "uneven_bubble"]


def _chunk_times(
    width: int, counts: Any, again: Any, kinds: Any, plain: Any, full: Any
) -> tuple[Any, Any]:
    """Each chunk's (time, forward) of one micro-batch (rank i's chunk c at ``i·v + c``, ``width``
    = pp·v of them): its layers of each span group (``counts``: :func:`chunk_counts`' totals,
    then group after group; numbers or ``[n, 1]`` columns), those of them recomputed whole
    (``again``, the same layout, or None) timed ``full``, the embedding on the first and the
    output layer on the last; the forward a third of the same without recomputation
    (``plain``). ``kinds``, ``plain``, ``full``: :func:`model.terms.roofline.kind_seconds`' (one
    layer of each group, the embedding, the output layer)."""
    (groups, e, o), (plain_groups, ep, op) = kinds, plain
    redone = groups if full is None else full[0]
    total, forward = [], []
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
        total.append(busy + ends)
        forward.append((ahead + plain_ends) / 3)
    return total, forward


def uneven_bubble(
    pp: int, v: int, m: int, counts: Any, kinds: Any, plain: Any, full: Any, again: Any
) -> Any:
    """Seconds of the bubble Megatron-Core's interleaved order leaves on one layout's chunks
    (:func:`model.pipeline_uneven.layout_bubbles`; :func:`_chunk_times`, ``counts`` and ``again``
    the lookups' tuples, the kinds numbers)."""
    total, forward = _chunk_times(pp * v, counts, again, kinds, plain, full)
    busy = max(sum(total[i * v : (i + 1) * v]) for i in range(pp))
    return layout_bubbles(
        pp, m, forward, [t - f for t, f in zip(total, forward, strict=True)], busy
    )


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
        total, forward = _chunk_times(
            width, table, redo, _nested(take[:width_k]), _nested(take[width_k : 2 * width_k]),
            None if full is None else _nested(take[2 * width_k :]),
        )  # fmt: skip
        total, forward = xp.stack(total, axis=1), xp.stack(forward, axis=1)
        busy = xp.max(xp.sum(xp.reshape(total, (-1, pp, vi)), axis=2), axis=1)
        mr = xp.reshape(xp.broadcast_to(xp.asarray(m), (n, 1)), (n,))[rows]
        out[rows] = layout_bubbles(pp, mr, forward, total - forward, busy)
    return out[:, None]


def classic_span(c: Context, f: Fields, t_mb: Any, t_plain: Any, roofline: bool) -> Any:
    """Seconds of the pipeline section under GPipe, 1F1B or interleaved 1F1B: the closed form
    ``m·t_mb·(1 + (pp − 1)/(v·m))`` (``t_mb`` the slowest stage's micro-batch), or, where a rank's
    model chunks hold unequal layers (:func:`model.pipeline_uneven.uneven_chunks`),
    ``m·t_mb`` + :func:`uneven_bubble`, its layers timed by the roofline model's kinds
    (``roofline``; per-stage counts' layers fully recomputed) or, under the single model, every
    layer as long as one of the stage with the most (``t_mb`` and ``t_plain`` over its layers)."""
    m, pp = f.m, f.pp
    closed = m * t_mb * (1 + as_float(bubble_ratio(pp, m, f.virtual_stages)))
    uneven = f.lookup(uneven_chunks, (c.arch,), *LAYER_FIELDS)
    xp = namespace(uneven, t_mb)
    if not (bool(xp.any(uneven)) if xp is not None else uneven):
        return closed
    counts = f.lookup(chunk_counts, (c.arch,), *LAYER_FIELDS)
    full = again = None
    if roofline:
        kinds, plain = kind_seconds(c, f), kind_seconds(c, f, Recompute.NONE)
        if f.recompute_layers is not None:
            full = kind_seconds(c, f, Recompute.FULL)
            again = f.lookup(chunk_counts, (c.arch,), *LAYER_FIELDS, "recompute_layers")
    else:  # the single model: no layer kinds, every layer the busiest stage's share
        most = f.lookup(_most_layers, (c.arch,), *LAYER_FIELDS)
        groups = len(span_groups(c.arch))
        kinds, plain = (((x / most,) * groups, 0.0, 0.0) for x in (t_mb, t_plain))
    if xp is None:
        bubble = uneven_bubble(pp, f.virtual_stages, m, counts, kinds, plain, full, again)
        return m * t_mb + bubble
    bubble = _uneven_bubbles(xp, pp, f.virtual_stages, m, counts, kinds, plain, full, again)
    return xp.where(uneven, m * t_mb + bubble, closed)


def _most_layers(arch: Any, pp: int, v: int, rule: Any, sizes: Any, schedule: Any) -> int:
    """The most layers a rank holds (:func:`model.pipeline_uneven.chunk_counts`)."""
    counts = chunk_counts(arch, pp, v, rule, sizes, schedule)[: pp * v]
    return max(sum(counts[i * v : (i + 1) * v]) for i in range(pp))
