"""The packed-documents inputs (:mod:`model.packing`) from flat parameters.

Three keys, one meaning: ``document_length`` (the mean document length, tokens) with an optional
``document_length_spread`` (its standard deviation), or ``document_lengths``, a histogram of
``[length, count]`` pairs (a scenario file's list, the API's JSON list). Giving none means each
sequence is one document (no packing); giving both forms is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainplan.model.errors import InputError
from trainplan.model.packing import Documents
from trainplan.model.units import parse_count, parse_number, shown_number, shown_text

__all__ = ["DOCUMENT_KEYS", "documents_from", "histogram"]

DOCUMENT_KEYS = ("document_length", "document_length_spread", "document_lengths")
"""The packed-documents keys: evaluate/search/frontier options (the first two), scenario
``[cluster]`` keys and API fields (all three)."""


def histogram(value: Any) -> Documents:
    """``[[length, count], …]`` → :class:`Documents`; one line naming the key otherwise."""
    if not isinstance(value, list | tuple) or not value:
        raise InputError(
            f"document_lengths: {shown_text(value)} must be a list of [length, count] pairs"
        )
    pairs = []
    for item in value:
        if not isinstance(item, list | tuple) or len(item) != 2:
            raise InputError(f"document_lengths: {shown_text(item)} must be a [length, count] pair")
        length = parse_count(item[0], "document_lengths")
        count = parse_number(item[1], "document_lengths")
        pairs.append((length, count))
    return Documents.histogram(pairs)


def documents_from(params: Mapping[str, Any], seq_len: int) -> Documents | None:
    """The document-length distribution the parameters give, or None (no packing).

    Raises
    ------
    InputError
        Both forms given, a spread without a mean, a mean longer than ``seq_len`` (a pack holds
        whole documents of that mean at most once: give a histogram), a bad number.

    Examples
    --------
    >>> documents_from({"document_length": "2,048", "document_length_spread": 512}, 8192)
    Documents(lengths=(1536, 2560), weights=(Fraction(1, 1), Fraction(1, 1)))
    >>> documents_from({"document_lengths": [[512, 3], [2048, 1]]}, 8192).mean_length
    Fraction(896, 1)
    >>> documents_from({}, 8192) is None
    True
    """
    mean, spread = params.get("document_length"), params.get("document_length_spread")
    hist = params.get("document_lengths")
    if hist is not None and (mean is not None or spread is not None):
        raise InputError(
            "document_lengths: give a histogram or document_length (with "
            "document_length_spread), not both"
        )
    if hist is not None:
        return histogram(hist)
    if mean is None:
        if spread is not None:
            raise InputError(
                "document_length_spread: needs document_length, the mean it spreads around"
            )
        return None
    mu = parse_number(mean, "document_length")
    sigma = parse_number(spread, "document_length_spread") if spread is not None else 0
    if mu < 1:
        raise InputError(f"document_length: {_shown(mean)} must be at least 1 token")
    if sigma < 0:  # named apart: the mean may be fine
        raise InputError(f"document_length_spread: {_shown(spread)} must be at least 0 tokens")
    if mu + sigma > seq_len:
        raise InputError(
            f"document_length: mean {_shown(mean)} plus spread {_shown(spread or 0)} "
            f"exceeds seq_len {seq_len} (documents longer than a pack: give document_lengths, "
            "a histogram, whose long documents are cut into packs)"
        )
    return Documents.mean_spread(float(mu), float(sigma))


def _shown(value: object) -> str:
    """A value as the error line echoes it: text quoted as given (``'8k'``), a number as a user
    writes it (``8000``, not the :class:`Fraction` the option parsed it into)."""
    return shown_text(value) if isinstance(value, str) else shown_number(value)
