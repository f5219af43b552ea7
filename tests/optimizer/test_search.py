"""The CP-SAT search equals exhaustive enumeration (docs/concepts/search.md "One cost model, two uses")."""

from __future__ import annotations

import pytest

from trainplan.model.errors import InfeasibleError
from trainplan.optimizer import enumerate as oracle
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Constraints, Job, Problem
from trainplan.optimizer.search import frontier, prepare, search
from trainplan.optimizer.space import SearchSpace
from trainplan.topology.accelerators import get_accelerator

V100_100G = get_accelerator("V100-SXM2-32GB").with_links(scaleout_bytes_per_s=12.5e9)
"""A V100 with 12.5 GB/s of scale-out per GPU (the accelerator table gives V100 none)."""

# Small scenarios: several models, GPUs (memory binding or not), GPU counts, batches and lengths.
SCENARIOS = [
    (
        {
            "model": "megatron-1.7b",
            "device": V100_100G,
            "seq_len": 2048,
            "global_batch_size": 32,
        },
        8,
    ),
    (
        {"model": "megatron-3.6b", "device": "A100-40GB", "seq_len": 1024, "global_batch_size": 64},
        16,
    ),
    ({"model": "llama3-8b", "device": "A100-40GB", "seq_len": 4096, "global_batch_size": 32}, 16),
    ({"model": "llama3-8b", "device": "H100-SXM", "seq_len": 8192, "global_batch_size": 16}, 8),
    ({"model": "mixtral-8x7b", "device": "H100-SXM", "seq_len": 4096, "global_batch_size": 16}, 16),
    (
        {
            "model": "megatron-7.5b",
            "device": V100_100G,
            "seq_len": 2048,
            "global_batch_size": 16,
        },
        4,
    ),
]


def _problem(params, gpus, **kw):
    case = Case.of(**params)
    space = SearchSpace(num_gpus=gpus, max_micro_batch_size=2, virtual_stages=(2,))
    return Problem(jobs=(Job(case, gpus, f"{gpus}"),), space=space, **kw)


@pytest.mark.parametrize(("params", "gpus"), SCENARIOS)
def test_cpsat_equals_enumeration_and_evaluate(params, gpus):
    problem = _problem(params, gpus)
    tables, _, _ = prepare(problem)
    want = oracle.best_by_evaluate(problem, tables)
    assert oracle.best(problem, tables) == want
    if want is None:
        with pytest.raises(InfeasibleError):
            search(problem)
        return
    (s, z, r), objective = want
    result = search(problem)
    assert result.status == "optimal"
    assert result.best.objective == objective
    assert result.best.estimate.layout == tables.shapes[s].layout(
        tables.zero_stages[z], tables.recomputes[r]
    )
    assert result.best.estimate.fits


def test_infeasible_names_memory():
    problem = _problem({"model": "llama3-405b", "device": "H100-SXM"}, 64)
    with pytest.raises(InfeasibleError) as err:
        search(problem)
    # Megatron-Core's profile: the driver's 81,559 MiB less the 2,310,800,384 B runtime reserve
    # = 83,210,009,600 B
    assert err.value.explanation[0].startswith("memory: no layout fits 83.21 GB")


def test_infeasible_names_min_mfu_alone():
    problem = _problem(
        {"model": "megatron-1.7b", "device": "A100-80GB", "global_batch_size": 32},
        8,
        constraints=Constraints(min_mfu=0.99),
    )
    with pytest.raises(InfeasibleError) as err:
        search(problem)
    assert err.value.explanation[0].startswith("min_mfu: the best MFU")


def test_prepared_answers_alike_however_often_it_is_used():
    """A user's Python session: one ``prepare``, then frontier, frontier again, search, top-3
    twice on the same object. Before the model was copied per call, the first frontier's ε
    bounds stayed in ``prepared``: the second frontier raised IndexError (an explanation with no
    line for a model whose every candidate was ruled out) and the top-3 search's exclusions
    moved the next top-3 down by the answers already given. Each call must equal the exhaustive
    oracle over the same tables (optimizer.enumerate: pareto, best, top)."""
    problem = _problem(*SCENARIOS[3])  # Llama 3 8B on 8 H100s, s 8192, B 16
    prepared = prepare(problem)
    tables = prepared[0]
    pareto = [(value, int(tables.peak_ceil[c])) for c, value in oracle.pareto(problem, tables)]
    top3 = [value for _, value in oracle.top(problem, tables, 3)]
    assert len(pareto) > 2 and len(top3) == 3  # a frontier and a top-3 to lose
    for _ in range(2):
        points = frontier(problem, "memory", prepared=prepared).points
        assert [(p.objective, p.peak_bytes) for p in points] == pareto
    assert search(problem, prepared=prepared).best.objective == top3[0] == pareto[0][0]
    for _ in range(2):
        assert [a.objective for a in search(problem, top=3, prepared=prepared).answers] == top3


def test_default_virtual_stages_are_those_megatron_core_builds() -> None:
    """Megatron-Core builds v chunks a rank without a layout when v divides the layers a rank
    holds (transformer_block.get_num_layers_to_build: num_layers_per_pipeline_rank % vp_size ==
    0), the embedding and the loss counted as a layer each under --account-for-*: 80 layers over
    pp 4 is 20 a rank (v 2, 4, 5, 10, 20; 81 and 82 do not divide by 4); over pp 2, 40 a rank
    and 82/2 = 41 (one layer a chunk, an embedding-only and an output-only chunk); 126 over pp 16
    divides only as 128 = 126 + 2, 8 a rank. Beside them the defaults 2, 3, 4, 8 (chunks of
    unequal layers, --pipeline-model-parallel-layout), never more than (L + 2)/pp chunks a
    rank."""
    from trainplan.optimizer.virtual_stages import virtual_stage_options

    assert virtual_stage_options(80, 4) == (2, 3, 4, 5, 8, 10, 20)
    assert virtual_stage_options(80, 2) == (2, 3, 4, 5, 8, 10, 20, 40, 41)
    assert virtual_stage_options(80, 16) == (2, 3, 4, 5)
    assert virtual_stage_options(126, 16) == (2, 3, 4, 8)
    assert virtual_stage_options(None, 4) == (2, 3, 4, 8)


def test_the_search_sees_the_clip_scaling_evaluate_sees() -> None:
    """``grad_clip_scaling`` is read by the one optimizer-step term
    (:func:`model.terms.optimizer_time.optimizer_seconds_term`), so the search's tables and
    ``evaluate`` agree under ``above_limit`` as under the default: CP-SAT's best equals the
    enumeration's by ``evaluate``, and, the scaling's 8 B an element dropped, no slower than the
    best with every-step scaling."""
    params = {"model": "llama3-8b", "device": "H100-SXM", "seq_len": 8192}
    params |= {"global_batch_size": 16, "framework": "megatron"}
    best = {}
    for scaling in ("every_step", "above_limit"):
        problem = _problem(params | {"grad_clip_scaling": scaling}, 8)
        tables, _, _ = prepare(problem)
        want = oracle.best_by_evaluate(problem, tables)
        assert want is not None and oracle.best(problem, tables) == want
        result = search(problem)
        assert result.best.objective == want[1]
        assert result.best.estimate.options.grad_clip_scaling == scaling
        best[scaling] = want[1]
    assert best["above_limit"] < best["every_step"]
