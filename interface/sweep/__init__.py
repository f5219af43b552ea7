"""Co-design sweeps: many searches (or evaluations) over models, accelerators, GPU counts,
sequence lengths, batches, frameworks, recipes and hardware what-ifs, each point the answer the
single command gives.

* :mod:`.grid` reads the grid file into points;
* :mod:`.points` runs one point (the single command's function) into a results row;
* :mod:`.engines` runs batches of points on a local process pool or on Ray;
* :mod:`.results` writes the rows to Parquet as they finish (a stopped sweep resumes);
* :mod:`.summary` says what a finished sweep found; :mod:`.plots` draws its standard figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainplan.interface.sweep.engines import batches, engine
from trainplan.interface.sweep.grid import Grid, load_grid, parse_grid
from trainplan.interface.sweep.results import ResultsStore, load_results

__all__ = ["Grid", "SweepRun", "load_grid", "parse_grid", "run_sweep", "engine", "load_results"]


@dataclass(frozen=True, slots=True)
class SweepRun:
    """A sweep that ran to its end."""

    frame: Any
    """Every point's row (pandas DataFrame, point order)."""
    ran: int
    """Points run now (the others were in the results file already)."""
    seconds: float
    """Wall time of this run."""


def run_sweep(
    grid: Grid,
    out: str | Path,
    runner: Any,
    restart: bool = False,
    on_start: Callable[[int, int], None] | None = None,
    on_rows: Callable[[list[dict[str, Any]]], None] | None = None,
) -> SweepRun:
    """Run the points of ``grid`` not yet in ``out`` on ``runner`` (an engine of
    :func:`engine`), writing each batch's rows as it finishes; then merge ``out``.

    ``on_start(points to run, points in all)`` is called once, ``on_rows(rows)`` after each batch
    (the progress bar, the web app's stream).

    Raises
    ------
    InputError
        ``out`` holds another grid's results (without ``restart``); the engine's refusals.
    KeyboardInterrupt
        Ctrl+C: the rows written so far stay in ``out``'s parts; the same command resumes.
    """
    store = ResultsStore(out, grid, restart)
    todo = [p.index for p in grid.points if p.index not in store.done]
    if on_start is not None:
        on_start(len(todo), len(grid.points))
    t0 = time.perf_counter()
    for rows in runner.run(grid, batches(grid, todo, runner.workers)):
        store.append(rows)
        if on_rows is not None:
            on_rows(rows)
    seconds = time.perf_counter() - t0
    return SweepRun(store.finish(), len(todo), seconds)
