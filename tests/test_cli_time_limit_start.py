"""Where ``--time-limit`` counts from (interface.cli.clock): the console script's command from the
process's start (loading Python, the planner, the model and the solver all count), a command run
in a program that keeps the command line loaded from that command's own start. Before, every
command read the process's start, so a program that had been running for a while ran its
commands with their limits already spent. Each case is its own Python process, as a user's
program would be; the JSON's ``startup_seconds`` says what the limit counted before the search."""

from __future__ import annotations

import json
import subprocess
import sys

SEARCH = ["search", "--model", "llama3-8b", "--gpus", "8", "--time-limit", "60", "--json"]
"""A small search that ends well inside its limit (the figures do not matter here)."""

SLEEP_S = 3.0
"""What the program does before it runs a command (a long-lived program's earlier work)."""


def _program(body: str) -> float:
    """Run ``body`` in a fresh interpreter after importing the command line and sleeping
    :data:`SLEEP_S`; return the ``startup_seconds`` of the JSON object it printed last (each on
    its own lines, as ``--json`` prints it)."""
    code = (
        "import sys, time\n"
        "from trainplan.interface.cli import cli, main\n"
        f"time.sleep({SLEEP_S})\n"
        f"args = {SEARCH!r}\n" + body
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    last = done.stdout[done.stdout.rindex("\n{") + 1 :] if "\n{" in done.stdout else done.stdout
    return float(json.loads(last)["startup_seconds"])


def test_a_command_run_in_a_loaded_program_counts_from_its_own_start():
    """click's own ``cli.main(args)`` in a program that slept 3 s after loading: the limit's
    start-up is the command's (a fraction of a second on a quiet machine; here under the 3 s
    sleep, which it does not count), and a second command in the same program likewise."""
    body = (
        "from click.testing import CliRunner\n"
        "runner = CliRunner()\n"
        "for _ in range(2):\n"
        "    out = runner.invoke(cli, args)\n"
        "    assert out.exit_code == 0, out.output\n"
        "    print(out.stdout)\n"
    )
    assert _program(body) < SLEEP_S


def test_the_console_scripts_command_counts_from_the_process_start():
    """``main()`` as the console script runs it (``trainplan …``, ``python -m trainplan``): its
    first command's start-up holds the process's whole life before it, the 3 s sleep included
    (the limit is the user's wall clock of the command)."""
    body = (
        "sys.argv = ['trainplan', *args]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as end:\n"
        "    assert not end.code, end.code\n"
    )
    assert _program(body) > SLEEP_S
