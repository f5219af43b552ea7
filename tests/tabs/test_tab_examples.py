"""Every pipeline, mfu, ckpt and rlhf example of ``scenarios/examples.toml``, read from the package.

The figures are compared by the examples file's rule (a key anywhere in the
report, exact unless ``rel``; ``*_min`` a lower bound), on the dictionaries of
:data:`interface.tabs.TAB_REPORTS` and on the ``--json`` output of each CLI command.
"""

import json

import pytest
from click.testing import CliRunner

import trainplan.interface.cli.tabs  # noqa: F401  (registers the commands)
from tests.examples_check import check_expect as check
from trainplan import scenarios
from trainplan.interface.cli import cli
from trainplan.interface.tabs import TAB_REPORTS

EXAMPLES = [e for e in scenarios.data("examples")["example"] if e["tab"] in TAB_REPORTS]


def test_all_tab_examples_present():
    assert len(EXAMPLES) == 13  # grpo-long-rollouts ran grpo-rule-70b's inputs: folded into it
    assert {e["tab"] for e in EXAMPLES} == set(TAB_REPORTS)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e["name"] for e in EXAMPLES])
def test_example_report(example):
    report = TAB_REPORTS[example["tab"]](**example[example["tab"]])
    check(report, example["expect"])
    json.dumps(report)  # plain JSON values only


NEGATIVE = {"causal": "--non-causal"}
"""A switch's off spelling where it is not ``--no-NAME`` (``mfu --causal/--non-causal``)."""


def _flags(params):
    args = []
    for k, v in params.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            args.append(flag)
        elif v is False:
            args.append(NEGATIVE.get(k, "--no-" + flag[2:]))
        else:
            args += [flag, str(v)]
    return args


@pytest.mark.parametrize("example", EXAMPLES, ids=[e["name"] for e in EXAMPLES])
def test_example_cli_json(example):
    tab = example["tab"]
    result = CliRunner().invoke(cli, [tab, *_flags(example[tab]), "--json"])
    assert result.exit_code == 0, result.output
    check(json.loads(result.output), example["expect"])


@pytest.mark.parametrize("example", EXAMPLES, ids=[e["name"] for e in EXAMPLES])
def test_example_cli_text(example):
    tab = example["tab"]
    result = CliRunner().invoke(cli, [tab, *_flags(example[tab])])
    assert result.exit_code == 0, result.output
    assert all(len(line) <= 120 for line in result.output.splitlines() if "|" in line)
