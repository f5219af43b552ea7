"""The accelerator table: ``topology/accelerators.toml`` read into :class:`DeviceSpec` values.

The data file is package data read with :mod:`importlib.resources`, so it works from an installed
wheel. Keys are strict: an unknown key or a missing required key is a :class:`ScenarioError` that
names the file, the row and the key. Every row carries a ``source``.

Units: the file holds vendor units (``memory_gb`` in GB or GiB as ``memory_unit`` says,
``bf16_tflops`` in TFLOP/s, ``*_gbps`` in GB/s = 10^9 bytes/s per GPU per direction, and
``hbm_tbps`` the device memory's peak bandwidth in TB/s); the
:class:`DeviceSpec` values hold base units (bytes, FLOP/s, bytes/s).
"""

from __future__ import annotations

import math
import re
import tomllib
from fractions import Fraction
from functools import lru_cache
from importlib import resources
from typing import Any

from trainplan.model.errors import ScenarioError
from trainplan.model.frameworks import DRIVER_RESERVED_BYTES
from trainplan.model.hardware import DeviceSpec, runtime_reserve_for
from trainplan.model.units import GB, GIB, closest_names
from trainplan.topology.accelerator_figures import read_figures
from trainplan.topology.accelerator_sizes import sized_names

__all__ = [
    "load_accelerators",
    "get_accelerator",
    "is_part_file",
    "name_key",
    "check_keys",
    "check_row",
    "to_device",
    "accelerator_tables",
    "catalogue_row",
    "row_dict",
    "accelerator_rows",
    "status_legend",
    "ALIASES",
    "STATUS_HEADER",
    "STATUS_MEANINGS",
    "TABLE_FILE",
]

TABLE_FILE = "accelerators.toml"
"""File name of the table inside the ``topology`` package."""

_REQUIRED = ("name", "memory_gb", "memory_unit", "bf16_tflops", "dense", "source", "status")
_OPTIONAL = (
    *("nvlink_gbps", "nvlink_domain", "scaleout_gbps", "hbm_gib", "fp8_tflops", "fp8_source"),
    *("hbm_tbps", "host_link_gbps", "bandwidth_source", "host_memory_gb", "host_memory_gbps"),
    *("host_cores", "host_source", "gpus_per_node", "power_w", "power_source"),
    *("driver_total_mib", "driver_reserved_mib", "driver_source"),
)
_DRIVER_KEYS = ("driver_total_mib", "driver_reserved_mib", "driver_source")
_ROW_OPTIONAL = (
    *("nvlink_gbps", "nvlink_domain", "scaleout_gbps", "hbm_tbps", "host_link_gbps"),
    *("bandwidth_source", "host_memory_gb", "host_memory_gbps", "host_cores", "host_source"),
    *("power_w", "power_source"),
)
"""The optional keys a row of :func:`accelerator_rows` shows, in its order."""
_UNITS = {"GB": GB, "GiB": GIB}
STATUS_MEANINGS: dict[str, str] = {
    "vendor": "read in the vendor's document",
    "secondary": "a copy of the vendor's table",
    "derived": "computed from vendor figures, as the row's source says",
}
"""A row's ``status`` (accelerators.toml): how its figures were got from their source."""
STATUS_HEADER = "figures from"
"""The ``status`` column's header in the CLI's and the page's tables."""
_STATUSES = tuple(STATUS_MEANINGS)


def status_legend() -> str:
    """The line under the accelerator table that says what its ``figures from`` column (a
    row's ``status``) means."""
    kinds = "; ".join(f"{k} = {v}" for k, v in STATUS_MEANINGS.items())
    return f"{STATUS_HEADER}: {kinds}."


ALIASES: dict[str, str] = {
    "h100sxm5": "H100-SXM",
    "trn2": "Trainium2",
}
"""Other spellings accepted by :func:`get_accelerator`, keyed by normalised spelling (see
:func:`name_key`). Only names that mean one part: ``H100`` (SXM, PCIe or NVL?), ``A100`` (40 or 80 GB?)
and ``Gaudi`` (2 or 3?) are not here, and are refused with their candidates."""


def name_key(name: str) -> str:
    """Normalised spelling: lower case without spaces, hyphens, underscores or dots.

    >>> name_key("TPU v4"), name_key("tpu-v4"), name_key("H100_SXM")
    ('tpuv4', 'tpuv4', 'h100sxm')
    """
    return re.sub(r"[\s\-_.]+", "", name).lower()


def _where(row: int, name: object) -> str:
    return f"{TABLE_FILE}: accelerator row {row}" + (f" ({name})" if name else "")


FIGURE_LIMIT = 10**9
"""The largest figure a row may give in its key's own unit (TFLOP/s, GB, GB/s, GPUs, W, cores):
a thousand times beyond any part of the table, and small enough that every figure scaled to
FLOP/s or bytes stays a finite float (a file's ``bf16_tflops = 1e300`` would not)."""


def _number(value: Any, where: str, key: str, *, integer: bool = False) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(f"{where}: key '{key}' must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ScenarioError(f"{where}: key '{key}' must be a finite number, got {value!r}")
    exact = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    if exact <= 0 or (integer and exact.denominator != 1):
        kind = "a positive whole number" if integer else "positive"
        raise ScenarioError(f"{where}: key '{key}' must be {kind}, got {value!r}")
    if exact > FIGURE_LIMIT:
        raise ScenarioError(
            f"{where}: key '{key}' must be at most {FIGURE_LIMIT:.0e} in its unit (no accelerator "
            f"comes near it), got {value!r}"
        )
    return exact


def _check_peak_sources(row: dict[str, Any], where: str) -> None:
    """``source`` a non-empty string; ``fp8_source`` one too, and only beside ``fp8_tflops``."""
    if not isinstance(row["source"], str) or not row["source"].strip():
        raise ScenarioError(f"{where}: key 'source' must be a non-empty string")
    if "fp8_source" in row and (
        "fp8_tflops" not in row
        or not isinstance(row["fp8_source"], str)
        or not row["fp8_source"].strip()
    ):
        raise ScenarioError(f"{where}: fp8_source must be a non-empty string, beside fp8_tflops")


def check_keys(row: dict[str, Any], where: str, extra: tuple[str, ...] = ()) -> None:
    """Refuse a key that is neither the table's nor one of ``extra``, naming the allowed ones.

    Raises
    ------
    ScenarioError
        ``{where}: unknown key 'X' (allowed: name, memory_gb, …)``.
    """
    unknown = sorted(set(row) - set(_REQUIRED) - set(_OPTIONAL) - set(extra))
    if unknown:
        allowed = ", ".join(_REQUIRED + _OPTIONAL + extra)
        raise ScenarioError(f"{where}: unknown key '{unknown[0]}' (allowed: {allowed})")


def check_row(row: dict[str, Any], where: str, extra: tuple[str, ...] = ()) -> None:
    """Check one ``[[accelerator]]`` row against the table's rules (module docstring);
    ``where`` heads each refusal (the table's file and row, or ``gpu: 'PATH'``), ``extra`` are
    keys a caller takes besides the table's (a file's ``base`` and ``like``).

    Raises
    ------
    ScenarioError
        An unknown or missing key, a value of the wrong kind, a figure without its source.
    """
    check_keys(row, where, extra)
    for key in _REQUIRED:
        if key not in row:
            raise ScenarioError(f"{where}: missing required key '{key}'")
    if not isinstance(row["name"], str) or not row["name"].strip():
        raise ScenarioError(f"{where}: key 'name' must be a non-empty string")
    if row["memory_unit"] not in _UNITS:
        raise ScenarioError(
            f"{where}: key 'memory_unit' must be GB or GiB, got {row['memory_unit']!r}"
        )
    if row["dense"] is not True:
        raise ScenarioError(f"{where}: key 'dense' must be true (bf16_tflops is the dense peak)")
    _check_peak_sources(row, where)
    has_rate = "hbm_tbps" in row or "host_link_gbps" in row
    if has_rate != ("bandwidth_source" in row):
        raise ScenarioError(
            f"{where}: hbm_tbps / host_link_gbps need a bandwidth_source, and only they do"
        )
    if has_rate and (
        not isinstance(row["bandwidth_source"], str) or not row["bandwidth_source"].strip()
    ):
        raise ScenarioError(f"{where}: key 'bandwidth_source' must be a non-empty string")
    has_host = any(k in row for k in ("host_memory_gb", "host_memory_gbps", "host_cores"))
    if has_host != ("host_source" in row) or (
        has_host and (not isinstance(row["host_source"], str) or not row["host_source"].strip())
    ):
        raise ScenarioError(
            f"{where}: host_memory_gb / host_memory_gbps / host_cores need a non-empty "
            "host_source, and only they do"
        )
    if ("power_w" in row) != ("power_source" in row) or (
        "power_source" in row
        and (not isinstance(row["power_source"], str) or not row["power_source"].strip())
    ):
        raise ScenarioError(f"{where}: power_w needs a non-empty power_source, and only it does")
    if "power_w" in row:
        _number(row["power_w"], where, "power_w")
    given = [k for k in _DRIVER_KEYS if k in row]
    if given and (
        len(given) != len(_DRIVER_KEYS)
        or not isinstance(row["driver_source"], str)
        or not row["driver_source"].strip()
    ):
        raise ScenarioError(
            f"{where}: driver_total_mib, driver_reserved_mib and a non-empty driver_source go "
            "together"
        )
    if row["status"] not in _STATUSES:
        raise ScenarioError(f"{where}: key 'status' must be one of {', '.join(_STATUSES)}")


def _driver_figures(row: dict[str, Any], where: str, memory: Fraction) -> tuple[int, int, str]:
    """(the device's bytes, the bytes its driver keeps, their source) from a row's
    ``driver_total_mib``, ``driver_reserved_mib`` and ``driver_source``."""
    if "hbm_gib" in row:
        raise ScenarioError(f"{where}: give hbm_gib or driver_total_mib, not both")
    total = _number(row["driver_total_mib"], where, "driver_total_mib", integer=True) * 2**20
    kept = _number(row["driver_reserved_mib"], where, "driver_reserved_mib", integer=True) * 2**20
    if total < memory or kept >= total:
        raise ScenarioError(
            f"{where}: driver_total_mib {row['driver_total_mib']} must be at least memory_gb "
            f"and above driver_reserved_mib {row['driver_reserved_mib']}"
        )
    return int(total), int(kept), row["driver_source"]


def _reserve(row: dict[str, Any], where: str, physical: Fraction | int, kept_bytes: int) -> int:
    """The runtime reserve of a part whose driver keeps ``kept_bytes`` (bytes,
    :func:`model.hardware.runtime_reserve_for`), checked below the part's ``physical`` bytes.

    Raises
    ------
    ScenarioError
        Naming ``memory_gb``, the key the row gives (DeviceSpec's own check would name
        ``memory_reserve``, which the row never wrote), its value, unit and the reserve."""
    reserve = runtime_reserve_for(kept_bytes)
    if physical <= reserve:
        raise ScenarioError(
            f"{where}: memory_gb {row['memory_gb']} ({row['memory_unit']}) must be above the "
            f"{reserve / GIB:.2f} GiB every process holds before the model "
            "(driver, CUDA context, cuBLAS workspaces, fragmentation allowance: "
            "model.hardware.runtime_reserve_for)"
        )
    return reserve


def to_device(row: dict[str, Any], where: str) -> DeviceSpec:
    """A row :func:`check_row` passed as a :class:`DeviceSpec` (refusals headed ``where``)."""
    memory = _number(row["memory_gb"], where, "memory_gb") * _UNITS[row["memory_unit"]]
    if memory.denominator != 1:
        raise ScenarioError(f"{where}: memory_gb {row['memory_gb']} is not a whole number of bytes")
    peak = _number(row["bf16_tflops"], where, "bf16_tflops") * 10**12

    def rate(key: str) -> float | None:
        return float(_number(row[key], where, key) * GB) if key in row else None

    domain = row.get("nvlink_domain")
    hbm = None
    if "hbm_gib" in row:
        hbm_exact = _number(row["hbm_gib"], where, "hbm_gib") * GIB
        if hbm_exact.denominator != 1 or hbm_exact < memory:
            raise ScenarioError(
                f"{where}: hbm_gib {row['hbm_gib']} must be whole bytes and at least memory_gb"
            )
        hbm = int(hbm_exact)
    if "driver_total_mib" in row:
        hbm, kept_bytes, driver_source = _driver_figures(row, where, memory)
    else:
        kept_bytes, driver_source = DRIVER_RESERVED_BYTES, ""
    return DeviceSpec(
        name=row["name"],
        memory_bytes=int(memory),
        memory_unit=row["memory_unit"],
        hbm_bytes=hbm,
        driver_reserved_bytes=kept_bytes,
        driver_source=driver_source,
        runtime_reserve_bytes=_reserve(row, where, hbm or memory, kept_bytes),
        peak_flops_per_s=float(peak),
        nvlink_bytes_per_s=rate("nvlink_gbps"),
        nvlink_domain=None
        if domain is None
        else int(_number(domain, where, "nvlink_domain", integer=True)),
        scaleout_bytes_per_s=rate("scaleout_gbps"),
        fp8_flops_per_s=float(_number(row["fp8_tflops"], where, "fp8_tflops") * 10**12)
        if "fp8_tflops" in row
        else None,
        fp8_source=row.get("fp8_source", ""),
        hbm_bytes_per_s=float(_number(row["hbm_tbps"], where, "hbm_tbps") * 10**12)
        if "hbm_tbps" in row
        else None,
        host_link_bytes_per_s=rate("host_link_gbps"),
        bandwidth_source=row.get("bandwidth_source", ""),
        host_memory_bytes=int(_number(row["host_memory_gb"], where, "host_memory_gb") * GB)
        if "host_memory_gb" in row
        else None,
        host_memory_bytes_per_s=rate("host_memory_gbps"),
        host_cores=int(_number(row["host_cores"], where, "host_cores", integer=True))
        if "host_cores" in row
        else None,
        host_source=row.get("host_source", ""),
        gpus_per_node=int(
            _number(row.get("gpus_per_node", 8), where, "gpus_per_node", integer=True)
        ),
        source=row["source"],
        status=row["status"],
    )


def accelerator_tables(text: str, where: str) -> list[dict[str, Any]]:
    """The ``[[accelerator]]`` tables of TOML ``text``, unchecked (the table's file, or a file
    describing one part); ``where`` heads a refusal.

    Raises
    ------
    ScenarioError
        Not TOML, a top-level key other than ``accelerator``, no ``[[accelerator]]`` table.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{where}: not valid TOML ({exc})") from None
    extra = sorted(set(data) - {"accelerator"})
    if extra:
        raise ScenarioError(f"{where}: unknown top-level key '{extra[0]}' (only [[accelerator]])")
    rows = data.get("accelerator")
    if not isinstance(rows, list) or not rows:
        raise ScenarioError(f"{where}: no [[accelerator]] table")
    return [read_figures(row, where) for row in rows]  # "400Gb/s": 50 GB/s


def _parse(text: str) -> list[dict[str, Any]]:
    rows = accelerator_tables(text, TABLE_FILE)
    for index, row in enumerate(rows, start=1):
        check_row(row, _where(index, row.get("name")))
    return rows


def _devices_from_text(text: str) -> dict[str, DeviceSpec]:
    """Parse and validate table text (the loader's work, separated from file access for tests)."""
    devices: dict[str, DeviceSpec] = {}
    for index, row in enumerate(_parse(text), start=1):
        device = to_device(row, _where(index, row["name"]))
        if name_key(device.name) in {name_key(n) for n in devices}:
            raise ScenarioError(f"{_where(index, device.name)}: duplicate name")
        devices[device.name] = device
    return devices


@lru_cache(maxsize=16)
def _table_text() -> str:
    return resources.files("trainplan.topology").joinpath(TABLE_FILE).read_text(encoding="utf-8")


@lru_cache(maxsize=16)
def load_accelerators() -> dict[str, DeviceSpec]:
    """Every accelerator of the table, by catalogue name, in file order (cached).

    Returns
    -------
    dict[str, DeviceSpec]
        ``memory_bytes`` in bytes (GB = 10^9 or GiB = 2^30 per row), ``peak_flops_per_s`` in
        dense BF16 FLOP/s, link bandwidths in bytes/s per GPU per direction (None when the table
        has no sourced figure). Source: ``topology/accelerators.toml``, a ``source`` per row.

    Raises
    ------
    ScenarioError
        When the file is malformed: an unknown or missing key names the file, row and key.

    Examples
    --------
    >>> load_accelerators()["H100-SXM"].peak_flops_per_s
    989400000000000.0
    """
    return _devices_from_text(_table_text())


def get_accelerator(name: str) -> DeviceSpec:
    """The accelerator called ``name``: case-insensitive, spaces/hyphens ignored, the spellings
    of :data:`ALIASES`, or the start of exactly one catalogue name (``V100`` → ``V100-SXM2-32GB``,
    ``TPU v4`` / ``tpu-v4`` → ``TPUv4``). A start several names share is ambiguous: the
    candidates are listed, none is chosen (``A100`` could be the 40 GB or the 80 GB part). A
    family and a size (``H200-141GB``) is the family's part of that size
    (:func:`topology.accelerator_sizes.sized_names`), ambiguous where several are.

    Raises
    ------
    ScenarioError
        ``gpu: 'A100' is ambiguous: A100-40GB, A100-80GB …`` with the candidates, or
        ``unknown gpu 'X'; did you mean …?`` with the closest catalogue names.

    Examples
    --------
    >>> get_accelerator("tpu v4").memory_bytes
    34359738368
    >>> get_accelerator("h100-sxm").name, get_accelerator("v100").name
    ('H100-SXM', 'V100-SXM2-32GB')
    """
    devices = load_accelerators()
    by_key = {name_key(n): d for n, d in devices.items()}
    key = name_key(str(name))
    if not key:
        raise ScenarioError(f"gpu: {name!r} is empty; name an accelerator (trainplan gpus)")
    if key in by_key:
        return by_key[key]
    if key in ALIASES:
        return devices[ALIASES[key]]
    candidates = [n for n in devices if name_key(n).startswith(key)]
    if len(candidates) == 1:
        return devices[candidates[0]]
    if candidates:
        raise ScenarioError(
            f"gpu: {name!r} is ambiguous: it could be {', '.join(candidates)}; name one "
            "(trainplan gpus lists them)"
        )
    sized = sized_names(str(name), {n: d.memory_bytes for n, d in devices.items()}, name_key)
    if len(sized) == 1:  # H200-141GB: the family's one part of that size
        return devices[sized[0]]
    if sized:  # H100-80GB: the SXM or the PCIe part
        raise ScenarioError(
            f"gpu: {name!r} is ambiguous: it could be {', '.join(sized)}; name one "
            "(trainplan gpus lists them)"
        )
    raise ScenarioError(f"unknown gpu '{name}'; {closest_names(str(name), list(devices))}")


def accelerator_rows() -> list[dict[str, Any]]:
    """One JSON-able dict per table row, in file order, for a ``trainplan gpus`` table.

    Keys: ``name, memory_gb, memory_unit, memory_bytes, device_bytes, runtime_reserve_bytes,
    usable_bytes, bf16_tflops, fp8_tflops, fp8_source,
    dense, nvlink_gbps,
    nvlink_domain, scaleout_gbps, hbm_tbps, host_link_gbps, bandwidth_source, host_memory_gb,
    host_memory_gbps, host_cores, host_source, power_w, power_source, source, status``;
    the vendor figures as written in the file (GB/s per GPU per direction, HBM in TB/s; None
    where the table has no sourced figure) plus ``memory_bytes`` in bytes (the vendor's nominal
    figure), ``device_bytes`` (the bytes the device has, as its driver reports them where a
    capture is known: :attr:`model.hardware.DeviceSpec.physical_bytes`, what evaluate starts
    from), ``runtime_reserve_bytes`` and ``usable_bytes`` (device less reserve: evaluate's
    capacity under a physical profile, :meth:`~model.hardware.DeviceSpec.usable_bytes`).

    Examples
    --------
    >>> row = accelerator_rows()[0]
    >>> row["name"], row["memory_bytes"]
    ('V100-SXM2-32GB', 32000000000)
    """
    devices = load_accelerators()
    return [row_dict(raw, devices[raw["name"]]) for raw in _parse(_table_text())]


def row_dict(raw: dict[str, Any], device: DeviceSpec) -> dict[str, Any]:
    """One row of :func:`accelerator_rows` from a checked row ``raw`` and its device."""
    return {
        "name": raw["name"],
        "memory_gb": raw["memory_gb"],
        "memory_unit": raw["memory_unit"],
        "memory_bytes": device.memory_bytes,
        "device_bytes": device.physical_bytes,
        "runtime_reserve_bytes": device.runtime_reserve_bytes,
        "usable_bytes": device.usable_bytes(True),
        "bf16_tflops": raw["bf16_tflops"],
        **{k: raw.get(k) for k in ("fp8_tflops", "fp8_source")},
        "dense": raw["dense"],
        **{k: raw.get(k) for k in _ROW_OPTIONAL},
        "source": raw["source"],
        "status": raw["status"],
    }


def catalogue_row(name: str) -> dict[str, Any]:
    """The table's row of catalogue part ``name`` as the file writes it (a copy).

    Raises
    ------
    KeyError
        ``name`` is not a catalogue name as the table spells it.
    """
    return dict(next(r for r in _parse(_table_text()) if r["name"] == name))


def is_part_file(name: object) -> bool:
    """Whether an accelerator named ``name`` is a file describing one (a path ending in
    ``.toml``, as ``--model`` takes a path ending in ``.json``).

    >>> is_part_file("parts/h100-a3-high.toml"), is_part_file("H100-SXM")
    (True, False)
    """
    return isinstance(name, str) and name.strip().lower().endswith(".toml")
