"""The step-time options of a case, from flat parameters: which time model, its figures, the
overlap mechanisms, and a calibration file written by ``trainplan calibrate``.

Keys: ``time_model`` (roofline | single), the roofline figures of
:data:`model.roofline.CALIBRATABLE` (``gemm_efficiency`` …, fractions in (0, 1]),
``tp_comm_overlap`` (none | async | full | async-tp),
``grad_reduce_overlap`` and ``p2p_overlap`` (true | false), ``calibration`` (a scenario file whose ``[cluster]``
table holds fitted figures for its ``gpu``; refused for any other accelerator, since efficiencies
measured on one part say nothing of another). The single model's ``kernel_efficiency`` and
``overlap`` are refused where the roofline model times the layout, and the roofline's figures
where the single model does: an option that does not apply is never silently ignored.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainplan.model.errors import InputError, ScenarioError, check_applicable
from trainplan.model.frameworks import Framework
from trainplan.model.hardware import DeviceSpec
from trainplan.model.op_time import TpOverlap
from trainplan.model.quantities import FRACTION_RULE
from trainplan.model.roofline import CALIBRATABLE
from trainplan.model.timing import TimeModel
from trainplan.model.units import parse_number, shown_number
from trainplan.topology.accelerator_file import get_part

__all__ = [
    "TIME_KEYS",
    "ROOFLINE_KEYS",
    "bool_param",
    "cost_options",
    "fraction_of_peak",
    "read_calibration",
    "calibration_gpu",
]

ROOFLINE_KEYS: tuple[str, ...] = tuple(k for k in CALIBRATABLE if k != "attention_efficiency")
"""Roofline figures given by name (``attention_efficiency`` serves both models)."""

TIME_KEYS: tuple[str, ...] = (
    "time_model",
    *ROOFLINE_KEYS,
    "tp_comm_overlap",
    "tp_comm_overlap_cfg",
    "grad_reduce_overlap",
    "p2p_overlap",
    "p2p_warmup_flush",
    "p2p_forward_send_wait",
    "nccl_sm_charge",
    "nccl_channel_setup",
    "nccl_nvls",
    "use_multi_rank_bucket_allreduce",
    "lp_grads_set_to_none",
    "loss_scaling",
    "grad_stats_group",
    "grad_clip_scaling",
    "attention_kernel",
    "calibration",
)
"""Every step-time key :func:`cost_options` reads besides the single model's."""


MIN_EFFICIENCY = 0.01
"""The least efficiency accepted: 1 % of a datasheet peak, below any kernel or link a training
run keeps (a value like 1e-300 would print a step of 10³⁰⁰ seconds)."""


def fraction_of_peak(value: Any, key: str) -> float:
    """An efficiency: a number in (0, 1] (a fraction of a datasheet peak or bandwidth).

    Raises
    ------
    InputError
        Not a number, or outside (0, 1]; the line names ``key`` and the value as given."""
    x = float(parse_number(value, key))
    if not MIN_EFFICIENCY <= x <= 1:
        raise InputError(
            f"{key}: {shown_number(value)} must be a fraction of the peak from "
            f"{MIN_EFFICIENCY:g} to 1 ({FRACTION_RULE})"
        )
    return x


def _overlap(value: Any) -> Any:
    """The single time model's overlap per axis (``overlap.dp``), each share read as a number
    (:func:`model.units.parse_number`: ``0.5``, ``.5``, ``50%`` — text a ``--set`` or a query
    that TOML does not read as a number keeps) for :class:`model.timing.CostOptions` to check;
    anything but a table as it is."""
    if not isinstance(value, Mapping):
        return value
    return {axis: float(parse_number(v, f"overlap {axis}")) for axis, v in value.items()}


def _calibration_data(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ScenarioError(f"calibration {p}: {err}") from None
    if not isinstance(data.get("gpu"), str) or not isinstance(data.get("cluster"), dict):
        raise ScenarioError(f'calibration {p}: needs gpu = "NAME" and a [cluster] table')
    return data


def calibration_gpu(path: str | Path) -> str:
    """The accelerator a calibration file was fitted on (its ``gpu``, as the accelerator table
    names it).

    Raises
    ------
    ScenarioError
        The file cannot be read, has no ``gpu`` or ``[cluster]``, or names no known accelerator.
    """
    return get_part(_calibration_data(path)["gpu"]).name


def read_calibration(path: str | Path, device_name: str) -> dict[str, float]:
    """The fitted roofline figures of a calibration file for ``device_name``: its ``[cluster]``
    keys among :data:`model.roofline.CALIBRATABLE`.

    Raises
    ------
    InputError
        The file calibrates another accelerator (its ``gpu``): efficiencies fitted on one part
        are refused for another, never silently unused (``docs/guides/calibration.md``).
    ScenarioError
        The file cannot be read, has no ``gpu`` or ``[cluster]``, or a figure is out of range.
    """
    p = Path(path)
    data = _calibration_data(p)
    fitted_on = calibration_gpu(p)
    if fitted_on != device_name:
        raise InputError(
            f"calibration: {str(path)!r} was fitted on {fitted_on}; it does not apply to "
            f"{device_name} (efficiencies measured on one accelerator say nothing of another) — "
            f"calibrate on {device_name}, or leave --calibration out"
        )
    cluster = data["cluster"]
    try:
        return {k: fraction_of_peak(cluster[k], k) for k in CALIBRATABLE if k in cluster}
    except InputError as err:
        raise ScenarioError(f"calibration {p}: {err}") from None


def cost_options(
    params: Mapping[str, Any],
    device: DeviceSpec,
    framework: Framework,
    attention_efficiency: float | None,
) -> dict[str, Any]:
    """The step-time knobs given in ``params`` (see the module docstring), parsed and checked,
    as :func:`trainplan.optimizer.case.cost_options_for` takes them (which fills the defaults).

    Raises
    ------
    InputError
        A value out of range, or an option of the other time model.
    """
    time_model = _time_model(params, framework)
    kernel = params.get("kernel_efficiency")
    kernel_name = params.get("attention_kernel")
    given: dict[str, Any] = {
        "time_model": time_model,
        "roofline_figures": _figures(params, device),
        "attention_efficiency": attention_efficiency,
        "attention_kernel": None if kernel_name is None else str(kernel_name),
        "overlap": _overlap(params.get("overlap")),
        "tp_comm_overlap": None
        if params.get("tp_comm_overlap") is None
        else _choice(TpOverlap, params, "tp_comm_overlap", "async"),
    }
    if kernel is not None:
        given["kernel_efficiency"] = fraction_of_peak(kernel, "kernel_efficiency")
    flags = ("causal_attention_flops", "grad_reduce_overlap", "p2p_overlap")
    nccl = ("nccl_sm_charge", "nccl_channel_setup", "nccl_nvls", "use_multi_rank_bucket_allreduce")
    versions = ("lp_grads_set_to_none", "loss_scaling")
    for key in (*flags, "p2p_warmup_flush", "p2p_forward_send_wait", *nccl, *versions):
        if params.get(key) is not None:
            given[key] = bool_param(params, key, False)
    if params.get("grad_stats_group") is not None:
        given["grad_stats_group"] = str(params["grad_stats_group"])
    if params.get("grad_clip_scaling") is not None:
        given["grad_clip_scaling"] = str(params["grad_clip_scaling"])
    if params.get("tp_comm_overlap_cfg") is not None:
        given["tp_comm_overlap_cfg"] = str(params["tp_comm_overlap_cfg"])
    if "mfu_convention" in params:
        given["mfu_convention"] = params["mfu_convention"]
    return given


def _time_model(params: Mapping[str, Any], framework: Framework) -> TimeModel:
    """The time model asked for (roofline by default), with the options of the other model
    refused.

    Raises
    ------
    InputError
        ``time_model`` roofline under the textbook profile; an option of the model not used.
    """
    time_model = _choice(TimeModel, params, "time_model", "roofline")
    if params.get("time_model") == "roofline" and not framework.physical:
        raise InputError(
            f"time_model: roofline times the mechanisms of a physical profile; framework "
            f"{framework} keeps the single model (one kernel efficiency, per-axis overlaps); use --framework "
            "megatron, deepspeed or fsdp2, or leave time_model out"
        )
    roofline = time_model is TimeModel.ROOFLINE and framework.physical
    why = (
        "the roofline time model (the default for megatron, deepspeed and fsdp2) times each "
        "operation and overlaps by mechanism; this option belongs to --set time_model=single"
    )
    single_only = {"kernel_efficiency": why, "overlap": why} if roofline else {}
    given = {k: params.get(k) or None for k in ("kernel_efficiency", "overlap")}
    check_applicable(given, single_only)
    if not roofline:
        why = "the single time model (the textbook profile's, or --set time_model=single) has one "
        why += "kernel efficiency and per-axis overlaps; this option belongs to the roofline model"
        given = {k: params.get(k) for k in TIME_KEYS if k != "time_model"}
        # a switch turned off is given too (grad_reduce_overlap=false changes nothing here)
        given = {k: "false" if v is False else v for k, v in given.items()}
        check_applicable(given, {k: why for k in TIME_KEYS if k != "time_model"})
    return time_model


def _figures(params: Mapping[str, Any], device: DeviceSpec) -> dict[str, Any]:
    """The roofline's figures given: a calibration file's for its accelerator, then the
    efficiencies given (each a fraction of peak in (0, 1]; the attention efficiency is passed on
    its own, :func:`cost_options`)."""
    figures = (
        read_calibration(params["calibration"], device.name) if params.get("calibration") else {}
    )
    figures |= {
        k: fraction_of_peak(params[k], k) for k in ROOFLINE_KEYS if params.get(k) is not None
    }
    return figures


def _choice(kind: Any, params: Mapping[str, Any], key: str, default: str) -> Any:
    value = params.get(key, default)
    try:
        return kind(str(value).lower())
    except ValueError:
        allowed = ", ".join(k.value for k in kind)
        raise InputError(f"{key}: {value!r} is not one of {allowed}") from None


def bool_param(params: Mapping[str, Any], key: str, default: bool) -> bool:
    """A true/false parameter of a query or scenario; anything but a bool (e.g. the string
    "false") is an :class:`InputError` naming the key; missing: ``default``."""
    value = params.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InputError(f"{key}: {value!r} must be true or false")
    return value
