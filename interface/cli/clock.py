"""When the command began: the instant from which ``--time-limit`` counts (``search``,
``frontier``, ``rlhf-plan``: the command's wall clock, loading the model, the accelerator and
the solver included, as a user timing the command measures it)."""

from __future__ import annotations

import os
import time

__all__ = ["STARTED", "process_started"]

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


STARTED = process_started()
"""The command's start (:func:`process_started`), read once when the command line is loaded."""
