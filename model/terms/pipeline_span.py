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

import numpy as np

from trainplan.model.layout import Recompute
from trainplan.model.pipeline import bubble_ratio
from trainplan.model.pipeline_uneven import (
    chunk_counts,
    chunk_recomputed,
    layout_bubbles,
    uneven_chunks,
)
from trainplan.model.terms.activation_fields import LAYER_FIELDS
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.roofline import kind_seconds
from trainplan.model.xp import as_float, is_array

__all__ = ["classic_span", "uneven_bubble"]


def uneven_bubble(
    pp: int,
    v: Any,
    m: Any,
    counts: np.ndarray,
    kinds: tuple[Any, ...],
    plain: tuple[Any, ...],
    full: tuple[Any, ...] | None = None,
    redone: np.ndarray | None = None,
) -> np.ndarray:
    """Per layout (``[n]``, seconds), the bubble of Megatron-Core's interleaved order on its
    chunks (:func:`model.pipeline_uneven.layout_bubbles`): ``counts`` each layout's
    :func:`model.pipeline_uneven.chunk_counts` (``[n, 2·pp·v]``, zeros past them), ``kinds``,
    ``plain`` the seconds of a dense layer, a MoE layer, the embedding and the output layer as
    the layout runs them and without recomputation (each a number or ``[n]``); with per-stage
    counts, ``redone`` their :func:`model.pipeline_uneven.chunk_recomputed` and ``full`` the
    kinds fully recomputed."""
    n = len(counts)
    v, m = (np.broadcast_to(np.asarray(x).reshape(-1), n) for x in (v, m))
    per = [[np.broadcast_to(np.asarray(x, dtype=float).reshape(-1), n) for x in k]
           for k in (kinds, plain, full or kinds)]  # fmt: skip
    out = np.empty(n)
    for vi in sorted(set(v.tolist())):
        rows, width = np.flatnonzero(v == vi), pp * vi
        layers, moe = counts[rows, :width], counts[rows, width : 2 * width]
        again = np.zeros((len(rows), 2 * width)) if redone is None else redone[rows, : 2 * width]
        ends = np.zeros((2, width))
        ends[0, 0] = ends[1, width - 1] = 1  # the embedding, the output layer
        (d, mo, e, o), (dp, mp, ep, op), (df, mf, _, _) = ([x[rows, None] for x in k] for k in per)
        again_moe = again[:, width:]
        again_dense = again[:, :width] - again_moe
        total = ((layers - moe - again_dense) * d + (moe - again_moe) * mo + again_dense * df
                 + again_moe * mf + ends[0] * e + ends[1] * o)  # fmt: skip
        forward = ((layers - moe) * dp + moe * mp + ends[0] * ep + ends[1] * op) / 3
        busy = total.reshape(len(rows), pp, vi).sum(axis=2).max(axis=1)
        out[rows] = layout_bubbles(pp, m[rows], forward, total - forward, busy)
    return out


def _table(found: Any, n: int) -> np.ndarray:
    """A lookup's tuple (numbers, or ``[n, 1]`` columns) as ``[n, len]`` floats."""
    return np.column_stack([np.broadcast_to(np.asarray(x, dtype=float), (n, 1)) for x in found])


def classic_span(c: Context, f: Fields, t_mb: Any, t_plain: Any, roofline: bool) -> Any:
    """Seconds of the pipeline section under GPipe, 1F1B or interleaved 1F1B: the closed form
    ``m·t_mb·(1 + (pp − 1)/(v·m))`` (``t_mb`` the slowest stage's micro-batch), or, where a rank's
    model chunks hold unequal layers (:func:`model.pipeline_uneven.uneven_chunks`),
    ``m·t_mb`` + :func:`uneven_bubble`, its layers timed by the roofline model's kinds
    (``roofline``; per-stage counts' layers fully recomputed) or, under the single model, every
    layer as long as one of the stage with the most (``t_mb`` and ``t_plain`` over its layers)."""
    m = f.m
    closed = m * t_mb * (1 + as_float(bubble_ratio(f.pp, m, f.virtual_stages)))
    uneven = f.lookup(uneven_chunks, (c.arch,), *LAYER_FIELDS)
    if not np.any(uneven):
        return closed
    n = t_mb.shape[0] if is_array(t_mb) else 1
    counts = _table(f.lookup(chunk_counts, (c.arch,), *LAYER_FIELDS), n)
    full = redone = None
    if roofline:
        kinds, plain = kind_seconds(c, f), kind_seconds(c, f, Recompute.NONE)
        if f.recompute_layers is not None:
            full = kind_seconds(c, f, Recompute.FULL)
            found = f.lookup(chunk_recomputed, (c.arch,), *LAYER_FIELDS, "recompute_layers")
            redone = _table(found, n)
    else:  # the single model: no layer kinds, every layer the busiest stage's share
        v = np.broadcast_to(np.asarray(f.virtual_stages).reshape(-1), n)
        most = np.array([counts[k, : f.pp * v[k]].reshape(f.pp, -1).sum(axis=1).max()
                         for k in range(n)])  # fmt: skip
        kinds, plain = ((x / most, x / most, 0.0, 0.0) for x in (np.reshape(t_mb, -1),
                                                                  np.reshape(t_plain, -1)))  # fmt: skip
    bubble = uneven_bubble(f.pp, f.virtual_stages, m, counts, kinds, plain, full, redone)
    span = m * t_mb + bubble.reshape(np.shape(t_mb) or ())
    if not is_array(t_mb):
        return float(span)
    return np.where(uneven, span, closed)
