"""The hybrid context parallelism's two groups (``a2a+p2p``: Megatron-Core's
``create_hierarchical_groups``, model.terms.cp_links) placed on their own links by the search's
tables as by the evaluator."""

from __future__ import annotations

from trainplan.interface.scenario import build_problem
from trainplan.optimizer.search import check_against_evaluate, prepare


def test_the_search_times_the_hybrid_on_its_groups_links_as_the_evaluator_does():
    """The search's tables (columns of many layouts) place the hybrid's two groups as the
    evaluator does: tp 2, cp 8 as 2 × 4 and 4 × 2 on two H100 nodes, every row checked term by
    term against the evaluator (``check_against_evaluate`` raises on any difference)."""
    values = {
        "model": "llama3-8b", "gpus": "16", "gpu": "H100-SXM", "seq_len": 32768,
        "global_batch": 2, "cluster": {"memory_reserve_gib": 0},
        "space": {"tp": [2], "pp": [1], "cp": [8], "recompute": ["none"], "zero": [1],
                  "cp_kind": ["a2a+p2p"], "cp_a2a": [2, 4]},
    }  # fmt: skip
    tables = prepare(build_problem({}, values))[0]
    assert {sh.cp_a2a for sh in tables.shapes} == {2, 4}
    for s in range(len(tables.shapes)):
        check_against_evaluate(tables, (s, 0, 0))
