"""Units, number parsing and exact-arithmetic helpers.

Conventions (docs/concepts/conventions.md "Units and symbols"): GB = 10**9 bytes, TB = 10**12 bytes, GiB = 2**30
bytes (only where a vendor states capacity in GiB). Time in seconds, bandwidth in bytes/s per GPU
per direction. Counts are ``int``; exact rationals are :class:`fractions.Fraction`.
"""

from __future__ import annotations

import difflib
import re
from fractions import Fraction

from trainplan.model.errors import InputError
from trainplan.model.limits import LIMITS, Limit, floor_for, limit_for, limit_key
from trainplan.model.number_words import (
    AMBIGUOUS_SUFFIXES,
    DECIMAL_COUNTS,
    check_length,
    not_a_number,
)
from trainplan.model.quantities import read_quantity

__all__ = [
    "GB",
    "TB",
    "GIB",
    "MAX_EXPONENT",
    "Limit",
    "LIMITS",
    "limit_for",
    "check_limit",
    "parse_number",
    "parse_count",
    "parse_positive",
    "exact_div",
    "as_json_number",
    "closest_names",
    "close_names",
    "shown_number",
    "shown_text",
    "list_items",
    "parse_counts",
    "LIST_SEPARATOR",
    "LIST_HINT",
]

GB = 10**9
TB = 10**12
GIB = 2**30

_SUFFIX = {"B": 10**9, "T": 10**12}
"""Size suffixes (docs/concepts/conventions.md "Inputs and errors"): 70B, 1.5T. K, M and G are
refused, naming both readings (:data:`model.number_words.AMBIGUOUS_SUFFIXES`): to an ML engineer
"8K" means 8192 tokens, so a silent 8000 would be a wrong figure — except for the counts whose
suffixes have one reading (:data:`model.number_words.DECIMAL_COUNTS`)."""
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$", re.IGNORECASE)
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+")
"""A whole part grouped by commas in threes: the only comma a number may hold."""
_LISTY = re.compile(r"\d{4,},|,\d{4,}")
"""Commas that look like a list's (``2048,4096``, ``64,128,2``): the refusal then says how lists
are written."""
LIST_SEPARATOR = ";"
"""Separates the items of one value of a list parameter (``64;128``): never a comma, which
only groups thousands (``16,384`` is one number)."""
LIST_HINT = "for several values repeat the option, or put ';' between them (64;128)"
"""How a list of numbers is written, everywhere: the option repeated (``--gpus 64 --gpus 128``),
a TOML array (``[64, 128]``), a repeated query key (``gpus=64&gpus=128``), or one value with
:data:`LIST_SEPARATOR` between the items (``64;128``)."""

MAX_EXPONENT = 300
"""Every number read lies within ±10^300 and is 0 or at least 10^-300 in size: beyond that a float
(IEEE double, ≈ 1.8·10^308) overflows or underflows when the figure is printed, and ``1e999999``
would take seconds to expand exactly. :func:`parse_number` refuses the rest."""


def check_limit(
    name: str, value: Fraction | int, text: object = None, limit: Limit | None = None
) -> None:
    """Refuse a size or count above ``limit`` (a :class:`Limit`), else its :data:`LIMITS` entry
    (nothing happens for a parameter without one).

    Raises
    ------
    InputError
        ``seq_len: 1e26 is above the limit of 16,777,216 tokens (2^24 …)``, naming the parameter,
        the value as written (``text``; plain digits grouped, ``4,000``, as every refusal
        echoes a number) and the limit with its reason.

    Examples
    --------
    >>> check_limit("--seq-len", 8192)
    >>> check_limit("--seq-len", 10**26, "1e26")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: --seq-len: 1e26 is above the limit of 16,777,216 tokens (2^24 ...)
    >>> check_limit("--seq-len", 20000000, "20000000")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: --seq-len: 20,000,000 is above the limit of 16,777,216 ...
    """
    limit = limit or limit_for(name)
    if limit is None or value <= limit.maximum:
        return
    if text is not None and not str(text).strip().isdigit():  # 1e26, 16Ki: as written
        shown = str(text)
    else:  # plain digits in the one number form of every refusal (4000 → 4,000)
        shown = shown_number(value) if value < 10**15 else f"{float(value):.3g}"
    raise InputError(
        f"{name}: {shown} is above the limit of {limit.maximum:,} {limit.unit} ({limit.why})"
    )


def parse_number(
    text: str | float | int | Fraction, name: str = "value", whole: bool = False
) -> Fraction:
    """Read a number as the command line, the page's links and scenario files write it, exactly.

    Accepts ``4e6``, ``4000000``, ``4,000,000``, ``4e+6``, ``4e 6`` (a URL's ``+`` read back as a
    space) and the size suffixes ``B`` and ``T`` (``70B`` = 70·10^9, ``1.5T`` = 1.5·10^12); ``K``,
    ``M`` and ``G`` as 10^3, 10^6 and 10^9 for the counts of
    :data:`model.number_words.DECIMAL_COUNTS` only (``--params 70M``), ambiguous elsewhere.
    ``whole`` (a count's reading, :func:`parse_count`): a refusal's examples are whole numbers.
    Returns the exact value as a :class:`Fraction` (``4e6`` → ``Fraction(4000000)``).

    Raises
    ------
    InputError
        Naming ``name`` and the text when it is not a number, or when it is out of range: not 0
        and outside [10^-300, 10^300] in size (:data:`MAX_EXPONENT`).

    Examples
    --------
    >>> parse_number("4e 6") == 4_000_000, parse_number("1.5T") == 1_500_000_000_000
    (True, True)
    >>> parse_number("70M", "--params"), parse_number("8K", "policy_params")
    (Fraction(70000000, 1), Fraction(8000, 1))
    """
    if isinstance(text, bool):
        raise InputError(f"{name}: {text!r} is not a number")
    if text is None:
        raise InputError(f"{name}: missing (no value given, and it has no default)")
    if isinstance(text, (int, Fraction)):
        return _in_range(Fraction(text), name, text)
    if isinstance(text, float):
        text = repr(text)  # inf and nan fail the pattern below
    raw = str(text).strip()
    if not raw:  # as a list parameter's empty value (list_items): one refusal for both
        raise InputError(f"{name}: {shown_text(text)} is empty; give a value")
    s = _without_separators(raw, name)
    s = re.sub(r"(?i)e\s+(\d)", r"e+\1", s)  # "4e 6": the '+' of a URL read back as a space
    scale: Fraction | int = 1
    quantity = read_quantity(s, name, shown_text(raw), whole)  # 40% on a fraction, 2TB: GB
    if quantity is not None:
        s, scale = quantity
    elif s and s[-1].upper() in _SUFFIX and not s[-1].isdigit():
        scale = _SUFFIX[s[-1].upper()]
        s = s[:-1].strip()
    elif s[-1:].upper() in AMBIGUOUS_SUFFIXES and limit_key(name) in DECIMAL_COUNTS:
        scale = 1000 ** AMBIGUOUS_SUFFIXES[s[-1].upper()]
        s = s[:-1].strip()
    if not _NUMBER.match(s):
        raise InputError(not_a_number(name, shown_text(raw), s, _NUMBER, limit_for(name), whole))
    mantissa, _, exponent = check_length(name, shown_text(raw), s).lower().partition("e")
    value = Fraction(mantissa) * scale
    if exponent:
        if abs(int(exponent)) > 2 * MAX_EXPONENT:  # refused before 10**exponent is expanded
            return _in_range(Fraction(10) ** (2 * MAX_EXPONENT + 1), name, raw)
        value *= Fraction(10) ** int(exponent)
    return _in_range(value, name, raw)


def _without_separators(raw: str, name: str) -> str:
    """``raw`` without its digit-group separators: commas that group the whole part in threes
    (``16,384``, ``4,000,000``) and underscores between digits (``4_000_000``).

    Raises
    ------
    InputError
        Any other comma (``4,0``, ``1,00``, ``16,38``, ``2048,4096``, ``1.000,5``): it could be a
        decimal comma, a list or a typo, and a number read wrongly is worse than a refusal.
    """
    s = re.sub(r"(?<=\d)_(?=\d)", "", raw)
    if "," not in s:
        return s
    grouped = _THOUSANDS.match(s)
    rest = s[grouped.end() :] if grouped else ""
    if grouped is None or "," in rest or rest[:1].isdigit():
        raise InputError(
            f"{name}: {shown_text(raw)} is not a number: a comma only separates thousands, in "
            "groups of three digits (16,384 or 4,000,000); the decimal point is '.'"
            + (f"; {LIST_HINT}" if _LISTY.search(s) else "")
        )
    return grouped.group().replace(",", "") + rest


def _in_range(value: Fraction, name: str, text: object) -> Fraction:
    """``value`` when it is 0 or within [10^-MAX_EXPONENT, 10^MAX_EXPONENT] in size."""
    if value and not Fraction(1, 10**MAX_EXPONENT) <= abs(value) <= 10**MAX_EXPONENT:
        shown = repr(text) if isinstance(text, str) and len(text) <= 40 else "the value given"
        raise InputError(
            f"{name}: {shown} is out of range: a number is 0 or between 1e-{MAX_EXPONENT} and "
            f"1e{MAX_EXPONENT} in size (beyond, a float cannot hold it)"
        )
    return value


def parse_count(text: str | float | int | Fraction, name: str = "value", minimum: int = 1) -> int:
    """Read a whole number (``4e6``, ``70B``…) that must be at least ``minimum`` and its
    :data:`~trainplan.model.limits.FLOORS` entry, if it has one (a model size: ``70`` for ``70B``),
    and at most the parameter's :data:`LIMITS` entry (found by ``name``, see :func:`limit_for`).

    Raises
    ------
    InputError
        When the text is not a number, not whole, below ``minimum`` or the floor, or above
        the limit.

    Examples
    --------
    >>> parse_count("4,000,000", "tokens")
    4000000
    """
    value = parse_number(text, name, whole=True)
    given = repr(text) if isinstance(text, str) else shown_number(text)
    if value.denominator != 1:
        raise InputError(f"{name}: {given} must be a whole number")
    if value < minimum:
        raise InputError(f"{name}: {given} must be at least {minimum}")
    floor = floor_for(name)
    if floor is not None and value < floor.minimum:
        raise InputError(
            f"{name}: {shown_number(value)} {floor.unit} is below the floor of "
            f"{floor.minimum:,} ({floor.why})"
        )
    check_limit(name, value, text if isinstance(text, str) else None)
    return int(value)


def parse_positive(text: str | float | int | Fraction, name: str = "value") -> Fraction:
    """Read a number that must be above zero (a duration, a rate, a peak) and at most the
    parameter's :data:`LIMITS` entry, if it has one.

    Raises
    ------
    InputError
        When the text is not a number, is zero or negative, or is above the limit.

    Examples
    --------
    >>> parse_positive("0.6", "delay")
    Fraction(3, 5)
    """
    value = parse_number(text, name)
    if value <= 0:
        raise InputError(f"{name}: {text} must be positive")
    check_limit(name, value, text if isinstance(text, str) else None)
    return value


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


def shown_number(value: object) -> str:
    """A number as refusals echo it: whole, thousands grouped (``1e3``: ``1,000``); else shortest.

    >>> shown_number(Fraction(3, 2)), shown_number(Fraction(-7 * 10**9)), shown_number(1e3), shown_number("x")
    ('1.5', '-7,000,000,000', '1,000', 'x')
    """
    if isinstance(value, float) and not value.is_integer():
        return repr(value)
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        return str(value)
    return f"{int(value):,}" if value == int(value) else f"{float(value):g}"


def closest_names(name: str, names: list[str]) -> str:
    """A hint with the closest known names, for "unknown model/GPU" errors.

    Examples
    --------
    >>> closest_names("h100", ["H100-SXM", "H100-PCIe", "A100-80GB"])
    'did you mean H100-SXM, H100-PCIe, A100-80GB?'
    """
    hits = close_names(name, names)
    if not hits:
        return "known: " + ", ".join(sorted(names))
    return "did you mean " + ", ".join(hits) + "?"


def close_names(name: str, names: list[str]) -> list[str]:
    """Up to three of ``names`` close to ``name``, closest first, case aside (difflib's
    ratio ≥ 0.4, then those that hold ``name``); empty when none is.

    Examples
    --------
    >>> close_names("llama3-405", ["one-gpu-70b", "llama3-405b", "llama3-405b-128k"])
    ['llama3-405b', 'llama3-405b-128k']
    >>> close_names("nope", ["one-gpu-70b", "llama3-405b"])
    []
    """
    lowered = {n.lower(): n for n in names}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.4)
    hits += [n for low, n in lowered.items() if name.lower() in low and n not in hits]
    return list(dict.fromkeys(lowered.get(h, h) for h in hits))[:3]


MAX_SHOWN = 80
"""Characters of a value an error line or a note echoes (a pasted 100,000-character value is cut,
with its length said)."""


def shown_text(value: object, limit: int = MAX_SHOWN) -> str:
    """A value as an error line or a note echoes it: its ``repr``, cut to ``limit`` characters
    with the length of the whole.

    >>> shown_text("4,0"), shown_text("x" * 100_000, 8)
    ("'4,0'", "'xxxxxx… (100,002 characters)")
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… ({len(text):,} characters)"


def list_items(value: object, name: str) -> list[object]:
    """The items of a list parameter's value, in order, each once: a list or tuple (a TOML array,
    an option given several times, a repeated query key), each text item split at
    :data:`LIST_SEPARATOR` (``"64;128"``). A comma never separates items (``16,384`` is one
    number, :func:`parse_number`).

    Raises
    ------
    InputError
        An empty list or an empty item (``tp = []``, ``"64;"``): a list without values would
        silently mean "every value".

    >>> list_items(["64;128", 64, "16,384"], "gpus")
    ['64', '128', 64, '16,384']
    """
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    out: list[object] = []
    for item in values:
        if isinstance(item, str):
            parts = [part.strip() for part in item.split(LIST_SEPARATOR)]
            if not all(parts):
                raise InputError(
                    f"{name}: {shown_text(item)} "
                    + ("is empty; give a value" if not item.strip() else "has an empty item")
                )
            out += parts
        elif item is None:
            raise InputError(f"{name}: an empty value; give a number")
        else:
            out.append(item)
    if not out:
        raise InputError(
            f"{name}: {value!r} is an empty list; give at least one value, or leave {name} out "
            "for the default"
        )
    return list(dict.fromkeys(out))


def parse_counts(value: object, name: str, ranges: bool = False) -> list[int]:
    """Whole numbers >= 1 (:func:`parse_count`) from a list parameter's value
    (:func:`list_items`), ascending, each once. With ``ranges``, an item ``lo..hi`` stands for the
    powers of two and 1.5× powers of two inside it — the sizes clusters and batches come in.

    Raises
    ------
    InputError
        An item that is not a count, an empty list or item, an empty range.

    Examples
    --------
    >>> parse_counts("64..512", "gpus", ranges=True)
    [64, 96, 128, 192, 256, 384, 512]
    >>> parse_counts(["16,384", "2048;4096"], "gpus")
    [2048, 4096, 16384]
    >>> parse_counts("8..0x", "gpus", ranges=True)
    Traceback (most recent call last):
    trainplan.model.errors.InputError: gpus: range '8..0x': '0x' is not a number (write a number ...)
    """
    counts: set[int] = set()
    for item in list_items(value, name):
        if ranges and isinstance(item, str) and ".." in item:
            counts.update(_range(item, name))
        else:
            counts.add(parse_count(item, name))  # type: ignore[arg-type]
    return sorted(counts)


def _range(text: str, name: str) -> list[int]:
    lo_text, _, hi_text = text.partition("..")
    if not lo_text.strip() or not hi_text.strip():
        raise InputError(f"{name}: range {text!r} needs both ends, e.g. 1024..16384")
    try:
        lo, hi = parse_count(lo_text, name), parse_count(hi_text, name)
    except InputError as err:  # the range as typed, then the end's rule
        raise InputError(f"{name}: range {text!r}: {str(err).removeprefix(name + ': ')}") from None
    if lo > hi:
        raise InputError(f"{name}: range {text!r} is empty (low end above high end)")
    out, p = [], 1
    while p <= hi:
        out += [c for c in (p, 3 * p // 2 if p >= 2 else 0) if lo <= c <= hi]
        p *= 2
    if not out:
        raise InputError(f"{name}: no power of two (or 1.5×) in {text!r}")
    return out
