"""The largest bandwidth and FLOP rate a part described outside the accelerator table may give.

One rule for every rate a user writes, whether on the command line (``--nvlink-gbps``,
``--peak-tflops``), in a ``--gpu PATH.toml`` file or in an inline accelerator: at most 100× the
fastest figure of its kind among the parts of ``topology/accelerators.toml`` (its vendors'
datasheets), so a typo such as ``1e9`` is refused in one line instead of printing a step with no
communication or no computation at all. The table itself is not held to it (the bound is drawn
from the table).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from trainplan.model.errors import ScenarioError
from trainplan.model.hardware import DeviceSpec
from trainplan.model.units import shown_number
from trainplan.topology.accelerators import load_accelerators

__all__ = [
    "BANDWIDTHS",
    "FLOP_RATES",
    "max_bandwidth",
    "max_flop_rate",
    "check_part_rates",
    "rate_over_bound",
]

HEADROOM = 100
"""How far beyond the table's fastest part a figure may go: two orders of magnitude, room for
parts a decade out, far below a typo's extra zeros."""

BANDWIDTHS = (
    "hbm_bytes_per_s",
    "nvlink_bytes_per_s",
    "scaleout_bytes_per_s",
    "host_link_bytes_per_s",
    "host_memory_bytes_per_s",
)
"""The :class:`model.hardware.DeviceSpec` bandwidths (bytes/s) :func:`max_bandwidth` bounds."""

FLOP_RATES = ("peak_flops_per_s", "fp8_flops_per_s")
"""The :class:`model.hardware.DeviceSpec` FLOP rates (FLOP/s) :func:`max_flop_rate` bounds."""

_FILE_KEYS: dict[str, tuple[str, int, str]] = {
    "hbm_bytes_per_s": ("hbm_tbps", 10**12, "TB/s"),
    "nvlink_bytes_per_s": ("nvlink_gbps", 10**9, "GB/s"),
    "scaleout_bytes_per_s": ("scaleout_gbps", 10**9, "GB/s"),
    "host_link_bytes_per_s": ("host_link_gbps", 10**9, "GB/s"),
    "host_memory_bytes_per_s": ("host_memory_gbps", 10**9, "GB/s"),
    "peak_flops_per_s": ("bf16_tflops", 10**12, "TFLOP/s"),
    "fp8_flops_per_s": ("fp8_tflops", 10**12, "TFLOP/s"),
}
"""Each bounded field's key in an accelerator file, the key's unit in base units and its name."""


def _fastest(fields: tuple[str, ...]) -> tuple[float, str]:
    """(the fastest of ``fields`` over the table's parts in base units, that part's name)."""
    return max((getattr(d, k) or 0.0, d.name) for d in load_accelerators().values() for k in fields)


@cache
def max_bandwidth() -> tuple[float, str]:
    """(the largest bandwidth accepted, bytes/s per GPU per direction; its reason in words):
    :data:`HEADROOM` × the fastest bandwidth of :data:`BANDWIDTHS` in the table (the MI355X's
    8 TB/s HBM today, AMD Instinct MI355X datasheet).

    >>> max_bandwidth()
    (800000000000000.0, "100× the fastest bandwidth in the accelerator table, the MI355X's 8,000 GB/s")
    """
    rate, name = _fastest(BANDWIDTHS)
    why = (
        f"100× the fastest bandwidth in the accelerator table, the {name}'s {rate / 1e9:,.0f} GB/s"
    )
    return HEADROOM * rate, why


@cache
def max_flop_rate() -> tuple[float, str]:
    """(the largest FLOP rate accepted per chip, FLOP/s; its reason in words): :data:`HEADROOM` ×
    the fastest dense rate of :data:`FLOP_RATES` in the table (the MI355X's 5,032 TFLOP/s dense
    FP8 today, AMD Instinct MI355X datasheet).

    >>> max_flop_rate()
    (5.032e+17, "100× the fastest FLOP rate in the accelerator table, the MI355X's 5,032 TFLOP/s")
    """
    rate, name = _fastest(FLOP_RATES)
    why = (
        f"100× the fastest FLOP rate in the accelerator table, the {name}'s "
        f"{rate / 1e12:,.0f} TFLOP/s"
    )
    return HEADROOM * rate, why


def check_part_rates(device: DeviceSpec, row: dict[str, Any], where: str) -> None:
    """Refuse a part from a file (or given inline) whose bandwidth is above :func:`max_bandwidth`
    or whose FLOP rate is above :func:`max_flop_rate`; ``row`` is the file's row merged with its
    base (the value is echoed as every refused number is, :func:`model.units.shown_number`:
    TOML's ``1e9`` is read as the float 1000000000.0, echoed ``1,000,000,000``), ``where`` heads
    the refusal.

    Raises
    ------
    ScenarioError
        ``WHERE: key 'bf16_tflops' must be at most 503,200 TFLOP/s (100× …), got 1,000,000,000``.
    """
    for field, (key, unit, unit_name) in _FILE_KEYS.items():
        value = getattr(device, field)
        top, why = max_flop_rate() if field in FLOP_RATES else max_bandwidth()
        if value is not None and value > top:
            raise ScenarioError(
                f"{where}: key '{key}' must be at most {top / unit:,.0f} {unit_name} ({why}), "
                f"got {shown_number(row.get(key, value / unit))}"
            )


def rate_over_bound(field: str, value: float | None) -> str | None:
    """Why ``value`` (base units: bytes/s or FLOP/s) of the :class:`DeviceSpec` field ``field``
    is refused — ``"2.2e+09 TFLOP/s is above 503,200 TFLOP/s (100× …)"`` — or None when it is
    within :func:`max_bandwidth` / :func:`max_flop_rate`, not given, or not a bounded rate (a
    sweep's what-if part, :func:`topology.what_if.what_if_part`).

    >>> rate_over_bound("peak_flops_per_s", 9.894e20)[:43]
    '989,400,000 TFLOP/s is above 503,200 TFLOP/'
    >>> rate_over_bound("peak_flops_per_s", 9.894e14), rate_over_bound("memory_bytes", 1e30)
    (None, None)
    """
    if field not in _FILE_KEYS or value is None:
        return None
    _, unit, unit_name = _FILE_KEYS[field]
    top, why = max_flop_rate() if field in FLOP_RATES else max_bandwidth()
    if value <= top:
        return None
    return f"{value / unit:,.0f} {unit_name} is above {top / unit:,.0f} {unit_name} ({why})"
