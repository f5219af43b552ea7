"""The attention spans of a model's layers, each timed at its own span: a model mixing local and
global layers (gpt-oss's 128-key band on every other layer, Gemma 2/3's windows, Llama 4's
chunks) runs its attention core once per layer at that layer's span.

The roofline clock times one layer of each *span group* (:func:`span_groups`: a distinct
(FFN kind, attention span) among the model's layers, its first layer standing for the others,
:meth:`Architecture.layer_span`) and a pipeline stage, or a model chunk, as the count of its
own layers in each group (:func:`group_counts`; :func:`model.step_time.stage_parts`): so each
stage's attention core is the sum over the layers it holds of each layer's own span time, not
the model-wide mean. Gemma 3's ten global layers (5, 11, …, 59 of 62) fall two on some stages
of pp 4 and three on others; the slowest stage paces the pipeline
(:func:`model.terms.roofline.slowest_microbatch`). Which layers a stage holds is the split's
(:func:`model.split.stage_layers`: Megatron-Core's ``get_transformer_layer_offset`` and
``--pipeline-model-parallel-layout``, torchtitan's ``generate_llm_fqn_per_model_part``).

Standard library and :mod:`model` only; pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from trainplan.model.flops import attention_core_forward_flops
from trainplan.model.packing import Documents
from trainplan.model.specs import Architecture, AttentionSpan

__all__ = ["CoreSpan", "span_groups", "group_counts", "core_spans"]


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
def span_groups(arch: Architecture) -> tuple[tuple[bool, int], ...]:
    """``(moe, layer)`` for each distinct (FFN kind, attention span) among the model's layers
    (its L layers and MTP blocks, :attr:`Architecture.mtp_layers`): whether its FFN is MoE and
    the first such layer (whose span and width stand for the others,
    :meth:`Architecture.layer_span`); dense groups first, then MoE, each in layer order.

    Examples
    --------
    Gemma 3's five local layers to one global over 62 layers (layers 5, 11, …, 59 global):

    >>> from trainplan.model.specs import Architecture
    >>> g = Architecture(num_layers=62, hidden_size=8, num_attention_heads=2,
    ...                  ffn_hidden_size=32, vocab_size=16, sliding_window=1024,
    ...                  attention_pattern=("local",) * 5 + ("global",))
    >>> span_groups(g)
    ((False, 0), (False, 5))
    """
    first: dict[tuple[bool, AttentionSpan], int] = {}
    for j in range(arch.num_layers + arch.mtp_layers):
        first.setdefault((arch.is_moe_layer(j), arch.layer_span(j)), j)
    return tuple(sorted(((moe, j) for (moe, _), j in first.items()), key=lambda g: g[0]))


@lru_cache(maxsize=4096)
def group_counts(arch: Architecture, layers: tuple[int, ...]) -> tuple[int, ...]:
    """How many of ``layers`` (indices, MTP blocks L, L + 1, …) fall in each of
    :func:`span_groups`, in its order: what a stage or model chunk holding them is timed by.

    Examples
    --------
    Gemma 3 (as in :func:`span_groups`) at pp 4, Megatron's split 15, 16, 16, 15: stage 0
    holds layers 0 … 14 (globals 5, 11), stage 1 layers 15 … 30 (globals 17, 23, 29).

    >>> from trainplan.model.specs import Architecture
    >>> g = Architecture(num_layers=62, hidden_size=8, num_attention_heads=2,
    ...                  ffn_hidden_size=32, vocab_size=16, sliding_window=1024,
    ...                  attention_pattern=("local",) * 5 + ("global",))
    >>> group_counts(g, tuple(range(15))), group_counts(g, tuple(range(15, 31)))
    ((13, 2), (13, 3))
    """
    index = {
        (moe, arch.layer_span(j)): k for k, (moe, j) in enumerate(span_groups(arch))
    }  # fmt: skip
    out = [0] * len(index)
    for j in layers:
        out[index[arch.is_moe_layer(j), arch.layer_span(j)]] += 1
    return tuple(out)


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
    """Each ``(layer, count)`` of ``spans`` (a layer standing for its span, :func:`span_groups`,
    and how many layers it stands for; the clock times one group at a time, ``((layer, 1),)``:
    :func:`model.step_time.kind_parts`) as the FlashAttention core
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
    >>> band, full = core_spans(arch, ((0, 1), (1, 1)), 8192, 1, 1, True, None, 8192)
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
