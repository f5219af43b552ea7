"""Ctrl-C inside the optimizer's loops (:func:`optimizer.solver.interrupt`, which the command
line calls on SIGINT): each loop ends at once with what it found, status ``feasible``. The top-k
search once went on solving, and a later answer's stopped solve threw away every answer found
(``search: CP-SAT stopped without an answer``); the frontier crashed (``AssertionError``) when
its second-axis solve was stopped; the per-stage search went on building every base's stage
tables (71 s after Ctrl-C for Llama 3 70B on 32 GPUs), and its frontier every search left. The
end-to-end runs, as a user presses Ctrl-C, are in tests/test_cli_interrupt.py."""

from __future__ import annotations

import time

import pytest

from tests.optimizer.test_per_stage import tight_headroom, tiny_case
from tests.optimizer.test_solver_stops import STOPPED, _prepared
from trainplan.optimizer import cpsat
from trainplan.optimizer.cpsat import LayoutModel
from trainplan.optimizer.per_stage import solve_bases
from trainplan.optimizer.per_stage_frontier import Budget, FrontierRun, _frontier
from trainplan.optimizer.search import frontier, search
from trainplan.optimizer.stage_solve import solve_shape
from trainplan.optimizer.stage_tables import OutOfTime, build_stage_tables


@pytest.fixture
def ctrl_c():
    """:func:`optimizer.solver.interrupt` for the test (process-wide), forgotten after it."""
    cpsat.clear_interrupt()
    yield cpsat.interrupt
    cpsat.clear_interrupt()


def _interrupting(monkeypatch, ctrl_c, after: int, stopped: bool = False) -> None:
    """Every :meth:`LayoutModel.solve` as it is, but Ctrl-C once ``after`` solves returned; with
    ``stopped`` the next solve is the one Ctrl-C stops before any answer."""
    solve, calls = LayoutModel.solve, []

    def counted(self, *args, **kwargs):
        calls.append(1)
        if stopped and len(calls) == after + 1:
            ctrl_c()
            return STOPPED
        out = solve(self, *args, **kwargs)
        if len(calls) == after:
            ctrl_c()
        return out

    monkeypatch.setattr(LayoutModel, "solve", counted)


@pytest.mark.parametrize("stopped", [False, True], ids=["between-answers", "in-a-solve"])
def test_top_k_ends_with_the_answers_found(monkeypatch, ctrl_c, stopped):
    """Each answer here is one solve (the objective alone binds: the tie-break is read off the
    candidates, :meth:`LayoutModel.first_at`), so Ctrl-C after the second solve leaves the two
    best answers of the full run, in order."""
    problem, prepared = _prepared()
    whole = search(problem, top=4, prepared=prepared)
    assert whole.status == "optimal" and len(whole.answers) == 4
    _interrupting(monkeypatch, ctrl_c, 2, stopped)
    cut = search(problem, top=4, prepared=prepared)
    assert cut.status == "feasible" and cut.answers == whole.answers[:2]


def test_frontier_ends_with_the_points_found(monkeypatch, ctrl_c):
    """A point is three solves (the objective, the second axis, the tie-break)."""
    problem, prepared = _prepared()
    whole = frontier(problem, prepared=prepared)
    assert whole.status == "optimal" and len(whole.points) > 2
    _interrupting(monkeypatch, ctrl_c, 3)
    cut = frontier(problem, prepared=prepared)
    assert cut.status == "feasible" and cut.points == whole.points[:1]


def test_frontier_keeps_a_point_whose_second_solve_was_stopped(monkeypatch, ctrl_c):
    """The second point's second-axis solve (the fifth) stopped before an answer: the point is
    the first solve's, at the least objective the full run has there, and the frontier ends."""
    problem, prepared = _prepared()
    whole = frontier(problem, prepared=prepared)
    _interrupting(monkeypatch, ctrl_c, 4, stopped=True)
    cut = frontier(problem, prepared=prepared)
    assert cut.status == "feasible" and len(cut.points) == 2
    assert cut.points[0] == whole.points[0]
    assert cut.points[1].objective == whole.points[1].objective


def test_per_stage_stops_before_the_next_tables(ctrl_c):
    """Interrupted, a base's stage tables stop at their first layer count, a shape is
    ``feasible`` with no plan (as when its time limit is spent: tests/optimizer/
    test_per_stage.py), and no further base is searched."""
    case = tiny_case(6, 2)
    headroom = tight_headroom(case)
    assert solve_shape(case, case.layout, headroom).status == "optimal"
    ctrl_c()
    with pytest.raises(OutOfTime):
        build_stage_tables(case, case.layout, headroom)
    spent = solve_shape(case, case.layout, headroom)
    assert (spent.status, spent.estimate, spent.solves, spent.rows) == ("feasible", None, 0, 0)
    problem, _ = _prepared()
    bases = [(0, problem.jobs[0], case.layout)]
    assert solve_bases(problem, bases, [], None, None, 2) == ([], False)


def test_per_stage_frontier_stops_as_at_a_spent_budget(ctrl_c):
    """The per-stage frontier's loops ask :meth:`Budget.spent` before each search: Ctrl-C spends
    it; the frontier then says it was interrupted, not proven, even when its last search was the
    one cut short."""
    budget = Budget(None, 4)
    assert budget.spent(0) is None
    ctrl_c()
    assert budget.spent(0) == "interrupted"
    done = _frontier("memory", FrontierRun([], True, 2, None), time.perf_counter())
    assert (done.status, done.stopped, done.searches) == ("feasible", "interrupted", 2)
