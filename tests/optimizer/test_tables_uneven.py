"""The search's tables against evaluate() where interleaving leaves a rank's model chunks unequal
and m runs far past the 8 groups of pp micro-batches the order is run whole for
(model.pipeline_uneven: the steady phase's shift per group, or its upper bound): the tables'
batch and the evaluator's single layout read the same rule, to the nanosecond; and no step is
shorter than its busiest stage's own work (the bubble never below 0)."""

from __future__ import annotations

from trainplan.model.estimate import objective_ns
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Recompute
from trainplan.model.pipeline import Schedule, bubble_ratio
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import NS_TOLERANCE
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.tables import build_tables


def test_unequal_chunks_at_large_m_the_tables_are_the_evaluators() -> None:
    """Llama 3 70B (80 layers) on 64 H100s, B 512, tp 4 or 8 × pp 4 or 8, v 2 or 3, b 1 or 2,
    Megatron-Core's and torchtitan's splits: 12 or 24 chunks of 80 layers are unequal at v 3, and
    torchtitan's split gives the end ranks one layer fewer (model.split); m = 512/(dp·b) = 64 …
    512 micro-batches, 8 … 128 groups of pp. Every legal layout's step in the tables is the
    evaluator's; the unequal ones' bubble is not the closed form's, and is never negative."""
    case = Case.of("llama3-70b", "H100-SXM", global_batch_size=512, seq_len=8192)
    space = SearchSpace(
        num_gpus=64, pp=(4, 8), tp=(4, 8), max_micro_batch_size=2, virtual_stages=(2, 3),
        schedules=(Schedule.INTERLEAVED,), zero_stages=(1, 2), recomputes=(Recompute.SELECTIVE,),
        frameworks=(Framework.MEGATRON, Framework.FSDP2),
    )  # fmt: skip
    tables = build_tables(Problem(jobs=(Job(case, 64, "70b"),), space=space))
    unequal, groups = 0, set()
    for s, shape in enumerate(tables.shapes):
        for z in range(len(tables.zero_stages)):
            if not tables.legal[s, z, 0]:
                continue
            lay = shape.layout(tables.zero_stages[z], tables.recomputes[0])
            est = case.evaluate(lay)
            tt = est.time_terms
            assert tt is not None
            t1, t2 = objective_ns(tt)
            assert abs(t1 - tables.t1_at(s, z, 0)) <= NS_TOLERANCE, (lay, t1, tables.t1_at(s, z, 0))
            assert abs(t2 - tables.t2_ns[s, z, 0]) <= NS_TOLERANCE, lay
            assert tt.bubble_s >= 0, lay
            assert tt.step_s >= tt.busy_s + tt.exposed_dp_s + tt.optimizer_s
            m, pp, v = est.num_microbatches, lay.pp, lay.virtual_stages
            if est.bubble_ratio != bubble_ratio(pp, m, v):
                unequal += 1
                groups.add(m // pp)
    assert unequal >= 8
    assert min(groups) >= 8 and max(groups) >= 64, groups
