"""The command-line and interface parts of tests/model/test_stage_layouts.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.model.test_stage_layouts import LLAMA3_405B
from tests.test_cli_planner import run_main
from trainplan.interface.cli import cli, register_commands
from trainplan.interface.inputs import build_case
from trainplan.interface.render.report_dict import estimate_to_dict


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stage-layers", "7,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8"], "= 127 layers, not num_layers"),
        (["--stage-layers", "7,8"], "2 counts for pp 16"),
        (["--stage-layers", "7,x"], "must be whole numbers >= 0"),
        (["--stage-layers", "-1,127" + ",0" * 14], "must be whole numbers >= 0"),
        (["--first-stage-layers", "6", "--last-stage-layers", "5"], "do not split evenly"),
        (["--first-stage-layers", "7", "--stage-layers", "7" + ",8" * 14 + ",7"], "not both"),
    ],
)
def test_bad_stage_layouts_exit_2_with_one_line(monkeypatch, capsys, args, message):
    base = ["--model", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "8"]
    code, out, err = run_main(monkeypatch, capsys, *base, *args)
    assert code == 2 and not out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err


def test_cli_first_last_stage_layers():
    register_commands()
    result = CliRunner().invoke(
        cli,
        [
            "evaluate", "--model", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "8",
            "--first-stage-layers", "8", "--last-stage-layers", "6", "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    layout = json.loads(result.output)["layout"]
    assert layout["stage_layers"] == [8] * 15 + [6]  # (126 − 8 − 6) / 14 = 8


def test_the_report_names_a_given_stage_layout():
    """The JSON form's chunk layers and the assumption line of a stage layout as given
    (Llama 3 405B, tests/model/test_stage_layouts.py's hand count)."""
    given_ = build_case({**LLAMA3_405B, "stage_layers": "6," + ",".join(["8"] * 15)}).evaluate()
    assert estimate_to_dict(given_)["layout"]["chunk_layers"] == [6] + [8] * 15
    assert any("stage layout as given" in a for a in estimate_to_dict(given_)["assumptions"])
