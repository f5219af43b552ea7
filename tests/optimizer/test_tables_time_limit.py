"""A time limit binds inside one job's cost tables (:func:`optimizer.tables.build_tables`): under
a deadline a job's shapes are filled in blocks (:data:`optimizer.tables.BLOCK_SHAPES`), the
deadline looked at between blocks once some tabulated candidate fits (the search: meets its
constraints). A build cut short holds a
prefix of the complete build's rows, each row equal to the complete build's, and says so
(:attr:`CostTables.complete` False, :meth:`CostTables.cut`); the search over it is ``feasible``,
never proven. No timing is asserted: the deadline is already past, or the clock is a fake one."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from trainplan.model.frameworks import Framework
from trainplan.optimizer import tables as tables_module
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import search
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.tables import CostTables, build_tables

BLOCK = 40
"""Shapes a block in these tests (the space has 284: 8 blocks, the last of 4)."""


@pytest.fixture(scope="module")
def problem() -> Problem:
    """Llama 3 8B on 16 H100s under Megatron-LM and DeepSpeed: 284 shapes, one job."""
    case = Case.of("llama3-8b", "H100-SXM")
    space = SearchSpace(num_gpus=16, frameworks=(Framework.MEGATRON, Framework.DEEPSPEED))
    return Problem(jobs=(Job(case, 16, "8b"),), space=space)


@pytest.fixture(scope="module")
def full(problem: Problem) -> CostTables:
    return build_tables(problem)


def _arrays(t: CostTables) -> dict[str, np.ndarray]:
    return {
        f.name: getattr(t, f.name) for f in fields(t) if isinstance(getattr(t, f.name), np.ndarray)
    }


def _is_prefix(cut: CostTables, full: CostTables) -> None:
    """Every array of ``cut`` is the first rows of ``full``'s, value for value."""
    n = len(cut.shapes)
    assert cut.shapes == full.shapes[:n]
    for name, array in _arrays(cut).items():
        assert array.shape[1:] == getattr(full, name).shape[1:], name
        assert np.array_equal(array, getattr(full, name)[:n]), name


def test_a_build_without_a_deadline_is_complete(full):
    assert len(full.shapes) == sum(full.job_shapes_in_all) == 284
    assert full.complete and full.cut() is None


def test_blocks_under_a_deadline_not_reached_are_the_whole_build_row_for_row(
    problem, full, monkeypatch
):
    """The rows do not depend on the block they are filled in (each term is evaluated shape by
    shape; the blocks only look each group's figures up again)."""
    monkeypatch.setattr(tables_module, "BLOCK_SHAPES", BLOCK)
    steps: list[int] = []
    blocked = build_tables(problem, lambda done, _: steps.append(done), deadline=float("inf"))
    assert steps == [40, 80, 120, 160, 200, 240, 280, 284]
    assert blocked.complete and len(blocked.shapes) == 284
    _is_prefix(blocked, full)


@pytest.mark.parametrize("model", ["llama3-8b", "llama3-70b"])
def test_a_deadline_already_past_keeps_the_blocks_up_to_the_first_that_fits(
    model, problem, full, monkeypatch
):
    """A deadline in the past: the first block is filled, and more until some candidate fits
    (an answer rather than none); then the build stops, a prefix of the complete build. Llama 3
    8B fits from its first shape (one block kept); Llama 3 70B on 16 H100s first fits at its
    142nd of 404 shapes (row 141: four blocks kept)."""
    if model == "llama3-70b":
        problem = Problem(jobs=(Job(Case.of(model, "H100-SXM"), 16, "70b"),), space=problem.space)
        full = build_tables(problem)
    monkeypatch.setattr(tables_module, "BLOCK_SHAPES", BLOCK)
    cut = build_tables(problem, deadline=-1.0)
    first_fit = int(np.flatnonzero(full.fits.any(axis=(1, 2)))[0])
    assert first_fit == {"llama3-8b": 0, "llama3-70b": 141}[model]
    assert len(cut.shapes) == (first_fit // BLOCK + 1) * BLOCK < len(full.shapes)
    assert not cut.complete and cut.job_shapes_in_all == (len(full.shapes),)
    assert cut.cut() == (
        f"the time limit cut the cost tables at {len(cut.shapes)} of {len(full.shapes)} shapes, "
        "the first in tie-break order (fewest model-parallel GPUs first)"
    )
    _is_prefix(cut, full)
    assert cut.peak_ceil.shape == (len(cut.shapes), *full.peak_ceil.shape[1:])


def test_a_fake_clock_passing_the_deadline_after_two_blocks_keeps_two(problem, full, monkeypatch):
    """The deadline is looked at before each block: with a clock that passes it once two blocks
    are done, the tables hold those two (80 shapes; more only until one candidate fits),
    whatever the machine's speed."""
    monkeypatch.setattr(tables_module, "BLOCK_SHAPES", BLOCK)
    done: list[int] = []
    monkeypatch.setattr(tables_module.time, "perf_counter", lambda: 10.0 if len(done) >= 2 else 0.0)
    cut = build_tables(problem, lambda n, _: done.append(n), deadline=5.0)
    first_fit = int(np.flatnonzero(full.fits.any(axis=(1, 2)))[0])
    kept = max(2, first_fit // BLOCK + 1) * BLOCK
    assert done == list(range(BLOCK, kept + 1, BLOCK)) and len(cut.shapes) == kept
    _is_prefix(cut, full)


def test_a_search_over_tables_cut_short_is_feasible_and_says_why(problem, full, monkeypatch):
    """The search's answer over the cut tables is the best of the rows held (status
    ``feasible``, :attr:`SearchResult.cut` the words), at most as good as the complete search's."""
    monkeypatch.setattr(tables_module, "BLOCK_SHAPES", BLOCK)
    whole = search(problem)
    cut = search(problem, time_limit_s=1e-9)
    assert whole.status == "optimal" and whole.cut is None
    assert cut.status == "feasible" and cut.num_shapes < whole.num_shapes
    assert cut.cut is not None and cut.cut.startswith("the time limit cut the cost tables at ")
    assert cut.best.objective >= whole.best.objective


def test_the_deadline_waits_for_what_the_caller_counts_as_enough(problem, full, monkeypatch):
    """``enough`` decides when a cut may happen (the layout search passes its solver's own mask,
    so that a ``min_mfu`` no tabulated row meets keeps the build going rather than ending in no
    answer): never enough, a past deadline still builds every block."""
    monkeypatch.setattr(tables_module, "BLOCK_SHAPES", BLOCK)
    asked: list[int] = []

    def never(held: CostTables) -> bool:
        asked.append(len(held.shapes))
        return False

    whole = build_tables(problem, deadline=-1.0, enough=never)
    assert whole.complete and len(whole.shapes) == 284
    assert asked == [40, 80, 120, 160, 200, 240, 280]  # before each block after the first
    _is_prefix(whole, full)


def test_a_cut_over_two_jobs_names_each_jobs_share(monkeypatch):
    """Jobs are filled in order, so a cut search over two GPU counts may have tabulated only the
    first: the words say so, job by job (the first block of the 8-GPU job: 40 of its shapes;
    the 16-GPU job: none)."""
    monkeypatch.setattr(tables_module, "BLOCK_SHAPES", BLOCK)
    case = Case.of("llama3-8b", "H100-SXM")
    space = SearchSpace(num_gpus=16, frameworks=(Framework.MEGATRON, Framework.DEEPSPEED))
    two = Problem(jobs=(Job(case, 8, "8 GPUs"), Job(case, 16, "16 GPUs")), space=space)
    complete = build_tables(two)
    per_job = np.bincount(complete.job_of, minlength=2).tolist()
    cut = build_tables(two, deadline=-1.0)
    assert complete.job_shapes_in_all == tuple(per_job) and per_job[0] > BLOCK
    assert len(cut.shapes) == BLOCK
    assert cut.cut() == (
        f"the time limit cut the cost tables at 40 of {sum(per_job):,} shapes, the first in "
        f"tie-break order (fewest model-parallel GPUs first): 8 GPUs 40 of {per_job[0]:,}; "
        f"16 GPUs none of {per_job[1]:,}"
    )
