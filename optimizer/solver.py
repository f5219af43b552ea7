"""One CP-SAT set-up for every model the search builds (the layout model,
:mod:`optimizer.cpsat`; the per-stage model, :mod:`optimizer.stage_cpsat`): the solver's
parameters (workers, a fixed seed, a time limit), an optional solution callback, the status
read as one of four words — the OR-Tools samples' shape (CP-SAT primer: "solve → check status →
read") — and one way to stop every solve at once (:func:`interrupt`, Ctrl-C in the CLI:
:mod:`interface.cli.interrupt`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ortools.sat.python import cp_model

__all__ = [
    "Solved",
    "solve",
    "SEED",
    "run_solver",
    "interrupt",
    "interrupted",
    "clear_interrupt",
    "INTERRUPTED_LIMIT_S",
]

SEED = 0
"""The solver's random seed: the same model gives the same answer run after run (ties are broken
by a later pass, so the answer does not depend on it; its time does)."""

INTERRUPTED_LIMIT_S = 1.0
"""Seconds each solve may still take once the search is interrupted (:func:`interrupt`): the
passes after the stopped one (the tie-break, the objective after ``--maximize params``) read the
answer so far instead of being skipped."""
_STOP = threading.Event()
_RUNNING: set[cp_model.CpSolver] = set()
_LOCK = threading.Lock()


def interrupt() -> None:
    """Stop every CP-SAT solve now running and bound each later one by
    :data:`INTERRUPTED_LIMIT_S`, so an interrupted search (Ctrl-C, which the caller catches:
    the solver's own SIGINT handler is off, it resets SIGINT to the default after each solve)
    ends within seconds with the best found so far. Thread-safe; idempotent, so a caller may
    repeat it until the search returns."""
    _STOP.set()
    with _LOCK:
        for solver in _RUNNING:
            solver.stop_search()


def interrupted() -> bool:
    """Whether :func:`interrupt` was called since :func:`clear_interrupt`."""
    return _STOP.is_set()


def clear_interrupt() -> None:
    """Forget an earlier :func:`interrupt` (before a new search)."""
    _STOP.clear()


def run_solver(
    solver: cp_model.CpSolver,
    model: cp_model.CpModel,
    time_limit_s: float | None = None,
    callback: cp_model.CpSolverSolutionCallback | None = None,
) -> Any:
    """``solver.solve(model)`` (its status: ``cp_model.OPTIMAL``…) within ``time_limit_s``
    (None: none), stoppable by :func:`interrupt`: every CP-SAT solve of the project runs
    through here."""
    solver.parameters.catch_sigint_signal = False  # Ctrl-C is the caller's: interrupt()
    with _LOCK:
        _RUNNING.add(solver)
    if _STOP.is_set():
        time_limit_s = min(time_limit_s or INTERRUPTED_LIMIT_S, INTERRUPTED_LIMIT_S)
    if time_limit_s:
        solver.parameters.max_time_in_seconds = time_limit_s
    try:
        return solver.solve(model, callback)
    finally:
        with _LOCK:
            _RUNNING.discard(solver)


@dataclass(frozen=True, slots=True)
class Solved:
    """What a solve left: its status and the solver to read values from."""

    status: str
    """``optimal`` (proven), ``feasible`` (stopped by the time limit or :func:`interrupt` with
    an answer), ``infeasible`` (proven: none) or ``unknown`` (stopped with none)."""
    solver: cp_model.CpSolver
    seconds: float
    """The solver's wall time, seconds."""

    @property
    def found(self) -> bool:
        """Whether the solve has an answer to read."""
        return self.status in ("optimal", "feasible")


class _Callback(cp_model.CpSolverSolutionCallback):
    def __init__(self, report: Callable[[int, float], None]) -> None:
        super().__init__()
        self._report, self._count = report, 0

    def on_solution_callback(self) -> None:
        self._count += 1
        self._report(self._count, self.objective_value)


def solve(
    model: cp_model.CpModel,
    *,
    time_limit_s: float | None = None,
    workers: int = 2,
    progress: Callable[[int, float], None] | None = None,
) -> Solved:
    """Solve ``model`` with ``workers`` threads, the fixed :data:`SEED`, at most
    ``time_limit_s`` seconds (None: until proven or interrupted; :func:`run_solver`), calling
    ``progress(count, objective)`` on every improving solution."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = SEED
    status = run_solver(solver, model, time_limit_s, _Callback(progress) if progress else None)
    name = {
        cp_model.OPTIMAL: "optimal",
        cp_model.FEASIBLE: "feasible",
        cp_model.INFEASIBLE: "infeasible",
    }.get(status, "unknown")
    return Solved(name, solver, solver.wall_time)
