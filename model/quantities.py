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
    "µs": _Unit(_TIME, Fraction(1, 10**6)),
    "min": _Unit(_TIME, Fraction(60)),
    "h": _Unit(_TIME, Fraction(3600)),
}
"""Every unit word read, by its spelling; a byte unit (``B``) and a bit unit (``b``) differ by
case only in a rate's (``Gb/s`` is gigabits), so a word is first looked up as written, then any
case where that has one reading (``2tb``, ``400gb/s`` is ambiguous and refused)."""
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

_EXAMPLES = {
    _BYTES: "2000, 2TB or 64GiB; TB and GB are decimal, TiB and GiB binary",
    _RATE: "400, 400GB/s or 400Gb/s (bits: 50 GB/s)",
    _TIME: "2.5, 2.5s or 2500ms",
    _FLOPS: "989, 989TFLOPS or 0.989PFLOP/s",
}

_TAIL = re.compile(r"^(.*?[\d.])\s*([A-Za-zµ%/]+)$")
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


def read_quantity(body: str, name: str, shown: str) -> tuple[str, Fraction] | None:
    """(the number's text, the factor it is multiplied by) of ``body`` (a number's text without
    digit separators) when it ends in a percent or a unit word that parameter ``name`` reads;
    None when it ends in neither (the caller reads it as a plain number, ``B``/``T`` suffixes
    included). ``shown``: the text as a refusal echoes it.

    Raises
    ------
    InputError
        A percent on a parameter that is no fraction; a unit of another kind than the
        parameter's (``--host-memory-gb: '2ms' is a time; …``), an unknown or ambiguous unit
        word on a parameter whose name gives its unit.

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
    scale = _unit_scale(word, name, shown, number)
    return None if scale is None else (number, scale)


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


def _unit_scale(word: str, name: str, shown: str, number: str) -> Fraction | None:
    """What unit ``word`` multiplies by on parameter ``name`` (its unit over the parameter's);
    None where ``name`` gives no unit or ``word`` is a plain number's suffix (``70B``)."""
    unit = unit_of(name)
    if unit is None:
        return None
    symbol, kind = unit
    own = _named(name)[1]  # type: ignore[index]  # unit_of(name) is not None
    if word in _AMBIGUOUS_RATES or word.lower() in {w.lower() for w in _AMBIGUOUS_RATES}:
        bits = _AMBIGUOUS_RATES.get(word, word[:-3] + "b/s")
        raise InputError(
            f"{name}: {shown} is ambiguous: write {number}{bits} (bits) or {number}{bits[:-3]}B/s "
            f"(bytes); the value is in {symbol}"
        )
    found = _UNITS.get(word)
    if found is None and len(_FOLDED.get(word.lower(), [])) == 1:
        found = _UNITS[_FOLDED[word.lower()][0]]
    if found is None:
        if len(word) == 1 and word.upper() in "BTKMG":  # 70B, 8K: the plain number grammar's
            return None
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


def _in_unit(name: str) -> str:
    """`` in GB`` where the parameter's name gives its unit, else nothing."""
    unit = unit_of(name)
    return f" in {unit[0]}" if unit else ""
