"""``trainplan calibrate``: fit the roofline model's efficiencies to measured steps of known
layouts, print the fit and its residuals, and save them as a scenario file.

A fit the model cannot explain (:func:`interface.calibration.fit_problems`: a figure on a bound,
a residual beyond ±25 %) is printed, then refused with one ``Error:`` line and exit code 2, and
nothing is written — unless ``--accept-poor-fit``, which writes it with the problems in the
file's comments and a warning on stderr (exit 0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from trainplan.interface.cli import cli
from trainplan.interface.cli.common import echo_json, fail, output
from trainplan.interface.cli.evaluate_line import evaluate_line
from trainplan.interface.outputs import writing
from trainplan.model.errors import InputError


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
        ],
        case_sensitive=False,
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
@click.option(
    "--accept-poor-fit",
    "accept",
    is_flag=True,
    help="Keep a fit the model cannot explain (a figure on a bound of its range, or a run off "
    "by more than ±25%): write it anyway, with a warning (docs/guides/calibration.md).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def calibrate_cmd(
    measurements: str, fit: tuple[str, ...], output_file: Any, accept: bool, as_json: bool
) -> None:
    """Fit efficiencies to MEASUREMENTS (a TOML file: gpu, fit, and [[run]] tables of evaluate
    parameters with step_seconds; see docs/guides/calibration.md) and report the residuals. A fit with
    a figure on a bound or a run off by more than ±25% is refused (exit 2) unless
    --accept-poor-fit."""
    from trainplan.interface.calibration import (
        calibrate_measurements,
        fit_problems,
        fit_text,
        read_measurements,
        scenario_text,
    )

    if output_file and _same_file(Path(output_file), Path(measurements)):
        raise InputError(
            f"--output: {str(output_file)!r} is the measurements file; writing the fit there would "
            "overwrite the measurements — give another file"
        )
    gpu, keys, runs = read_measurements(measurements)
    result = calibrate_measurements(gpu, fit or keys, runs)
    problems = fit_problems(result)
    written = bool(output_file) and (accept or not problems)
    if written:
        with writing(output_file, "--output"):
            Path(output_file).write_text(scenario_text(result, gpu, f"measurements {measurements}"))
    if as_json:
        echo_json(_fit_json(gpu, result, problems, accept, output_file if written else None))
    else:
        click.echo(fit_text(result))
        click.echo("each run's prediction, as evaluate gives it:")
        for r in result.residuals:
            click.echo(f"  {r.label}: {evaluate_line(r.params)}")
        if written:
            click.echo(f"wrote {output_file}")
    if problems and accept:
        click.echo(
            f"Warning: a poor fit, kept (--accept-poor-fit): {'; '.join(problems)}", err=True
        )
    elif problems:
        fail(
            f"calibrate: the model cannot explain these measurements: {'; '.join(problems)}. "
            "Check each run's step_seconds and layout"
            + (", nothing was written" if output_file else "")
            + "; --accept-poor-fit keeps such a fit anyway"
        )


def _fit_json(gpu: str, fit: Any, problems: list[str], accept: bool, output: Any) -> dict:
    """``calibrate --json``: the fit, its residuals (each run's settings as evaluated and those
    left at the planner's default, and ``evaluate_command``: the ``trainplan evaluate`` line
    that gives its prediction), why it is poor (``problems``), each fitted figure far from
    its per-operation default (``warnings``), whether it was kept, and the file written (None:
    none)."""
    from trainplan.interface.calibration import fit_warnings

    return {
        "gpu": gpu,
        "fitted": dict(fit.figures),
        "held": dict(fit.fixed),
        "residuals": [
            {
                "label": r.label,
                "measured_s": r.measured_s,
                "predicted_s": r.predicted_s,
                "error": r.error,
                "settings": dict(r.settings),
                "defaulted": list(r.defaulted),
                "evaluate_command": evaluate_line(r.params),
            }
            for r in fit.residuals
        ],
        "mean_abs_error": fit.mean_abs_error,
        "max_abs_error": fit.max_abs_error,
        "problems": problems,
        "warnings": fit_warnings(fit),
        "accepted": not problems or accept,
        "output": str(output) if output else None,
    }


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` names the file ``b`` (the same path, a link to it, or a hard link)."""
    try:
        return a.exists() and a.samefile(b)
    except OSError:
        return a.resolve() == b.resolve()
