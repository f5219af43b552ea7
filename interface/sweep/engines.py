"""Where a sweep's points run: a local process pool (the default: every core, no server) or Ray
(a local Ray instance, or an existing cluster by its address).

Both take the same batches — points grouped by (model, catalogue part), so a worker process
that runs one batch keeps the model's and the part's cached terms (:mod:`model.estimate`,
:mod:`model.stage_bytes` cache them by value) for the next points of the batch — and run
:func:`interface.sweep.points.run_points` on them; a point's row does not depend on the engine,
the batch or the order (the tests run one grid both ways and compare).

* :class:`ProcessPool`: :class:`concurrent.futures.ProcessPoolExecutor` over the ``forkserver``
  start method (workers forked from a clean server process that has imported the planner once;
  no threads of the parent are forked). The grid is sent to each worker once, at its start; a
  batch is a list of point numbers. One worker runs the points in this process.
* :class:`RayEngine`: one Ray task a batch (``num_cpus=1``), the grid put once in Ray's object
  store (``ray.put``); results taken as they finish (``ray.wait``). ``address`` joins an
  existing cluster (``ray.init(address=…)``; every node needs the same trainplan installed);
  without it a local instance of ``workers`` CPUs is started and stopped.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from importlib.metadata import version
from typing import Any

from trainplan.interface.sweep.grid import Grid
from trainplan.interface.sweep.points import run_points
from trainplan.model.errors import InputError

__all__ = [
    "WorkerLost",
    "ENGINES",
    "MAX_BATCH",
    "ProcessPool",
    "RayEngine",
    "batches",
    "default_workers",
    "engine",
]

ENGINES = ("pool", "ray")
MAX_BATCH = 8
"""Most points in one batch: enough to reuse a worker's cached terms, few enough that the
progress bar moves and the last batches spread over the workers."""

Rows = list[dict[str, Any]]


class WorkerLost(RuntimeError):
    """A worker process died (killed by a signal or the out-of-memory killer): the rows done so
    far are kept; the same command resumes the rest."""


def default_workers() -> int:
    """The cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where the
    platform has no affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def batches(grid: Grid, todo: list[int], workers: int) -> list[list[int]]:
    """``todo`` (point numbers) in batches of one (model, part) each, at most
    :data:`MAX_BATCH` points and about a quarter of a worker's share, groups in grid order."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i in todo:
        groups.setdefault(grid.group(grid.point(i)), []).append(i)
    size = max(1, min(MAX_BATCH, math.ceil(len(todo) / (4 * max(1, workers)))))
    return [g[k : k + size] for g in groups.values() for k in range(0, len(g), size)]


PRELOAD = [
    __name__,
    "trainplan.interface.commands",
    "trainplan.interface.render.report",
    "trainplan.model.report_dict",
    "trainplan.optimizer.search",
    "ortools.sat.python.cp_model",
]
"""Modules the fork server imports once, so that every worker starts with them (a search's
imports take about 2 s on the 2-core development machine)."""

_GRID: Grid | None = None


def _init_worker(grid: Grid) -> None:
    """A pool worker's start: keep the grid; leave Ctrl+C to the parent (it stops the sweep)."""
    global _GRID
    _GRID = grid
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _worker_batch(indices: list[int]) -> Rows:
    assert _GRID is not None
    return run_points(_GRID, indices)


class ProcessPool:
    """The local engine: ``workers`` processes (default :func:`default_workers`)."""

    name = "pool"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or default_workers()

    def describe(self) -> str:
        return f"process pool of {self.workers} worker{'s' if self.workers > 1 else ''}"

    def run(self, grid: Grid, work: list[list[int]]) -> Iterator[Rows]:
        """Each batch's rows as it finishes (in any order)."""
        if self.workers == 1 or len(work) <= 1:
            for indices in work:
                yield run_points(grid, indices)
            return
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        pool = ProcessPoolExecutor(
            min(self.workers, len(work)), ctx, initializer=_init_worker, initargs=(grid,)
        )
        try:
            pending = {pool.submit(_worker_batch, b) for b in work}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
        except BrokenProcessPool:
            raise WorkerLost(
                "a worker process died (a signal, or the system out of memory); the rows done are kept"
            ) from None
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Nothing held between runs."""


def _ray_batch(grid: Grid, indices: list[int], driver_version: str) -> Rows:
    """A Ray task: the batch's rows, on a node with the driver's trainplan."""
    here = version("trainplan")
    if here != driver_version:
        raise InputError(
            f"engine ray: a worker has trainplan {here}, the driver {driver_version}; install the "
            "same version on every node"
        )
    return run_points(grid, indices)


class RayEngine:
    """Ray: a local instance of ``workers`` CPUs, or the cluster at ``address``.

    Raises
    ------
    InputError
        Ray not installed (``pip install -e '.[sweep-ray]'``); ``workers`` given with an
        ``address`` (the cluster's CPUs decide); a cluster Ray cannot reach.
    """

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise InputError(
                "engine ray: Ray is not installed; pip install -e '.[sweep-ray]'"
            ) from None
        if address and workers:
            raise InputError(
                f"workers: {workers} applies to a local Ray instance; the cluster at {address} "
                "runs a task on each CPU it has"
            )
        self._ray = ray
        self.address = address
        self._started = not ray.is_initialized()
        if self._started:
            import logging

            options: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
            try:
                if address:
                    ray.init(address=address, **options)
                else:
                    ray.init(
                        num_cpus=workers or default_workers(), include_dashboard=False, **options
                    )
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise InputError(
                    f"address: Ray could not start or reach {address or 'a local instance'}: {err}"
                ) from None
        self.workers = int(ray.cluster_resources().get("CPU", 1))

    def describe(self) -> str:
        where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance"
        return f"{where} ({self.workers} CPUs)"

    def run(self, grid: Grid, work: list[list[int]]) -> Iterator[Rows]:
        """Each batch's rows as it finishes (in any order)."""
        ray = self._ray
        task = ray.remote(num_cpus=1)(_ray_batch)
        ref = ray.put(grid)
        pending = [task.remote(ref, b, version("trainplan")) for b in work]
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                yield ray.get(done[0])
        except ray.exceptions.RayTaskError as err:
            cause = err.as_instanceof_cause()
            if isinstance(cause, InputError):
                raise InputError(str(cause).splitlines()[-1]) from None
            raise
        finally:
            for ref_left in pending:
                ray.cancel(ref_left)

    def close(self) -> None:
        """Stop the local instance this engine started (a cluster is left running)."""
        if self._started:
            self._ray.shutdown()


def engine(
    name: str, workers: int | None = None, address: str | None = None
) -> ProcessPool | RayEngine:
    """The engine called ``name`` (:data:`ENGINES`).

    Raises
    ------
    InputError
        An unknown engine; ``address`` with the process pool (it applies to Ray only).
    """
    if name == "pool":
        if address:
            raise InputError(f"address: {address!r} applies to --engine ray, not the process pool")
        return ProcessPool(workers)
    if name == "ray":
        return RayEngine(address, workers)
    raise InputError(f"engine: {name!r} is not one of {', '.join(ENGINES)}")
