"""The command-line and interface parts of tests/model/test_context_parallel.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tests.test_cli_planner import run_main
from trainplan.interface.cli import cli, register_commands


def test_evaluate_cli_cp_kind_json_keys_and_collective_names():
    register_commands()
    runner = CliRunner()
    args = ["evaluate", "--model", "llama3-8b", "--cp", "8", "--seq-len", "32768"]
    names = {}
    for kind in ("ring", "all-gather", "ulysses", "a2a"):
        res = runner.invoke(cli, [*args, "--cp-kind", kind, "--global-batch", "1", "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.stdout)
        assert out["layout"]["cp_kind"] == ("ulysses" if kind == "a2a" else kind)
        assert out["layout"]["cp_a2a"] is None
        names[kind] = next(r["collective"] for r in out["traffic"] if r["axis"] == "cp")
    assert names == {
        "ring": "ring send/recv of K, V (ring attention)",
        "all-gather": "all-gather of K, V + reduce-scatter of dK, dV (Llama 3 all-gather CP)",
        "ulysses": "all-to-all of Q, K, V, O over heads (DeepSpeed-Ulysses)",
        "a2a": "all-to-all of Q, K, V, O over heads (DeepSpeed-Ulysses)",
    }
    res = runner.invoke(
        cli, [*args, "--cp-kind", "a2a+p2p", "--cp-a2a", "2", "--global-batch", "1"]
    )
    assert res.exit_code == 0, res.output
    assert "cp 8 a2a+p2p (a2a 2)" in res.stdout
    assert "context-parallel buffers (one layer)" in res.stdout
    assert "over 2 ranks + ring send/recv of K, V over 4 (a2a+p2p)" in res.stdout


def test_evaluate_cli_refuses_an_illegal_flavour_with_exit_2(monkeypatch, capsys):
    code, out, err = run_main(
        monkeypatch, capsys, "--model", "llama3-405b", "--tp", "8", "--cp", "16", "--seq-len",
        "131072", "--cp-kind", "ulysses",
    )  # fmt: skip
    assert code == 2 and out == ""
    assert (
        err.startswith("Error: --cp: ulysses splits the heads over 16 ranks")
        and err.count("\n") == 1
    )


def test_evaluate_without_cp_kind_takes_the_frameworks_own_flavour_in_a_fresh_process():
    """A user who gives ``--cp`` and no ``--cp-kind`` gets the flavour the framework runs by
    default (model.cp_rules.DEFAULT_CP_KIND), not a refusal of a flavour they never named:
    Megatron-Core's ``--cp-comm-type`` default p2p (the ring), DeepSpeed-Ulysses (DeepSpeed's
    only flavour), torchtitan's ``context_parallel_rotate_method`` default allgather."""
    import subprocess
    import sys

    want = {"megatron": "ring", "deepspeed": "ulysses", "fsdp2": "pytorch-allgather"}
    for framework, kind in want.items():
        args = [sys.executable, "-m", "trainplan", "evaluate", "--model", "llama3-8b"]
        args += ["--gpus", "8", "--cp", "4", "--seq-len", "32768", "--global-batch", "8"]
        res = subprocess.run(
            [*args, "--framework", framework, "--json"], capture_output=True, text=True
        )
        assert res.returncode == 0, (framework, res.stderr)
        assert json.loads(res.stdout)["layout"]["cp_kind"] == kind
