"""The ``params`` objective (``search --maximize params``) member by member
(:mod:`optimizer.params_search`) equals the exhaustive oracle over every member's tables at once
(:func:`optimizer.enumerate.best`, the one-model formulation's oracle), proven, and a time limit
gives the best member found with the bracket it left unproven."""

from __future__ import annotations

import pytest

from tests.optimizer.test_interrupt import _interrupting
from trainplan.interface.search_commands import search_problem
from trainplan.optimizer import cpsat
from trainplan.optimizer import enumerate as oracle
from trainplan.optimizer.params_search import family_members, params_search
from trainplan.optimizer.problem import model_size
from trainplan.optimizer.tables import build_tables

FAMILY = {"model": "llama3-8b", "gpus": 3, "gpu": "H100-SXM", "pp": [3], "tp": [1]}
FAMILY |= {"max_micro_batch": 1}
"""Llama 3 8B's depth family (4, 8, …, 128 layers: the catalogue's 32 layers, step 32 // 8 and up
to 4 × 32) on 3 H100s as one pipeline of 3 stages, micro-batch 1: 32 members, one job each."""

EIGHT = {"model": "llama3-8b", "gpus": 8, "gpu": "H100-SXM", "pp": [4], "tp": [2]}
EIGHT |= {"max_micro_batch": 1, "max_layers": 192}
"""The same family to 192 layers (48 members) on 8 H100s as tp 2 × pp 4."""

LAYER = 4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
"""Llama 3 8B's parameters per layer (hidden 4096, 32 query heads and 8 KV heads of 128, FFN
14336, SwiGLU; Meta's config.json): q and o 4096², k and v 4096 × 1024, gate/up/down
4096 × 14336, two RMSNorm weights = 218,112,000."""
OUTSIDE = 2 * 128_256 * 4096 + 4096
"""Untied embedding and output layer (vocabulary 128,256) and the final norm = 1,050,677,248."""


def _params(layers: int) -> int:
    return layers * LAYER + OUTSIDE


@pytest.fixture(scope="module", params=[(FAMILY, 48, 32), (EIGHT, 144, 48)], ids=["3", "8"])
def family(request):
    """The problem, every member's tables at once (the exhaustive oracle's), the largest member
    that fits (its layers) and the members."""
    values, layers, members = request.param
    problem = search_problem(values, "params")
    return problem, build_tables(problem), layers, members


def test_hand_sizes_are_the_members():
    problem = search_problem(FAMILY, "params")
    assert LAYER == 218_112_000 and OUTSIDE == 1_050_677_248
    sizes = [n for n, _ in family_members(problem)]
    assert sizes == [_params(4 * k) for k in range(1, 33)]
    assert sizes[11] == 11_520_053_248  # 48 layers


def test_member_by_member_equals_the_exhaustive_oracle(family):
    problem, tables, layers, members = family
    (s, z, r), value = oracle.best(problem, tables)
    job = tables.jobs[tables.job_of[s]]
    assert job.case.model.arch.num_layers == layers  # 3 GPUs: 16 layers a stage; 8: 36
    assert model_size(job) == _params(layers)
    run = params_search(problem)
    got = run.result.best
    assert run.result.status == "optimal" and run.result.params_unproven is None
    assert got.job.label == job.label and got.objective == value
    assert got.estimate.layout == tables.shapes[s].layout(
        tables.zero_stages[z], tables.recomputes[r]
    )
    index = layers // 4 - 1
    assert run.probed == members - index  # each larger member fails, then this one fits
    bigger = tables.job_of > index  # the larger members: no allowed candidate in the oracle's
    assert not oracle.allowed(problem, tables)[bigger].any()


def test_top_two_are_the_oracles(family):
    problem, tables, _, _ = family
    want = oracle.top(problem, tables, 2)
    got = params_search(problem, top=2).result.answers
    assert [a.objective for a in got] == [v for _, v in want]
    for a, ((s, z, r), _) in zip(got, want, strict=True):
        assert a.estimate.layout == tables.shapes[s].layout(
            tables.zero_stages[z], tables.recomputes[r]
        )


def test_time_limit_gives_the_best_found_and_the_unproven_bracket():
    """A limit spent on the first probe (128 layers, no fit): the members below are bisected —
    indices 0..30: 15 (64 layers) fails, 7 (32) fits, 11 (48) fits, 13 (56) fails, 12 (52)
    fails — so the answer is 48 layers, not proven, with 124 layers (the largest member not
    probed) as the bracket's top."""
    problem = search_problem(FAMILY, "params")
    run = params_search(problem, time_limit_s=1e-9)
    assert run.result.status == "feasible"
    assert run.result.best.job.case.model.arch.num_layers == 48
    assert run.result.params_unproven == _params(124) == 28_096_565_248
    assert run.probed == 6


def test_the_answer_at_the_depth_cap_says_the_cap_binds():
    """Llama 3 8B on 8 H100: the family runs to 4 × 32 = 128 layers (``max_layers``' default) and
    its largest member fits, so nothing larger was checked: the answer (llama3-8b@L128) is the
    largest of the family's 32 members (4, 8, …, 128 layers) and the note says the depth cap, not
    the memory, binds (as a user runs it: a fresh process, ``--json``)."""
    import json

    from tests.cli_runs import trainplan

    done = trainplan("search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM",
                     "--maximize", "params", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["model"]["name"] == "llama3-8b@L128"
    assert answer["params_note"].startswith(
        "the answer is the largest of the family's 32 members: the depth cap (max_layers"
    )
    # the members' step, 32 ÷ 8 = 4 layers, so a user knows L126 was never tried
    assert answer["params_note"].endswith(
        "; members every 4 layers (an eighth of llama3-8b's 32), so a depth between two is not "
        "tried"
    )


def test_ctrl_c_ends_the_answers_with_those_found(monkeypatch):
    """Ctrl-C (:func:`optimizer.solver.interrupt`) after the first solve: the largest member that
    fits (48 layers, as the oracle's above) gives its fastest layout, and no further member is
    searched for the --top asked (it once went on, member after member)."""
    problem = search_problem(FAMILY, "params")
    cpsat.clear_interrupt()
    _interrupting(monkeypatch, cpsat.interrupt, 1)
    try:
        got = params_search(problem, top=5).result
    finally:
        cpsat.clear_interrupt()
    assert got.status == "feasible" and len(got.answers) == 1
    assert model_size(got.best.job) == _params(48)
