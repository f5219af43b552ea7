"""``trainplan calibrate``: fit the roofline model's efficiencies to measured steps of known
layouts, print the fit and its residuals, and save them as a scenario file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from trainplan.interface.cli import cli
from trainplan.interface.cli.common import echo_json, output


@cli.command("calibrate")
@click.argument("measurements", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--fit",
    "fit",
    multiple=True,
    type=click.Choice(
        [
            "gemm_efficiency",
            "attention_efficiency",
            "hbm_efficiency",
            "scaleup_efficiency",
            "scaleout_efficiency",
        ]
    ),
    help="A figure to fit (repeatable); default the file's `fit`, else gemm_efficiency.",
)
@click.option(
    "--output",
    "output_file",
    type=output(".toml"),
    help="Write the fit as a scenario file: load it with (trainplan evaluate --calibration "
    "FILE) or (trainplan search --scenario FILE).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def calibrate_cmd(measurements: str, fit: tuple[str, ...], output_file: Any, as_json: bool) -> None:
    """Fit efficiencies to MEASUREMENTS (a TOML file: gpu, fit, and [[run]] tables of evaluate
    parameters with step_seconds; see interface/calibration.py) and report the residuals."""
    from trainplan.interface.calibration import (
        calibrate_measurements,
        fit_text,
        read_measurements,
        scenario_text,
    )

    gpu, keys, runs = read_measurements(measurements)
    result = calibrate_measurements(gpu, fit or keys, runs)
    if output_file:
        Path(output_file).write_text(scenario_text(result, gpu, f"measurements {measurements}"))
    if as_json:
        echo_json(
            {
                "gpu": gpu,
                "fitted": dict(result.figures),
                "held": dict(result.fixed),
                "residuals": [
                    {
                        "label": r.label,
                        "measured_s": r.measured_s,
                        "predicted_s": r.predicted_s,
                        "error": r.error,
                    }
                    for r in result.residuals
                ],
                "mean_abs_error": result.mean_abs_error,
                "max_abs_error": result.max_abs_error,
                "output": str(output_file) if output_file else None,
            }
        )
        return
    click.echo(fit_text(result))
    if output_file:
        click.echo(f"wrote {output_file}")
