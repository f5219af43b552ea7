"""A solve that CP-SAT stops at its time limit before it finds an answer (status ``unknown``: on
a loaded machine a short ``--time-limit`` leaves the solver its 1 s floor only). The frontier
once took that for "no layout satisfies the constraints" and, with nothing blocking to explain,
crashed (``IndexError`` reading the empty explanation: ``trainplan frontier … --time-limit 5``
under load); it says the solver stopped, as the search does, and a frontier that has points
keeps them, unproven."""

from __future__ import annotations

import pytest

from trainplan.model.errors import InfeasibleError
from trainplan.optimizer.case import Case
from trainplan.optimizer.cpsat import LayoutModel, SolveResult
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import frontier, prepare, search
from trainplan.optimizer.space import SearchSpace

STOPPED = SolveResult("unknown", None, None, 1.0)
"""What :meth:`optimizer.cpsat.LayoutModel.solve` answers when the time limit passed before any
solution."""


def _prepared():
    case = Case.of(model="llama3-8b", device="H100-SXM", seq_len=4096, global_batch_size=16)
    space = SearchSpace(num_gpus=8, max_micro_batch_size=1, virtual_stages=(2,))
    problem = Problem(jobs=(Job(case, 8, "8"),), space=space)
    return problem, prepare(problem)


@pytest.mark.parametrize("run", [search, frontier], ids=["search", "frontier"])
def test_no_answer_within_the_time_limit_is_said_so(monkeypatch, run):
    problem, prepared = _prepared()
    # on the class: a search or a frontier solves a copy of the prepared model (LayoutModel.copy)
    monkeypatch.setattr(LayoutModel, "solve", lambda self, *a, **k: STOPPED)
    with pytest.raises(InfeasibleError) as err:
        run(problem, prepared=prepared)
    assert err.value.status == "unknown"
    assert str(err.value) == (
        f"{run.__name__}: CP-SAT stopped without an answer (time limit); give a longer --time-limit"
    )
    assert err.value.explanation == ["solver: no answer within the limits"]


def test_a_frontier_stopped_after_its_first_point_keeps_it_unproven(monkeypatch):
    problem, prepared = _prepared()
    whole = frontier(problem, prepared=_prepared()[1])
    assert whole.status == "optimal" and len(whole.points) > 1
    solve, calls = LayoutModel.solve, []

    def stops_after_one_point(self, *args, **kwargs):  # a point: the objective, the axis, the tie
        calls.append(1)
        return solve(self, *args, **kwargs) if len(calls) <= 3 else STOPPED

    monkeypatch.setattr(LayoutModel, "solve", stops_after_one_point)
    cut = frontier(problem, prepared=prepared)
    assert cut.status == "feasible" and cut.points == whole.points[:1]
