"""The command-line and interface parts of tests/model/test_frameworks.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.test_cli_planner import run_main
from trainplan.interface.cli import cli, register_commands
from trainplan.interface.flags import with_flags
from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import (
    Framework,
    check_framework,
)


@pytest.mark.parametrize(
    ("framework", "zero", "pp", "needle"),
    [
        ("megatron", 2, 1, "not a stage of --framework megatron"),
        ("megatron", 3, 2, "Megatron-FSDP) needs pp = 1"),
        ("fsdp2", 1, 1, "not a stage of --framework fsdp2"),
        ("deepspeed", 2, 2, "needs pp = 1"),
    ],
)
def test_a_stage_the_framework_lacks_is_one_line_exit_2(
    framework, zero, pp, needle, monkeypatch, capsys
):
    with pytest.raises(LayoutError) as refused:  # the model names the parameter, the CLI its flag
        check_framework(Framework(framework), zero, pp)
    assert needle in with_flags(str(refused.value))
    args = ["--model", "llama3-8b", "--framework", framework, "--zero", str(zero)]
    code, out, err = run_main(monkeypatch, capsys, *args, "--pp", str(pp), "--dp", "2")
    assert code == 2 and not out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: --zero: ") and needle in lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--tp", "4", "--dp", "3", "--etp", "3"],
            "etp: 3 does not divide expert_ffn_hidden_size = 14,336",
        ),
        (
            ["--tp", "2", "--etp", "1", "--ep", "8", "--dp", "2"],
            "etp 1 × ep 8 = 8 must divide tp × dp × cp = 4",
        ),
        (["--tp", "2", "--etp", "4"], "etp: 4 above tp = 2"),
    ],
)
def test_etp_rules_are_one_line_exit_2(args, needle, monkeypatch, capsys):
    code, out, err = run_main(
        monkeypatch, capsys, "--model", "mixtral-8x7b", "--global-batch", "12", *args
    )
    assert code == 2 and not out, err
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_json_names_the_profile_and_the_peak_phase():
    register_commands()
    res = CliRunner().invoke(
        cli,
        [
            "evaluate",
            "--model",
            "llama3-8b",
            "--dp",
            "8",
            "--framework",
            "deepspeed",
            "--zero",
            "2",
            "--json",
        ],  # fmt: skip
    )
    out = json.loads(res.output)
    assert out["layout"]["framework"] == "deepspeed" and out["layout"]["zero_stage"] == 2
    mem = out["memory"]
    assert mem["peak_phase"] in ("forward-backward", "optimizer-step")
    assert mem["total_bytes"] >= mem["steady_bytes"]
    assert any("DeepSpeed ZeRO stage 2" in a for a in out["assumptions"])
