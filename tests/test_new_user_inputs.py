"""What a new user trips on (issue 15, item 5), kind by kind.

Each kind of trip has one rule in the code; these tests hold the rule through the command line
(click's ``CliRunner`` on the real group: a PlannerError is one line on stderr and exit code 2,
:class:`~trainplan.optimizer.cli.common.GuardedGroup`) and, where the rule is a library function,
directly. Figures are derived by hand in the comments.
"""

from __future__ import annotations

from click.testing import CliRunner

import trainplan.optimizer.cli as cli_module
from trainplan.optimizer.cli import cli

cli_module._register()


def run(*args: str):
    """Invoke ``trainplan ARGS`` in-process; the click Result (stdout and stderr apart)."""
    return CliRunner().invoke(cli, list(args))


def refused(*args: str) -> str:
    """Assert ``trainplan ARGS`` is refused as bad input: exit 2, one ``Error:`` line on stderr,
    nothing on stdout, no traceback. Returns the line."""
    result = run(*args)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    return lines[0]


# ---------------------------------------------------------------------------------------------
# One rule for every command: PlannerError → one line, exit 2 (also under CliRunner)


def test_planner_error_is_one_line_in_every_command():
    assert "unknown model 'nope'" in refused("evaluate", "--model", "nope")
    assert "microbatches" in refused("pipeline", "--stages", "4", "--microbatches", "0")
    assert "unknown model" in refused("search", "--model", "nope", "--gpus", "8")
