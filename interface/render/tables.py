"""Tables the CLI prints beside the plan's text: the ``--per-stage`` table and the accelerator
table of ``trainplan gpus``. Presentation only: every figure comes from the library's JSON."""

from __future__ import annotations

from typing import Any

from trainplan.interface.render.part_text import rates_of
from trainplan.interface.render.report import gb, table_text
from trainplan.topology.accelerators import STATUS_HEADER

__all__ = ["STAGE_COLUMNS", "gpus_text", "stages_text"]


STAGE_COLUMNS: dict[str, str] = {
    "stage": "stage",
    "stage_layers": "layers",
    "stage_state_bytes": "model state GB",
    "stage_activation_bytes": "layer activations GB",
    "stage_other_activation_bytes": "other activations GB",
    "stage_in_flight": "micro-batches in flight",
    "stage_total_bytes": "peak GB",
}
"""The ``--per-stage`` table's header for each key of the JSON's ``stages`` rows (bytes in GB,
10^9, per GPU)."""


def stages_text(stages: list[dict[str, Any]]) -> str:
    """The ``--per-stage`` table (evaluate's ``stages`` rows): headers with their units
    (:data:`STAGE_COLUMNS`), GB to two decimals, and a line saying what the two summary columns
    hold.

    Examples
    --------
    >>> row = {"stage": 0, "stage_layers": 20, "stage_state_bytes": 27.26e9,
    ...        "stage_activation_bytes": 22.48e9, "stage_other_activation_bytes": 0.29e9,
    ...        "stage_in_flight": 16 / 3, "stage_total_bytes": 51.69e9}
    >>> print(stages_text([row]).splitlines()[2])
    0        20        27.26             22.48                   0.29                    5.333                      51.69
    """

    def cell(key: str, value: Any) -> str:
        if value is None:
            return "—"
        if key.endswith("_bytes"):
            return gb(value).removesuffix(" GB")
        return f"{value:,.4g}" if isinstance(value, float) else f"{value:,}"

    rows = [
        {STAGE_COLUMNS[k]: cell(k, v) for k, v in r.items() if k in STAGE_COLUMNS} for r in stages
    ]
    return (
        table_text(rows)
        + "\nother activations: embedding and output-layer activations and the recompute, "
        "backward, loss and context-parallel working sets, offload buffers; peak: the stage's "
        "peak per GPU, with the terms these columns leave out (buffers, communicators, caches)"
    )


def gpus_text(rows: list[dict[str, Any]]) -> str:
    """The accelerator table for the terminal (the ``status`` column headed
    :data:`topology.accelerators.STATUS_HEADER`; :func:`topology.accelerators.status_legend`
    says what it means): the vendor's nominal memory as the vendor writes it (GB or GiB, said),
    then in GB = 10⁹ B as evaluate prints them the bytes the device has (its driver's report
    where a capture is known) and what a layout may use after the runtime reserve; every figure
    in the one number form the tool prints (``1,978.9``), an unknown one blank."""
    return table_text(
        [
            {
                "name": r["name"],
                "vendor memory": f"{r['memory_gb']:g} {r['memory_unit']}",
                "device GB": f"{r['device_bytes'] / 1e9:,.2f}",
                "usable GB": f"{r['usable_bytes'] / 1e9:,.2f}",
                "dense BF16 TFLOP/s": _figure(r["bf16_tflops"]),
                "dense FP8 TFLOP/s": _figure(r["fp8_tflops"]),
                "NVLink GB/s": _figure(r["nvlink_gbps"]),
                "domain": _figure(r["nvlink_domain"]),
                "scale-out GB/s": _figure(r["scaleout_gbps"]),
                "HBM TB/s": _figure(r["hbm_tbps"]),
                "host GB/s": _figure(r["host_link_gbps"]),
                "host memory GB/s": _figure(r["host_memory_gbps"]),
                "power W": _figure(r["power_w"]),
                STATUS_HEADER: r["status"],
            }
            for r in rows
        ]
    )


def _figure(value: float | None) -> str:
    """A table figure with thousands separators to six significant figures, blank when unknown.

    >>> _figure(1978.9), _figure(6144), _figure(3.2768), _figure(None)
    ('1,978.9', '6,144', '3.2768', '')
    """
    return "" if value is None else f"{value:,g}"


def part_file_text(row: dict[str, Any]) -> str:
    """The lines under ``trainplan gpus --file``'s table: the file its figures come from, the
    base it starts from and the keys it gives, and the catalogue part whose per-part rates it
    takes (:func:`interface.render.part_text.rates_of`)."""
    base = f"base {row['base']}; " if row["base"] else ""
    given = ", ".join(k for k in row["given"] if k not in ("base", "like"))
    return (
        f"{STATUS_HEADER}: {row['file']} ({base}the file gives {given})\n"
        f"per-part rates (calibrated efficiencies, SM count, published kernel and collective "
        f"curves): {rates_of(row['like'])}"
    )
