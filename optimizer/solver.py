"""One CP-SAT set-up for every model the search builds (the layout model,
:mod:`optimizer.cpsat`; the per-stage model, :mod:`optimizer.stage_cpsat`): the solver's
parameters (workers, a fixed seed, a time limit), an optional solution callback, the status
read as one of four words — the OR-Tools samples' shape (CP-SAT primer: "solve → check status →
read") — one way to stop every solve at once (:func:`interrupt`, Ctrl-C in the CLI:
:mod:`interface.cli.interrupt`), and the one presolve rule family switched off because it
certifies wrong optima on this project's models (:data:`PRESOLVE_INCLUSION_WORK_LIMIT`).
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
    "LAYOUT_WORKERS",
    "STAGE_WORKERS",
    "run_solver",
    "interrupt",
    "interrupted",
    "clear_interrupt",
    "INTERRUPTED_LIMIT_S",
    "PRESOLVE_INCLUSION_WORK_LIMIT",
]

SEED = 0
"""The solver's random seed: the same model gives the same answer run after run (ties are broken
by a later pass, so the answer does not depend on it; its time does)."""

LAYOUT_WORKERS = 2
"""CP-SAT workers (threads) of the layout search and the RLHF placement unless the caller gives
a count (``--workers``): their answers do not depend on which worker finds them, as a later pass
breaks ties by a fixed rank (:mod:`optimizer.cpsat`)."""

STAGE_WORKERS = 1
"""CP-SAT workers of the per-stage search unless the caller gives a count: one. Two splits can
tie to the ns and the byte (Llama 4 Maverick at pp 8 on 256 H100s: 7,7,6,6,6,7,6,3 and
7,7,6,6,7,6,6,3 layers, 10.324 s, one peak), and with several workers the one that reports
first is kept, so two runs could print different splits. One worker searches on one thread with
the fixed :data:`SEED` (``ortools/sat/sat_parameters.proto``: ``num_workers`` 1 is no
parallelism, ``random_seed`` re-seeds each solve), so the same model gives the same split run
after run; OR-Tools promises that for no worker count across its versions. Measured on a
two-core machine (OR-Tools 9.15), the per-stage guide's search (Llama 3 405B on 192 H100s)
spent 5.1 s in CP-SAT with one worker against 5.6 s with two, and Maverick's above 3.6 against
4.1 s: the per-stage models are small, and their solves wait on the tables, not on threads."""

INTERRUPTED_LIMIT_S = 1.0
"""Seconds each solve may still take once the search is interrupted (:func:`interrupt`): the
passes after the stopped one (the tie-break, the objective after ``--maximize params``) read the
answer so far instead of being skipped."""

PRESOLVE_INCLUSION_WORK_LIMIT = 0
"""CP-SAT's ``presolve_inclusion_work_limit`` for every solve: 0, which switches off the presolve
rules that detect constraints included in others (``ortools/sat/sat_parameters.proto``, field
201, default 1e8: "A value of zero will disable these presolve rules completely"), among them
``CpModelPresolver::ProcessAtMostOneAndLinear`` (``ortools/sat/cp_model_presolve.cc``: it
returns at once when the limit is 0, and it is the only caller of ``ProcessOneLinearWithAmo``).

Why: in OR-Tools 9.15 ``ActivityBoundHelper::RemoveEnforcementThatMakesConstraintTrivial``
(``ortools/sat/presolve_util.cc``, called only from ``ProcessOneLinearWithAmo``: the rule
"linear + amo: removed enforcement literal") sums a row's Boolean coefficients into 32-bit
``int``s. Past 2^31 the sum wraps negative, the row's activity interval comes out empty, which
counts as always within the bound, and the row's enforcement literal is dropped: ``b ⇒ row``
becomes ``row``, the solutions with ``b`` false and the row violated are lost, and the status
still says OPTIMAL (google/or-tools issue #5293, "CP-SAT certifies a wrong optimality proof on an
all-linear model (9.15)", which names this limit as the switch; PR #5294 fixes a second fault of
the same function). This project's rows are bytes and nanoseconds over one-hot Booleans, far past
2^31: the RLHF placement's weight-sync row (enforced by ``B_q``) sums 4.9e12 B over its options,
and the layout search's removable bounds (:meth:`optimizer.cpsat.LayoutModel.bound`, the
objective or the frontier's second axis over the one-hot candidates) are enforced rows too. ``rlhf-plan`` of
Qwen3-235B-A22B GRPO on 128 H100 proves 260.240 s optimal beside a feasible 203.978 s placement
with the rule on (260.197 and 203.935 s when found, before NCCL's SM charge on the output layer);
tests/optimizer/test_solver_presolve.py holds that run, a smaller one and two small models to
the exhaustive optimum.

Not ``keep_all_feasible_solutions_in_presolve``: its documented effect (``sat_parameters.proto``:
"disable the presolve reductions that remove feasible solutions from the search space. Such
solution are usually dominated by a 'better' solution that is kept") is on the dual and symmetry
reductions, which are sound; it leaves ``ProcessAtMostOneAndLinear`` on, and with the dual
reductions off more rows reach the faulty sum (the test's ten-Boolean model: 4 proven optimal
instead of 8). Nor coarser units: every row's Boolean coefficients under 2^31 in all would take
memory in GiB and time in whole seconds, coarser than the memory verdict and the step time the
tables hold. Cost, measured on a loaded 2-core machine (median of three, CP-SAT only): the layout
search 0.136 → 0.127 s (Llama 3 70B, 64 H100), 0.388 → 0.394 s (DeepSeek-V3, 2,048 H800);
the three RLHF placement solves 0.446 → 0.513 s (the Qwen3-235B run above)."""

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
    (None: none), stoppable by :func:`interrupt`, with the faulty presolve rules off
    (:data:`PRESOLVE_INCLUSION_WORK_LIMIT`): every CP-SAT solve of the project runs through
    here."""
    solver.parameters.catch_sigint_signal = False  # Ctrl-C is the caller's: interrupt()
    solver.parameters.presolve_inclusion_work_limit = PRESOLVE_INCLUSION_WORK_LIMIT
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
    workers: int = LAYOUT_WORKERS,
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
