"""The Python facade (``trainplan.evaluate``, ``trainplan.search``, ``trainplan.Layout``,
``trainplan.Case``) as a user imports it: ``import trainplan`` loads neither numpy nor OR-Tools,
the figures are the command line's, and a parameter it does not know is refused, not dropped."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import trainplan
from tests.cli_runs import trainplan as run_cli
from trainplan.api import SEARCH_PARAMETERS
from trainplan.interface.commands import search_problem
from trainplan.model.errors import InputError
from trainplan.model.layout import Layout
from trainplan.optimizer.case import Case


def test_import_trainplan_stays_cheap():
    code = "import sys, trainplan; print(sorted({'numpy', 'ortools', 'pandas'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_the_facade_names_are_the_projects():
    assert trainplan.Layout is Layout and trainplan.Case is Case
    assert {"evaluate", "search", "Layout", "Case"} <= set(trainplan.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = trainplan.nothing


def test_evaluate_gives_the_command_lines_figures():
    """Llama 3 70B, dp 2 · tp 4 · pp 8 on H100: the same bytes and step time as
    ``trainplan evaluate --json`` (the example of the Python API page: 75,050,647,552 bytes)."""
    e = trainplan.evaluate(model="llama3-70b", gpu="H100-SXM", dp=2, tp=4, pp=8)
    args = ["evaluate", "--model", "llama3-70b", "--gpu", "H100-SXM", "--dp", "2", "--tp", "4"]
    cli = json.loads(run_cli(*args, "--pp", "8", "--json").stdout)
    assert int(e.peak.total_bytes) == 75_050_647_552 == cli["memory"]["total_bytes"]
    assert e.step_s == pytest.approx(cli["time"]["step_s"], rel=1e-12)


def test_search_refuses_a_parameter_it_does_not_know():
    with pytest.raises(InputError, match="^max_pt: not a search parameter"):
        trainplan.search(model="llama3-8b", gpus=8, max_pt=4)


def test_every_search_parameter_reaches_the_search():
    """Each name the facade accepts is one ``search_problem`` reads (a name it let through but
    the search ignored would be a silently dropped option)."""
    problem = search_problem({"model": "llama3-8b", "gpus": 8, "max_tp": 4, "headroom": 0.1})
    assert max(problem.space.tp) == 4 and problem.constraints.headroom == 0.1
    assert "max_tp" in SEARCH_PARAMETERS and "per_stage" not in SEARCH_PARAMETERS
