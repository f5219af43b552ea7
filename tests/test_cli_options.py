"""The command line's options are frozen (as torchtitan's ``test_no_new_cli_options.py``): every
command's options, each by all its spellings, are listed in ``tests/data/cli_options.txt``, and
adding, renaming or removing one fails here until that list is updated — a new flag is a
decision, taken in review with the list's diff, not a side effect. The large commands list their
options by purpose in ``--help``, each option in a group; the rarely set knobs have no flag but
``--set KEY=VALUE`` (the list's ``moved`` lines: each moved flag and its scenario key).

    python -m tests.test_cli_options --write    # rewrite the list after a decided change
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.cli_runs import trainplan
from trainplan.interface.cli import cli, register_commands
from trainplan.interface.flags import MOVED_FLAGS

FROZEN = Path(__file__).resolve().parent / "data" / "cli_options.txt"
GROUPED = ("evaluate", "example", "search", "frontier", "sweep", "sweep-plot")
"""The commands whose options ``--help`` lists by group."""


def current() -> list[str]:
    """``COMMAND SPELLINGS`` per option of every command (``--flash/--no-flash``), sorted."""
    register_commands()
    return sorted(
        f"{name} {'/'.join((*p.opts, *p.secondary_opts))}"
        for name, command in cli.commands.items()
        for p in command.params
        if p.param_type_name == "option"
    )


def moved() -> list[str]:
    """``moved FLAG KEY`` per flag moved off the command line to ``--set KEY=…``, sorted."""
    return sorted(f"moved {flag} {key}" for flag, (key, _) in MOVED_FLAGS.items())


def test_no_new_cli_options():
    lines = [line for line in FROZEN.read_text().splitlines() if line and line[0] != "#"]
    frozen = [line for line in lines if not line.startswith("moved ")]
    assert [line for line in lines if line.startswith("moved ")] == moved(), (
        "the moved flags (interface.flags.MOVED_FLAGS) differ from the list's `moved` lines"
    )
    now = current()
    added, removed = sorted(set(now) - set(frozen)), sorted(set(frozen) - set(now))
    assert not added and not removed, (
        f"options added: {added}; options removed: {removed}. A new, renamed or removed option "
        "is a decision: if it is meant, run `python -m tests.test_cli_options --write`, commit "
        "the list with the change, and say where it is documented"
    )
    assert now == frozen, "tests/data/cli_options.txt is out of order (rewrite it with --write)"


def test_moved_flags_are_gone_and_their_keys_are_scenario_keys():
    """A moved flag is no option of any command (given anyway, it is refused with its key:
    test_moved_flag_names_its_replacement), and its key is one ``--set`` takes everywhere."""
    from trainplan.interface.scenario_keys import EVALUATE_KEYS, KEY_HELP, SEARCH_KEYS

    live = {spelling for line in current() for spelling in line.split()[1].split("/")}
    assert not live & set(MOVED_FLAGS)
    for key, _ in MOVED_FLAGS.values():
        assert key in EVALUATE_KEYS and key in SEARCH_KEYS and KEY_HELP[key], key


def test_moved_flag_names_its_replacement():
    """As a user types them: a moved flag gets one line naming ``--set`` and the key (exit 2,
    not click's bare "No such option"); the same knob through ``--set`` runs, with the file's
    number grammar (``4,000`` is one number, refused as a reserve beyond the GPU's memory)."""
    done = trainplan("evaluate", "--model", "llama3-8b", "--dp", "8", "--moe-node-limit", "4")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "Error: --moe-node-limit: moved to --set moe_node_limit=4 or the scenario key\n"
    )
    done = trainplan("search", "--model", "llama3-8b", "--gpus", "8", "--set", "fabric=ring")
    assert done.returncode == 2
    assert done.stderr == "Error: --set fabric: 'ring' is not one of two-tier, fat-tree, rail\n"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["search", "--per-stage", "--set", "per_stage=true"],
            "Error: --set per_stage: --per-stage gives it too (True); give one of them\n",
        ),
        (
            ["frontier", "--per-stage", "--set", "per_stage=false"],
            "Error: --set per_stage: --per-stage gives it too (True); give one of them\n",
        ),
        (
            ["search", "--seq-len", "4096", "--set", "seq_len=8192"],
            "Error: --set seq_len: --seq-len gives it too (4096); give one of them\n",
        ),
        (
            ["search", "--per-stage-shapes", "3"],
            "Error: --per-stage-shapes: 3 applies to the per-stage search only; add --per-stage "
            "(or per_stage = true in the scenario)\n",
        ),
    ],
)
def test_a_flag_and_a_set_of_its_key_are_refused(args, line):
    """A flag and ``--set`` of the same key contradict each other or say one thing twice: one
    line, exit 2, before anything is searched (in-process: the group's rule holds under
    CliRunner too)."""
    from click.testing import CliRunner

    done = CliRunner().invoke(cli, [*args, "--model", "llama3-8b", "--gpus", "8"])
    assert (done.exit_code, done.stderr) == (2, line)


@pytest.mark.parametrize("name", GROUPED)
def test_every_option_in_a_group(name):
    """No option of a large command left in click's catch-all "Other options" (--help is)."""
    register_commands()
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
        "Other options",
    ]
    text = done.stdout
    assert text.index("Search space:") < text.index("  --tp COUNT") < text.index("Constraints:")
    assert text.index("  --set KEY=VALUE") < text.index("Model:")
    assert "--gemm-efficiency" not in text and "Advanced" not in text


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        header = "# Every option of every command (tests/test_cli_options.py); one line each.\n"
        header += "# `moved FLAG KEY`: a flag moved off the command line to --set KEY=VALUE.\n"
        FROZEN.write_text(header + "\n".join([*current(), *moved()]) + "\n")
        print(f"wrote {FROZEN} ({len(current())} options)")
    else:
        print(__doc__)
