"""Errors a user can cause. Every message names the parameter, the value and the rule.

The CLI turns any :class:`PlannerError` into one line on stderr and exit code 2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import TypeVar

__all__ = [
    "PlannerError",
    "LayoutError",
    "ScenarioError",
    "InfeasibleError",
    "InputError",
    "check_applicable",
    "named_lookup",
]

T = TypeVar("T")


class PlannerError(ValueError):
    """Base class of every error caused by the user's input."""


class InputError(PlannerError):
    """A value that cannot be read or is out of range (e.g. ``--seq-len -1``, ``--every 0``)."""


class LayoutError(PlannerError):
    """An impossible parallel layout (degrees, divisibility, schedule rules)."""


class ScenarioError(PlannerError):
    """An unknown or malformed model, accelerator, example or scenario file."""


class InfeasibleError(PlannerError):
    """A search with no layout that satisfies every constraint; ``explanation`` says which.
    ``status`` is ``infeasible`` (proven: none exists) or ``unknown`` (the solver stopped, at
    its time limit, before it found one or proved there is none)."""

    def __init__(
        self, message: str, explanation: list[str] | None = None, status: str = "infeasible"
    ) -> None:
        super().__init__(message)
        self.explanation = explanation or []
        self.status = status


def check_applicable(given: Mapping[str, object], not_applicable: Mapping[str, str]) -> None:
    """Refuse an option that was given but does not apply — the one rule for options a context
    would otherwise ignore silently (``--reward rule`` with DPO, ``--gpu`` with ``--peak-tflops``).

    ``given`` maps option names to their values (None or False: not given); ``not_applicable``
    maps the options that do not apply in this context to the reason.

    Raises
    ------
    InputError
        ``reward: 'rule' does not apply: DPO has no reward …`` for the first such option given.

    Examples
    --------
    >>> check_applicable({"reward": None}, {"reward": "DPO has no reward"})
    >>> check_applicable({"reward": "rule"}, {"reward": "DPO has no reward"})
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: reward: 'rule' does not apply: DPO has no reward
    >>> check_applicable({"overlap": {"dp": 0.5}}, {"overlap": "the roofline times overlaps"})
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: overlap: dp=0.5 does not apply: the roofline times overlaps
    """
    for name, why in not_applicable.items():
        value = given.get(name)
        if value is not None and value is not False:
            shown = _shown(value)
            if isinstance(value, Mapping):  # a table's entries as typed: overlap dp=0.5, tp=0.2
                shown = ", ".join(f"{k}={_shown(v).strip(chr(39))}" for k, v in value.items())
            raise InputError(f"{name}: {shown} does not apply: {why}")


def _shown(value: object) -> str:
    """A value as a line shows it: a number as written (not ``Fraction(8, 1)``), a repeated
    option's values each so, ``, `` between them (not ``('16e6',)``), else its repr.

    >>> _shown(("16e6",)), _shown(["8e6", Fraction(16)]), _shown(16e6), _shown(0.5)
    ("'16e6'", "'8e6', 16", '16,000,000', '0.5')
    """
    if isinstance(value, list | tuple):
        return ", ".join(_shown(v) for v in value)
    if isinstance(value, Fraction):
        return f"{int(value):,}" if value.denominator == 1 else f"{float(value):g}"
    if isinstance(value, float):  # a file's 16e6 is TOML's float: shown as the count it is
        return f"{int(value):,}" if value.is_integer() and abs(value) < 1e18 else f"{value:g}"
    return repr(value)


def named_lookup(name: str, get: Callable[[str], T], value: str) -> T:
    """``get(value)`` (a catalogue model, an accelerator), its "unknown …" refusal headed by the
    parameter that gave ``value``, so the line names it (``model: unknown model 'lama3-8b'; did
    you mean …``, on the command line ``--model: …``; ``critic_model: …`` for the critic's); a
    model path's refusal (headed ``model:``, :func:`scenarios.catalogue.config_path`,
    :meth:`model.model_spec.ModelSpec.from_hf_config`) headed by ``name`` likewise.

    >>> def unknown(v):
    ...     raise ScenarioError(f"unknown gpu {v!r}")
    >>> try:
    ...     named_lookup("gpu", unknown, "X")
    ... except ScenarioError as err:
    ...     print(err)
    gpu: unknown gpu 'X'
    """
    try:
        return get(value)
    except ScenarioError as err:
        text = str(err)
        if text.startswith("unknown "):
            raise ScenarioError(f"{name}: {text}") from None
        if text.startswith("model: ") and name != "model":  # a model path's own refusal
            raise ScenarioError(f"{name}: {text.removeprefix('model: ')}") from None
        raise
