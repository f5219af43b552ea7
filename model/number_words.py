"""What a number that cannot be read is refused with (:func:`model.units.parse_number`, the one
grammar for numbers everywhere): a ``K``, ``M`` or ``G`` suffix read both ways for the user to
choose, and examples that fit the parameter (docs/concepts/conventions.md "Inputs and errors").
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import TYPE_CHECKING

from trainplan.model.errors import InputError

if TYPE_CHECKING:
    from trainplan.model.units import Limit

__all__ = [
    "AMBIGUOUS_SUFFIXES",
    "DECIMAL_COUNTS",
    "MAX_DIGITS",
    "check_length",
    "not_a_number",
    "number_examples",
]

AMBIGUOUS_SUFFIXES = {"K": 1, "M": 2, "G": 3}
"""Suffixes refused as ambiguous, with the power each raises its base to: ``8K`` is 8,000 to an
SI reader and 8,192 (8 × 1,024) to an ML engineer's context length, so the tool reads neither
silently and names both (``B`` and ``T``, billions and trillions of parameters or tokens, have
one reading and are accepted)."""

DECIMAL_COUNTS = frozenset({"params", "tokens", "tokens_per_second", "sequences"})
"""The counts whose ``K``, ``M`` and ``G`` are decimal (their :data:`model.units.LIMITS` key, by
any alias: ``--params``, the policy's and the reward model's, a token budget or a step's tokens,
a throughput, a count of sequences), as a model's size ("70M"), a token budget ("4M tokens") and
a count of sequences are written; a length in tokens (``--seq-len 8K``) has a binary reading too
and stays refused (:func:`model.units.parse_number`)."""

_SUPERSCRIPT = {1: "", 2: "²", 3: "³"}

MAX_DIGITS = 4000
"""The longest number text read, characters (digits, point, exponent): any number within
:data:`model.units.MAX_EXPONENT` is written in far fewer, and Python's ``int()`` refuses a text of
more than 4,300 digits (``sys.int_info.default_max_str_digits``) with a ``ValueError``."""


def check_length(name: str, shown: str, body: str) -> str:
    """``body``, a number's text (without separators), when at most :data:`MAX_DIGITS` long:
    refused before ``int()`` or ``Fraction()`` reads it; ``shown`` is the text as echoed.

    Raises
    ------
    InputError
        Naming ``name``, the text (shortened) and the rule.

    >>> check_length("dp", "'99…'", "9" * 5000)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: dp: '99…' is 5,000 characters long: a number is written ...
    """
    if len(body) > MAX_DIGITS:
        raise InputError(
            f"{name}: {shown} is {len(body):,} characters long: a number is written in at most "
            f"{MAX_DIGITS:,} (any number within ±1e300 takes far fewer)"
        )
    return body


def not_a_number(
    name: str,
    shown: str,
    body: str,
    number: re.Pattern[str],
    limit: Limit | None,
    whole: bool = False,
) -> str:
    """The refusal of text that is not a number: ``body`` (the text without digit separators) is
    a number with an ambiguous suffix, or not one at all; ``shown`` is the text as echoed.

    Examples
    --------
    >>> from trainplan.model.units import limit_for
    >>> num = re.compile(r"^\\d+(\\.\\d*)?$")
    >>> not_a_number("--seq-len", "'128K'", "128K", num, limit_for("--seq-len"))
    "--seq-len: '128K' is ambiguous: write 131072 (128 × 1,024) or 128000"
    >>> not_a_number("--gpus", "'abc'", "abc", num, limit_for("--gpus"))
    "--gpus: 'abc' is not a number (write a number of GPUs, e.g. 8192, 8,192 or 8.192e3)"
    """
    mantissa, suffix = body[:-1].strip(), body[-1:].upper()
    if suffix in AMBIGUOUS_SUFFIXES and number.match(mantissa):
        power = AMBIGUOUS_SUFFIXES[suffix]
        binary, decimal = (Fraction(mantissa) * base**power for base in (1024, 1000))
        return (
            f"{name}: {shown} is ambiguous: write {_plain(binary)} ({mantissa} × "
            f"1,024{_SUPERSCRIPT[power]}) or {_plain(decimal)}"
        )
    return f"{name}: {shown} is not a number (write {number_examples(limit, whole)})"


def number_examples(limit: Limit | None, whole: bool = False) -> str:
    """Ways to write a number that fit the parameter: the ``B``/``T`` suffixes only for sizes
    that reach billions (parameters, a token budget: a limit of 10^12 or more); a count's unit
    with counts; whole numbers for a count without a limit (``whole``: checkpointing's
    ``every``); plain numbers for anything else (a price, an efficiency).

    >>> number_examples(None)
    'e.g. 0.5, 4e6, 4000000 or 4,000,000'
    >>> number_examples(None, whole=True)
    'a whole number, e.g. 4, 16 or 4,000,000'
    """
    if limit is None:
        return (
            "a whole number, e.g. 4, 16 or 4,000,000"
            if whole
            else "e.g. 0.5, 4e6, 4000000 or 4,000,000"
        )
    if limit.maximum >= 10**12:
        return "e.g. 4e6, 4000000, 4,000,000, 70B or 1.5T"
    if limit.maximum >= 10**4:
        return f"a number of {limit.unit}, e.g. 8192, 8,192 or 8.192e3"
    return f"a number of {limit.unit}, e.g. 4 or 16"


def _plain(value: Fraction) -> str:
    """A number as the user can paste it back: digits only (``131072``, ``0.3``)."""
    return str(value.numerator) if value.denominator == 1 else repr(float(value))
