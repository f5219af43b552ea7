"""An accelerator row's figures written as text (``scaleout_gbps = "400Gb/s"``,
``memory_gb = "80GB"``, ``power_w = "1,000"``), read by the one number grammar of every input
(:func:`model.units.parse_number`, docs/guides/cli.md "Numbers") into the key's own unit."""

from __future__ import annotations

from typing import Any

from trainplan.model.errors import InputError, ScenarioError
from trainplan.model.units import as_json_number, parse_number

__all__ = ["FIGURE_KEYS", "read_figures"]

FIGURE_KEYS = frozenset(
    {
        *("memory_gb", "bf16_tflops", "fp8_tflops", "nvlink_gbps", "nvlink_domain"),
        *("scaleout_gbps", "hbm_gib", "hbm_tbps", "host_link_gbps", "host_memory_gb"),
        *("host_memory_gbps", "host_cores", "gpus_per_node", "power_w"),
        *("driver_total_mib", "driver_reserved_mib"),
    }
)
"""The keys of a row (topology/accelerators.toml) that hold a number, each in the unit its name
ends in (GB, TFLOP/s, GB/s, GiB, TB/s, W, MiB) or a count (GPUs, cores)."""


def read_figures(row: Any, where: str) -> Any:
    """``row`` (a ``[[accelerator]]`` table) with each figure of :data:`FIGURE_KEYS` given as
    text read as a number in its key's unit (``"400Gb/s"`` → 50, GB/s; ``"80GB"`` → 80 on a
    GB row, 74.5… on a GiB row: ``memory_gb`` is in the row's ``memory_unit``); anything else,
    and a row that is no table, as given (:func:`topology.accelerators.check_row` judges it).

    Raises
    ------
    ScenarioError
        Headed ``where``: a text the grammar refuses (``'400gbps' is ambiguous …``).

    >>> read_figures({"scaleout_gbps": "400Gb/s", "memory_gb": "80GB", "name": "X"}, "x")
    {'scaleout_gbps': 50, 'memory_gb': 80, 'name': 'X'}
    """
    if not isinstance(row, dict):
        return row
    unit = row.get("memory_unit")
    memory = f"memory_{unit.lower()}" if isinstance(unit, str) else "memory_gb"
    out = dict(row)
    for key, value in row.items():
        if key in FIGURE_KEYS and isinstance(value, str):
            try:
                read = parse_number(value, memory if key == "memory_gb" else key)
            except InputError as err:
                raise ScenarioError(f"{where}: {err}") from None
            out[key] = as_json_number(read)
    return out
