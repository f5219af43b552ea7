"""When the command began: the instant from which ``--time-limit`` counts (``search``,
``frontier``, ``rlhf-plan``: the command's wall clock, loading the model, the accelerator and
the solver included, as a user timing the command measures it).

The console script (``trainplan …``, ``python -m trainplan``) runs one command a process, so its
first command counts from the process's start (:func:`process_started`: the interpreter's
start and the imports included). A program that keeps the command line loaded and runs commands
in it (click's ``cli.main([...])``, ``CliRunner.invoke``, a second ``main()``) has each further
command count from its own start: :func:`begin_command`, called by the command group at every
command; :func:`command_started` is what the commands read."""

from __future__ import annotations

import os
import time

__all__ = ["begin_command", "command_started", "console_command", "process_started"]

_MOST_BEFORE_S = 600.0
"""A process start read as further back than this is taken as unreadable (a clock that does
not match the kernel's): the reading at import is used instead."""


def process_started() -> float:
    """The :func:`time.perf_counter` reading at which this process started, s: Linux's
    ``/proc/self/stat`` field 22, ``starttime`` (clock ticks after boot, proc(5)), against
    ``CLOCK_BOOTTIME`` (the clock it is counted on since Linux 5.x's ``start_boottime``), so
    that the interpreter's start and the imports before this module count; where that cannot be
    read (another OS), the reading now (this module is imported before any of the planner's).
    """
    now = time.perf_counter()
    try:
        with open("/proc/self/stat", "rb") as stat:
            after_name = stat.read().rsplit(b")", 1)[1].split()
        began = int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22; field 3 is [0]
        before = time.clock_gettime(time.CLOCK_BOOTTIME) - began
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - before if 0.0 <= before <= _MOST_BEFORE_S else now


_PROCESS_START = process_started()
"""The process's start (:func:`process_started`), read once when the command line is loaded."""

_clock = {"started": _PROCESS_START, "console": False, "first": True}
"""The running command's start (``started``, a :func:`time.perf_counter` reading), whether the
console script is running the process's first command (``console``), and whether no command has
begun yet (``first``): the only state of this module, written by :func:`console_command` and
:func:`begin_command`."""


def console_command() -> None:
    """Mark the command about to run as the console script's (:func:`interface.cli.main`): the
    process's first command then counts from the process's start."""
    _clock["console"] = True


def begin_command() -> float:
    """Record a command's start, as the command group's callback runs (before the command's):
    the process's start for the console script's first command (:func:`console_command`), else
    now. Returns that :func:`time.perf_counter` reading.

    >>> import time
    >>> begin_command() <= time.perf_counter()  # a command run in a loaded program: now
    True
    """
    from_process = _clock["console"] and _clock["first"]
    _clock.update(console=False, first=False)
    _clock["started"] = _PROCESS_START if from_process else time.perf_counter()
    return command_started()


def command_started() -> float:
    """The :func:`time.perf_counter` reading at which the running command began
    (:func:`begin_command`; before any command, the process's start)."""
    return float(_clock["started"])
