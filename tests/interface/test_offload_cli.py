"""The command-line and interface parts of tests/model/test_offload.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

import pytest

from tests.test_cli_planner import run_main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--framework", "textbook", "--offload-optimizer", "1"],
            "textbook profile has no offload",
        ),
        (["--offload-params"], "Megatron-Core offloads the optimizer only"),
        (["--framework", "deepspeed", "--zero", "2", "--offload-optimizer", "0.5"], "ratio"),
        (["--framework", "fsdp2", "--offload-optimizer", "1"], "CPUOffloadPolicy"),
        (["--offload-optimizer", "1.5"], "must be a fraction from 0 to 1, or a percent"),
        (["--gpu", "B200", "--offload-optimizer", "1"], "--set host_link_gbps"),
    ],
)
def test_offload_refusals_are_one_line(monkeypatch, capsys, args, message):
    code, out, err = run_main(monkeypatch, capsys, "--model", "llama3-8b", "--dp", "8", *args)
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and message in err, err
