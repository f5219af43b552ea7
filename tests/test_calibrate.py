"""Calibration from measurements (issue 16): fit the roofline model's GEMM efficiency on two
measured steps, predict a third, save the fit as a scenario file that evaluate and search load;
and the step-time options' rules (an option of the other time model is refused)."""

from __future__ import annotations

import json
import subprocess
import tomllib
from importlib import resources

import pytest
from click.testing import CliRunner

from tests import cli_runs
from trainplan.interface.calibration import (
    MAX_RESIDUAL,
    calibrate_measurements,
    fit_problems,
    read_measurements,
)
from trainplan.interface.cli import cli, register_commands
from trainplan.interface.inputs import build_case
from trainplan.interface.render.report_dict import estimate_to_dict
from trainplan.interface.scenario import load_scenario
from trainplan.model.errors import InputError, ScenarioError

register_commands()
MEASUREMENTS = resources.files("trainplan.scenarios").joinpath("measurements-megatron-2021.toml")
ROUND_TRIP_TOLERANCE = 0.03
"""A step predicted from a fit on two others is within 3% of its measurement: the Megatron-LM
Table 1 rows' own spread under the roofline model (docs/fidelity-published.md: ±2.2% on the
calibration rows) plus the GEMM-efficiency uncertainty of a two-point fit."""


def test_fit_on_two_rows_predicts_the_third():
    """Megatron-LM Table 1's 7.5B and 39.1B steps (3.696 s, 14.453 s, implied by the published
    TFLOP/s and Eq. 3) fix the GEMM efficiency; the 18.4B step (9.399 s) is then predicted."""
    gpu, keys, runs = read_measurements(MEASUREMENTS)
    assert (gpu, keys) == ("A100-80GB", ("gemm_efficiency",))
    two, third = runs[:2], runs[2]
    fit = calibrate_measurements(gpu, keys, two)
    assert 0.5 < fit.figures["gemm_efficiency"] < 0.9
    assert fit.max_abs_error < ROUND_TRIP_TOLERANCE
    params = dict(third.params) | dict(fit.figures)
    predicted = build_case(params).evaluate().step_s
    assert predicted == pytest.approx(third.step_s, rel=ROUND_TRIP_TOLERANCE)


def test_fit_recovers_the_efficiency_that_made_the_measurements():
    """Steps measured by the model itself at e = 0.63 give back e = 0.63 (to the 4 decimals the
    fit keeps) and zero residuals."""
    gpu, keys, runs = read_measurements(MEASUREMENTS)
    made = [
        type(r)(
            r.label,
            build_case(dict(r.params) | {"gemm_efficiency": 0.63}).evaluate().step_s,
            r.params,
        )
        for r in runs
    ]
    fit = calibrate_measurements(gpu, keys, made[:2])
    assert fit.figures["gemm_efficiency"] == pytest.approx(0.63, abs=1e-4)
    assert fit.max_abs_error < 1e-3


def test_cli_writes_a_scenario_that_evaluate_and_search_load(tmp_path):
    target = tmp_path / "a100.toml"
    out = CliRunner().invoke(
        cli, ["calibrate", str(MEASUREMENTS), "--output", str(target), "--json"]
    )
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert len(result["residuals"]) == 3 and result["output"] == str(target)
    data = tomllib.loads(target.read_text())
    assert data["gpu"] == "A100-80GB"
    assert data["cluster"]["gemm_efficiency"] == result["fitted"]["gemm_efficiency"]
    assert "# Residuals of the fit" in target.read_text()
    load_scenario(target)  # a valid scenario file (search --scenario)
    case = build_case({"model": "megatron-7.5b", "gpu": "A100-80GB", "calibration": str(target)})
    assert case.options.roofline.gemm_efficiency == result["fitted"]["gemm_efficiency"]
    with pytest.raises(InputError, match="fitted on A100-80GB; it does not apply to H100-SXM"):
        build_case({"model": "megatron-7.5b", "gpu": "H100-SXM", "calibration": str(target)})
    text = CliRunner().invoke(cli, ["calibrate", str(MEASUREMENTS)])
    assert "fitted: gemm_efficiency" in text.output and "mean |error|" in text.output


def test_more_figures_than_measurements_is_refused(tmp_path):
    gpu, _, runs = read_measurements(MEASUREMENTS)
    with pytest.raises(InputError, match="at least as many measured steps as figures"):
        calibrate_measurements(gpu, ("gemm_efficiency", "hbm_efficiency"), runs[:1])


def test_a_run_without_a_step_time_is_refused(tmp_path):
    bad = tmp_path / "m.toml"
    bad.write_text('gpu = "A100-80GB"\n[[run]]\nmodel = "megatron-7.5b"\n')
    with pytest.raises(
        ScenarioError, match=r"run 1: step_seconds missing: give the run's measured"
    ):
        read_measurements(bad)


BASE = {"model": "llama3-8b", "gpu": "H100-SXM", "tp": 2, "dp": 4}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"kernel_efficiency": 0.5}, "kernel_efficiency: 0.5 does not apply: the roofline"),
        ({"overlap": {"dp": 0.5}}, "overlap: .* does not apply: the roofline"),
        (
            {"framework": "textbook", "gemm_efficiency": 0.5},
            "gemm_efficiency: 0.5 does not apply: the single time model",
        ),
        (
            {"time_model": "single", "tp_comm_overlap": "full"},
            "tp_comm_overlap: 'full' does not apply: the single time model",
        ),
        (
            {"gemm_efficiency": 1.5},
            r"gemm_efficiency: 1.5 must be a fraction of the peak from 0.01 to 1",
        ),
        ({"time_model": "fast"}, "time_model: 'fast' is not one of roofline, single"),
        ({"tp_comm_overlap": "some"}, "tp_comm_overlap: 'some' is not one of none, async, full"),
    ],
)
def test_options_of_the_other_time_model_are_refused(extra, message):
    with pytest.raises(InputError, match=message):
        build_case(BASE | extra)


def test_the_single_model_stays_reachable_and_textbook_uses_it():
    single = build_case(BASE | {"time_model": "single", "kernel_efficiency": 0.5}).evaluate()
    assert estimate_to_dict(single)["time"]["time_model"] == "single"
    assert estimate_to_dict(single)["time"]["kernel_efficiency"] == 0.5
    textbook = build_case(BASE | {"framework": "textbook"}).evaluate()
    assert estimate_to_dict(textbook)["time"]["time_model"] == "single"
    roofline = estimate_to_dict(build_case(BASE).evaluate())["time"]
    assert roofline["time_model"] == "roofline" and roofline["roofline"]["gemm_efficiency"] > 0


# ---------------------------------------------------------------- what calibrate refuses, as run


def trainplan(*args: str) -> subprocess.CompletedProcess[str]:
    """A ``trainplan`` command in a fresh process, as a user runs it."""
    return cli_runs.trainplan(*args, timeout=300)


def _one_line(out: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("Error: ")
    for text in fragments:
        assert text in out.stderr, out.stderr


def _measurements(tmp_path, first_step: float | None = None, fit: str | None = None):
    """The example file, with its first run's step and its fit list changed."""
    text = MEASUREMENTS.read_text()
    if first_step is not None:
        text = text.replace("step_seconds = 3.696", f"step_seconds = {first_step!r}")
    if fit is not None:
        text = text.replace('fit = ["gemm_efficiency"]', f"fit = {fit}")
    path = tmp_path / "m.toml"
    path.write_text(text)
    return path


def test_output_equal_to_the_input_is_refused(tmp_path):
    """``--output`` naming the measurements file (as given, or through a link) would replace the
    measurements with the fit: refused before any fit, the file untouched."""
    path = _measurements(tmp_path)
    before = path.read_text()
    (tmp_path / "link.toml").symlink_to(path)
    for target in (path, tmp_path / "link.toml"):
        out = trainplan("calibrate", str(path), "--output", str(target))
        _one_line(out, "is the measurements file", "give another file")
    assert path.read_text() == before


@pytest.mark.parametrize("fit", ['["nonsense"]', "3", "[]"])
def test_an_unknown_figure_to_fit_is_one_line(tmp_path, fit):
    out = trainplan("calibrate", str(_measurements(tmp_path, fit=fit)))
    _one_line(out, "fit ", "gemm_efficiency, attention_efficiency")


def test_an_output_the_file_system_refuses_is_one_line(tmp_path):
    """A folder that does not exist, and a path the kernel refuses even to root (``/proc``)."""
    _one_line(
        trainplan("calibrate", str(MEASUREMENTS), "--output", str(tmp_path / "no" / "a.toml")),
        "--output",
        "does not exist",
    )
    _one_line(
        trainplan("calibrate", str(MEASUREMENTS), "--output", "/proc/trainplan-test.toml"),
        "--output",
        "/proc/trainplan-test.toml",
    )


def test_a_fit_on_a_bound_or_with_an_absurd_residual_is_refused(tmp_path):
    """A 1 µs step cannot be met by any efficiency up to 1 (the 7.5B step needs 3.70 s at the
    fitted 0.69): the fit runs to the bound, 1.0, and the run stays off by more than 10⁵ %.
    Nothing is written, the fit is shown, exit 2, and --json says the same."""
    one_us = tmp_path / "one.toml"
    head, run = MEASUREMENTS.read_text().split("[[run]]")[:2]
    one_us.write_text(head + "[[run]]" + run.replace("step_seconds = 3.696", "step_seconds = 1e-6"))
    target = tmp_path / "fit.toml"
    out = trainplan("calibrate", str(one_us), "--output", str(target))
    _one_line(out, "gemm_efficiency = 1.0000 sits on the upper bound", "nothing was written")
    assert "fitted: gemm_efficiency = 1.0000" in out.stdout and not target.exists()
    js = trainplan("calibrate", str(one_us), "--output", str(target), "--json")
    assert js.returncode == 2 and not target.exists()
    r = json.loads(js.stdout)
    assert r["accepted"] is False and r["output"] is None and len(r["problems"]) == 2
    assert r["fitted"]["gemm_efficiency"] == 1.0 and r["max_abs_error"] > 1e5


def test_one_run_a_hundred_times_off_is_refused(tmp_path):
    """3.7 s written as 369.6 s: the other two runs still fit (0.69), but that run is predicted
    at 3.7 s, −99 %, beyond ±25 %."""
    out = trainplan("calibrate", str(_measurements(tmp_path, first_step=369.6)))
    _one_line(out, "run '7.5B on 128 GPUs'", "-99%", "more than ±25%")
    assert "369.600" in out.stdout


def test_accept_poor_fit_writes_it_with_the_warning(tmp_path):
    target = tmp_path / "fit.toml"
    out = trainplan(
        "calibrate", str(_measurements(tmp_path, first_step=369.6)), "--output", str(target),
        "--accept-poor-fit",
    )  # fmt: skip
    assert out.returncode == 0 and out.stderr.startswith("Warning: a poor fit, kept")
    assert "# WARNING (accepted with --accept-poor-fit): run '7.5B on 128 GPUs'" in (
        target.read_text()
    )
    assert tomllib.loads(target.read_text())["cluster"]["gemm_efficiency"] > 0.5


def test_the_fit_rule():
    """On a bound within 10⁻³ of 0.05 or 1; a residual beyond ±25 % — and a good fit passes."""
    from trainplan.interface.calibration import Fit, Residual

    good = Fit({"gemm_efficiency": 0.69}, (Residual("a", 3.7, 3.69),), {})
    assert fit_problems(good) == []
    low = Fit({"hbm_efficiency": 0.0505}, (Residual("a", 3.7, 3.7 * (1 + MAX_RESIDUAL)),), {})
    assert fit_problems(low) == [
        "hbm_efficiency = 0.0505 sits on the lower bound of its range (0.05, 1]"
    ]
    off = Fit({"gemm_efficiency": 0.5}, (Residual("b", 1.0, 1.2501),), {})
    assert fit_problems(off) == [
        "run 'b': predicted 1.25 s against 1 s measured (+25%, more than ±25%)"
    ]


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "--model", "llama3-8b", "--dp", "8"],
        ["search", "--model", "llama3-8b", "--gpus", "64"],
        ["frontier", "--model", "llama3-8b", "--gpus", "64"],
    ],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_a_calibration_of_another_gpu_is_refused(tmp_path, command, as_json):
    """A100 efficiencies applied to H100 would skew every figure; left unused they are a silent
    no-op: both are refused, in evaluate, search and frontier alike."""
    target = tmp_path / "a100.toml"
    assert trainplan("calibrate", str(MEASUREMENTS), "--output", str(target)).returncode == 0
    out = trainplan(
        *command, "--gpu", "H100-SXM", "--calibration", str(target), *(["--json"] * as_json)
    )
    _one_line(out, "was fitted on A100-80GB", "H100-SXM")
    assert out.stdout == ""


def test_a_search_of_several_gpus_applies_the_calibration_to_its_own(tmp_path):
    """Searching H100 and A100 with an A100 calibration: the A100 jobs take the fitted figure,
    the H100 jobs their defaults."""
    from trainplan.interface.scenario import build_problem

    target = tmp_path / "a100.toml"
    assert trainplan("calibrate", str(MEASUREMENTS), "--output", str(target)).returncode == 0
    fitted = tomllib.loads(target.read_text())["cluster"]["gemm_efficiency"]
    problem = build_problem(
        {},
        {"model": "llama3-8b", "gpus": "64", "gpu": "H100-SXM,A100-80GB",
         "cluster": {"calibration": str(target)}},
    )  # fmt: skip
    by_gpu = {j.case.device.name: j.case.options.roofline.gemm_efficiency for j in problem.jobs}
    assert by_gpu["A100-80GB"] == fitted and by_gpu["H100-SXM"] != fitted
