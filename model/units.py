"""Units, number parsing and exact-arithmetic helpers.

Conventions (docs/concepts/conventions.md "Units and symbols"): GB = 10**9 bytes, TB = 10**12 bytes, GiB = 2**30
bytes (only where a vendor states capacity in GiB). Time in seconds, bandwidth in bytes/s per GPU
per direction. Counts are ``int``; exact rationals are :class:`fractions.Fraction`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from types import MappingProxyType

from trainplan.model.errors import InputError
from trainplan.model.number_words import check_length, not_a_number

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
"8K" means 8192 tokens, so a silent 8000 would be a wrong figure."""
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


@dataclass(frozen=True, slots=True)
class Limit:
    """The largest accepted value of a size or count, with the reason it is no smaller."""

    maximum: int
    """Largest accepted value, in ``unit``."""
    unit: str
    """What the value counts (``tokens``, ``GPUs``…)."""
    why: str
    """The rule in words: the published extremes it leaves room for (each with its source)."""


_GPUS = Limit(2**24, "GPUs", "2^24; published training runs use up to ~10^5, Llama 3 16,384")
_SEQUENCES = Limit(2**24, "sequences", "2^24; published global batches are ~10^3, Llama 3 2,048")
_TOKENS_PER_SEQUENCE = Limit(
    2**24, "tokens", "2^24 = 16,777,216; the longest published training contexts are ~10^6"
)
_WIDTH = Limit(2**20, "dims", "2^20; the widest published models have h ~ 2.6·10^4, Megatron 1T")

LIMITS: Mapping[str, Limit] = MappingProxyType(
    {
        "params": Limit(
            10**15, "parameters", "10^15 = 1,000T; the largest published models have ~2·10^12"
        ),
        "seq_len": _TOKENS_PER_SEQUENCE,
        "global_batch_size": _SEQUENCES,
        "micro_batch_size": Limit(2**16, "sequences", "2^16; a global batch is at most 2^24"),
        "gpus": _GPUS,
        "layers": Limit(
            10**4, "layers", "10^4; the deepest published LLMs have ~10^2 layers, PaLM 118"
        ),
        "virtual_stages": Limit(10**4, "model chunks", "10^4, the most layers a model may have"),
        "hidden": _WIDTH,
        "ffn_hidden": Limit(
            2**22, "dims", "2^22; published FFNs are ~10^4–10^5 wide, Llama 3 405B 53,248"
        ),
        "heads": Limit(2**16, "heads", "2^16; published models have ~10^2, Megatron 1T 160"),
        "head_dim": Limit(2**16, "dims", "2^16; published heads have 64–256 dims"),
        "vocab": Limit(2**24, "tokens", "2^24; published vocabularies are ~10^5, Llama 3 128,256"),
        "vocab_multiple": Limit(
            2**16, "tokens", "2^16; Megatron-LM pads to multiples of 128 (× tp)"
        ),
        "tokens": Limit(
            10**16, "tokens", "10^16; the largest published budgets are ~1.6·10^13, Llama 3"
        ),
        "sequences": _SEQUENCES,
        "epochs": Limit(10**3, "epochs", "10^3; PPO implementations use 1–4 per batch"),
        "width": Limit(10**3, "columns", "10^3; a terminal line is ~10^2"),
        "stages": Limit(
            256,
            "stages",
            "256; the pipeline timeline draws one row per stage, and published runs use at most "
            "64, Megatron-LM's 1T (Narayanan et al. 2021 Table 1)",
        ),
        "top": Limit(100, "layouts", "100; each answer is one more CP-SAT solve of ~0.1–1 s"),
        "workers": Limit(2**10, "threads", "2^10; CP-SAT runs one search thread per worker"),
        "delay": Limit(60, "seconds per frame", "60; an animation frame longer than a minute"),
    }
)
"""Upper limits of sizes and counts, by parameter name (see :func:`limit_for` for the spellings
that share one). A value above its limit is refused by :func:`check_limit` with the limit and its
reason, rather than printed as an absurd figure (``--seq-len 1e26`` would be 4.98·10^23 GB)."""

_LIMIT_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(("num_params", "num_params_declared", "policy_params"), "params"),
        "reward_params": "params",
        **dict.fromkeys(("prompt_tokens", "completion_tokens", "logits_tokens"), "seq_len"),
        **dict.fromkeys(
            ("max_position_embeddings", "sliding_window", "attention_chunk_size"), "seq_len"
        ),
        **dict.fromkeys(("global_batch", "prompts", "rollout_batch"), "global_batch_size"),
        **dict.fromkeys(("samples_per_prompt", "max_micro_batch"), "micro_batch_size"),
        "micro_batch": "micro_batch_size",
        **dict.fromkeys(("num_gpus", "chips", "dp", "tp", "pp", "cp", "ep"), "gpus"),
        **dict.fromkeys(("max_tp", "nvlink_domain", "pod_size"), "gpus"),
        **dict.fromkeys(
            ("num_layers", "max_layers", "first_k_dense_layers", "mtp_layers", "moe_layer_step"),
            "layers",
        ),
        "hidden_size": "hidden",
        **dict.fromkeys(("kv_lora_rank", "q_lora_rank"), "hidden"),
        **dict.fromkeys(("ffn_hidden_size", "expert_ffn_hidden_size"), "ffn_hidden"),
        "shared_expert_ffn_hidden_size": "ffn_hidden",
        **dict.fromkeys(("num_attention_heads", "num_kv_heads", "kv_heads"), "heads"),
        **dict.fromkeys(("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"), "head_dim"),
        "vocab_size": "vocab",
        "pad_vocab": "vocab_multiple",
        "global_batch_tokens": "tokens",
    }
)


def _canonical(name: str) -> str:
    """``--seq-len`` → ``seq_len``; ``training.seq_len`` → ``seq_len``."""
    return name.rsplit(".", 1)[-1].lstrip("-").replace("-", "_").strip().lower()


@lru_cache(maxsize=256)  # bounded: a long-lived server sees any spelling a user types
def limit_for(name: str) -> Limit | None:
    """The :class:`Limit` of a parameter, by any of its spellings (``--seq-len``, ``seq_len``,
    ``training.seq_len``; ``tp`` and ``--gpus`` share the GPU limit); None when it has none.

    Examples
    --------
    >>> limit_for("--seq-len").maximum
    16777216
    >>> limit_for("model.num_layers") is LIMITS["layers"], limit_for("kernel_efficiency")
    (True, None)
    """
    key = _canonical(name)
    return LIMITS.get(_LIMIT_ALIASES.get(key, key))


def check_limit(
    name: str, value: Fraction | int, text: object = None, limit: Limit | None = None
) -> None:
    """Refuse a size or count above ``limit`` (a :class:`Limit`), else its :data:`LIMITS` entry
    (nothing happens for a parameter without one).

    Raises
    ------
    InputError
        ``seq_len: 1e26 is above the limit of 16,777,216 tokens (2^24 …)``, naming the parameter,
        the value as written (``text``) and the limit with its reason.

    Examples
    --------
    >>> check_limit("--seq-len", 8192)
    >>> check_limit("--seq-len", 10**26, "1e26")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: --seq-len: 1e26 is above the limit of 16,777,216 tokens (2^24 ...)
    """
    limit = limit or limit_for(name)
    if limit is None or value <= limit.maximum:
        return
    shown = text if text is not None else f"{value:,}" if value < 10**15 else f"{float(value):.3g}"
    raise InputError(
        f"{name}: {shown} is above the limit of {limit.maximum:,} {limit.unit} ({limit.why})"
    )


def parse_number(
    text: str | float | int | Fraction, name: str = "value", whole: bool = False
) -> Fraction:
    """Read a number as the command line, the page's links and scenario files write it, exactly.

    Accepts ``4e6``, ``4000000``, ``4,000,000``, ``4e+6``, ``4e 6`` (a URL's ``+`` read back as a
    space) and the size suffixes ``B`` and ``T`` (``70B`` = 70·10^9, ``1.5T`` = 1.5·10^12).
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
    """
    if isinstance(text, bool):
        raise InputError(f"{name}: {text!r} is not a number")
    if isinstance(text, (int, Fraction)):
        return _in_range(Fraction(text), name, text)
    if isinstance(text, float):
        text = repr(text)  # inf and nan fail the pattern below
    raw = str(text).strip()
    if not raw:  # as a list parameter's empty value (list_items): one refusal for both
        raise InputError(f"{name}: {shown_text(text)} is empty; give a value")
    s = _without_separators(raw, name)
    s = re.sub(r"(?i)e\s+(\d)", r"e+\1", s)  # "4e 6": the '+' of a URL read back as a space
    scale = 1
    if s and s[-1].upper() in _SUFFIX and not s[-1].isdigit():
        scale = _SUFFIX[s[-1].upper()]
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
    """Read a whole number (``4e6``, ``70B``…) that must be at least ``minimum`` and at most the
    parameter's :data:`LIMITS` entry (found by ``name``, see :func:`limit_for`).

    Raises
    ------
    InputError
        When the text is not a number, not whole, below ``minimum`` or above the limit.

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
    lowered = {n.lower(): n for n in names}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.4)
    hits += [n for low, n in lowered.items() if name.lower() in low and n not in hits]
    hits = [lowered.get(h, h) for h in hits][:3]
    if not hits:
        return "known: " + ", ".join(sorted(names))
    return "did you mean " + ", ".join(dict.fromkeys(hits)) + "?"


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
    lo, hi = parse_count(lo_text, name), parse_count(hi_text, name)
    if lo > hi:
        raise InputError(f"{name}: range {text!r} is empty (low end above high end)")
    out, p = [], 1
    while p <= hi:
        out += [c for c in (p, 3 * p // 2 if p >= 2 else 0) if lo <= c <= hi]
        p *= 2
    if not out:
        raise InputError(f"{name}: no power of two (or 1.5×) in {text!r}")
    return out
