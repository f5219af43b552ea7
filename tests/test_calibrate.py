"""Calibration from measurements (issue 16): fit the roofline model's GEMM efficiency on two
measured steps, predict a third, save the fit as a scenario file that evaluate and search load;
and the step-time options' rules (an option of the other time model is refused)."""

from __future__ import annotations

import json
import tomllib
from importlib import resources

import pytest
from click.testing import CliRunner

from trainplan.interface.calibration import calibrate_measurements, read_measurements
from trainplan.interface.cli import _register, cli
from trainplan.interface.inputs import build_case
from trainplan.interface.report_dict import estimate_to_dict
from trainplan.interface.scenario import load_scenario
from trainplan.model.errors import InputError, ScenarioError

_register()
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
    other = build_case({"model": "megatron-7.5b", "gpu": "H100-SXM", "calibration": str(target)})
    assert other.options.roofline.gemm_efficiency != result["fitted"]["gemm_efficiency"]
    text = CliRunner().invoke(cli, ["calibrate", str(MEASUREMENTS)])
    assert "fitted: gemm_efficiency" in text.output and "mean |error|" in text.output


def test_more_figures_than_measurements_is_refused(tmp_path):
    gpu, _, runs = read_measurements(MEASUREMENTS)
    with pytest.raises(InputError, match="at least as many measured steps as figures"):
        calibrate_measurements(gpu, ("gemm_efficiency", "hbm_efficiency"), runs[:1])


def test_a_run_without_a_step_time_is_refused(tmp_path):
    bad = tmp_path / "m.toml"
    bad.write_text('gpu = "A100-80GB"\n[[run]]\nmodel = "megatron-7.5b"\n')
    with pytest.raises(ScenarioError, match="step_seconds None must be a positive number"):
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
