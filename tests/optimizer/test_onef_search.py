"""The search's tables and the per-stage search read the 1F1B step of unequal stages
(model.pipeline_onef) exactly as evaluate() charges it."""

from __future__ import annotations

import numpy as np
import pytest

from trainplan.model.estimate import objective_ns
from trainplan.model.layout import Recompute
from trainplan.model.pipeline import Schedule
from trainplan.optimizer.case import Case
from trainplan.optimizer.per_stage import per_stage_search
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import check_against_evaluate, prepare
from trainplan.optimizer.space import SearchSpace


def _problem(model: str, gpus: int, pp: int, batch: int, **space):  # type: ignore[no-untyped-def]
    case = Case.of(model=model, device="H100-SXM", global_batch_size=batch, seq_len=4096)
    kw = dict(num_gpus=gpus, pp=(pp,), schedules=(Schedule.ONE_F_ONE_B,), max_micro_batch_size=2)
    return Problem(jobs=(Job(case, gpus, f"{gpus}"),), space=SearchSpace(**{**kw, **space}))


@pytest.mark.parametrize(
    ("model", "gpus", "pp", "batch", "space"),
    [
        ("llama3-70b", 64, 4, 256, {"recomputes": (Recompute.NONE, Recompute.FULL)}),
        ("deepseek-v3", 2048, 16, 1024, {"tp": (1, 2), "zero_stages": (1,), "recomputes": (Recompute.FULL,)}),
    ],
)  # fmt: skip
def test_tables_equal_evaluate_on_unequal_stages(model, gpus, pp, batch, space) -> None:
    """Every legal 1F1B candidate's tabulated step terms equal evaluate()'s (to NS_TOLERANCE):
    Llama 3 70B at pp 4 (the embedding on stage 0, the output layer on stage 3, the split of
    80 layers with and without Llama 3's lighter end stages) and DeepSeek-V3 at pp 16 (61
    layers: 3 dense ones first, stages of 3 and 4). Each candidate's bubble is the order's
    step, below the closed form (pp − 1)·t_mb."""
    problem = _problem(model, gpus, pp, batch, **space)
    tables, _, _ = prepare(problem)
    seen = 0
    for s, z, r in zip(*np.nonzero(tables.legal), strict=True):
        est = check_against_evaluate(tables, (int(s), int(z), int(r)))
        tt = est.time_terms
        assert tt is not None
        closed = tt.busy_s * (pp - 1) / est.num_microbatches
        assert 0 < tt.bubble_s < closed
        seen += 1
    assert seen >= 4


@pytest.mark.slow
def test_per_stage_answer_is_evaluates_and_never_slower_than_uniform() -> None:
    """trainplan search --model llama3-70b --gpus 64 --gpu H100-SXM --framework megatron
    --schedule 1f1b --pp 4 --global-batch 256 --per-stage: the uniform answer dp 2 × tp 8
    (38.289 → 38.246 s with the order's step; 38.2475 s with Megatron-Core's whole gradient
    buffer zeroed at the step, 4 B × half of the GPU's 2.2 billion parameters more at 3.35 TB/s,
    model.terms.optimizer_time.whole_buffer_zeroing_bytes) and the per-stage plan dp 4 × tp 4,
    stages of 19, 21, 21, 19 layers, one recomputed on stage 0 (34.321 → 34.241 s; 34.2455 s
    with the whole buffer zeroed): CP-SAT's pipeline term is the closed form
    (m + pp − 1)·t_max, an upper bound on the order's step; the plan printed is evaluate()'s,
    below its CP-SAT objective, and never slower than the uniform one. Megatron-Core's own
    optimizer-step passes (model.step_passes.step_pass_bytes: the clip's scale +8, the master
    re-read +4; 38 → 50 B an element) at 3.35 TB/s × 0.8866, the layouts not: the uniform
    +12 B × 1,135,775,744 owned elements = +4.589 ms, 38.2475 → 38.2521 s; the plan
    +12 B × 1.1231e9 (a 21-layer stage at tp 4 over dp 4) = +4.538 ms, 34.2455 → 34.2500 s."""
    case = Case.of(model="llama3-70b", device="H100-SXM", global_batch_size=256,
                   framework="megatron")  # fmt: skip
    space = SearchSpace(num_gpus=64, pp=(4,), schedules=(Schedule.ONE_F_ONE_B,),
                        frameworks=("megatron",))  # fmt: skip
    result = per_stage_search(Problem(jobs=(Job(case, 64, "64"),), space=space))
    assert result.status == "optimal"
    assert result.uniform_ns is not None and result.plan_ns <= result.uniform_ns
    assert result.plan_ns == sum(objective_ns(result.plan.time_terms))
    assert result.uniform_ns == pytest.approx(38.2521e9, abs=1e6)
    assert result.plan_ns == pytest.approx(34.2500e9, abs=1e6)
    lay = result.plan.layout
    assert (lay.dp, lay.tp, lay.stage_layers, lay.recompute_layers) == (
        4, 4, (19, 21, 21, 19), (1, 0, 0, 0)
    )  # fmt: skip
