"""Every CLI command has help text and a place in the README (sqlite-utils' docs discipline)."""

from pathlib import Path

import pytest

from trainplan.interface.cli import _register, cli

_register()
README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_command_documented(name):
    command = cli.commands[name]
    assert command.help and command.help.strip()
    assert f"trainplan {name}" in README


def test_quick_start_commands_in_readme():
    assert (
        "pip install -e . && trainplan search --model llama3-405b --gpus 16384 --gpu H100-SXM"
        in README
    )
    assert "pip install -e '.[test]' && python -m pytest" in README
