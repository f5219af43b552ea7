"""The CP-SAT search equals exhaustive enumeration with evaluate() (DESIGN.md, issue 2)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from model.errors import InfeasibleError
from optimizer.enumerate import best_by_evaluate, best_from_tables
from optimizer.inputs import build_case
from optimizer.search import search, tie_ranks
from optimizer.space import SearchSpace, legal_shapes
from optimizer.tables import build_tables

# Small scenarios: several models, GPUs (memory binding or not), GPU counts, batches and lengths.
SCENARIOS = [
    (
        {
            "model": "megatron-1.7b",
            "gpu": "V100-SXM2-32GB",
            "scaleout_gbps": 12.5,
            "seq_len": 2048,
            "global_batch_size": 32,
        },
        8,
    ),
    ({"model": "megatron-3.6b", "gpu": "A100-40GB", "seq_len": 1024, "global_batch_size": 64}, 16),
    ({"model": "llama3-8b", "gpu": "A100-40GB", "seq_len": 4096, "global_batch_size": 32}, 16),
    ({"model": "llama3-8b", "gpu": "H100-SXM", "seq_len": 8192, "global_batch_size": 16}, 8),
    ({"model": "mixtral-8x7b", "gpu": "H100-SXM", "seq_len": 4096, "global_batch_size": 16}, 16),
    (
        {
            "model": "megatron-7.5b",
            "gpu": "V100-SXM2-32GB",
            "scaleout_gbps": 12.5,
            "seq_len": 2048,
            "global_batch_size": 16,
        },
        4,
    ),
]


@pytest.mark.parametrize(("params", "gpus"), SCENARIOS)
def test_cpsat_equals_enumeration(params, gpus):
    case = build_case(params)
    space = SearchSpace(num_gpus=gpus, max_micro_batch_size=2, virtual_stages=(2,))
    shapes = legal_shapes(case.model, case.training, space)
    tables = build_tables(case, shapes, space.zero_stages, space.recomputes)
    zero_rank, rec_rank = tie_ranks(tables)
    oracle = best_by_evaluate(
        case, shapes, space.zero_stages, space.recomputes, zero_rank, rec_rank
    )
    assert best_from_tables(tables, zero_rank, rec_rank) == oracle
    if oracle is None:
        with pytest.raises(InfeasibleError):
            search(case, space)
        return
    (s, z, r), objective = oracle
    result = search(case, space)
    assert result.status == "optimal"
    assert result.layout == shapes[s].layout(space.zero_stages[z], space.recomputes[r])
    assert result.estimate is not None and result.estimate.fits


def test_infeasible_names_memory():
    case = build_case({"model": "llama3-405b", "gpu": "H100-SXM"})
    with pytest.raises(InfeasibleError) as err:
        search(case, SearchSpace(num_gpus=64))
    assert "memory" in err.value.explanation[0] and "80.00 GB" in err.value.explanation[0]


def test_search_cli_json_and_infeasible_exit_code():
    from optimizer.cli import _register, cli

    _register()
    runner = CliRunner()
    res = runner.invoke(
        cli,
        [
            "search",
            "--model",
            "megatron-1.7b",
            "--gpus",
            "8",
            "--gpu",
            "A100-80GB",
            "--global-batch",
            "32",
            "--max-micro-batch",
            "2",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["status"] == "optimal" and out["num_gpus"] == 8 and out["solve_seconds"] >= 0
    assert out["memory"]["fits"] is True
    res = runner.invoke(cli, ["search", "--model", "llama3-405b", "--gpus", "64", "--json"])
    assert res.exit_code == 1
    assert json.loads(res.output)["status"] == "infeasible"
