"""Ctrl-C during a search: the CP-SAT solves stop (:func:`optimizer.solver.interrupt`), the best
layout found so far is printed as such, and the command exits with code 130 (128 + SIGINT, the
shells' convention), never as if it had finished.

The search runs in a worker thread while the main thread waits, so the interrupt is caught
where Python delivers it (the main thread) and passed on at once; a second Ctrl-C quits
without waiting.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from trainplan.interface.cli.common import INTERRUPTED

if TYPE_CHECKING:
    from trainplan.optimizer.tables import TableProgress

__all__ = ["Interrupted", "interruptible", "stop_between_tables"]

T = TypeVar("T")
POLL_S = 0.1
"""How often the waiting main thread looks for a Ctrl-C, seconds (the search's end wakes it at
once)."""


class Interrupted(click.ClickException):
    """A command stopped by Ctrl-C before it had anything to show: one line, exit code 130."""

    exit_code = INTERRUPTED


def interruptible(work: Callable[[], T]) -> tuple[T, bool]:
    """``work()`` run so that Ctrl-C stops its CP-SAT solves instead of the process; returns
    its result and whether it was interrupted (the result is then the best found before).

    Raises
    ------
    Interrupted
        When interrupted before ``work`` had a result (it raised, e.g. while building tables or
        with no solution yet).
    BaseException
        Whatever ``work`` raised, when not interrupted.
    """
    from trainplan.optimizer import cpsat

    cpsat.clear_interrupt()
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as err:  # handed to the main thread
            box["error"] = err
        finally:
            done.set()

    presses: list[int] = []
    # Ctrl-C counted by a handler, so that it never lands between two statements of this loop
    # as a KeyboardInterrupt that skips the stop (the main thread only; elsewhere the default)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, lambda *_: presses.append(1)) if main else None
    threading.Thread(target=target, name="search", daemon=True).start()
    try:
        seen = 0
        while not done.is_set():
            done.wait(POLL_S)  # polled (a Thread.join interrupted by Ctrl-C may misreport), and
            # woken the moment the search ends rather than at the next tick
            if len(presses) > seen:
                again = len(presses) - seen > 1  # pressed twice between two polls
                seen = len(presses)
                if again or cpsat.interrupted():
                    click.echo("\nError: interrupted", err=True)
                    os._exit(INTERRUPTED)
                click.echo(
                    "\ninterrupted: stopping the search (Ctrl-C again to quit at once)", err=True
                )
                cpsat.interrupt()
            if cpsat.interrupted():
                cpsat.interrupt()  # again: a solve may have started since
    finally:
        if main:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
    stopped = cpsat.interrupted()
    if "error" in box:
        if stopped and not isinstance(box["error"], Interrupted):
            raise Interrupted("interrupted before any layout was found") from None
        raise box["error"]
    return box["value"], stopped


def stop_between_tables(report: TableProgress | None) -> TableProgress:
    """A table-building progress callback (``(done, total)`` shapes, and a time limit's ``cut``:
    :class:`optimizer.tables.TableProgress`) that ends the building once the search is
    interrupted, then calls ``report`` (None: none)."""
    from trainplan.optimizer import cpsat

    def on_tables(done: int, total: int, cut: str | None = None, /) -> None:
        if cpsat.interrupted():
            raise Interrupted(
                f"interrupted while building the cost tables ({done:,} of {total:,} shapes), "
                "before any layout was found"
            )
        if report is not None:
            report(done, total, cut)

    return on_tables
