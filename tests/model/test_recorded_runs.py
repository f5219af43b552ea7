"""The recorded timeline runs (model.schedule._recorded_run) are kept by the operations they hold,
not by their number: a search's tables read two runs per pipeline depth at each recompute mode
in turn, and each is recorded once; past the budget the least recently read go, and a run
recorded again is the same run."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.model import schedule
from trainplan.model.pipeline_sim import PassTimes
from trainplan.model.schedule import SplitSchedule


@pytest.fixture
def counted(monkeypatch):
    """Empty the kept runs and count the recordings."""
    calls: list[tuple] = []
    record = schedule._record

    def counting(*key):
        calls.append(key)
        return record(*key)

    monkeypatch.setattr(schedule, "_RUNS", type(schedule._RUNS)())
    monkeypatch.setattr(schedule, "_record", counting)
    return calls


def test_a_search_pattern_records_each_run_once(counted):
    # 6 depths × 2 micro-batch counts (DualPipeV's 2·pp and 2·pp + 2, simulated_span), read
    # 4 times over (recompute modes): 12 runs, where 8 kept runs re-recorded all 48
    keys = [(pp, m) for pp in (2, 4, 8, 16, 32, 64) for m in (2 * pp, 2 * pp + 2)]
    for _ in range(4):
        for pp, m in keys:
            schedule._recorded_run(pp, m, SplitSchedule.DUALPIPE_V, 2)
    assert len(counted) == 12


def test_past_the_budget_the_least_recent_go(counted, monkeypatch):
    sizes = {pp: len(schedule._record(pp, 2 * pp, SplitSchedule.ZB_V, 2)[0]) for pp in (2, 4, 8)}
    counted.clear()
    monkeypatch.setattr(schedule, "RECORDED_OPS", sizes[4] + sizes[8])
    for pp in (2, 4, 8):
        schedule._recorded_run(pp, 2 * pp, SplitSchedule.ZB_V, 2)
    assert [k[0] for k in schedule._RUNS] == [4, 8]  # pp 2 dropped: 4 and 8 fill the budget
    schedule._recorded_run(4, 8, SplitSchedule.ZB_V, 2)  # kept: no recording
    assert len(counted) == 3
    monkeypatch.setattr(schedule, "RECORDED_OPS", 1)  # below any run: the last one stays
    schedule._recorded_run(2, 4, SplitSchedule.ZB_V, 2)
    assert list(schedule._RUNS) == [(2, 4, SplitSchedule.ZB_V, 2)]


def test_a_dropped_run_recorded_again_times_the_same(counted, monkeypatch):
    times = PassTimes(Fraction(1), Fraction(3, 2), Fraction(2, 3))
    first = schedule.split_step_time(8, 16, "zb-v", 2, times)
    monkeypatch.setattr(schedule, "RECORDED_OPS", 1)
    schedule.split_step_time(4, 8, "zb-v", 2, times)  # drops pp 8
    assert schedule.split_step_time(8, 16, "zb-v", 2, times) == first
    assert first == schedule.simulate(8, 16, "zb-v", times=times).step_time
    assert len(counted) == 3
