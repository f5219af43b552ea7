"""A model whose layers Megatron-DeepSpeed cannot build (model.deepspeed_layers): one line,
exit 2, from evaluate and from search under ``--framework deepspeed``."""

import pytest
from click.testing import CliRunner

from trainplan.interface.cli import cli


@pytest.mark.parametrize("command", ["evaluate", "search"])
def test_gemma3_deepspeed_exit_2(command):
    args = [command, "--model", "gemma3-27b", "--gpus", "32", "--framework", "deepspeed"]
    if command == "evaluate":
        args += ["--tp", "8", "--dp", "4"]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 2 and done.stderr.count("\n") == 1, done.output
    assert "deepspeed runs Megatron-DeepSpeed's transformer layer, which has no QK-norm" in (
        done.stderr
    )
