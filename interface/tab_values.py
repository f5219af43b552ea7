"""The tabs' values: numbers read from an example's parameters (:func:`positive`,
:func:`optional_count`), the peak FLOP rate from an accelerator or a given figure
(:func:`resolve_peak`), and the report dictionaries' numbers made JSON values (:func:`jsonable`)
and compact text (:func:`fmt_number`, :func:`percent`)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from trainplan.model.errors import InputError, check_applicable, named_lookup
from trainplan.model.units import as_json_number, parse_count, parse_positive, shown_number
from trainplan.topology.accelerator_file import get_part
from trainplan.topology.rate_bounds import max_flop_rate

__all__ = [
    "jsonable",
    "positive",
    "optional_count",
    "name_word",
    "fmt_number",
    "percent",
    "resolve_peak",
]


def jsonable(obj: Any) -> Any:
    """Fractions → int when whole, else float, through dicts, lists and tuples."""
    if isinstance(obj, Fraction):
        return as_json_number(obj)
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj


def positive(name: str, value: Any) -> Fraction:
    """A number above zero (within its limit, if it has one): :func:`model.units.parse_positive`."""
    return parse_positive(value, name)


def optional_count(name: str, value: Any) -> int | None:
    """None, or a count (:func:`model.units.parse_count`)."""
    return None if value is None else parse_count(value, name)


def name_word(value: Any) -> str | None:
    """None, or a name of a fixed set as the tabs' checks spell it: stripped, lowercase
    (``--framework Megatron``, ``--recompute Full``, ``--labels Inputs``), as the pipeline's
    schedule and evaluate's choices (click's ``case_sensitive=False``) are read in any case.

    >>> name_word(" Megatron"), name_word(None)
    ('megatron', None)
    """
    return None if value is None else str(value).strip().lower()


def choice_word(name: str, value: Any, choices: tuple[str, ...]) -> str | None:
    """:func:`name_word` of ``value``, refused as typed when it is none of ``choices``
    (``--recompute Bogus``: ``recompute: 'Bogus' must be one of …``, not ``'bogus'``).

    >>> choice_word("labels", " Inputs", ("outputs", "inputs"))
    'inputs'
    >>> choice_word("labels", "Bogus", ("outputs", "inputs"))
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: labels: 'Bogus' must be one of outputs, inputs
    """
    word = name_word(value)
    if word is not None and word not in choices:
        raise InputError(f"{name}: {str(value).strip()!r} must be one of {', '.join(choices)}")
    return word


def fmt_number(x: Fraction | int | float) -> str:
    """Compact exact-looking form: ``70e9``, ``4e6``, ``989.4e12``, ``512``, ``7``.

    Examples
    --------
    >>> fmt_number(70 * 10**9), fmt_number(Fraction(9894, 10) * 10**12), fmt_number(7.5)
    ('70e9', '989.4e12', '7.5')
    """
    x = Fraction(x) if not isinstance(x, Fraction) else x
    if abs(x) < 10**4:
        return str(int(x)) if x.denominator == 1 else f"{float(x):.6g}"
    exp = 0
    while abs(x) >= 10 ** (exp + 3):
        exp += 3
    return f"{float(x / 10**exp):.6g}e{exp}"


def percent(x: Fraction) -> str:
    """A 0–1 fraction as a percentage with one decimal, thousands grouped as every number the
    command line prints (``39.7%``; ``3,316.4%``).

    >>> percent(Fraction(397, 1000)), percent(Fraction(33164, 1000))
    ('39.7%', '3,316.4%')
    """
    return f"{float(x) * 100:,.1f}%"


# ------------------------------------------------------------------------------------ pipeline


def resolve_peak(
    gpu: str | None, peak_tflops: Any, default_gpu: str | None = None
) -> tuple[Fraction, str]:
    """Peak FLOP/s per chip and its source: ``peak_tflops`` (TFLOP/s) if given, else the
    accelerator table's dense BF16 peak of ``gpu`` (or of ``default_gpu`` when neither is given),
    its source saying so before the row's source text (``H100-SXM dense BF16, the accelerator
    table's (source: …)``).

    Raises
    ------
    InputError
        When neither is given (and there is no default), when both are given (one would be
        ignored: :func:`model.errors.check_applicable`), or when the peak is not positive or
        above :func:`topology.rate_bounds.max_flop_rate`.
    ScenarioError
        An unknown or ambiguous accelerator name (with the candidates).
    """
    if peak_tflops is not None:
        check_applicable(
            {"gpu": gpu},
            {"gpu": f"the peak is given by `peak_tflops` = {peak_tflops}; give one of the two"},
        )
        peak = positive("peak_tflops", peak_tflops) * 10**12
        top, why = max_flop_rate()
        if peak > top:
            raise InputError(
                f"peak_tflops: {shown_number(peak_tflops)} must be at most "
                f"{top / 10**12:,.0f} TFLOP/s per chip ({why})"
            )
        return peak, "given (--peak-tflops)"
    gpu = gpu or default_gpu
    if gpu is None:
        raise InputError("gpu: missing; give `gpu` (e.g. H100-SXM) or `peak_tflops` (per chip)")
    device = named_lookup("gpu", get_part, gpu)
    # the figure used first: a row's source may open with another figure (H100-SXM's with FP8)
    return Fraction(device.peak_flops_per_s), (
        f"{device.name} dense BF16, {device.figures_from}'s (source: {device.source})"
    )


def old_log_prob_flag(value: bool | str) -> bool:
    """``old_log_prob`` as given: a flag, or ``recompute`` (True: the actor's forward recomputes
    them in the scoring phase) / ``engine`` (False: the engine's are used), the text the command
    line and the web take (:func:`model.rlhf.phases.step_roles`).

    Raises
    ------
    InputError
        Any other text.

    Examples
    --------
    >>> old_log_prob_flag("engine"), old_log_prob_flag(" Recompute"), old_log_prob_flag(True)
    (False, True, True)
    """
    if isinstance(value, bool):
        return value
    low = str(value).strip().lower()
    if low not in ("recompute", "engine"):
        raise InputError(f"old_log_prob: {value!r} is not one of recompute, engine")
    return low == "recompute"
