"""Sweeps from the page: start one from a grid's text, follow its progress as a stream, download
its results, draw its figures — ``trainplan sweep`` on the server's process pool, the same grid
rules, rows, summary and figures.

* ``POST /api/sweep`` with ``{"grid": "<the grid file's TOML>"}`` starts a sweep (one at a time)
  and answers ``{"id", "points"}``; a bad grid is HTTP 422 with the line the CLI prints; while
  another runs, HTTP 422 with ``{"error", "running"}`` (:func:`busy_line`; its id);
* ``GET /api/sweep/{id}/stream``: newline-delimited JSON events from the start — ``start``
  (points, to run), ``progress`` after each batch (done, to run, points per second, seconds
  left), then ``done`` with the summary (``trainplan sweep --json``), ``cancelled`` or ``error``;
* ``GET /api/sweep/{id}``: where it stands (``state``: running, cancelling, done, cancelled or
  error); ``DELETE`` cancels it after the batches running now (the rows done are kept): it
  answers ``cancelling`` until they end, then ``cancelled``;
* ``GET /api/sweep/{id}/results.csv`` and ``results.parquet``: the rows so far;
* ``GET /api/sweep/{id}/figure.svg?kind=scaling&metric=cost`` (or ``kind=heatmap&what_if=…``;
  without ``metric``, the one ``trainplan sweep-plot`` draws); the ``done`` summary names the
  metrics the results have (``metrics``) and that default (``metric``).

Files on the server are not taken from the page: models must be catalogue names, and a
``calibration`` file is refused.
"""

from __future__ import annotations

import asyncio
import atexit
import io
import logging
import shutil
import tempfile
import threading
import time
import tomllib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Body, Response
from fastapi.responses import StreamingResponse

from trainplan.interface.commands import to_json
from trainplan.interface.render import plots
from trainplan.interface.sweep import charts, engine, load_results, parse_grid, run_sweep
from trainplan.interface.sweep.engines import WorkerLost
from trainplan.interface.sweep.results import results_meta
from trainplan.interface.sweep.summary import summary_json
from trainplan.interface.web.api import BAD_INPUT, json_response
from trainplan.model.errors import InputError, PlannerError
from trainplan.scenarios.catalogue import model_names

__all__ = ["router", "MAX_POINTS", "busy_line"]

router = APIRouter(prefix="/api/sweep", tags=["sweeps"])
_LOG = logging.getLogger("trainplan.web")
MAX_POINTS = 20_000
"""Most points a sweep started from the page may have (``trainplan sweep`` takes more)."""
_JOBS: dict[str, Job] = {}
_LOCK = threading.Lock()


@cache
def _folder() -> Path:
    """Where the page's sweeps write their results: a temporary folder made at the first one and
    removed as the server's process ends (a sweep's id, which the downloads ask by, lives only
    in that process)."""
    folder = Path(tempfile.mkdtemp(prefix="trainplan-sweeps-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


class _Cancelled(Exception):
    pass


@dataclass
class Job:
    """One sweep started from the page, and its events so far."""

    id: str
    grid: Any
    out: Path
    started: float = field(default_factory=time.perf_counter)
    todo: int = 0
    done: int = 0
    state: str = "running"
    events: list[dict[str, Any]] = field(default_factory=list)
    cancel: threading.Event = field(default_factory=threading.Event)

    def put(self, event: dict[str, Any]) -> None:
        with _LOCK:
            self.events.append(event)

    def status(self) -> dict[str, Any]:
        """Where the sweep stands (module docstring); ``cancelling`` from a cancel until the
        batches running then end (never ``running`` after the DELETE that stops it)."""
        elapsed = time.perf_counter() - self.started
        rate = self.done / elapsed if self.done and elapsed > 0 else None
        left = (self.todo - self.done) / rate if rate else None
        state = "cancelling" if self.state == "running" and self.cancel.is_set() else self.state
        return {"id": self.id, "state": state, "points": len(self.grid.points), "todo": self.todo,
                "done": self.done, "points_per_s": rate, "seconds_left": left}  # fmt: skip


def _grid(text: str) -> Any:
    """The grid of the page's text, checked as the CLI checks a file, plus the page's rules."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"grid: not TOML: {err}") from None
    g = parse_grid(data, "from the page", _catalogue_model)
    if "calibration" in g.base.get("cluster", {}):
        raise InputError("calibration: names a file on the server; the page does not take files")
    known = set(model_names())
    for p in g.points:  # a point without a model anywhere
        if g.model(p) not in known:
            raise InputError(f"model: {_not_catalogue(g.model(p))}")
    if len(g.points) > MAX_POINTS:
        raise InputError(
            f"grid: {len(g.points):,} points, over the page's {MAX_POINTS:,}; run trainplan sweep"
        )
    return g


def _not_catalogue(name: str) -> str:
    return (
        f"{name!r} is not a catalogue model (trainplan models); the page takes catalogue names only"
    )


def _catalogue_model(name: str) -> None:
    """Refuse, reading nothing, a model that is no catalogue name (a path would name a file on
    the server)."""
    if name not in model_names():
        raise InputError(_not_catalogue(name))


def _run(job: Job) -> None:
    """The sweep in a thread: events as it goes."""

    def start(todo: int, total: int) -> None:
        job.todo = todo
        job.put({"event": "start", "points": total, "todo": todo})

    def rows(batch: list[dict[str, Any]]) -> None:
        job.done += len(batch)
        job.put({"event": "progress", **job.status()})
        if job.cancel.is_set():
            raise _Cancelled

    try:
        run = run_sweep(job.grid, job.out, engine("pool"), False, start, rows)
        summary = summary_json(run.frame, results_meta(job.out))
        summary.update(ran=run.ran, seconds=run.seconds, metrics=charts.metrics_of(run.frame))
        summary["metric"] = charts.default_metric(run.frame)  # what `trainplan sweep-plot` draws
        job.state = "done"
        job.put({"event": "done", "summary": summary})
    except _Cancelled:
        job.state = "cancelled"
        job.put({"event": "cancelled", "done": job.done})
    except (PlannerError, WorkerLost) as err:
        job.state = "error"
        job.put({"event": "error", "error": str(err)})
    except Exception:  # a bug: logged on the server, one line to the page
        _LOG.exception("sweep failed")
        job.state = "error"
        job.put({"event": "error", "error": "internal error; the server's log has the details"})


def _job(sweep_id: str) -> Job:
    with _LOCK:
        job = _JOBS.get(sweep_id)
    if job is None:
        raise InputError(
            f"sweep: no sweep {sweep_id!r} on this server (it restarted, or never ran)"
        )
    return job


def busy_line(sweep_id: str) -> str:
    """The refusal of a second sweep while ``sweep_id`` runs: where to follow it and how to
    cancel it (the page shows its link and a Cancel button beside the line).

    >>> busy_line("0123abcd")
    'sweep: 0123abcd is running (follow it at /sweep?id=0123abcd); wait for it or cancel it (DELETE /api/sweep/0123abcd)'
    """
    return (
        f"sweep: {sweep_id} is running (follow it at /sweep?id={sweep_id}); wait for it or "
        f"cancel it (DELETE /api/sweep/{sweep_id})"
    )


@router.post("", responses=BAD_INPUT)
def start(grid: str = Body(..., embed=True, description="The grid file's text (TOML)")) -> Response:
    """Start a sweep of the grid (`trainplan sweep GRID`) on the server's cores; one at a time."""
    g = _grid(grid)
    with _LOCK:
        running = [j.id for j in _JOBS.values() if j.state == "running"]
    if running:  # the line, and the running sweep's id for the page's link and Cancel button
        return json_response({"error": busy_line(running[0]), "running": running[0]}, 422)
    job = Job(uuid.uuid4().hex[:12], g, _folder() / f"{uuid.uuid4().hex[:12]}.parquet")
    with _LOCK:
        _JOBS[job.id] = job
    threading.Thread(target=_run, args=(job,), daemon=True).start()
    return json_response({"id": job.id, "points": len(g.points)})


@router.get("/{sweep_id}", responses=BAD_INPUT)
def status(sweep_id: str) -> Response:
    """Where the sweep stands: state (running, cancelling, done, cancelled, error), points done,
    rate, time left."""
    return json_response(_job(sweep_id).status())


@router.delete("/{sweep_id}", responses=BAD_INPUT)
def cancel(sweep_id: str) -> Response:
    """Cancel the sweep after the batches running now; the rows done stay downloadable."""
    job = _job(sweep_id)
    job.cancel.set()
    return json_response(job.status())


@router.get("/{sweep_id}/stream", response_class=Response, responses=BAD_INPUT)
async def stream(sweep_id: str) -> Response:
    """The sweep's events from its start, one JSON object a line, until done, cancelled or error."""
    job = _job(sweep_id)

    async def lines() -> AsyncIterator[str]:
        sent = 0
        while True:
            with _LOCK:
                new = job.events[sent:]
            for event in new:
                yield to_json(event, None) + "\n"
                if event["event"] in ("done", "cancelled", "error"):
                    return
            sent += len(new)
            await asyncio.sleep(0.2)

    return StreamingResponse(lines(), media_type="application/x-ndjson")


def _frame(sweep_id: str) -> Any:

    return load_results(_job(sweep_id).out)


@router.get("/{sweep_id}/results.csv", response_class=Response, responses=BAD_INPUT)
def results_csv(sweep_id: str) -> Response:
    """The rows so far as CSV (what `trainplan sweep --csv` writes)."""
    text = _frame(sweep_id).to_csv(index=False)
    return Response(
        text,
        media_type="text/csv",
        headers={"Content-Disposition": 'attachment; filename="sweep.csv"'},
    )


@router.get("/{sweep_id}/results.parquet", response_class=Response, responses=BAD_INPUT)
def results_parquet(sweep_id: str) -> Response:
    """The rows so far as Parquet (what `trainplan sweep --out` writes)."""
    buf = io.BytesIO()
    _frame(sweep_id).to_parquet(buf, index=False)
    return Response(buf.getvalue(), media_type="application/vnd.apache.parquet",
                    headers={"Content-Disposition": 'attachment; filename="sweep.parquet"'})  # fmt: skip


@router.get("/{sweep_id}/figure.svg", response_class=Response, responses=BAD_INPUT)
def figure(
    sweep_id: str, kind: str = "scaling", metric: str | None = None, what_if: str | None = None
) -> Response:
    """The sweep's figure (`trainplan sweep-plot`): `kind` scaling (the metric against GPU count
    per part) or heatmap (with `what_if`); `metric` time-to-train, cost, step-time or mfu
    (default as `sweep-plot`'s: time to train where the grid gives tokens, else step time)."""
    frame = _frame(sweep_id)
    kind = kind.lower()  # in any case, as the command's --kind and --metric
    metric = metric.lower() if metric else charts.default_metric(frame)
    if kind == "scaling":
        series, m, note = charts.scaling_series(frame, metric)
        return Response(
            plots.svg(lambda out: plots.sweep_scaling_chart(series, m.label, note, out, m.bounded)),
            media_type="image/svg+xml",
        )
    if kind != "heatmap":
        raise InputError(f"kind: {kind!r} is not one of scaling, heatmap")
    if not what_if:
        raise InputError("what_if: kind heatmap needs what_if, e.g. hbm_capacity")
    cells = charts.heatmap_cells(frame, what_if, metric)
    return Response(
        plots.svg(lambda out: plots.sweep_heatmap(cells, out)), media_type="image/svg+xml"
    )
