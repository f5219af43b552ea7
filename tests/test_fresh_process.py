"""The suite's commands run in processes of their own (:mod:`tests.fresh_process`): each is
``python -m`` as a user types it — its own working directory, environment, ``sys.argv`` and
``sys.path``, none of trainplan's modules imported before it, its exit code, stdout and stderr
apart — and what it prints is what a new interpreter prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import fresh_process
from tests.cli_runs import trainplan

pytestmark = pytest.mark.skipif(not fresh_process.enabled(), reason="TRAINPLAN_TESTS_FORK=0")


def _probe(tmp_path, monkeypatch, *args: str, **kw) -> subprocess.CompletedProcess[str]:
    monkeypatch.setenv("TRAINPLAN_PROBE", "set by the test")
    cmd = [sys.executable, "-m", "tests.fresh_probe", *args]
    return fresh_process.run_module(cmd, "tests.fresh_probe", list(args), tmp_path, 60, **kw)


def test_a_forked_command_is_its_own_process(tmp_path, monkeypatch):
    """Exit code 3, stdout and stderr apart; the working directory, the environment at the
    call, ``sys.argv`` and ``sys.path[0]`` as ``python -m`` sets them; no trainplan module
    imported before it; ``__main__`` the module run."""
    done = _probe(tmp_path, monkeypatch, "3", "on stderr")
    assert (done.returncode, done.stderr) == (3, "on stderr\n")
    seen = json.loads(done.stdout)
    assert seen == {
        "cwd": str(tmp_path),
        "argv": ["3", "on stderr"],
        "argv0": seen["argv0"],
        "path0": str(tmp_path),
        "env": "set by the test",
        "trainplan": [],
        "main": "tests.fresh_probe",
    }
    assert seen["argv0"].endswith("tests/fresh_probe.py")
    merged = _probe(tmp_path, monkeypatch, "0", "first", merge_stderr=True)
    new = subprocess.run(  # stderr=STDOUT, buffered as a new interpreter buffers
        [sys.executable, "-m", "tests.fresh_probe", "0", "first"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )  # fmt: skip
    assert merged.stderr == "" and merged.stdout == new.stdout  # in the order a pipe gets them


def test_a_command_prints_what_a_new_interpreter_prints():
    """A refusal (exit 2, one line on stderr) and an answer in text and JSON, forked and in a
    new interpreter: the same bytes."""
    calls = (
        ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H10"],
        ["evaluate", "--model", "llama3-8b", "--gpus", "8"],
        ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--json"],
    )
    for args in calls:
        forked = trainplan(*args)
        new = subprocess.run(
            [sys.executable, "-m", "trainplan", *args], capture_output=True, text=True, timeout=120
        )
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            new.returncode,
            new.stdout,
            new.stderr,
        )
    assert forked.returncode == 0 and json.loads(forked.stdout)


def test_a_command_past_its_timeout_is_killed(tmp_path):
    """As ``subprocess.run`` does: ``TimeoutExpired``, the process gone."""
    with pytest.raises(subprocess.TimeoutExpired):
        trainplan("search", "--model", "llama3-405b", "--gpus", "16384", timeout=0.2)
