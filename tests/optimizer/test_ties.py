"""Equal objectives go to the candidate with the least peak memory (:func:`optimizer.rules.
tie_keys`), in the CP-SAT search, the exhaustive oracle, the frontier and the per-stage ranking.

The tie is a real one: Llama 3 8B on 8 H100s, dp 8 (B 64, s 8192, b 1, Megatron's distributed
optimizer). Recompute ``sqrt`` and ``full`` run the same FLOPs (every layer's forward once more
in backward), so the step times are equal to the nanosecond; ``full`` keeps the 32 layers'
inputs, ``sqrt`` round(√32) = 6 segment inputs. Their peak is the loss's phase (the output
layer's tensors, its FP32 logits among them, are released before any layer's backward, so a
6-layer segment recomputed in backward stays below it), where ``sqrt``'s fewer kept inputs hold
less."""

from __future__ import annotations

import pytest

from trainplan.model.estimate import objective_ns
from trainplan.model.layout import Layout, Recompute
from trainplan.optimizer import enumerate as oracle
from trainplan.optimizer.case import Case
from trainplan.optimizer.params_search import params_search
from trainplan.optimizer.problem import Job, Objective, Problem
from trainplan.optimizer.search import frontier, prepare, search
from trainplan.optimizer.space import SearchSpace


@pytest.fixture(scope="module")
def case() -> Case:
    return Case.of("llama3-8b", "H100-SXM", global_batch_size=64, seq_len=8192)


def _problem(case: Case, **kw) -> Problem:
    space = SearchSpace(
        num_gpus=8, tp=(1,), pp=(1,), micro_batch_size=(1,), zero_stages=(1,),
        recomputes=(Recompute.SQRT, Recompute.FULL), frameworks=("megatron",),
    )  # fmt: skip
    return Problem(jobs=(Job(case, 8, "8 × H100-SXM"),), space=space, **kw)


def test_the_tie_is_real(case) -> None:
    sqrt, full = (case.evaluate(Layout(dp=8, recompute=r)) for r in ("sqrt", "full"))
    assert sqrt.fits and full.fits
    assert objective_ns(sqrt.time_terms) == objective_ns(full.time_terms)
    assert sqrt.total_bytes < full.total_bytes  # 69.09 GB against 70.02 GB


def test_search_oracle_and_frontier_take_the_least_memory(case) -> None:
    problem = _problem(case)
    tables, _, _ = prepare(problem)
    least = tables.recomputes.index(Recompute.SQRT)
    ((choice, _),) = [oracle.best(problem, tables)]
    assert choice[2] == least
    assert search(problem).best.estimate.layout.recompute is Recompute.SQRT  # read off the ties
    # the params objective (one member here): its member's step-time search, the same tie
    params = _problem(case, objective=Objective.PARAMS)
    assert params_search(params).result.best.estimate.layout.recompute is Recompute.SQRT
    # against GPUs: least objective, least GPUs, then the tie key
    (point,) = frontier(problem, against="gpus").points
    assert point.estimate.layout.recompute is Recompute.SQRT
    assert [c for c, _ in oracle.pareto(problem, tables, "gpus")] == [choice]


def test_per_stage_ranking_takes_the_least_memory_of_equal_plans(case) -> None:
    """Two plans of equal step time (the tie above, as the per-stage search's plans) and no
    uniform answer: the ranking takes the one that holds less, whichever came first."""
    from trainplan.model.errors import InfeasibleError
    from trainplan.optimizer.per_stage import UniformBest, per_stage_result
    from trainplan.optimizer.stage_solve import ShapePlan, step_ns

    job = Job(case, 8, "8 × H100-SXM")
    plans = []
    for r in ("sqrt", "full"):
        est = case.evaluate(Layout(dp=8, recompute=r))
        plans.append((job, ShapePlan(est.layout, "optimal", est, step_ns(est), 1, 0.0, 0.0, 1)))
    none = UniformBest(None, None, True, InfeasibleError("search: none", ["none"]))
    for order in (plans, plans[::-1]):
        got = per_stage_result(none, order, True, 2, 0.0)
        assert got.plan.layout.recompute is Recompute.SQRT
