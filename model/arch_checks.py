"""The attention fields of an :class:`model.specs.Architecture`, checked where it is built
(:func:`check_attention`): the attention pattern normalised to its spans, each span's width given
where a layer uses it, and the MHA/GQA-only features refused with MLA. Split from
:mod:`model.specs`; the rules and their messages are unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainplan.model.arch_parts import AttentionKind, positive
from trainplan.model.attention import AttentionSpan
from trainplan.model.errors import InputError
from trainplan.model.units import check_limit

if TYPE_CHECKING:
    from trainplan.model.specs import Architecture

__all__ = ["check_attention"]


def check_attention(arch: Architecture) -> None:
    """Normalise :attr:`Architecture.attention_pattern` and check the attention fields agree:
    a ``local`` layer needs ``sliding_window``, a ``chunked`` one ``attention_chunk_size``, and
    each of the two is used by some layer; q/k/v biases, QK-norm and sinks are MHA/GQA
    features; ``qkv_bias`` and ``linear_bias`` do not go together. Also checks ``mtp_layers``
    (a whole number >= 0 within its limit). Run by :class:`Architecture`'s construction.

    Raises
    ------
    InputError
        One line naming the field, its value and the rule.
    """
    positive(
        "model",
        sliding_window=arch.sliding_window,
        attention_chunk_size=arch.attention_chunk_size,
    )
    if not isinstance(arch.mtp_layers, int) or isinstance(arch.mtp_layers, bool):
        raise InputError(f"model.mtp_layers: {arch.mtp_layers!r} must be a whole number >= 0")
    if arch.mtp_layers < 0:
        raise InputError(f"model.mtp_layers: {arch.mtp_layers} must be a whole number >= 0")
    check_limit("model.mtp_layers", arch.mtp_layers)
    pattern = arch.attention_pattern
    if isinstance(pattern, str) or not isinstance(pattern, tuple | list):
        raise InputError(f"model.attention_pattern: {pattern!r} must be a list of spans")
    try:
        spans = tuple(AttentionSpan(str(p).lower()) for p in pattern)
    except ValueError:
        allowed = ", ".join(k.value for k in AttentionSpan)
        raise InputError(
            f"model.attention_pattern: {list(pattern)!r} holds a span that is not one of {allowed}"
        ) from None
    if len(spans) > arch.num_layers:
        raise InputError(
            f"model.attention_pattern: {len(spans)} entries for num_layers = {arch.num_layers}; "
            "it repeats over the layers, so at most one entry per layer"
        )
    if not spans and (arch.sliding_window is None) != (arch.attention_chunk_size is None):
        spans = (AttentionSpan.LOCAL if arch.sliding_window else AttentionSpan.CHUNKED,)
    for span, key, value in (
        (AttentionSpan.LOCAL, "sliding_window", arch.sliding_window),
        (AttentionSpan.CHUNKED, "attention_chunk_size", arch.attention_chunk_size),
    ):
        if (span in spans) != (value is not None):
            rule = (
                f"a '{span}' layer needs model.{key}"
                if value is None
                else f"model.{key} = {value} is given but no layer of attention_pattern is '{span}'"
            )
            raise InputError(f"model.attention_pattern: {[s.value for s in spans]!r}: {rule}")
    object.__setattr__(arch, "attention_pattern", spans)
    if arch.qkv_bias and arch.linear_bias:
        raise InputError(
            "model.qkv_bias: true with linear_bias true; linear_bias already puts biases on q, k "
            "and v (give one of the two)"
        )
    if arch.attention is AttentionKind.MLA:
        for name in ("qkv_bias", "qk_norm", "attention_sinks"):
            if getattr(arch, name):
                raise InputError(f"model.{name}: true is an MHA/GQA feature, not modelled with MLA")
