"""The suite's commands run in processes of their own (:mod:`tests.fresh_process`): each is
``python -m`` as a user types it — its own working directory, environment, ``sys.argv`` and
``sys.path``, none of this project's modules imported before it, its exit code, stdout and stderr
apart — and what it prints, how it fails and how it ends is what a new interpreter's does
(:mod:`tests.fresh_probe` does each thing a process does, both ways)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import cli_runs, fresh_process, prose_figures, transcripts
from tests.cli_runs import trainplan

PROBE = Path(__file__).with_name("fresh_probe.py")


@pytest.fixture
def here(tmp_path: Path) -> Path:
    """A folder holding the probe, importable from it as ``fresh_probe`` (the working
    directory is ``sys.path[0]`` under ``-m``) as nothing of this project is."""
    shutil.copy(PROBE, tmp_path / "fresh_probe.py")
    return tmp_path


def both(here: Path, *args: str, merge: bool = False, env: dict[str, str] | None = None):
    """``python -m fresh_probe ARGS`` forked and in a new interpreter, in ``here``."""
    cmd = [sys.executable, "-m", "fresh_probe", *args]
    forked = fresh_process.run_module(cmd, "fresh_probe", list(args), here, 60, merge, env)
    err = subprocess.STDOUT if merge else subprocess.PIPE
    new = subprocess.run(cmd, cwd=here, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    return forked, new


def test_a_forked_command_is_its_own_process(here, monkeypatch):
    """Exit code 3, stdout and stderr apart; the working directory, the environment at the
    call, ``sys.argv``, ``sys.orig_argv`` and ``sys.path[0]`` as ``python -m`` sets them; no
    module of this project imported before it; ``__main__`` the module run; its streams pipes,
    opened as a new interpreter opens them; the same signals blocked, ignored and caught, the
    same recursion and digit limits, flags, locale and time zone."""
    monkeypatch.setenv("TRAINPLAN_PROBE", "set by the test")
    forked, new = both(here, "report", "3", "on stderr")
    assert (forked.returncode, forked.stderr) == (3, "on stderr\n")
    seen = json.loads(forked.stdout)
    assert seen == {
        "cwd": str(here),
        "argv": ["report", "3", "on stderr"],
        "argv0": str(here / "fresh_probe.py"),
        "orig_argv": ["-m", "fresh_probe", "report", "3", "on stderr"],
        "path0": str(here),
        "env": "set by the test",
        "project": [],
        "main": "fresh_probe",
        "streams": seen["streams"],
        "signals": seen["signals"],
        "interpreter": seen["interpreter"],
    }
    assert seen == json.loads(new.stdout) and (forked.stderr, new.returncode) == (new.stderr, 3)
    assert seen["streams"]["stdout"][4:] == ["<stdout>", "w", False, True]  # a pipe


@pytest.mark.parametrize("way", ["interleave", "raise", "interrupt", "exit-text", "ends"])
@pytest.mark.parametrize("merge", [False, True], ids=["apart", "merged"])
def test_a_command_writes_fails_and_ends_as_a_new_interpreter(here, way, merge):
    """The same bytes, in the same order where stdout and stderr share a pipe (a block-buffered
    stdout flushed as a pipe's buffer fills; C's ``printf`` flushed at exit), the same
    traceback, exit code (−2: ended by SIGINT after an uncaught ``KeyboardInterrupt``) and
    ending (threads joined before the at-exit handlers)."""
    forked, new = both(here, way, merge=merge)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        new.returncode,
        new.stdout,
        new.stderr or "",
    )
    codes = {"interleave": 0, "raise": 1, "interrupt": -2, "exit-text": 1, "ends": 0}
    assert forked.returncode == codes[way]


@pytest.mark.parametrize("code", ["-1", "256", "300"])
def test_an_exit_code_is_what_the_system_keeps_of_it(here, code):
    """``sys.exit(N)``: the low 8 bits, as C's ``exit`` keeps them (255, 0, 44)."""
    forked, new = both(here, "report", code, "")
    assert forked.returncode == new.returncode == int(code) & 0xFF


def test_a_working_directory_not_given_is_the_test_process_one(here, monkeypatch):
    """As ``subprocess.run(cwd=None)``: the caller's working directory, not the server's."""
    monkeypatch.chdir(here)
    cmd = [sys.executable, "-m", "fresh_probe", "report", "0", ""]
    done = fresh_process.run_module(cmd, "fresh_probe", cmd[3:], None, 60)
    assert json.loads(done.stdout)["cwd"] == str(here)


def test_an_environment_read_at_start_gets_a_new_interpreter(here):
    """A variable the interpreter reads only as it starts (``PYTHONHASHSEED``) cannot be given
    to a fork of the server: the command starts a new interpreter, which takes it."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    forked, new = both(here, "hash", env=env)
    assert forked.stdout == new.stdout and forked.returncode == 0
    again = subprocess.run(
        [sys.executable, "-c", "print(hash('trainplan'))"], env=env, capture_output=True, text=True
    )
    assert forked.stdout == again.stdout


def test_a_missing_module_is_said_as_python_says_it(here):
    cmd = [sys.executable, "-m", "no_such_module"]
    forked = fresh_process.run_module(cmd, "no_such_module", [], here, 60)
    new = subprocess.run(cmd, cwd=here, capture_output=True, text=True)
    assert (
        (forked.returncode, forked.stderr)
        == (new.returncode, new.stderr)
        == (
            1,
            f"{sys.executable}: No module named no_such_module\n",
        )
    )


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


def test_a_command_past_its_timeout_is_killed(here):
    """As ``subprocess.run`` does: ``TimeoutExpired`` with what it printed, the process killed
    and reaped by then (its pid no longer a process)."""
    cmd = [sys.executable, "-m", "fresh_probe", "sleep"]
    with pytest.raises(subprocess.TimeoutExpired) as stopped:
        fresh_process.run_module(cmd, "fresh_probe", ["sleep"], here, 2)
    pid = int(stopped.value.stdout)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_server_that_ended_is_started_again(here):
    """A server killed between two commands: the next command gets a new one."""
    first = fresh_process._server()
    first.proc.kill()
    first.proc.wait()
    forked, new = both(here, "report", "0", "")
    assert forked.returncode == 0 and fresh_process._server() is not first
    assert not os.path.exists(first.folder)


def test_without_forks_every_helper_starts_a_new_interpreter(monkeypatch, tmp_path):
    """``TRAINPLAN_TESTS_FORK=0``: the suite's helpers — a command, a transcript, a figure the
    prose quotes from the fidelity report — never ask the server."""

    def refuse(*_args, **_kw):
        raise AssertionError("forked under TRAINPLAN_TESTS_FORK=0")

    monkeypatch.setenv("TRAINPLAN_TESTS_FORK", "0")
    monkeypatch.setattr(fresh_process, "run_module", refuse)
    assert cli_runs.trainplan("gpus", "--json").returncode == 0
    shown = transcripts.run(
        transcripts.Transcript(tmp_path, 0, "trainplan models", (), 0), tmp_path
    )
    assert "llama3-8b" in shown
    report = prose_figures.output_of(prose_figures.FIDELITY + " --help", tmp_path)
    assert report.startswith("usage:") or "Usage" in report
