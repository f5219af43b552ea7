"""The command line's options are frozen (as torchtitan's ``test_no_new_cli_options.py``): every
command's options, each by all its spellings, are listed in ``tests/data/cli_options.txt``, and
adding, renaming or removing one fails here until that list is updated — a new flag is a
decision, taken in review with the list's diff, not a side effect. The large commands list their
options by purpose in ``--help``, each option in a group, the rarely typed ones under headings
that begin with "Advanced".

    python -m tests.test_cli_options --write    # rewrite the list after a decided change
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.cli_runs import trainplan
from trainplan.interface.cli import _register, cli

FROZEN = Path(__file__).resolve().parent / "data" / "cli_options.txt"
GROUPED = ("evaluate", "example", "search", "frontier", "sweep", "sweep-plot")
"""The commands whose options ``--help`` lists by group."""


def current() -> list[str]:
    """``COMMAND SPELLINGS`` per option of every command (``--flash/--no-flash``), sorted."""
    _register()
    return sorted(
        f"{name} {'/'.join((*p.opts, *p.secondary_opts))}"
        for name, command in cli.commands.items()
        for p in command.params
        if p.param_type_name == "option"
    )


def test_no_new_cli_options():
    frozen = [line for line in FROZEN.read_text().splitlines() if line and line[0] != "#"]
    now = current()
    added, removed = sorted(set(now) - set(frozen)), sorted(set(frozen) - set(now))
    assert not added and not removed, (
        f"options added: {added}; options removed: {removed}. A new, renamed or removed option "
        "is a decision: if it is meant, run `python -m tests.test_cli_options --write`, commit "
        "the list with the change, and say where it is documented"
    )
    assert now == frozen, "tests/data/cli_options.txt is out of order (rewrite it with --write)"


@pytest.mark.parametrize("name", GROUPED)
def test_every_option_in_a_group(name):
    """No option of a large command left in click's catch-all "Other options" (--help is)."""
    _register()
    command = cli.commands[name]
    loose = [
        p.opts[0]
        for p in command.params
        if p.param_type_name == "option" and getattr(p, "group", None) is None
    ]
    assert not loose, f"trainplan {name}: {loose} in no option group (interface/cli/options.py)"


def test_help_lists_groups_in_order():
    """``trainplan search --help`` as a user reads it: what most runs give first, the advanced
    knobs last, each group under its title with its options."""
    done = trainplan("search", "--help")
    assert done.returncode == 0, done.stderr
    titles = [line[:-1] for line in done.stdout.splitlines() if line and line[-1] == ":"]
    titles = [t for t in titles if not t.startswith((" ", "Usage"))]
    assert titles == [
        *("Scenario", "Model", "Cluster", "Sequence and batch", "Objective", "Search space"),
        *("Constraints", "Training recipe", "Search", "Solver and output"),
        "Advanced: links, memory reserve and placement",
        "Advanced: step-time model",
        "Advanced: counting conventions",
        "Other options",
    ]
    text = done.stdout
    assert text.index("Search space:") < text.index("  --tp COUNT") < text.index("Constraints:")
    advanced = text.index("Advanced: step-time model:")
    assert text.index("  --gemm-efficiency NUMBER") > advanced


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        header = "# Every option of every command (tests/test_cli_options.py); one line each.\n"
        FROZEN.write_text(header + "\n".join(current()) + "\n")
        print(f"wrote {FROZEN} ({len(current())} options)")
    else:
        print(__doc__)
