"""A time limit binds inside one job's cost tables (:func:`optimizer.tables.build_tables`): under
a deadline the jobs' shapes are filled in blocks (:func:`optimizer.tables.block_shapes`), a
block of each job in turn, the deadline looked at between blocks once every job holds its first
block and some tabulated candidate fits (the search: meets its constraints). A build cut short
holds each job's first rows of the complete build, each row equal to the complete build's, and
says so (:attr:`CostTables.complete` False, :meth:`CostTables.cut`, the progress callback's
``cut``); the search over it is ``feasible``, never proven. No timing is asserted: the deadline
is already past, or the clock is a fake one."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from trainplan.model.frameworks import Framework
from trainplan.optimizer import table_blocks
from trainplan.optimizer import tables as tables_module
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import search
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.tables import CostTables, build_tables

BLOCK = 40
"""Shapes a block in these tests (the space has 284: 8 blocks, the last of 4)."""


def _blocks_of(monkeypatch: pytest.MonkeyPatch, size: int, jobs: int) -> None:
    """Blocks of ``size`` shapes for a problem of ``jobs`` jobs: :data:`BLOCK_SHAPES` is what
    the first round costs in all, shared by the jobs (:func:`optimizer.tables.block_shapes`),
    so ``size × jobs``, with no floor; the first round as large
    (:data:`optimizer.table_blocks.FIRST_BLOCK_SHAPES`: no growth), and no job's rest filled whole
    (:data:`optimizer.table_blocks.WHOLE_REST_MARGIN` infinite)."""
    monkeypatch.setattr(table_blocks, "BLOCK_SHAPES", size * jobs)
    monkeypatch.setattr(table_blocks, "MIN_BLOCK_SHAPES", 1)
    monkeypatch.setattr(table_blocks, "FIRST_BLOCK_SHAPES", size * jobs)
    monkeypatch.setattr(table_blocks, "WHOLE_REST_MARGIN", float("inf"))


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
    _blocks_of(monkeypatch, BLOCK, jobs=1)
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
    _blocks_of(monkeypatch, BLOCK, jobs=1)
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
    _blocks_of(monkeypatch, BLOCK, jobs=1)
    done: list[int] = []
    said: list[tuple[int, int, str]] = []

    def progress(n: int, total: int, cut: str | None = None, /) -> None:
        done.append(n) if cut is None else said.append((n, total, cut))

    monkeypatch.setattr(tables_module.time, "perf_counter", lambda: 10.0 if len(done) >= 2 else 0.0)
    cut = build_tables(problem, progress, deadline=5.0)
    first_fit = int(np.flatnonzero(full.fits.any(axis=(1, 2)))[0])
    kept = max(2, first_fit // BLOCK + 1) * BLOCK
    assert done == list(range(BLOCK, kept + 1, BLOCK)) and len(cut.shapes) == kept
    _is_prefix(cut, full)
    # the cut is said once, after the last block, in CostTables.cut's words (the page's
    # progress line, the CLI's terminal line: the solve starts next)
    assert said == [(kept, 284, cut.cut())]


def test_a_search_over_tables_cut_short_is_feasible_and_says_why(problem, full, monkeypatch):
    """The search's answer over the cut tables is the best of the rows held (status
    ``feasible``, :attr:`SearchResult.cut` the words), at most as good as the complete search's."""
    _blocks_of(monkeypatch, BLOCK, jobs=1)
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
    _blocks_of(monkeypatch, BLOCK, jobs=1)
    asked: list[int] = []

    def never(held: CostTables) -> bool:
        asked.append(len(held.shapes))
        return False

    whole = build_tables(problem, deadline=-1.0, enough=never)
    assert whole.complete and len(whole.shapes) == 284
    assert asked == [40, 80, 120, 160, 200, 240, 280]  # before each block after the first
    _is_prefix(whole, full)


@pytest.fixture(scope="module")
def two() -> Problem:
    """Llama 3 8B on 8 and on 16 H100s (196 and 284 shapes)."""
    case = Case.of("llama3-8b", "H100-SXM")
    space = SearchSpace(num_gpus=16, frameworks=(Framework.MEGATRON, Framework.DEEPSPEED))
    return Problem(jobs=(Job(case, 8, "8 GPUs"), Job(case, 16, "16 GPUs")), space=space)


def _rows_of(cut: CostTables, full: CostTables) -> None:
    """Every job's rows of ``cut`` are that job's first rows of ``full``, value for value, jobs
    in order."""
    want = np.concatenate(
        [np.flatnonzero(full.job_of == j)[:n] for j, n in enumerate(np.bincount(cut.job_of))]
    )
    assert cut.shapes == tuple(full.shapes[i] for i in want)
    assert np.array_equal(cut.job_of, full.job_of[want])
    for name, array in _arrays(cut).items():
        assert np.array_equal(array, getattr(full, name)[want]), name


def test_blocks_are_taken_round_robin_over_the_jobs():
    """A block of each job in turn (each job's in its shapes' order); without a size each job
    whole, job after job, as a build without a time limit fills them."""
    jobs = [(None, tuple(range(5))), (None, ()), (None, (10, 11)), (None, (20,))]
    assert tables_module.blocks(jobs, 2) == [
        (0, (0, 1)), (2, (10, 11)), (3, (20,)), (0, (2, 3)), (0, (4,)),
    ]  # fmt: skip
    assert tables_module.blocks(jobs, None) == [(0, (0, 1, 2, 3, 4)), (2, (10, 11)), (3, (20,))]


def test_a_cut_over_two_jobs_leaves_each_job_a_share(two, monkeypatch):
    """The jobs are filled round-robin and the deadline is not looked at before every job holds
    its first block: a deadline already past keeps the first block of each (40 of the 8-GPU
    job's 196 shapes, 40 of the 16-GPU job's 284; both fit from their first shape), where a fill
    job after job kept the 8-GPU job's 40 alone and compared nothing at 16 GPUs. The words say
    each job's share."""
    _blocks_of(monkeypatch, BLOCK, jobs=2)
    complete = build_tables(two)
    per_job = np.bincount(complete.job_of, minlength=2).tolist()
    assert per_job == [196, 284] and complete.job_shapes_in_all == (196, 284)
    cut = build_tables(two, deadline=-1.0)
    assert np.bincount(cut.job_of).tolist() == [40, 40]
    assert cut.cut() == (
        "the time limit cut the cost tables at 80 of 480 shapes, the first in tie-break order "
        "(fewest model-parallel GPUs first): 8 GPUs 40 of 196; 16 GPUs 40 of 284"
    )
    _rows_of(cut, complete)


def test_a_cut_after_the_first_round_may_end_mid_round(two, monkeypatch):
    """A clock that passes the deadline once three blocks are filled: the 8-GPU job's first and
    second, the 16-GPU job's first (the cut comes between blocks, so one job may hold a block
    more than another; the words say each one's)."""
    _blocks_of(monkeypatch, BLOCK, jobs=2)
    done: list[int] = []
    monkeypatch.setattr(tables_module.time, "perf_counter", lambda: 10.0 if len(done) >= 3 else 0.0)
    cut = build_tables(two, lambda n, _, cut=None, /: done.append(n), deadline=5.0)
    assert done == [40, 80, 120, 120]  # the last: the cut said (TableProgress)
    assert np.bincount(cut.job_of).tolist() == [80, 40]
    _rows_of(cut, build_tables(two))


def test_a_deadline_that_cuts_nothing_changes_no_row_over_two_jobs(two, monkeypatch):
    """Filled round-robin, each block's rows are written where a build without a deadline has
    them: a deadline not reached gives the complete build, array for array."""
    _blocks_of(monkeypatch, BLOCK, jobs=2)
    done: list[int] = []
    blocked = build_tables(two, lambda n, _: done.append(n), deadline=float("inf"))
    assert done[:3] == [40, 80, 120] and done[-1] == 480 and len(done) == 5 + 8
    complete = build_tables(two)
    assert blocked.complete and blocked.shapes == complete.shapes
    for name, array in _arrays(complete).items():
        assert np.array_equal(getattr(blocked, name), array), name


def test_the_first_round_costs_about_one_block_however_many_jobs():
    """Under a deadline a block is :data:`BLOCK_SHAPES` (512) shared by the jobs with shapes, at
    least :data:`MIN_BLOCK_SHAPES` (64): llama3-405b on 512, 1,024, 1,536 and 2,048 H100s held
    1,633 of its 1,696 shapes after a first round of 512-shape blocks (every job's first block,
    never cut); with 4 jobs a block is 512 // 4 = 128 shapes, at most 512 in the first round.
    Beyond 8 jobs the floor binds (each block looks its groups' figures up again)."""
    assert tables_module.BLOCK_SHAPES == 512 and tables_module.MIN_BLOCK_SHAPES == 64
    assert [tables_module.block_shapes(n) for n in (1, 2, 3, 4, 8, 9, 100)] == [
        512, 256, 170, 128, 64, 64, 64,
    ]  # fmt: skip


def test_two_jobs_share_the_first_round(two, monkeypatch):
    """Two jobs, :data:`BLOCK_SHAPES` 80 and no floor: blocks of 80 // 2 = 40, a deadline already
    past keeps 40 + 40 = 80 shapes (one block's worth), where blocks of 80 each kept 160; with a
    floor of 60 the blocks are 60 each (120 kept; a first round of 160 grows no further)."""
    monkeypatch.setattr(table_blocks, "BLOCK_SHAPES", 80)
    monkeypatch.setattr(table_blocks, "MIN_BLOCK_SHAPES", 1)
    monkeypatch.setattr(table_blocks, "FIRST_BLOCK_SHAPES", 80)
    assert np.bincount(build_tables(two, deadline=-1.0).job_of).tolist() == [40, 40]
    monkeypatch.setattr(table_blocks, "MIN_BLOCK_SHAPES", 60)
    monkeypatch.setattr(table_blocks, "FIRST_BLOCK_SHAPES", 160)  # the floor caps the growth
    assert np.bincount(build_tables(two, deadline=-1.0).job_of).tolist() == [60, 60]


def test_a_block_the_last_ones_pace_says_would_pass_the_deadline_is_not_started(
    problem, full, monkeypatch
):
    """Each block takes 2 s on a fake clock (``fill_job_rows`` moves it), the deadline is at
    5 s: blocks end at 2 s and 4 s; the third would end at 6 s, past the deadline, so it is not
    started (before, the deadline was only looked at, 4 s < 5 s, and the third block ended the
    tables 1 s late). The rows held are the complete build's first two blocks, value for value:
    the pace decides where the build stops, never a figure."""
    _blocks_of(monkeypatch, BLOCK, jobs=1)
    now = [0.0]
    fill = tables_module.fill_job_rows

    def slow_fill(*args, **kwargs):
        fill(*args, **kwargs)
        now[0] += 2.0

    monkeypatch.setattr(tables_module, "fill_job_rows", slow_fill)
    monkeypatch.setattr(tables_module.time, "perf_counter", lambda: now[0])
    cut = build_tables(problem, deadline=5.0)
    assert len(cut.shapes) == 2 * BLOCK and now[0] == 4.0 <= 5.0
    assert (
        not cut.complete
        and cut.cut() is not None
        and cut.cut().startswith(f"the time limit cut the cost tables at {2 * BLOCK} of 284 shapes")
    )
    _is_prefix(cut, full)


def test_the_pace_never_cuts_before_a_candidate_fits(monkeypatch):
    """The pace only moves the cut earlier among the blocks a cut may end at: Llama 3 70B on 16
    H100s first fits at its 142nd shape (row 141, the fourth block of 40), so under a deadline
    every block would pass, the build still holds four blocks (an answer rather than none)."""
    case = Case.of("llama3-70b", "H100-SXM")
    space = SearchSpace(num_gpus=16, frameworks=(Framework.MEGATRON, Framework.DEEPSPEED))
    problem = Problem(jobs=(Job(case, 16, "70b"),), space=space)
    _blocks_of(monkeypatch, BLOCK, jobs=1)
    now = [0.0]
    fill = tables_module.fill_job_rows

    def slow_fill(*args, **kwargs):
        fill(*args, **kwargs)
        now[0] += 10.0

    monkeypatch.setattr(tables_module, "fill_job_rows", slow_fill)
    monkeypatch.setattr(tables_module.time, "perf_counter", lambda: now[0])
    cut = build_tables(problem, deadline=1.0)
    assert len(cut.shapes) == 4 * BLOCK and cut.fits.any() and not cut.complete


def test_the_blocks_grow_from_a_small_first_round():
    """Under a deadline the first round is :data:`FIRST_BLOCK_SHAPES` (64) shared by the jobs,
    doubled each round up to :func:`block_shapes` (512 shared, at least 64 each): one job 64,
    128, 256, 512, 512; four jobs 16, 32, 64, 128 each (512 // 4); sixteen 4, 8, 16, 32, 64
    (the floor)."""
    assert table_blocks.FIRST_BLOCK_SHAPES == 64
    assert [table_blocks.round_shapes(1, k) for k in range(5)] == [64, 128, 256, 512, 512]
    assert [table_blocks.round_shapes(4, k) for k in range(5)] == [16, 32, 64, 128, 128]
    assert [table_blocks.round_shapes(16, k) for k in range(6)] == [4, 8, 16, 32, 64, 64]


def test_growing_blocks_change_no_row(problem, full, monkeypatch):
    """A first round of 8 doubling to blocks of 32 (no rest filled whole): the blocks end at 8,
    8 + 16 = 24, 24 + 32 = 56, then every 32 to 280 and the last 4 at 284; the rows are the
    complete build's, array for array."""
    monkeypatch.setattr(table_blocks, "BLOCK_SHAPES", 32)
    monkeypatch.setattr(table_blocks, "MIN_BLOCK_SHAPES", 1)
    monkeypatch.setattr(table_blocks, "FIRST_BLOCK_SHAPES", 8)
    monkeypatch.setattr(table_blocks, "WHOLE_REST_MARGIN", float("inf"))
    steps: list[int] = []
    grown = build_tables(problem, lambda done, _: steps.append(done), deadline=float("inf"))
    assert steps == [8, 24, 56, 88, 120, 152, 184, 216, 248, 280, 284]
    assert grown.complete
    _is_prefix(grown, full)


def test_a_deadline_already_past_keeps_the_first_round_only(problem, full):
    """With the shipped sizes, a deadline already past keeps the first round, 64 of the 284
    shapes (the first block is never cut: no pace is known before it; it was 284, the job's
    whole first 512-shape block), row for row the complete build's first 64."""
    cut = build_tables(problem, deadline=-1.0)
    assert len(cut.shapes) == 64 and not cut.complete
    _is_prefix(cut, full)


def test_the_rest_is_filled_whole_once_the_pace_says_it_ends_well_before_the_deadline(
    problem, full
):
    """A deadline far off (infinite): after the first block of 64 the pace says the other 220
    shapes end before it (:data:`WHOLE_REST_MARGIN` times over), so they are filled in one
    block, as a build without a deadline fills a job (blocks cost a part each: a limit that does
    not bind costs about what no limit does). The rows are the complete build's."""
    steps: list[int] = []
    blocked = build_tables(problem, lambda done, _: steps.append(done), deadline=float("inf"))
    assert steps == [64, 284]
    assert blocked.complete
    _is_prefix(blocked, full)


def test_past_the_deadline_without_an_answer_the_blocks_stop_growing_by_steps(problem, full):
    """A deadline already past, and rows that hold no answer before 100 shapes (``enough``):
    no cut may come before an answer, so after the first block of 64 the next is a whole block
    of :func:`block_shapes` (512: the 220 shapes left) rather than 128 and then 256 — fewer
    blocks, each of which looks its groups' figures up again. The rows are the complete
    build's."""
    steps: list[int] = []
    held = build_tables(
        problem,
        lambda done, _: steps.append(done),
        deadline=-1.0,
        enough=lambda rows: len(rows.shapes) >= 100,
    )
    assert steps == [64, 284]
    _is_prefix(held, full)
