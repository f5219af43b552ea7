"""The command-line and interface parts of tests/model/test_precision.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

import pytest

from tests.test_cli_planner import run_main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--model", "llama3-8b", "--gpu", "A100-80GB", "--precision", "fp8"],
            "needs FP8 tensor cores",
        ),
        (["--params", "7B", "--precision", "fp8"], "needs the model's layers"),
        (["--model", "llama3-8b", "--precision", "fp4"], "--precision"),
    ],
)
def test_fp8_refusals_are_one_line(monkeypatch, capsys, args, message):
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and message in err, err
