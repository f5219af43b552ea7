"""The attention spans of one layer kind (dense or MoE), each timed at its own span: a model
mixing local and global layers (gpt-oss's 128-key band on every other layer, Gemma 2/3's
windows, Llama 4's chunks) runs its attention core once per layer at that layer's span, so a
kind's core costs the mean over its layers of each span's time (:func:`model.op_time.op_seconds`
of the core, reading :attr:`model.ops.Op.spans`).

The mix is the kind's over the whole model (:func:`kind_spans`), not a pipeline stage's: the
roofline clock times one layer of each kind and a stage as counts of those
(:func:`model.layer_time.stage_parts`), which is exact where every stage holds the model's mix
(gpt-oss's alternation on stages of an even number of layers) and the mean elsewhere (Gemma 3's
five local layers to one global on stages of a number of layers not a multiple of six).

Standard library and :mod:`model` only; pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from trainplan.model.flops import attention_core_forward_flops
from trainplan.model.packing import Documents
from trainplan.model.specs import Architecture, AttentionSpan

__all__ = ["CoreSpan", "kind_spans", "core_spans"]


@dataclass(frozen=True, slots=True)
class CoreSpan:
    """One attention span of a layer kind's fused core, on one GPU for one micro-batch."""

    share: float
    """Fraction of the kind's layers at this span (the shares of a kind add to 1)."""
    flops: float
    """Forward FLOPs of one such layer's core (:func:`model.flops.attention_core_forward_flops`
    ÷ tp·cp, in the run's causal convention)."""
    masked_flops: float
    """Forward FLOPs over the (query, key) pairs the mask keeps (causal, windowed, chunked,
    document), ÷ tp·cp: what the kernel computes."""
    window: int | None = None
    """W keys of a sliding-window (``local``) layer whose band is narrower than the kernel's
    call (the kernel skips the key tiles outside the band: its time is read from a windowed
    curve, :func:`model.attention_rates.window_fractions`); None for a global or chunked layer
    and for a window at least as long as the call (a plain causal call)."""
    ring_split: bool = False
    """The causal triangle of whole sequences (a global span, no document mask), which a
    load-balanced context-parallel ring runs as one causal call and unmasked calls
    (:func:`model.attention_rates.ring_fractions`)."""


@lru_cache(maxsize=1024)
def kind_spans(arch: Architecture, moe: bool) -> tuple[tuple[int, int], ...]:
    """``(layer, count)`` for each distinct attention span among the layers of one kind (MoE
    or dense): the first such layer (whose span and width stand for the others,
    :meth:`Architecture.layer_span`) and how many of the kind's layers have it, in layer
    order; ``((0, 1),)`` for a model without layers of the kind.

    Examples
    --------
    Gemma 3's five local layers to one global over 62 layers (layers 5, 11, …, 59 global):

    >>> from trainplan.model.specs import Architecture
    >>> g = Architecture(num_layers=62, hidden_size=8, num_attention_heads=2,
    ...                  ffn_hidden_size=32, vocab_size=16, sliding_window=1024,
    ...                  attention_pattern=("local",) * 5 + ("global",))
    >>> kind_spans(g, False)
    ((0, 52), (5, 10))
    """
    first: dict[AttentionSpan, int] = {}
    count: dict[AttentionSpan, int] = {}
    for j in range(arch.num_layers):
        if arch.is_moe_layer(j) == moe:
            span = arch.layer_span(j)
            first.setdefault(span, j)
            count[span] = count.get(span, 0) + 1
    return tuple((first[s], count[s]) for s in first) or ((0, 1),)


def core_spans(
    arch: Architecture,
    spans: tuple[tuple[int, int], ...],
    seq_len: int,
    batch: int,
    shards: int,
    causal: bool,
    documents: Documents | None,
    call: float,
) -> tuple[CoreSpan, ...]:
    """Each ``(layer, count)`` of ``spans`` (:func:`kind_spans`) as the FlashAttention core
    runs it on one GPU for ``batch`` sequences of ``seq_len`` tokens: its share of the layers,
    its forward FLOPs (``causal`` convention) and masked FLOPs
    (:func:`model.flops.attention_core_forward_flops`, with ``documents``) ÷ ``shards`` (tp·cp);
    a sliding window narrower than ``call`` (the queries of one kernel call, s/cp or a
    document) is a band (:attr:`CoreSpan.window`); only a global span without documents splits
    over a context-parallel ring.

    Examples
    --------
    gpt-oss's band (W = 128) and global layers at s = 8,192, b = 1, 64 heads of 64, one GPU:
    the band keeps 128·129/2 + 8,064·128 = 1,040,448 pairs, 2·64·pairs·128 forward FLOPs.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("gpt-oss-120b").model.arch
    >>> band, full = core_spans(arch, kind_spans(arch, True), 8192, 1, 1, True, None, 8192)
    >>> band.share, band.window, band.masked_flops == 2 * 64 * 1040448 * 128, band.ring_split
    (0.5, 128, True, False)
    >>> full.window, full.masked_flops == 2 * 64 * (8192 * 8193 // 2) * 128, full.ring_split
    (None, True, True)
    """
    total = sum(n for _, n in spans)
    out = []
    for layer, n in spans:
        span = arch.layer_span(layer)
        width = arch.span_width(span)
        flops = attention_core_forward_flops(arch, layer, seq_len, batch, causal, documents)
        pairs = attention_core_forward_flops(arch, layer, seq_len, batch, True, documents)
        band = span is AttentionSpan.LOCAL and width is not None and width < call
        out.append(
            CoreSpan(
                n / total,
                flops / shards,
                pairs / shards,
                width if band else None,
                documents is None and span is AttentionSpan.GLOBAL,
            )  # fmt: skip
        )
    return tuple(out)
