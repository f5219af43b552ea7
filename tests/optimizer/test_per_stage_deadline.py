"""The per-stage search's ordering of its base layouts keeps to the time limit: each base's
pipeline lower bound costs 15 to 30 ms (Llama 3 70B on 256 H100s: 149 bases, 2 to 4 s on a
2-core machine), and ``trainplan frontier --per-stage --time-limit 10`` on a loaded machine
ran 15.6 s, the first point's search given the 1 s floor spending 4 s on bounds it then had
no time to use (:func:`optimizer.per_stage.solve_bases` solves none past the deadline)."""

from __future__ import annotations

import time

from tests.optimizer.test_per_stage_frontier import tiny_problem
from trainplan.optimizer import per_stage
from trainplan.optimizer.per_stage import ordered_bases, per_stage_search
from trainplan.optimizer.search import prepare


def test_no_base_is_bounded_past_the_deadline():
    """Without a deadline every legal base of the tiny model on 2 GPUs is bounded and ordered;
    with one already past, none is (each would be dropped unsolved)."""
    problem = tiny_problem((2,))
    prepared = prepare(problem)
    assert len(ordered_bases(problem, prepared, None, None)) > 1
    assert ordered_bases(problem, prepared, None, None, time.perf_counter()) == []


def test_a_search_cut_while_ordering_stops_there_and_proves_nothing(monkeypatch):
    """Each bound made to take 0.2 s: a 0.3 s limit bounds two bases at most, not all of them,
    and the search returns the uniform best, ``feasible`` (nothing per stage was searched, so
    nothing is proven), within the limit and one bound's time."""
    problem = tiny_problem((2,))
    prepared = prepare(problem)
    total = len(ordered_bases(problem, prepared, None, None))
    real, calls = per_stage.pipeline_lower_bound, []

    def slow(case, base):  # type: ignore[no-untyped-def]
        calls.append(base)
        time.sleep(0.2)
        return real(case, base)

    monkeypatch.setattr(per_stage, "pipeline_lower_bound", slow)
    t0 = time.perf_counter()
    r = per_stage_search(problem, None, 0.3, prepared=prepared)
    assert time.perf_counter() - t0 < 0.3 + 0.2 + 0.3  # the limit, one bound, slack
    assert 1 <= len(calls) <= 2 < total
    assert r.status == "feasible"
    assert r.plan_ns == r.uniform_ns  # the uniform best is the answer
