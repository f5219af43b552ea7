"""Calibration from measurements: fit the roofline model's efficiencies to measured step times
of known layouts on one cluster, report the fit and its residuals, and write them as a scenario
file that ``evaluate --calibration`` and ``search --scenario`` / ``--calibration`` load.

The fit minimises the squared relative errors ``predicted / measured − 1`` over the chosen
figures (:data:`model.roofline.CALIBRATABLE`, each bounded to (0.05, 1]) with SciPy's
trust-region least squares (``scipy.optimize.least_squares``); every prediction is the cost
model's own ``evaluate()`` — nothing is re-typed.

A fit is trusted only when the model can explain the measurements (:func:`fit_problems`): no
fitted figure on a bound of its range (:data:`BOUND_TOLERANCE`: the optimum lies outside what the
hardware can do, e.g. a step faster than the datasheet peak allows), and no run's residual beyond
:data:`MAX_RESIDUAL`. ``trainplan calibrate`` refuses any other fit (no file written, exit 2)
unless told ``--accept-poor-fit``; ``docs/guides/calibration.md`` states the rule.

A measurements file (TOML; a run's keys are :func:`interface.inputs.build_case`'s parameters,
:data:`interface.inputs.PARAMETERS`, and any other is refused naming the run)::

    gpu = "A100-80GB"                 # the cluster's accelerator, every run
    fit = ["gemm_efficiency"]         # the figures to fit (default: gemm_efficiency)
    [[run]]
    label = "7.5B on 128 GPUs"
    step_seconds = 3.70               # measured seconds per optimizer step
    model = "megatron-7.5b"           # and any evaluate parameter: tp, pp, dp, micro_batch_size,
    tp = 4                            # global_batch_size, seq_len, recompute, framework, …
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainplan.interface.inputs import build_case
from trainplan.interface.measurements_file import Measurement, read_measurements
from trainplan.model.errors import InputError
from trainplan.model.frameworks import gradient_bytes_for
from trainplan.model.layout import sequence_parallel_on
from trainplan.model.memory import keeps_gathered_inputs
from trainplan.model.roofline import CALIBRATABLE, roofline_params_for
from trainplan.model.tp_overlap import tp_overlap_for
from trainplan.topology.accelerator_file import get_part

__all__ = [
    "Measurement",
    "Residual",
    "Fit",
    "fit_figures",
    "fit_problems",
    "fit_warnings",
    "run_settings",
    "SETTINGS",
    "FAR_FROM_DEFAULT",
    "read_measurements",
    "MAX_RESIDUAL",
    "BOUND_TOLERANCE",
    "calibrate_measurements",
    "fit_text",
    "scenario_text",
]

_BOUNDS = (0.05, 1.0)

MAX_RESIDUAL = 0.25
"""The largest |predicted / measured − 1| of any run that a trusted fit leaves: above the roofline
model's worst error on the published runs it was not fitted to (12.5 % held out, and the previous
single-efficiency model's 22.7 %: ``docs/fidelity-published.md``). A larger residual means the
run is not the layout described (a typo in ``step_seconds``, a step that also times data
loading or evaluation, another model), and fitting through it skews every later search."""

BOUND_TOLERANCE = 1e-3
"""A fitted figure within this of a bound of (0.05, 1] sits on it: the least squares wanted a
value outside the range (the measured steps are faster than the datasheet peak allows, or more
than 20× slower), so the figure explains nothing."""


FAR_FROM_DEFAULT = 1.5
"""A fitted figure more than this factor from the per-operation default it replaces, either way
(below ``default / 1.5`` or above ``1.5 × default``; the defaults are
:func:`model.roofline.roofline_params_for`'s, each one's benchmark in
``docs/time-model-sources.md``), draws a warning (:func:`fit_warnings`). The fit is kept — a
cluster may truly differ — but with the sourced default the planner's step for those runs would
be a third to a half off, beyond the ±25 % (:data:`MAX_RESIDUAL`) a trusted fit may leave a run,
which is more often a run evaluated under other settings than it ran (a default recompute,
overlap or framework; :func:`run_settings` lists them) than a cluster that slow or fast."""

SETTINGS = (
    "framework",
    "zero_stage",
    "recompute",
    "precision",
    "seq_len",
    "sequence_parallel",
    "flash_attention",
    "gradient_dtype",
    "tp_comm_overlap",
    "grad_reduce_overlap",
    "p2p_overlap",
    "pipeline_scatter_gather",
)
"""The settings of a run that move its step time most and that a measurements file most often
leaves out (the recipe of the code measured): each run's are printed with the fit, those left at
the planner's default marked (:func:`run_settings`)."""


@dataclass(frozen=True, slots=True)
class Residual:
    """A measurement beside the fitted model's prediction."""

    label: str
    measured_s: float
    predicted_s: float
    settings: Mapping[str, str] = field(default_factory=dict)
    """The run's :data:`SETTINGS` as evaluated (:func:`run_settings`)."""
    defaulted: tuple[str, ...] = ()
    """Those of :data:`SETTINGS` the run did not give: the planner's default was used."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """The flat evaluate parameters the prediction is of: the run's, its ``gpu`` and the fitted
    figures (``trainplan evaluate`` with them gives ``predicted_s``; ``calibrate`` prints that
    command line for each run)."""

    @property
    def error(self) -> float:
        """predicted / measured − 1."""
        return self.predicted_s / self.measured_s - 1


@dataclass(frozen=True, slots=True)
class Fit:
    """Fitted figures and the residuals they leave."""

    figures: Mapping[str, float]
    residuals: tuple[Residual, ...]
    fixed: Mapping[str, float]
    """The other roofline figures in force (defaults, not fitted)."""
    defaults: Mapping[str, float] = field(default_factory=dict)
    """The per-operation default each fitted figure replaces (a 0–1 rate; absent when the
    default is no single number, as ``attention_efficiency``'s per-kernel figure)."""

    @property
    def mean_abs_error(self) -> float:
        return sum(abs(r.error) for r in self.residuals) / len(self.residuals)

    @property
    def max_abs_error(self) -> float:
        return max(abs(r.error) for r in self.residuals)


def fit_figures(
    predict: Sequence[Callable[[Mapping[str, float]], float]],
    measured: Sequence[float],
    keys: Sequence[str],
    start: Mapping[str, float],
) -> dict[str, float]:
    """The figures ``keys`` minimising Σ (predict_i(figures) / measured_i − 1)², from
    ``start``, each within (0.05, 1].

    Raises
    ------
    InputError
        More figures than measurements (the fit would be undetermined), or an unknown figure.
    """
    from scipy.optimize import least_squares

    unknown = [k for k in keys if k not in CALIBRATABLE]
    if unknown:
        raise InputError(f"fit: {unknown[0]!r} is not one of {', '.join(CALIBRATABLE)}")
    if not keys or len(keys) > len(measured):
        raise InputError(
            f"fit: {len(keys)} figure(s) from {len(measured)} measurement(s); give at least as "
            "many measured steps as figures to fit, and at least one figure"
        )

    def residuals(x: Sequence[float]) -> list[float]:
        figures = dict(zip(keys, map(float, x), strict=True))
        return [p(figures) / m - 1 for p, m in zip(predict, measured, strict=True)]

    x0 = [min(max(start[k], _BOUNDS[0]), _BOUNDS[1]) for k in keys]
    result = least_squares(
        residuals, x0, bounds=([_BOUNDS[0]] * len(keys), [_BOUNDS[1]] * len(keys))
    )
    return {k: round(float(v), 4) for k, v in zip(keys, result.x, strict=True)}


def fit_problems(fit: Fit) -> list[str]:
    """Why a fit cannot be trusted (empty: it can): each figure on a bound of its range, each
    run whose residual exceeds :data:`MAX_RESIDUAL`.

    Examples
    --------
    >>> fit_problems(Fit({"gemm_efficiency": 1.0}, (Residual("1 µs step", 1e-6, 2.98),), {}))
    ... # doctest: +NORMALIZE_WHITESPACE
    ['gemm_efficiency = 1.0000 sits on the upper bound of its range (0.05, 1]',
     "run '1 µs step': predicted 2.98 s against 1e-06 s measured (+297,999,900%, more than ±25%)"]
    """
    out = []
    for key, value in fit.figures.items():
        for side, bound in (("lower", _BOUNDS[0]), ("upper", _BOUNDS[1])):
            if abs(value - bound) <= BOUND_TOLERANCE:
                out.append(
                    f"{key} = {value:.4f} sits on the {side} bound of its range "
                    f"({_BOUNDS[0]:g}, {_BOUNDS[1]:g}]"
                )
    for r in fit.residuals:
        if not abs(r.error) <= MAX_RESIDUAL:
            out.append(
                f"run {r.label!r}: predicted {r.predicted_s:.4g} s against {r.measured_s:.4g} s "
                f"measured ({100 * r.error:+,.0f}%, more than ±{100 * MAX_RESIDUAL:g}%)"
            )
    return out


def fit_warnings(fit: Fit) -> list[str]:
    """Lines flagging each fitted figure beyond :data:`FAR_FROM_DEFAULT` of the per-operation
    default it replaces (the fit is kept; :func:`fit_problems` refuses).

    Examples
    --------
    >>> fit_warnings(Fit({"gemm_efficiency": 0.3764}, (), {}, {"gemm_efficiency": 0.6996}))
    ... # doctest: +NORMALIZE_WHITESPACE
    ['gemm_efficiency fitted 0.3764 is 0.54 × its per-operation default 0.6996 (more than
      1.5 × from it either way, docs/time-model-sources.md): check that each run gives the
      settings it ran (recompute, precision, overlaps, framework; the settings listed above,
      * = a default)']
    >>> fit_warnings(Fit({"gemm_efficiency": 0.7463}, (), {}, {"gemm_efficiency": 0.6996}))
    []
    """
    low, high = 1 / FAR_FROM_DEFAULT, FAR_FROM_DEFAULT
    out = []
    for key, value in fit.figures.items():
        default = fit.defaults.get(key)
        if not default:
            continue
        if value < low * default or value > high * default:
            out.append(
                f"{key} fitted {value:.4f} is {value / default:.2f} × its per-operation default "
                f"{default:.4f} (more than {high:g} × from it either way, "
                "docs/time-model-sources.md): check that each run gives the settings it ran "
                "(recompute, precision, overlaps, framework; the settings listed above, "
                "* = a default)"
            )
    return out


def run_settings(params: Mapping[str, Any]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The :data:`SETTINGS` a run of flat evaluate parameters ``params`` is evaluated under
    (``p2p_overlap`` only where the layout reads it: Megatron-Core's interleaved schedule), as
    text (a number as the tool prints it, ``2,048``), each read through the model's own resolver
    of its default (the framework's
    ``tp_comm_overlap``, :func:`model.tp_overlap.tp_overlap_for`; its gradient dtype,
    :func:`model.frameworks.gradient_bytes_for`; sequence parallelism,
    :func:`model.layout.sequence_parallel_on`), and those of them ``params`` does not give.

    Examples
    --------
    >>> s, defaulted = run_settings({"gpu": "A100-80GB", "model": "megatron-7.5b", "tp": 4,
    ...     "dp": 32, "micro_batch_size": 16, "global_batch_size": 512, "recompute": "full"})
    >>> s["recompute"], s["zero_stage"], s["tp_comm_overlap"], s["gradient_dtype"]
    ('full', '1', 'async', 'fp32')
    >>> "recompute" in defaulted, "zero_stage" in defaulted
    (False, True)
    """
    case = build_case(params)
    lay, t, o = case.layout, case.training, case.options
    fw = lay.framework

    def on(flag: Any) -> str:
        return "on" if flag else "off"

    grad = gradient_bytes_for(fw, t.gradient_bytes)
    settings = {
        "framework": fw.value,
        "zero_stage": str(lay.zero_stage),
        "recompute": lay.recompute.value,
        "precision": t.precision.value,
        "seq_len": f"{t.seq_len:,}",
        "sequence_parallel": on(sequence_parallel_on(lay.tp, lay.sequence_parallel)),
        "flash_attention": on(t.flash_attention),
        "gradient_dtype": {4: "fp32", 2: "bf16"}.get(grad, f"{grad} B"),
        "tp_comm_overlap": str(
            tp_overlap_for(fw, o.tp_comm_overlap, keeps_gathered_inputs(fw, t)).value
        ),
        "grad_reduce_overlap": on(o.grad_reduce_overlap),
        "p2p_overlap": on(o.p2p_overlap),
        "pipeline_scatter_gather": on(lay.pipeline_scatter_gather),
    }
    if lay.virtual_stages == 1 or fw != "megatron":  # read by the interleaved schedule only
        del settings["p2p_overlap"]
    return settings, tuple(k for k in settings if params.get(k) is None)


def _predictor(m: Measurement) -> Callable[[Mapping[str, float]], float]:

    def predict(figures: Mapping[str, float]) -> float:
        est = build_case(dict(m.params) | dict(figures)).evaluate()
        if est.step_s is None:
            raise InputError(f"{m.label}: no step time (give the model's dimensions and links)")
        return est.step_s

    return predict


def calibrate_measurements(
    gpu: str, keys: Sequence[str], measurements: Sequence[Measurement]
) -> Fit:
    """Fit ``keys`` to ``measurements`` on ``gpu`` (the roofline time model) and return the fit
    with each run's residual."""
    unknown = [k for k in keys if k not in CALIBRATABLE]
    if unknown:
        raise InputError(f"fit: {unknown[0]!r} is not one of {', '.join(CALIBRATABLE)}")
    device = get_part(gpu)
    base = roofline_params_for(device.part)
    start = {k: getattr(base, k) or base.gemm_efficiency for k in keys}
    predictors = [_predictor(m) for m in measurements]
    figures = fit_figures(predictors, [m.step_s for m in measurements], keys, start)
    residuals = tuple(
        Residual(
            m.label,
            m.step_s,
            p(figures),
            *run_settings(m.params),
            {"gpu": m.params["gpu"], **m.params, **figures},
        )
        for m, p in zip(measurements, predictors, strict=True)
    )
    fixed = {k: getattr(base, k) for k in CALIBRATABLE if k not in figures}
    defaults = {k: getattr(base, k) for k in figures if getattr(base, k) is not None}
    return Fit(figures, residuals, {k: v for k, v in fixed.items() if v is not None}, defaults)


def fit_text(fit: Fit) -> str:
    """The fit and its residuals for the terminal."""
    lines = ["fitted: " + ", ".join(f"{k} = {v:.4f}" for k, v in fit.figures.items())]
    if fit.fixed:
        lines.append(
            "held at their defaults: " + ", ".join(f"{k} = {v:g}" for k, v in fit.fixed.items())
        )
    width = max(len(r.label) for r in fit.residuals)
    lines.append(f"{'run':<{width}}  measured s  predicted s   error")
    for r in fit.residuals:
        lines.append(
            f"{r.label:<{width}}  {r.measured_s:10.3f}  {r.predicted_s:11.3f}  {100 * r.error:+6.2f}%"
        )
    lines.append(
        f"mean |error| {100 * fit.mean_abs_error:.2f}%, max {100 * fit.max_abs_error:.2f}% "
        f"over {len(fit.residuals)} run(s)"
    )
    said = {
        r.label: ", ".join(
            f"{k} {v}{'*' if k in r.defaulted else ''}" for k, v in r.settings.items()
        )
        for r in fit.residuals
        if r.settings
    }
    if said:
        lines.append("settings each run was evaluated under (* = the planner's default):")
        if len(said) > 1 and len(set(said.values())) == 1:
            lines.append(f"  every run: {next(iter(said.values()))}")
        else:
            lines += [f"  {label}: {text}" for label, text in said.items()]
    lines += [f"Warning: {w}" for w in fit_warnings(fit)]
    return "\n".join(lines)


def scenario_text(fit: Fit, gpu: str, source: str) -> str:
    """A scenario file holding the fit: ``gpu`` and a ``[cluster]`` table of the fitted figures,
    the residuals as comments (and, for a fit accepted with :func:`fit_problems` against it,
    those problems). ``evaluate --calibration FILE`` and ``search --scenario FILE`` (or
    ``--calibration FILE``) load it."""
    today = _dt.date.today().isoformat()
    lines = [f"# Written by trainplan calibrate on {today} from {source}."]
    lines += [f"# WARNING (accepted with --accept-poor-fit): {p}" for p in fit_problems(fit)]
    lines += [f"# WARNING: {w}" for w in fit_warnings(fit)]
    lines += ["# Residuals of the fit (predicted / measured − 1):"]
    lines += [
        f"#   {r.label}: measured {r.measured_s:.4g} s, predicted {r.predicted_s:.4g} s, "
        f"{100 * r.error:+.2f}%"
        for r in fit.residuals
    ]
    lines += [
        f"description = {_quote(f'roofline figures fitted to {len(fit.residuals)} measured step(s)')}",
        f"source = {_quote(source)}",
        f"gpu = {_quote(gpu)}",
        "",
        "[cluster]",
    ]
    lines += [f"{k} = {v!r}" for k, v in fit.figures.items() if math.isfinite(v)]
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
