"""Units, number parsing and exact-arithmetic helpers.

Conventions (SPEC.md "Units and conventions"): GB = 10**9 bytes, TB = 10**12 bytes, GiB = 2**30
bytes (only where a vendor states capacity in GiB). Time in seconds, bandwidth in bytes/s per GPU
per direction. Counts are ``int``; exact rationals are :class:`fractions.Fraction`.
"""

from __future__ import annotations

import difflib
import re
from fractions import Fraction

from trainplan.model.errors import InputError

__all__ = [
    "GB",
    "TB",
    "GIB",
    "parse_number",
    "parse_count",
    "exact_div",
    "as_json_number",
    "closest_names",
]

GB = 10**9
TB = 10**12
GIB = 2**30

_SUFFIX = {"B": 10**9, "T": 10**12}
"""Size suffixes (SPEC.md "Inputs"): 70B, 1.5T. K and M are refused: to an ML engineer "8K"
means 8192 tokens, so a silent 8000 would be a wrong figure."""
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$", re.IGNORECASE)


def parse_number(text: str | float | int, name: str = "value") -> Fraction:
    """Read a number as the seed writes it, exactly.

    Accepts ``4e6``, ``4000000``, ``4,000,000``, ``4e+6``, ``4e 6`` (a URL's ``+`` read back as a
    space) and the size suffixes ``B`` and ``T`` (``70B`` = 70·10^9, ``1.5T`` = 1.5·10^12).

    Returns
    -------
    Fraction
        The exact value (``4e6`` → ``Fraction(4000000)``).

    Raises
    ------
    InputError
        Naming ``name`` and the text when it is not a number.

    Examples
    --------
    >>> parse_number("4e 6") == 4_000_000
    True
    >>> parse_number("1.5T") == 1_500_000_000_000
    True
    """
    if isinstance(text, bool):
        raise InputError(f"{name}: {text!r} is not a number")
    if isinstance(text, (int, Fraction)):
        return Fraction(text)
    if isinstance(text, float):
        return Fraction(repr(text))
    raw = str(text).strip()
    s = raw.replace(",", "").replace("_", "")
    s = re.sub(r"(?i)e\s+(\d)", r"e+\1", s)  # "4e 6": the '+' of a URL read back as a space
    scale = 1
    if s and s[-1].upper() in _SUFFIX and not s[-1].isdigit():
        scale = _SUFFIX[s[-1].upper()]
        s = s[:-1].strip()
    if not _NUMBER.match(s):
        raise InputError(
            f"{name}: {raw!r} is not a number (write e.g. 4e6, 4000000, 4,000,000, 70B or 1.5T)"
        )
    mantissa, _, exponent = s.lower().partition("e")
    value = Fraction(mantissa) * scale
    if exponent:
        value *= Fraction(10) ** int(exponent)
    return value


def parse_count(text: str | float | int, name: str = "value", minimum: int = 1) -> int:
    """Read a whole number (``4e6``, ``70B``…) that must be at least ``minimum``.

    Raises
    ------
    InputError
        When the text is not a number, not whole, or below ``minimum``.

    Examples
    --------
    >>> parse_count("4,000,000", "tokens")
    4000000
    """
    value = parse_number(text, name)
    if value.denominator != 1:
        raise InputError(f"{name}: {text!r} must be a whole number")
    if value < minimum:
        raise InputError(f"{name}: {text!r} must be at least {minimum}")
    return int(value)


def exact_div(numerator: int, denominator: int, what: str) -> int:
    """``numerator / denominator`` when it is whole; else an error that says ``what`` failed.

    Raises
    ------
    InputError
        When the division leaves a remainder.

    Examples
    --------
    >>> exact_div(2048, 128, "global_batch_size / dp")
    16
    """
    if denominator <= 0 or numerator % denominator:
        raise InputError(f"{what}: {numerator} is not divisible by {denominator}")
    return numerator // denominator


def as_json_number(value: Fraction | int | float) -> int | float:
    """An exact value for JSON: an ``int`` when whole, else the nearest ``float``.

    Examples
    --------
    >>> as_json_number(Fraction(293125000000))
    293125000000
    >>> as_json_number(Fraction(3, 11))
    0.2727272727272727
    """
    if isinstance(value, Fraction):
        return int(value) if value.denominator == 1 else float(value)
    return value


def closest_names(name: str, names: list[str]) -> str:
    """A hint with the closest known names, for "unknown model/GPU" errors.

    Examples
    --------
    >>> closest_names("h100", ["H100-SXM", "H100-PCIe", "A100-80GB"])
    'did you mean H100-SXM, H100-PCIe, A100-80GB?'
    """
    lowered = {n.lower(): n for n in names}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.4)
    hits += [n for low, n in lowered.items() if name.lower() in low and n not in hits]
    hits = [lowered.get(h, h) for h in hits][:3]
    if not hits:
        return "known: " + ", ".join(sorted(names))
    return "did you mean " + ", ".join(dict.fromkeys(hits)) + "?"
