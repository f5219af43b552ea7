"""One CP-SAT set-up for every model the search builds (the layout model,
:mod:`optimizer.cpsat`; the per-stage model, :mod:`optimizer.stage_cpsat`): the solver's
parameters (workers, a fixed seed, a time limit), an optional solution callback, and the status
read as one of four words — the OR-Tools samples' shape (CP-SAT primer: "solve → check status →
read")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

__all__ = ["Solved", "solve", "SEED"]

SEED = 0
"""The solver's random seed: the same model gives the same answer run after run (ties are broken
by a later pass, so the answer does not depend on it; its time does)."""


@dataclass(frozen=True, slots=True)
class Solved:
    """What a solve left: its status and the solver to read values from."""

    status: str
    """``optimal`` (proven), ``feasible`` (stopped by the time limit with an answer),
    ``infeasible`` (proven: none) or ``unknown`` (stopped with none)."""
    solver: cp_model.CpSolver
    seconds: float

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
    ``time_limit_s`` seconds (None: until proven), calling ``progress(count, objective)`` on
    every improving solution."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = SEED
    if time_limit_s is not None:
        solver.parameters.max_time_in_seconds = time_limit_s
    status = solver.solve(model, _Callback(progress) if progress else None)
    name = {
        cp_model.OPTIMAL: "optimal",
        cp_model.FEASIBLE: "feasible",
        cp_model.INFEASIBLE: "infeasible",
    }.get(status, "unknown")
    return Solved(name, solver, solver.wall_time)
