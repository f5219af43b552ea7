"""Which keys each query of a layer attends to: global, sliding-window and chunked attention.

A decoder layer's attention span is one of :class:`AttentionSpan`. Query i (0-based) of a
sequence of s tokens attends to the keys j with

* ``global``:  j ≤ i (causal; i + 1 keys);
* ``local``:   i − W < j ≤ i, a sliding window of W keys, the query's own included
  (Mistral 7B §2, Jiang et al. 2023, arXiv 2310.06825; Gemma 2/3's local layers; gpt-oss's
  sliding layers; Hugging Face ``masking_utils.sliding_window_overlay``: ``kv > q − W`` on top of
  the causal mask, so min(i + 1, W) keys);
* ``chunked``: j ≤ i in the same chunk of C tokens, ⌊j/C⌋ = ⌊i/C⌋ (Llama 4's local layers,
  ``attention_chunk_size`` = 8,192; Hugging Face ``chunked_overlay``).

:func:`attended_pairs` counts the (query, key) pairs one sequence's layer computes — the number
that sets the attention core's FLOPs (QKᵀ and scores·V, :func:`model.flops.attention_core_forward_flops`).
Two conventions, both kept from before windows existed (``CostOptions.causal_attention_flops``):

* **causal** (FlashAttention on, by default): the attended pairs exactly — s(s + 1)/2 for a
  global layer, Σᵢ min(i + 1, W) for a window, each chunk's own triangle. FlashAttention-2 skips
  the key blocks a causal or windowed mask removes entirely (``window_size`` in
  ``flash_attn_func``), so the work is the pairs it keeps (up to the partly masked blocks on the
  mask's edges, which it computes and masks: not counted).
* **full** (FlashAttention off, Megatron-LM's Eq. 3 and PaLM's convention): s² per layer,
  whatever the mask. An unfused kernel builds the whole s×s score matrix and masks it — a causal
  triangle, a window or chunks alike (Hugging Face's eager attention adds the mask to the full
  ``[b, a, s, s]`` scores) — so a window saves nothing there.

Standard library only; exact integers.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["AttentionSpan", "attended_pairs", "pattern_span"]


class AttentionSpan(StrEnum):
    """The keys a layer's queries attend to: ``global`` (every earlier key), ``local`` (a sliding
    window of ``Architecture.sliding_window`` keys) or ``chunked`` (the earlier keys of the
    query's chunk of ``Architecture.attention_chunk_size`` tokens)."""

    GLOBAL = "global"
    LOCAL = "local"
    CHUNKED = "chunked"


def pattern_span(pattern: tuple[AttentionSpan, ...], index: int) -> AttentionSpan:
    """The span of layer ``index`` (0-based) under a pattern repeated over the layers: layer i
    takes ``pattern[i mod len(pattern)]``; an empty pattern is all ``global``.

    Examples
    --------
    Gemma 3's five local layers to one global (layers 5, 11, 17, … are global):

    >>> p = (AttentionSpan.LOCAL,) * 5 + (AttentionSpan.GLOBAL,)
    >>> [pattern_span(p, i).value for i in (0, 4, 5, 11)]
    ['local', 'local', 'global', 'global']
    """
    return pattern[index % len(pattern)] if pattern else AttentionSpan.GLOBAL


def attended_pairs(span: AttentionSpan, seq_len: int, width: int | None, causal: bool) -> int:
    """(query, key) pairs one sequence of ``seq_len`` tokens computes in a layer of ``span``
    (``width`` = W for ``local``, C for ``chunked``; ignored for ``global``).

    ``causal``: the attended pairs — global s(s+1)/2; local W(W+1)/2 + (s − W)·W when W < s
    (= Σᵢ min(i + 1, W)); chunked q·C(C+1)/2 + r(r+1)/2 with s = q·C + r. Not ``causal``: s²,
    the full score matrix an unfused kernel computes and masks (see the module docstring).

    Examples
    --------
    One Mistral-shaped layer at s = 4,096 with a window of 1,024 (issue 11 item 3):
    Σ_{i<4096} min(i + 1, 1024) = 1024·1025/2 + 3072·1024.

    >>> attended_pairs(AttentionSpan.LOCAL, 4096, 1024, causal=True)
    3670528
    >>> attended_pairs(AttentionSpan.GLOBAL, 4096, None, causal=True)  # 4096·4097/2
    8390656
    >>> attended_pairs(AttentionSpan.CHUNKED, 10, 4, causal=True)  # 2 chunks of 4, one of 2
    23
    >>> attended_pairs(AttentionSpan.LOCAL, 4096, 1024, causal=False)  # 4096²
    16777216
    """
    s = seq_len
    if not causal:
        return s * s
    if span is AttentionSpan.LOCAL and width is not None and width < s:
        return width * (width + 1) // 2 + (s - width) * width
    if span is AttentionSpan.CHUNKED and width is not None and width < s:
        q, r = divmod(s, width)
        return q * width * (width + 1) // 2 + r * (r + 1) // 2
    return s * (s + 1) // 2
