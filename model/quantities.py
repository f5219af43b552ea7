"""Percents and units in a number's text (:func:`model.units.parse_number`, the one grammar for
numbers everywhere): ``40%`` on a fraction parameter, ``2TB`` on a parameter whose unit is in its
name (``host_memory_gb``), read by the parameter's name (docs/guides/cli.md "Numbers").

Units (docs/concepts/conventions.md "Units and symbols"): GB, TB and PB are decimal (10^9, 10^12,
10^15 bytes: the SI prefixes, SI Brochure 9th ed. §3.1, as vendors state HBM and host memory),
GiB and TiB binary (2^30, 2^40 bytes: the binary prefixes of IEC 80000-13); a bandwidth in bytes
per second (``GB/s``) or in bits (``Gb/s``, ÷ 8: NICs are sold in Gb/s, NVIDIA ConnectX-7
400 Gb/s = 50 GB/s); a time in s, ms, us, min or h; a FLOP rate in GFLOP/s, TFLOP/s, PFLOP/s
(TFLOPS, as datasheets write it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from trainplan.model.errors import InputError

__all__ = ["FRACTIONS", "FRACTION_RULE", "is_fraction", "unit_of", "read_quantity"]

FRACTION_RULE = "a fraction from 0 to 1, or a percent such as 40%"
"""How a fraction parameter is written, as every refusal of one says."""

FRACTIONS = frozenset(
    {
        "train_mfu",
        "decode_mfu",
        "min_mfu",
        "headroom",
        "kernel_efficiency",
        "attention_efficiency",
        "gemm_efficiency",
        "hbm_efficiency",
        "scaleout_efficiency",
        "scaleup_efficiency",
        "bandwidth_efficiency",
        "engine_memory_fraction",
        "offload_optimizer",
        "overlap",
    }
)
"""The parameters that are a share from 0 to 1 (an MFU, an efficiency, a memory share, an
overlap per axis ``overlap.dp``), by their name without dashes: ``40%`` reads as 0.40 there."""


@dataclass(frozen=True, slots=True)
class _Unit:
    kind: str
    """What it measures, as a refusal says it (``a size in bytes``)."""
    scale: Fraction
    """The unit in the kind's base unit (bytes, bytes/s, s, FLOP/s)."""


_BYTES, _RATE, _TIME, _FLOPS = "a size in bytes", "a bandwidth", "a time", "a FLOP rate"
_UNITS: dict[str, _Unit] = {
    **{
        f"{p}B": _Unit(_BYTES, Fraction(10) ** (3 * i))
        for i, p in enumerate(("K", "M", "G", "T", "P"), 1)
    },
    **{
        f"{p}iB": _Unit(_BYTES, Fraction(2) ** (10 * i))
        for i, p in enumerate(("K", "M", "G", "T", "P"), 1)
    },
    **{
        f"{p}B/s": _Unit(_RATE, Fraction(10) ** (3 * i))
        for i, p in enumerate(("K", "M", "G", "T"), 1)
    },
    **{
        f"{p}b/s": _Unit(_RATE, Fraction(10) ** (3 * i) / 8)
        for i, p in enumerate(("K", "M", "G", "T"), 1)
    },
    **{
        f"{p}bit/s": _Unit(_RATE, Fraction(10) ** (3 * i) / 8)
        for i, p in enumerate(("K", "M", "G", "T"), 1)
    },
    **{
        f"{p}FLOP/s": _Unit(_FLOPS, Fraction(10) ** (3 * i))
        for i, p in enumerate(("G", "T", "P", "E"), 3)
    },
    **{
        f"{p}FLOPS": _Unit(_FLOPS, Fraction(10) ** (3 * i))
        for i, p in enumerate(("G", "T", "P", "E"), 3)
    },
    "s": _Unit(_TIME, Fraction(1)),
    "sec": _Unit(_TIME, Fraction(1)),
    "ms": _Unit(_TIME, Fraction(1, 1000)),
    "us": _Unit(_TIME, Fraction(1, 10**6)),
    "µs": _Unit(_TIME, Fraction(1, 10**6)),  # U+00B5 MICRO SIGN
    "μs": _Unit(_TIME, Fraction(1, 10**6)),  # U+03BC GREEK SMALL LETTER MU
    "min": _Unit(_TIME, Fraction(60)),
    "h": _Unit(_TIME, Fraction(3600)),
}
"""Every unit word read, by its spelling; a byte unit (``B``) and a bit unit (``b``) differ by
case only (``Gb/s`` is gigabits), so a word is first looked up as written, then any case where
that has one reading (``2tb``, ``2tib``); ``400gb/s`` is ambiguous and refused, a capital prefix
before a lowercase ``b`` (``8Gb``) is bits and refused on a size in bytes, and a time's unit is
read only as written (``7MS`` is refused: SI writes ms, and Ms would be megaseconds)."""
_FOLDED: dict[str, list[str]] = {}
for _word in _UNITS:
    _FOLDED.setdefault(_word.lower(), []).append(_word)

_AMBIGUOUS_RATES = {f"{p}bps": f"{p}b/s" for p in ("K", "M", "G", "T")}
"""``Gbps``: gigabits to a network engineer, GB/s in this tool's parameter names (``nvlink_gbps``);
refused naming both readings."""

_NAMED = {
    "gb": ("GB", _UNITS["GB"]),
    "gib": ("GiB", _UNITS["GiB"]),
    "tb": ("TB", _UNITS["TB"]),
    "gbps": ("GB/s", _UNITS["GB/s"]),
    "tbps": ("TB/s", _UNITS["TB/s"]),
    "tflops": ("TFLOP/s", _UNITS["TFLOP/s"]),
    "pflops": ("PFLOP/s", _UNITS["PFLOP/s"]),
    "ms": ("ms", _UNITS["ms"]),
    "s": ("s", _UNITS["s"]),
    "seconds": ("s", _UNITS["s"]),
}
"""A parameter's unit by the last word of its name (``host_memory_gb``: GB; ``step_seconds``: s;
``memory_reserve_gib``: GiB; ``nvlink_gbps``: GB/s per GPU per direction)."""

_UNNAMED = {"time_limit": "s", "delay": "s"}
"""The parameters in seconds whose name does not end in their unit: a search's wall-clock limit
(``--time-limit``, CP-SAT's ``max_time_in_seconds``) and the checkpointing animation's seconds
per frame (``--delay``); read as :data:`_NAMED`'s word (``--time-limit 2min`` is 120 s)."""

_EXAMPLES = {
    _BYTES: "2000, 2TB or 64GiB; TB and GB are decimal, TiB and GiB binary",
    _RATE: "400, 400GB/s or 400Gb/s (bits: 50 GB/s)",
    _TIME: "2.5, 2.5s or 2500ms",
    _FLOPS: "989, 989TFLOPS or 0.989PFLOP/s",
}

_BITS = re.compile(r"^([KMGTP])(i?)b$")
"""A size in bits (``8Gb``, ``8Gib``: gigabits): a capital prefix then a lowercase ``b``."""
_COUNT_SUFFIXES = "BTKMG"
"""The letters the plain number grammar reads as a count's suffix (``70B``, ``8K``)."""

_TAIL = re.compile(r"^(.*?[\d.])\s*([A-Za-zµμ%/]+)$")
"""A number and the word after it (``2TB``, ``2 TB``, ``40%``, ``400Gb/s``)."""


def _key(name: str) -> str:
    """``--host-memory-gb`` → ``host_memory_gb``; ``overlap.dp`` → ``overlap``;
    ``cluster.nvlink_gbps`` → ``nvlink_gbps``."""
    parts = name.lstrip("-").replace("-", "_").strip().lower().split(".")
    return "overlap" if "overlap" in parts[:-1] else parts[-1]


def is_fraction(name: str) -> bool:
    """Whether parameter ``name`` (any spelling) is a share from 0 to 1 (:data:`FRACTIONS`).

    >>> is_fraction("--train-mfu"), is_fraction("overlap.dp"), is_fraction("--gpus")
    (True, True, False)
    """
    return _key(name.split()[0] if name.strip() else name) in FRACTIONS


def _named(name: str) -> tuple[str, _Unit] | None:
    """The unit a parameter's name ends in (a rate ``per_gpu`` aside:
    ``achieved_tflops_per_gpu``), or None."""
    key = _key(name.split()[0] if name.strip() else name).removesuffix("_per_gpu")
    if key in _UNNAMED:
        return _NAMED[_UNNAMED[key]]
    head, sep, word = key.rpartition("_")
    return _NAMED.get(word) if sep and head else None


def unit_of(name: str) -> tuple[str, str] | None:
    """(the unit's symbol, what it measures) of a parameter whose unit is its name's last word;
    None for any other.

    >>> unit_of("--host-memory-gb"), unit_of("memory_reserve_gib"), unit_of("--gpus")
    (('GB', 'a size in bytes'), ('GiB', 'a size in bytes'), None)
    """
    named = _named(name)
    return None if named is None else (named[0], named[1].kind)


def read_quantity(
    body: str, name: str, shown: str, whole: bool = False
) -> tuple[str, Fraction] | None:
    """(the number's text, the factor it is multiplied by) of ``body`` (a number's text without
    digit separators) when it ends in a percent or a unit word that parameter ``name`` reads;
    None when it ends in neither (the caller reads it as a plain number, ``B``/``T`` suffixes
    included). ``shown``: the text as a refusal echoes it; ``whole``: the value is a count.

    Raises
    ------
    InputError
        A percent on a parameter that is no fraction; a unit of another kind than the
        parameter's (``--host-memory-gb: '2ms' is a time; …``), an unknown or ambiguous unit
        word on a parameter whose name gives its unit, a count's suffix there (``2T`` on
        ``--host-memory-gb``), bits on a size (``8Gb``), a time's unit in another case than
        its own (``7MS``), any unit on a parameter whose name gives none (``--gpus 8GB``).

    Examples
    --------
    >>> read_quantity("40%", "--train-mfu", "'40%'")
    ('40', Fraction(1, 100))
    >>> read_quantity("2TB", "--host-memory-gb", "'2TB'")
    ('2', Fraction(1000, 1))
    >>> read_quantity("64GiB", "memory_reserve_gib", "'64GiB'"), read_quantity("70B", "--params", "")
    (('64', Fraction(1, 1)), None)
    >>> read_quantity("2ms", "--host-memory-gb", "'2ms'")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: --host-memory-gb: '2ms' is a time, not a size in bytes (given in GB): write ...
    """
    match = _TAIL.match(body.strip())
    if match is None:
        return None
    number, word = match.group(1).strip(), match.group(2)
    if word == "%":
        return number, _percent(name, shown)
    if unit_of(name) is None:
        _refuse_unit_on_plain(word, name, shown, whole)
        return None
    return number, _unit_scale(word, name, shown, number)


def _percent(name: str, shown: str) -> Fraction:
    """What a percent multiplies by on parameter ``name``: 1/100 on a fraction, 1 on a
    parameter given in percent (``recomputed_flops_pct``); refused elsewhere."""
    if _key(name).endswith("_pct"):  # a parameter given in percent: 25% is 25
        return Fraction(1)
    if is_fraction(name):
        return Fraction(1, 100)
    raise InputError(
        f"{name}: {shown} is a percent, and the value is no fraction (0 to 1); write a "
        "number" + _in_unit(name)
    )


def _lookup(word: str, name: str, shown: str, number: str) -> _Unit | None:
    """The unit ``word`` is (as written, else the one unit of its letters in any case); None
    for no unit.

    Raises
    ------
    InputError
        A rate written ``gb/s`` or ``Gbps`` (bits or bytes), bits on a size (``8Gb``), a time's
        unit in another case than its own (``7MS``)."""
    folded = _FOLDED.get(word.lower(), [])
    if word in _AMBIGUOUS_RATES or word.lower() in {w.lower() for w in _AMBIGUOUS_RATES}:
        _ambiguous(name, shown, number, word[0].upper() + "b/s")
    bits_size = _BITS.match(word)
    if bits_size:
        prefix, binary = bits_size.group(1), bits_size.group(2)
        raise InputError(
            f"{name}: {shown} is {'binary ' if binary else ''}bits (a lowercase b is a bit): "
            f"write bytes, {number}{prefix}B or {number}{prefix}iB{_in_unit(name, ', the value is in ')}"
        )
    found = _UNITS.get(word)
    if found is None and len(folded) > 1:  # gb/s: Gb/s or GB/s
        _ambiguous(name, shown, number, next(w for w in folded if "b/s" in w))
    if found is None and len(folded) == 1:
        found = _UNITS[folded[0]]
        if found.kind == _TIME:
            raise InputError(
                f"{name}: {shown}: a time's unit is written in its own case (s, ms, us or µs, "
                f"min, h): write {number}{folded[0]}"
            )
    return found


def _ambiguous(name: str, shown: str, number: str, bits: str) -> None:
    """Refuse a rate that reads as bits or bytes, naming both (``bits``: ``Gb/s``)."""
    raise InputError(
        f"{name}: {shown} is ambiguous: write {number}{bits} (bits) or {number}{bits[:-3]}B/s "
        f"(bytes){_in_unit(name, '; the value is in ')}"
    )


def _refuse_unit_on_plain(word: str, name: str, shown: str, whole: bool) -> None:
    """Refuse a unit (``8GB``, ``8KB``, ``7ms``) on parameter ``name``, whose name gives no
    unit; a count's suffix (``70B``, ``8K``) is left to the plain number grammar. A share
    (:func:`is_fraction`: ``headroom``) is told its own form, a fraction or a percent.

    >>> _refuse_unit_on_plain("GB", "headroom", "'10GB'", False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: headroom: '10GB' is a size in bytes, not a plain number: ...
    """
    if len(word) == 1 and word.upper() in _COUNT_SUFFIXES:
        return
    found = _lookup(word, name, shown, "")
    if found is not None:
        what = "a count" if whole else "a plain number"
        alone = FRACTION_RULE if is_fraction(name) else "the number alone"  # headroom 10GB
        raise InputError(f"{name}: {shown} is {found.kind}, not {what}: write {alone}")


def _unit_scale(word: str, name: str, shown: str, number: str) -> Fraction:
    """What unit ``word`` multiplies by on parameter ``name``, whose name gives its unit (the
    word's unit over the parameter's)."""
    symbol, kind = unit_of(name)  # type: ignore[misc]  # the caller checked it is not None
    own = _named(name)[1]  # type: ignore[index]  # unit_of(name) is not None
    if len(word) == 1 and word.upper() in _COUNT_SUFFIXES:  # 2T: trillions, not terabytes
        raise InputError(_count_suffix(word.upper(), name, shown, number, own))
    found = _lookup(word, name, shown, number)
    if found is None:
        raise InputError(
            f"{name}: {shown}: {word!r} is no unit of {kind[2:]}; the value is {kind}, in "
            f"{symbol} (write e.g. {_EXAMPLES[kind]})"
        )
    if found.kind != kind:
        raise InputError(
            f"{name}: {shown} is {found.kind}, not {kind} (given in {symbol}): write e.g. "
            f"{_EXAMPLES[kind]}"
        )
    return found.scale / own.scale


_BASE = {_BYTES: "B", _RATE: "B/s", _FLOPS: "FLOP/s"}
"""A kind's base unit, after a prefix (``T`` + ``B``: TB)."""


def _count_suffix(letter: str, name: str, shown: str, number: str, own: _Unit) -> str:
    """The refusal of a count's suffix (``2T``) on a parameter whose name gives its unit: the
    unit the user likely meant (2TB; a time's ``2m``: 2min) and the plain number in the
    parameter's unit.

    >>> _count_suffix("M", "time_limit", "'2m'", "2", _UNITS["s"])
    "time_limit: '2m' is a count suffix, not a unit: write 2min (120 s) or 120"
    """
    symbol, kind = unit_of(name)  # type: ignore[misc]  # the caller checked it is not None
    head = f"{name}: {shown} is a count suffix, not a unit: write "
    suffix = f"{letter}{_BASE.get(kind, '?')}"
    if kind == _TIME and letter == "M":  # 2m: minutes, which the grammar writes min
        suffix = "min"
    meant = _UNITS.get(suffix)
    try:
        value = Fraction(number)
    except ValueError:
        value = None
    if meant is None or meant.kind != kind or value is None:
        return f"{head}e.g. {_EXAMPLES[kind]} (the value is in {symbol})"
    plain = value * meant.scale / own.scale
    digits = str(plain.numerator) if plain.denominator == 1 else f"{float(plain):g}"
    shown_value = f"{plain.numerator:,}" if plain.denominator == 1 else digits
    return f"{head}{number}{suffix} ({shown_value} {symbol}) or {digits}"


def _in_unit(name: str, lead: str = " in ") -> str:
    """`` in GB`` where the parameter's name gives its unit, else nothing."""
    unit = unit_of(name)
    return f"{lead}{unit[0]}" if unit else ""
