"""The layout frontier keeps to its time limit as one deadline for the whole ε walk: each point
took two or three solves, each given the whole limit again, so ``trainplan frontier --model
llama3-70b --gpus 256 --gpu H100-SXM --time-limit 5`` ran 5.6 s of cost tables and then 3.6 s
of solves (38 points, 'optimal'); it now stops at the deadline with the points found,
``feasible`` (0.7 s of solves, 6 points)."""

from __future__ import annotations

import time

from tests.optimizer.test_per_stage_frontier import tiny_problem
from trainplan.optimizer.cpsat import LayoutModel
from trainplan.optimizer.search import SOLVE_FLOOR_S, frontier, prepare


def test_the_walk_stops_at_the_deadline(monkeypatch):
    """The tiny model on 2 GPUs against memory: its full frontier has several points. With
    every solve made to take 0.3 s and a limit already spent on the tables, the walk has the
    floor (:data:`optimizer.search.SOLVE_FLOOR_S`, 1 s) from the tables' end: the first
    point's solves (0.3 s each, at least two) end by 0.9 s, at most the second point's start
    before 1 s, so at most two points, not proven, within the floor and one point's solves."""
    problem = tiny_problem((2,))
    full = frontier(problem, "memory", prepared=prepare(problem))
    assert full.status == "optimal" and len(full.points) > 2
    real = LayoutModel.solve

    def slow(self, *a, **kw):  # type: ignore[no-untyped-def]
        time.sleep(0.3)
        return real(self, *a, **kw)

    monkeypatch.setattr(LayoutModel, "solve", slow)
    prepared = prepare(problem)
    t0 = time.perf_counter()
    cut = frontier(problem, "memory", time_limit_s=1e-9, prepared=prepared)
    assert time.perf_counter() - t0 < SOLVE_FLOOR_S + 3 * 0.3 + 0.5
    assert cut.status == "feasible"
    assert 1 <= len(cut.points) <= 2
    assert cut.points == full.points[: len(cut.points)]
