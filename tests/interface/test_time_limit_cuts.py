"""What a time limit's cut of the cost tables (:meth:`optimizer.tables.CostTables.cut`) does
beyond the layout search: the ``params`` objective's probes are cut too, once they hold an
allowed candidate (their verdicts stay proven; the answer says the cut), and the per-stage
frontier says the cut of the tables its searches rest on, in the layout frontier's note
(:func:`interface.search_notes.frontier_cut_note`). The blocks are made small
(:data:`optimizer.tables.BLOCK_SHAPES`, without the floor :data:`MIN_BLOCK_SHAPES`; one job
a table, so a block is that many shapes) so that these small spaces are cut; the deadline is
already past (``1e-9`` s), so nothing here depends on the machine's speed."""

from __future__ import annotations

import numpy as np

from tests.optimizer.test_per_stage_frontier import tiny_problem
from trainplan.interface.per_stage_frontier_command import _frontier_object
from trainplan.interface.search_commands import search_problem
from trainplan.interface.search_notes import (
    frontier_cut_note,
    limit_note,
    params_note,
    time_limit_note,
)
from trainplan.optimizer import per_stage_frontier as frontier_module
from trainplan.optimizer import table_blocks
from trainplan.optimizer.params_search import params_search
from trainplan.optimizer.per_stage_frontier import per_stage_frontier
from trainplan.optimizer.tables import build_tables

WORDS = "the time limit cut the cost tables at {} of {} shapes, the first in tie-break order (fewest model-parallel GPUs first)"
""":meth:`CostTables.cut`'s words for one job."""

EIGHT = {"model": "llama3-8b", "gpus": 8, "gpu": "H100-SXM", "pp": [2], "max_micro_batch": 1}
"""Llama 3 8B's depth family (4 to 128 layers, 32 members) on 8 H100s, pp 2, micro-batch 1: the
largest member fits (its 33 shapes first fit at row 22)."""

FOUR = {**EIGHT, "gpus": 4}
"""The same on 4 H100s: the answer is 72 layers (22 shapes, first fitting at row 11); 128 layers
do not fit."""


def _first_fit(problem) -> tuple[int, int]:
    """The answer's member's shapes and its first shape with a fitting candidate (a build
    without a deadline)."""
    whole = build_tables(problem)
    return len(whole.shapes), int(np.flatnonzero(whole.fits.any(axis=(1, 2)))[0])


def test_a_params_probe_is_cut_once_it_holds_an_allowed_candidate(monkeypatch):
    """The probe of the largest member (128 layers) is built in blocks of 2 once the deadline
    has passed, and stops after the block holding row 22, its first fitting shape: 24 of its 33
    shapes (a probe built whole, as before, ignored the limit). The verdict is the same (it
    fits: an allowed candidate is held), one probe; the answer is the best of those 24 shapes,
    ``feasible``, and says the cut."""
    problem = search_problem(EIGHT, "params")
    whole = params_search(problem)
    assert whole.result.status == "optimal" and whole.result.cut is None
    assert whole.problem.jobs[0].case.model.arch.num_layers == 128
    assert _first_fit(whole.problem) == (33, 22)
    monkeypatch.setattr(table_blocks, "BLOCK_SHAPES", 2)
    monkeypatch.setattr(table_blocks, "MIN_BLOCK_SHAPES", 1)
    run = params_search(problem, time_limit_s=1e-9)
    assert run.problem.jobs[0].case.model.arch.num_layers == 128 and run.probed == whole.probed == 1
    assert run.result.status == "feasible" and run.result.params_unproven is None
    assert run.result.cut == WORDS.format(24, 33) and run.result.num_shapes == 24
    assert run.result.best.objective >= whole.result.best.objective


def test_a_params_bracket_and_a_cut_are_both_said(monkeypatch):
    """On 4 GPUs the limit is spent on the first probe (128 layers: no candidate fits, so it is
    built whole and its "does not fit" stays proven); the bisection below finds 72 layers, whose
    probe is cut after the block holding row 11, its first fitting shape: 12 of 22. The note
    says the family's bracket, then the cut (before, the bracket alone)."""
    problem = search_problem(FOUR, "params")
    monkeypatch.setattr(table_blocks, "BLOCK_SHAPES", 2)
    monkeypatch.setattr(table_blocks, "MIN_BLOCK_SHAPES", 1)
    run = params_search(problem, time_limit_s=1e-9)
    assert run.problem.jobs[0].case.model.arch.num_layers == 72
    assert _first_fit(run.problem) == (22, 11)
    result = run.result
    assert result.status == "feasible" and result.cut == WORDS.format(12, 22)
    assert result.params_unproven == 124 * 218_112_000 + 1_050_677_248  # 124 layers
    note = limit_note(result, 1e-9)
    spent = time_limit_note(1e-9, result.tables_seconds, result.solve_seconds, result.cut)
    assert spent is not None and spent.startswith(WORDS.format(12, 22) + "; ")
    assert note == f"{params_note(result)}; {spent}"


def test_a_per_stage_memory_frontier_says_the_cut_of_its_tables(monkeypatch):
    """Against memory every point is searched over one table, prepared once: cut at its first
    block (1 of the 2-GPU job's 6 shapes, which fits), its words are the frontier's ``cuts``, and
    its JSON notes are the layout frontier's note of them (it said only "not proven")."""
    problem = tiny_problem((2,))
    monkeypatch.setattr(table_blocks, "BLOCK_SHAPES", 1)
    monkeypatch.setattr(table_blocks, "MIN_BLOCK_SHAPES", 1)
    result = per_stage_frontier(problem, "memory", time_limit_s=1e-9)
    assert result.status == "feasible" and result.stopped == "time"
    assert result.cuts == (WORDS.format(1, 6),)
    out = _frontier_object(result, problem, 4, True, 1e-9)
    assert out["notes"] == frontier_cut_note(WORDS.format(1, 6))
    assert out["notes"][0] == (
        f"{WORDS.format(1, 6)}: the points are the frontier of those shapes, not proven; a "
        "longer --time-limit searches the rest"
    )
    assert per_stage_frontier(problem, "memory").cuts == ()  # no limit: nothing cut


def test_a_per_stage_job_frontier_says_each_jobs_cut(monkeypatch):
    """Against GPUs each job is searched alone, over its own tables: each search cut (its limit
    already past) says so, headed by its job — 1 of the 2-GPU job's 6 shapes, 1 of the 4-GPU
    job's 13 — one note each (a search of one job reads tables of that job alone, whose
    words name no job)."""
    problem = tiny_problem((2, 4))
    uncut = per_stage_frontier(problem, "gpus")
    assert uncut.status == "optimal" and uncut.cuts == ()
    monkeypatch.setattr(table_blocks, "BLOCK_SHAPES", 1)
    monkeypatch.setattr(table_blocks, "MIN_BLOCK_SHAPES", 1)
    real = frontier_module.per_stage_search

    def past_deadline(problem, top_shapes, time_limit_s, workers, **kw):
        return real(problem, top_shapes, 1e-9, workers, **kw)

    monkeypatch.setattr(frontier_module, "per_stage_search", past_deadline)
    result = per_stage_frontier(problem, "gpus")
    cuts = (f"2 GPUs: {WORDS.format(1, 6)}", f"4 GPUs: {WORDS.format(1, 13)}")
    assert result.status == "feasible" and result.cuts == cuts
    notes = _frontier_object(result, problem, None, True, None)["notes"]
    assert notes == [note for cut in cuts for note in frontier_cut_note(cut)]


def test_the_settings_search_passes_the_cut_on(monkeypatch):
    """The search without the user's settings (:mod:`interface.setting_cost`) wraps the tables'
    progress to stop on Ctrl-C; it took ``(done, total)`` only, so a cut of its tables (its
    limit is what the first search left) raised TypeError. It passes the cut on: Llama 3 8B on
    16 H100s, blocks of 40, its limit already past: cut at the first block (the first shape
    fits), 40 of 284 shapes."""
    from trainplan.interface import setting_cost
    from trainplan.model.frameworks import Framework
    from trainplan.optimizer.case import Case
    from trainplan.optimizer.problem import Job, Problem
    from trainplan.optimizer.space import SearchSpace

    space = SearchSpace(num_gpus=16, frameworks=(Framework.MEGATRON, Framework.DEEPSPEED))
    problem = Problem(jobs=(Job(Case.of("llama3-8b", "H100-SXM"), 16, "8b"),), space=space)
    monkeypatch.setattr(table_blocks, "BLOCK_SHAPES", 40)
    monkeypatch.setattr(table_blocks, "MIN_BLOCK_SHAPES", 1)
    said: list[tuple[int, int, str | None]] = []
    found = setting_cost._search(
        problem, 1e-9, 1, lambda done, total, cut=None, /: said.append((done, total, cut))
    )
    assert said == [(40, 284, None), (40, 284, WORDS.format(40, 284))]
    assert found["status"] == "feasible"
