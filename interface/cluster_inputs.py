"""The accelerator and cluster of a planner request: the GPU by name (or a DeviceSpec built in
code), its links, host bandwidths and memory reserve as given, and the cluster graph's fabric
(:func:`interface.inputs.build_case`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from trainplan.interface.model_inputs import count_of
from trainplan.interface.time_inputs import calibration_gpu
from trainplan.model.errors import InputError, check_applicable
from trainplan.model.frameworks import DEFAULT_FRAMEWORK, Framework
from trainplan.model.hardware import DeviceSpec
from trainplan.model.model_spec import ModelSpec
from trainplan.model.op_rates import check_fp8_recipe
from trainplan.model.precision import Precision, check_precision, fp8_recipe_of
from trainplan.model.specs import TrainingSpec
from trainplan.model.units import parse_number, shown_number
from trainplan.optimizer.case import DEFAULT_GPU
from trainplan.topology.accelerator_file import accelerator_of
from trainplan.topology.rate_bounds import max_bandwidth

__all__ = [
    "DEFAULT_GPU",
    "check_fp8_profile",
    "device_of",
    "fabric_of",
    "MIN_GBPS",
    "max_gbps",
    "MAX_OVERSUBSCRIPTION",
]

MIN_GBPS = 0.1
"""The least link or host-memory bandwidth accepted, GB/s: below any interconnect in use (PCIe
Gen1 ×1 moves 0.25 GB/s per direction, PCI-SIG), so a typo such as 1e-3 is refused instead of
printing a step of years."""


def max_gbps() -> tuple[float, str]:
    """The largest link or host bandwidth accepted, GB/s, with its reason: the bound every part
    described outside the table is held to (:func:`topology.rate_bounds.max_bandwidth`, 100× the
    fastest bandwidth of any part in ``topology/accelerators.toml``; the MI355X's 8 TB/s HBM
    today), so a typo such as 1e9 is refused instead of printing a step with no communication at
    all.

    >>> max_gbps()[0], max_gbps()[1]
    (800000.0, "100× the fastest bandwidth in the accelerator table, the MI355X's 8,000 GB/s")
    """
    top, why = max_bandwidth()
    return top / 1e9, why


def check_fp8_profile(
    training: TrainingSpec, device: DeviceSpec, frameworks: Iterable[Framework | str]
) -> None:
    """Check the recipe's FP8 scaling against the part's published GEMM profile
    (:func:`model.op_rates.check_fp8_recipe`) under each of ``frameworks``: the recipe given, or
    where none is given the framework's own default (:func:`model.precision.fp8_recipe_of`:
    tensorwise under fsdp2, delayed elsewhere), the recipe the cost model then prices.

    Raises
    ------
    InputError
        A recipe given under bf16, or a recipe the part does not run (one line naming it).
    """
    for framework in frameworks:
        recipe = training.fp8_recipe
        if recipe is None and training.precision is Precision.FP8:
            recipe = fp8_recipe_of(str(framework), None)
        check_fp8_recipe(training.precision, recipe, device)


def device_of(
    params: Mapping[str, Any],
    model: ModelSpec,
    training: TrainingSpec,
    used: dict[str, Any],
    frameworks: Iterable[Framework | str] = (DEFAULT_FRAMEWORK,),
) -> DeviceSpec:
    """The accelerator of ``params`` (``gpu``; when not named, the one a ``calibration`` file was
    fitted on, else :data:`DEFAULT_GPU`, listed in ``used``) with the links, host bandwidths and
    memory reserve given, checked against the recipe's precision and, under fp8, its scaling as each of ``frameworks`` runs it
    (:func:`check_fp8_profile`).

    Raises
    ------
    PlannerError
        An unknown accelerator, a precision or FP8 recipe it does not run, a bandwidth below
        :data:`MIN_GBPS` or above :func:`max_gbps`.
    """
    gpu_name = params.get("gpu", DEFAULT_GPU)  # an empty name is refused, not defaulted
    if "gpu" not in params and params.get("calibration"):
        # a calibration fits one accelerator: without --gpu, that one (only a named other is
        # refused, interface.time_inputs.read_calibration)
        gpu_name = calibration_gpu(params["calibration"])
    elif "gpu" not in params:
        used["gpu"] = gpu_name
    # a DeviceSpec built in code (a hardware what-if, topology.what_if) is taken as it is
    device = accelerator_of(gpu_name)
    check_precision(training.precision, device)
    check_fp8_profile(training, device, frameworks)
    if training.precision is Precision.FP8 and model.arch is None:
        raise InputError(
            "precision: fp8 needs the model's layers (which weights are linear), not a size only"
        )
    gbps = _bandwidths(params)
    device = device.with_links(
        nvlink_domain=count_of(params, "nvlink_domain"),
        nvlink_bytes_per_s=gbps["nvlink_gbps"],
        scaleout_bytes_per_s=gbps["scaleout_gbps"],
        segment_gpus=_segment_gpus(params),
    )
    if gbps["host_link_gbps"] is not None:
        device = replace(device, host_link_bytes_per_s=gbps["host_link_gbps"])
    if gbps["host_memory_gbps"] is not None:
        device = replace(device, host_memory_bytes_per_s=gbps["host_memory_gbps"])
    if "memory_reserve_gib" in params:
        device = replace(device, runtime_reserve_bytes=_reserve_bytes(params, device))
    return device


def _bandwidths(params: Mapping[str, Any]) -> dict[str, float | None]:
    """The link and host bandwidths given in ``params`` (``nvlink_gbps``, ``scaleout_gbps``,
    ``host_link_gbps``, ``host_memory_gbps``; GB/s per GPU per direction), in bytes/s, None
    where not given.

    Raises
    ------
    InputError
        Not a number, below :data:`MIN_GBPS` or above :func:`max_gbps`: the key, the value as
        typed and the bound.
    """
    gbps: dict[str, float | None] = {}
    for k in ("nvlink_gbps", "scaleout_gbps", "host_link_gbps", "host_memory_gbps"):
        value = None
        if k in params:
            value = float(parse_number(params[k], k))
            if value < MIN_GBPS:
                raise InputError(
                    f"{k}: {shown_number(params[k])} must be a bandwidth of at least {MIN_GBPS:g} "
                    "GB/s per GPU per direction (PCIe Gen1 ×1 moves 0.25)"
                )
            top, why = max_gbps()
            if value > top:
                raise InputError(
                    f"{k}: {shown_number(params[k])} must be a bandwidth of at most {top:,.0f} "
                    f"GB/s per GPU per direction ({why})"
                )
        gbps[k] = None if value is None else value * 1e9
    return gbps


def _reserve_bytes(params: Mapping[str, Any], device: DeviceSpec) -> int:
    """``memory_reserve_gib`` (GiB) as the bytes :attr:`model.hardware.DeviceSpec.
    runtime_reserve_bytes` holds, checked here so the line names the key the user typed.

    Raises
    ------
    InputError
        Not a number, below 0, or not below the device's own memory
        (:attr:`model.hardware.DeviceSpec.physical_bytes`).
    """
    value = params["memory_reserve_gib"]
    reserve = parse_number(value, "memory_reserve_gib")
    gib = device.physical_bytes / 2**30
    if not 0 <= reserve < gib:
        raise InputError(
            f"memory_reserve_gib: {shown_number(value)} must be at least 0 GiB and below the "
            f"{device.name}'s {int(gib * 100) / 100:.2f} GiB"  # cut, not rounded up, to 2 places
        )
    return int(reserve * 2**30)


MAX_OVERSUBSCRIPTION = 255
"""The largest scale-out oversubscription accepted: a leaf switch's downlinks per uplink is at
most its port count less one, and the most ports a switch offers is 256 (NVIDIA Spectrum-4,
51.2 Tb/s: 64 × 800 GbE, split into up to 256 × 100 GbE; the SN5600 announcement). Beyond it the
figure is no fabric's: 10^6 printed 8.3 days per step at 0.0% MFU."""


def fabric_of(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Cluster-graph options from ``fabric`` (two-tier | fat-tree | rail), ``pod_size`` and
    ``oversubscription``; empty for the default two-tier rule."""
    kind = str(params.get("fabric") or "two-tier")
    if kind not in ("two-tier", "fat-tree", "rail"):
        raise InputError(f"fabric: {kind!r} is not one of two-tier, fat-tree, rail")
    pod, over = params.get("pod_size"), params.get("oversubscription")
    given_keys = ("pod_size", "oversubscription")
    if kind == "two-tier":
        why = "it shapes a cluster graph; add `fabric`=fat-tree or rail"
        check_applicable(
            {"pod_size": pod, "oversubscription": over}, dict.fromkeys(given_keys, why)
        )
        return ()
    out: list[tuple[str, Any]] = [("rail_optimized", kind == "rail")]
    if pod is not None:
        out.append(("pod_size", count_of(params, "pod_size")))
    if over is not None:
        value = float(parse_number(over, "oversubscription"))
        if not 1 <= value <= MAX_OVERSUBSCRIPTION:
            raise InputError(
                f"oversubscription: {shown_number(over)} must be between 1 (non-blocking) and "
                f"{MAX_OVERSUBSCRIPTION} (a leaf switch of {MAX_OVERSUBSCRIPTION + 1} ports, the "
                "most one has, with a single uplink)"
            )
        out.append(("oversubscription", value))
    return tuple(out)


def _segment_gpus(params: Mapping[str, Any]) -> int | None:
    """``segment_gpus``: 0 (no segments: the ranks fill whole NVLink domains,
    :attr:`model.hardware.DeviceSpec.segment_gpus`), else a whole number ≥ 1
    (:func:`count_of`'s rule and refusal), or None where not given."""
    value = params.get("segment_gpus")
    if value is not None and str(value).strip() in ("0", "0.0"):
        return 0
    return count_of(params, "segment_gpus")
