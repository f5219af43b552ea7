"""A search or frontier of the page (or an RLHF placement search, ``/api/rlhf-plan``) in a
process of its own, so that cancelling it stops the work: the process (its cost tables, its CP-SAT
workers) is terminated, not left running unseen.

The page's progress stream (:mod:`interface.web.stream`) starts a :class:`Job` per search and
cancels it when the page goes away (the browser closes the connection: the page's Cancel button,
a new search, leaving the page). Processes come from a ``forkserver`` (a clean process that has
imported the planner once; each job is a fork of it, quick to start and safe beside the server's
threads). The job sends its progress and its end over a pipe; a search's or frontier's result is
kept in the API's cache (:func:`interface.web.api.remember`) like a search run in the server's own
process (an RLHF placement's is not: its object is answered as it is).
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from trainplan.interface.web import api
from trainplan.model.errors import InfeasibleError, PlannerError

__all__ = ["Job", "running"]

_LOG = logging.getLogger("trainplan.web")
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["trainplan.interface.web.jobs", "trainplan.interface.web.api"])
_RUNNING: dict[int, Job] = {}
_RUNNING_LOCK = threading.Lock()


def _child(kind: str, query: list[tuple[str, str]], conn: Connection) -> None:
    """The job's process: run the search, send ``("tables", done, total, cut)`` (``cut`` a time
    limit's words, :class:`optimizer.tables.TableProgress`; else None) and ``("solution",
    count, best)`` as it goes, then one of ``("result", SearchRun)``, ``("infeasible", message,
    explanation)``, ``("error", line)``; ``rlhf-plan``: ``("tables", done, total)`` per pool size
    and role costed and ``("solve", done, 3)`` per CP-SAT solve as it goes, then ``("result", its
    JSON object)`` (a placement that does not fit is its object too), or ``("error", line)``."""

    def on_tables(done: int, total: int, cut: str | None = None, /) -> None:
        conn.send(("tables", done, total, cut))

    progress = {
        "on_tables": on_tables,
        "on_solution": lambda count, best: conn.send(("solution", count, best)),
    }
    try:
        if kind == "rlhf-plan":
            result: Any = api.rlhf_plan_object(
                query, lambda stage, done, total: conn.send((stage, done, total))
            )
        else:
            run = api.search_run if kind == "search" else api.frontier_run
            result = run(query, **progress)
        if isinstance(result, InfeasibleError):
            conn.send(("infeasible", str(result), result.explanation))
        else:
            conn.send(("result", result))
    except PlannerError as err:
        conn.send(("error", api.error_line(err, f"/api/{kind}", query)))
    except Exception:  # a bug: logged, one line to the page, no trace
        _LOG.exception("search failed")
        conn.send(("error", "internal error; the server's log has the details"))
    finally:
        conn.close()


class Job:
    """One search, frontier or RLHF placement search (``kind``: ``search``, ``frontier``,
    ``rlhf-plan``) of ``query`` running in its own process."""

    def __init__(self, kind: str, query: list[tuple[str, str]]) -> None:
        self.kind, self.query = kind, query
        self.started = time.time()
        self.cancelled = False
        self._conn, child = _CONTEXT.Pipe(duplex=False)
        self.process = _CONTEXT.Process(target=_child, args=(kind, query, child), daemon=True)
        self.process.start()
        child.close()
        with _RUNNING_LOCK:
            _RUNNING[self.pid] = self

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def messages(self) -> Iterator[tuple[Any, ...]]:
        """The job's messages as they come (blocking), until its end or its process is gone."""
        try:
            while True:
                try:
                    message = self._conn.recv()
                except (EOFError, OSError):  # cancelled, or the process died
                    return
                yield message
                if message[0] in ("result", "infeasible", "error"):
                    return
        finally:
            self._conn.close()
            self.process.join(5)  # reaped, not left a zombie
            self._forget()

    def cancel(self) -> None:
        """Stop the job now: terminate its process (SIGTERM, then SIGKILL after 2 s)."""
        self.cancelled = True
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(2)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(2)
        self._forget()

    def _forget(self) -> None:
        """Off the list of running jobs (the pipe is closed by :meth:`messages`, whose reader
        sees its end when the process ends)."""
        with _RUNNING_LOCK:
            _RUNNING.pop(self.pid, None)


def running() -> list[dict[str, Any]]:
    """The jobs running now: ``kind``, ``pid``, ``seconds`` since they started, ``query``."""
    now = time.time()
    with _RUNNING_LOCK:
        jobs = list(_RUNNING.values())
    return [
        {"kind": j.kind, "pid": j.pid, "seconds": now - j.started, "query": j.query}
        for j in jobs
        if j.process.is_alive()
    ]


def run_job(
    kind: str, query: list[tuple[str, str]], put: Callable[[dict[str, Any]], None]
) -> tuple[Job, threading.Thread]:
    """Start a job and a thread that turns its messages into the stream's events (``tables``,
    with ``cut`` once when a time limit cut the cost tables: its words; ``solution``; an RLHF
    placement's ``solve``: ``done`` of ``total`` CP-SAT solves begun; then
    ``done`` with ``result``: the SearchRun, InfeasibleError or RLHF placement object, or
    ``error``);
    ``put`` receives each. Nothing is put after a cancel."""

    job = Job(kind, query)

    def pump() -> None:
        ended = False
        for message in job.messages():
            ended = message[0] in ("result", "infeasible", "error")
            tag, *rest = message
            if tag == "tables":  # a time limit's cut: its words (optimizer.tables.TableProgress)
                cut = {"cut": rest[2]} if len(rest) > 2 and rest[2] is not None else {}
                put({"event": "tables", "done": rest[0], "total": rest[1], **cut})
            elif tag == "solution":
                put({"event": "solution", "count": rest[0], "best": rest[1]})
            elif tag == "solve":
                put({"event": "solve", "done": rest[0], "total": rest[1]})
            elif tag == "result":
                put({"event": "done", "result": rest[0]})
            elif tag == "infeasible":
                put({"event": "done", "result": InfeasibleError(rest[0], rest[1])})
            else:
                put({"event": "error", "error": rest[0]})
        if not ended and not job.cancelled:
            line = f"the {kind} stopped without an answer (its process ended: out of memory?)"
            put({"event": "error", "error": line})

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return job, thread
