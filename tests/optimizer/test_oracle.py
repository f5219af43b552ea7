"""CP-SAT's best, top-k and frontier equal the exhaustive oracle's on 50 generated scenarios
(small models and clusters, every knob: GPU counts and accelerators, batch, sequence, cp, ep,
objectives, constraints). Issue 4, "Proof and speed"."""

from __future__ import annotations

import random

import pytest

from trainplan.model.errors import InfeasibleError
from trainplan.optimizer import enumerate as oracle
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Constraints, Job, Objective, Problem, gpu_counts
from trainplan.optimizer.search import frontier, prepare, search
from trainplan.optimizer.space import SearchSpace

MODELS = ["megatron-1.7b", "megatron-3.6b", "llama3-8b", "mixtral-8x7b", "megatron-7.5b"]
GPUS = ["A100-40GB", "A100-80GB", "H100-SXM", "H200"]


def problem_of(i: int, min_mfu: bool = True) -> Problem:
    """Scenario ``i``: a model, GPU counts (one, two, or the range 4..16: 4, 6, 8, 12, 16), one
    or two accelerators, s, B, an objective, b ≤ 2, v 2, cp 1 or 1–2, ep 1–4 for Mixtral, a
    headroom, an MFU floor (``min_mfu`` False drops it), and tp kept in NVLink or not."""
    rng = random.Random(1000 + i)
    model = MODELS[i % len(MODELS)]
    counts = gpu_counts(rng.choice(["4", "8", "16", "8;16", "4..16"]))
    gpus = rng.choice([*GPUS, "A100-80GB,H100-SXM"]).split(",")
    seq, batch = rng.choice([1024, 2048, 4096]), rng.choice([16, 32, 64])
    objective = Objective(rng.choice(["step-time", "step-time", "tokens-per-gpu", "time-to-train"]))
    cp = rng.choice([(1,), (1, 2)])
    headroom, floor = rng.choice([0, 0.1]), rng.choice([None, None, 0.3])
    constraints = Constraints(
        headroom=headroom,
        min_mfu=floor if min_mfu else None,
        tp_in_nvlink=rng.choice([False, True]),
    )
    space = SearchSpace(
        num_gpus=counts[0],
        cp=cp,
        ep=(1, 2, 4) if model == "mixtral-8x7b" else None,
        max_micro_batch_size=2,
        virtual_stages=(2,),
    )
    jobs = tuple(
        Job(Case.of(model, gpu, seq_len=seq, global_batch_size=batch), n, f"{model} {n} {gpu}")
        for gpu in gpus
        for n in counts
    )
    tokens = 10**12 if objective is Objective.TIME_TO_TRAIN else None  # only where it is used
    return Problem(
        jobs=jobs, space=space, constraints=constraints, objective=objective, tokens=tokens
    )


CASES = [
    i
    if i % 5 == 0
    else pytest.param(i, marks=pytest.mark.slow if i % 4 == 1 else pytest.mark.exhaustive)
    for i in range(50)
]
"""Every fifth scenario runs by default, one in four others (i ≡ 1 mod 4) with ``-m slow`` (CI
runs both: 20 of the 50), the rest with ``-m exhaustive`` (by hand, for CI's time)."""

FRONTIER_CASES = [i if i % 10 == 0 else pytest.param(i, marks=pytest.mark.exhaustive)
                  for i in range(0, 50, 5)]  # fmt: skip
"""Every tenth scenario's frontier runs by default, the other fifths with ``-m exhaustive``."""


@pytest.mark.parametrize("i", CASES)
def test_best_and_top_k_equal_enumeration(i):
    problem = problem_of(i)
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


@pytest.mark.parametrize("i", FRONTIER_CASES)
def test_frontier_equals_enumeration(i):
    problem = problem_of(i, min_mfu=False)
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
