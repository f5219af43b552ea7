"""The search under expert load imbalance and capacity padding reads the evaluator's memory:
the busiest expert-parallel rank's routed rows size the saved rows, the MoE working set and the
backward working set in the one cost model (model.moe_rows.row_factors), so CP-SAT's best equals
the enumeration's by ``evaluate`` and every stage's activation figure in the tables is the
evaluator's (docs/concepts/search.md "One cost model, two uses")."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.model.frameworks import Framework
from trainplan.model.moe_run import MoERun
from trainplan.optimizer import enumerate as oracle
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import prepare, search
from trainplan.optimizer.space import SearchSpace

RUNS = {
    "imbalanced": MoERun(imbalance=Fraction(3, 2)),
    "padded": MoERun(Fraction(3, 2), pad_to_capacity=True),
}


@pytest.mark.parametrize("name", [*RUNS, "deepspeed capacity"])
def test_search_equals_enumeration_by_evaluate(name):
    """``deepspeed capacity``: DeepSpeed's native MoE at capacity factor 3/2, not asked to pad,
    pads its E·C buffers all the same, in time, memory and traffic alike
    (model.moe_rows.deepspeed_slots)."""
    run, framework = RUNS.get(name, MoERun(Fraction(3, 2))), Framework.MEGATRON
    if name == "deepspeed capacity":
        framework = Framework.DEEPSPEED
    case = Case.of("mixtral-8x7b", "H100-SXM", seq_len=4096, global_batch_size=16, moe_run=run)
    # ep > 1 only: at ep 1 one rank holds every expert and imbalance moves nothing
    # (model.moe_rows.row_factors), so an unrestricted search under imbalance may pick ep 1
    space = SearchSpace(
        num_gpus=16, max_micro_batch_size=2, virtual_stages=(2,), ep=(2, 4, 8, 16),
        frameworks=(framework,),
    )  # fmt: skip
    problem = Problem(jobs=(Job(case, 16, "16"),), space=space)
    tables, _, _ = prepare(problem)
    want = oracle.best_by_evaluate(problem, tables)
    assert want is not None and oracle.best(problem, tables) == want
    (s, z, r), objective = want
    result = search(problem)
    assert result.best.objective == objective
    est = result.best.estimate
    assert est.fits and est.layout.ep > 1
    assert est.layout.framework is framework
    for st in est.stages:  # the tables' activations are the evaluator's, stage by stage
        acts = st.activations.total_bytes if st.activations else 0
        assert acts == int(acts)  # whole bytes: the routed rows are whole rows
        assert abs(acts - tables.act_ceil[s, r, st.stage]) <= 1
