"""Figures of one layout that do not read its per-stage splits, remembered across layouts that
differ only in them.

The per-stage tables (:mod:`optimizer.stage_tables`) evaluate thousands of one-stage layouts
that differ only in ``stage_layers`` and ``recompute_layers``
(:func:`optimizer.stage_rules.realization`). A figure that reads neither — a layer's roofline
parts (:func:`model.terms.roofline._kinds_of`), the NCCL communicators
(:func:`model.terms.comm_memory.comm_memory_term`, whose scope in :data:`model.terms.TERMS`
holds neither), the userbuffers (:func:`model.terms.userbuffers.userbuffers_term`, likewise),
the ends' activations and boundary tensors (:mod:`model.terms.activations`) — is the same for
all of them, so
:func:`split_free` evaluates it once per :meth:`model.terms.fields.LayoutFields.split_free_key`
(every layout field but the two splits, the stage, the micro-batches a step and the links).
A figure that reads the stage's layers but not how many it recomputes — every memory term
but the activations (:func:`model.terms.peak.stage_memory_term`; not DeepSpeed ZeRO-3's state,
:func:`model.terms.deepspeed_turn.walks_recompute`) — is remembered by that key and
``stage_layers`` (:func:`recompute_free`): the tables try several counts k for one n.
The function called is the one ``evaluate()`` calls; only its repeats are skipped.
``tests/model/test_split_free.py`` holds that each such figure is the same on rows of different
splits, and of different counts (dense, interleaved, MoE, context-parallel, span,
split-backward, DeepSpeed and fsdp2 layouts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainplan.model.terms.fields import Context, Fields, LayoutFields

__all__ = ["MEMO", "MEMO_SIZE", "split_free", "recompute_free"]

MEMO: dict[tuple[Any, ...], tuple[Any, Any]] = {}
"""(function, context, split-free key, further arguments) → (the links evaluated with, the
figure)."""

MEMO_SIZE = 8192
"""Entries :data:`MEMO` keeps (then it starts afresh): a per-stage search's shapes hold a few
thousand (function, stage) pairs; a long-lived server sees many."""


def split_free(fn: Callable[..., Any], c: Context, f: Fields, *args: Any) -> Any:
    """``fn(c, f, *args)``, remembered for one layout of scalar fields by ``fn``, the context
    ``c`` (by identity), ``f``'s :meth:`~model.terms.fields.LayoutFields.split_free_key` and the
    hashable ``args``: ``fn`` must not read ``stage_layers`` nor ``recompute_layers``, and
    ``args`` must not be computed from them. Evaluated afresh for the search's columns, for a
    layout without links (memory only) and where the links are not the ones remembered (the
    key holds their identity; an entry keeps the links it was evaluated with alive)."""
    return _remembered(fn, c, f, None, args)


def recompute_free(fn: Callable[..., Any], c: Context, f: Fields, *args: Any) -> Any:
    """:func:`split_free` for an ``fn`` that reads ``stage_layers`` but not
    ``recompute_layers``: remembered by the split-free key and the layout's ``stage_layers``,
    so that the per-stage tables' rows of one stage holding n layers with different recomputed
    counts k share one evaluation."""
    return _remembered(fn, c, f, "stage_layers", args)


def _remembered(fn: Callable[..., Any], c: Context, f: Fields, split: str | None, args: Any) -> Any:
    """``fn(c, f, *args)`` remembered by the split-free key and, where ``split`` names one, the
    value of that split (:func:`split_free`, :func:`recompute_free`)."""
    key = f.split_free_key() if isinstance(f, LayoutFields) else None
    if key is None or not isinstance(f, LayoutFields):
        return fn(c, f, *args)
    memo_key = (fn, c, key, args) if split is None else (fn, c, key, getattr(f, split), args)
    links = f.links_object
    found = MEMO.get(memo_key)
    if found is not None and found[0] is links:
        return found[1]
    value = fn(c, f, *args)
    if len(MEMO) >= MEMO_SIZE:
        MEMO.clear()
    MEMO[memo_key] = (links, value)
    return value
