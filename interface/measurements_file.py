"""A calibration's measurements file, read and checked (:func:`read_measurements`): its
accelerator, the figures to fit and each measured run (:class:`Measurement`), every run refused
by evaluate's own rules where it names no parameter or a layout evaluate refuses. The format is
in :mod:`interface.calibration`'s docstring; split from it, which re-exports these names.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from trainplan.interface.commands import check_layout_keys
from trainplan.interface.inputs import build_case, unknown_parameter
from trainplan.model.errors import InputError, PlannerError, ScenarioError
from trainplan.model.limits import Limit
from trainplan.model.roofline import CALIBRATABLE
from trainplan.model.units import check_limit, parse_positive
from trainplan.topology.accelerator_file import get_part, is_part_file

__all__ = ["Measurement", "read_measurements", "STEP_LIMIT"]

STEP_LIMIT = Limit(
    86_400,
    "seconds",
    "a day; published steps take seconds (Megatron-LM 2021, arXiv 2104.04473, Table 1: "
    "3.7-14.5 s per step by its Eq. 3): a longer one is a misread measurement, not a step",
)
"""The longest measured step a calibration reads (``step_seconds``), with its reason: above
it the residual table would compare a prediction with a value no training step takes."""


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured step of a known layout."""

    label: str
    step_s: float
    """Measured seconds per optimizer step (> 0)."""
    params: Mapping[str, Any]
    """Flat evaluate parameters (:func:`interface.inputs.build_case`) of the layout."""


def read_measurements(path: str | Path) -> tuple[str, tuple[str, ...], tuple[Measurement, ...]]:
    """(gpu, figures to fit, measurements) of a measurements file (:mod:`interface.calibration`).

    Raises
    ------
    ScenarioError
        Unreadable file, no ``gpu`` or runs, a run without a positive ``step_seconds``, a run's
        key that is no parameter (:func:`interface.inputs.unknown_parameter`: the file, the
        run's number and label, the key, the parameter meant and where they are listed), a key
        the run's layout does not read, a bad value or an impossible layout (evaluate's own
        rules, :func:`interface.commands.check_layout_keys`, :func:`interface.inputs.build_case`
        and :meth:`optimizer.case.Case.evaluate`).
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ScenarioError(f"measurements {p}: {err}") from None
    unknown = sorted(set(data) - {"gpu", "fit", "run", "description"})
    if unknown:
        raise ScenarioError(f"measurements {p}: unknown key {unknown[0]!r} (gpu, fit, run)")
    runs = data.get("run")
    if not isinstance(data.get("gpu"), str) or not isinstance(runs, list) or not runs:
        raise ScenarioError(f'measurements {p}: needs gpu = "NAME" and at least one [[run]]')
    fit = data.get("fit", ["gemm_efficiency"])
    fit = [fit] if isinstance(fit, str) else fit
    if not isinstance(fit, list) or not fit:
        raise ScenarioError(
            f"measurements {p}: fit {fit!r} must name one or more of {', '.join(CALIBRATABLE)}"
        )
    fit = [key.lower() if isinstance(key, str) else key for key in fit]  # in any case, as --fit
    for key in fit:
        if key not in CALIBRATABLE:
            raise ScenarioError(
                f"measurements {p}: fit {key!r} is not one of {', '.join(CALIBRATABLE)}"
            )
    out = []
    for i, run in enumerate(runs, start=1):
        step = _step_seconds(f"measurements {p}: run {i}", run.get("step_seconds"))
        params = {k: v for k, v in run.items() if k not in ("label", "step_seconds")}
        if "gpu" in params:
            raise ScenarioError(f"measurements {p}: run {i}: give gpu once, at the top")
        params["gpu"] = data["gpu"]
        _check_run(f"measurements {p}: run {i}", run.get("label"), params)
        out.append(Measurement(str(run.get("label", f"run {i}")), float(step), params))
    return _catalogue_name(data["gpu"]), tuple(str(k) for k in fit), tuple(out)


def _step_seconds(where: str, typed: Any) -> float:
    """A run's ``step_seconds`` as the file gives it (a TOML number, or a string read by the one
    number grammar), checked before any prediction is printed beside it: present, positive, and
    within :data:`STEP_LIMIT` (TOML's ``inf`` is above every limit).

    Raises
    ------
    ScenarioError
        ``where``, then the rule: missing, not a positive number (shown as the file writes it),
        or above the limit.
    """
    step = typed
    if step is None:
        raise ScenarioError(
            f"{where}: step_seconds missing: give the run's measured seconds per step "
            "(step_seconds = 3.7)"
        )
    if isinstance(step, str):  # "4,000,000" or "3.7e0": one number, as every input reads it
        try:
            step = float(parse_positive(step, "step_seconds"))
        except InputError as err:
            raise ScenarioError(f"{where}: {err}") from None
    if isinstance(step, bool) or not isinstance(step, int | float) or not step > 0:
        shown = str(step).lower() if isinstance(step, bool) else repr(step)  # as TOML has it
        raise ScenarioError(f"{where}: step_seconds {shown} must be a positive number")
    try:
        finite = math.isfinite(step)
        value = Fraction(step) if finite else STEP_LIMIT.maximum + 1
        text = typed if isinstance(typed, str) else (None if finite else "inf")
        check_limit("step_seconds", value, text, STEP_LIMIT)
    except InputError as err:
        raise ScenarioError(f"{where}: {err}") from None
    return float(step)


def _check_run(where: str, label: Any, params: dict[str, Any]) -> None:
    """Refuse a run's key that is no parameter (:func:`interface.inputs.unknown_parameter`), that
    its layout does not read, by evaluate's own rule
    (:func:`interface.commands.check_layout_keys`), or a layout evaluate refuses (tp not dividing
    the heads, a batch that does not divide: :meth:`optimizer.case.Case.evaluate`), naming
    ``where`` and the run's label."""
    name = f"{where} ({label!r})" if isinstance(label, str) else where
    refused = unknown_parameter({k: v for k, v in params.items() if k != "gpu"})
    if refused:
        raise ScenarioError(f"{name}: {refused}")
    try:
        case = build_case(params)
        check_layout_keys(case)
        case.evaluate()  # the layout's own rules (tp dividing the heads, B by b·dp…), here named
    except PlannerError as err:
        raise ScenarioError(f"{name}: {err}") from None


def _catalogue_name(gpu: str) -> str:
    """The accelerator table's full name of ``gpu`` as a measurements file names it (``A100-80G``
    → ``A100-80GB``), what the written calibration file says it was fitted on; a ``PATH.toml``
    part file stays its path. An unknown name is refused later, where the runs are built."""
    if is_part_file(gpu):
        return gpu
    try:
        return get_part(gpu).name
    except PlannerError:
        return gpu
