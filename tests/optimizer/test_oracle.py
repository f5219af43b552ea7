"""CP-SAT's best, top-k and frontier equal the exhaustive oracle's on 50 generated scenarios
(small models and clusters, every knob: GPU counts and accelerators, batch, sequence, cp, ep,
objectives, constraints). Issue 4, "Proof and speed"."""

from __future__ import annotations

import random

import pytest

from trainplan.interface.scenario import build_problem
from trainplan.model.errors import InfeasibleError
from trainplan.optimizer import enumerate as oracle
from trainplan.optimizer.search import frontier, prepare, search

MODELS = ["megatron-1.7b", "megatron-3.6b", "llama3-8b", "mixtral-8x7b", "megatron-7.5b"]
GPUS = ["A100-40GB", "A100-80GB", "H100-SXM", "H200"]


def scenario(i: int) -> dict:
    rng = random.Random(1000 + i)
    model = MODELS[i % len(MODELS)]
    values = {
        "model": model,
        "gpus": rng.choice(["4", "8", "16", "8;16", "4..16"]),
        "gpu": rng.choice(GPUS + ["A100-80GB,H100-SXM"]),
        "seq_len": rng.choice([1024, 2048, 4096]),
        "global_batch": rng.choice([16, 32, 64]),
        "objective": rng.choice(["step-time", "step-time", "tokens-per-gpu", "time-to-train"]),
        "space": {"max_micro_batch": 2, "virtual_stages": [2], "cp": rng.choice([[1], [1, 2]])},
        "constraints": {
            "headroom": rng.choice([0, 0.1]),
            "min_mfu": rng.choice([None, None, 0.3]),
            "tp_in_nvlink": rng.choice([False, True]),
        },
        "cluster": {},
    }
    if model == "mixtral-8x7b":
        values["space"]["ep"] = [1, 2, 4]
    if values["objective"] == "time-to-train":  # the budget only where it is used
        values["tokens"] = "1e12"
    return values


CASES = [
    i
    if i % 5 == 0
    else pytest.param(i, marks=pytest.mark.slow if i % 2 else pytest.mark.exhaustive)
    for i in range(50)
]
"""Every fifth scenario runs by default, the other odd ones with ``-m slow`` (CI runs both), the
other even ones with ``-m exhaustive`` (by hand, for CI's time)."""


@pytest.mark.parametrize("i", CASES)
def test_best_and_top_k_equal_enumeration(i):
    problem = build_problem({}, scenario(i))
    prepared = prepare(problem)
    tables = prepared[0]
    want = oracle.top(problem, tables, 3)
    if not want:
        with pytest.raises(InfeasibleError):
            search(problem, prepared=prepared)
        return
    result = search(problem, top=3, prepared=prepared)
    assert result.status == "optimal"
    got = [(a.objective) for a in result.answers]
    assert got == [value for _, value in want]
    for answer, (choice, _) in zip(result.answers, want, strict=True):
        s, z, r = choice
        assert answer.estimate.layout == tables.shapes[s].layout(
            tables.zero_stages[z], tables.recomputes[r]
        )
        assert answer.job is tables.jobs[tables.job_of[s]]


@pytest.mark.parametrize("i", range(0, 50, 5))
def test_frontier_equals_enumeration(i):
    values = scenario(i)
    values["constraints"]["min_mfu"] = None
    problem = build_problem({}, values)
    prepared = prepare(problem)
    tables = prepared[0]
    want = oracle.pareto(problem, tables, "memory")
    if not want:
        with pytest.raises(InfeasibleError):
            frontier(problem, prepared=prepared)
        return
    result = frontier(problem, "memory", prepared=prepared)
    assert [(a.objective, a.peak_bytes) for a in result.points] == [
        (value, int(tables.peak_ceil[c])) for c, value in want
    ]
    # non-dominated: objective strictly rises as memory strictly falls
    objs = [a.objective for a in result.points]
    mems = [a.peak_bytes for a in result.points]
    assert objs == sorted(objs) and mems == sorted(mems, reverse=True)
    assert len(set(mems)) == len(mems)
