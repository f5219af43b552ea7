"""Cost tables: the cost model's own terms evaluated over every candidate, as arrays.

For every job j, every legal shape s of it (optimizer.space), every ZeRO stage z and every
recompute mode r:

* ``state[s, z, r, i]`` — model-state bytes of pipeline stage i in forward/backward (weights,
  gradients, optimizer state, gathered units, buffers; r moves DeepSpeed ZeRO-3's gathered
  weights alone, :func:`model.terms.deepspeed_turn.zero3_turn_gathered`); ``step[s, z, r, i]``
  the same while the optimizer steps (no activations); ``act[s, r, i]`` activation bytes
* ``legal[s, z, r]`` — the shape breaks no legality rule at the ZeRO stage and recompute mode
  (:func:`model.legality.legality`: the framework runs the stage with its axes, the recompute
  mode, the offload)
* ``t1_ns[s, r]``    — compute × (1 + bubble) + exposed tp/cp/ep/pp traffic
* ``t2_ns[s, z, r]`` — exposed dp traffic, the optimizer step, an offload's transfers (both in
  whole ns as :func:`model.estimate.objective_ns`; r moves DeepSpeed ZeRO-3's gathers alone)

so that the memory of stage i is max(state + act, step) (:func:`model.terms.peak.peak_over_phases`)
and the step time t1 + t2, exactly as ``evaluate()`` adds them. Each table is one term of
:data:`model.terms.TERMS` evaluated over its scope (:func:`optimizer.columns.tabulate`): float64,
within a byte and a nanosecond of the exact evaluation. Fit verdicts are decided exactly where a
candidate's peak is within a relative 1e-9 of the capacity, and every printed answer is
re-evaluated exactly (:func:`optimizer.search.check_against_evaluate`). Nothing here costs: one
job's rows are :func:`optimizer.job_rows.fill_job_rows`'.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from typing import Protocol

import numpy as np

from trainplan.model.errors import InputError
from trainplan.model.frameworks import ZERO_STAGES, Framework
from trainplan.model.layout import Recompute
from trainplan.model.legality import Setting, legality, refusal
from trainplan.model.terms import peak as pk
from trainplan.model.terms.fields import LayoutFields
from trainplan.optimizer.job_rows import fill_job_rows, fit_columns
from trainplan.optimizer.launch_tables import objective_divisor, with_launch_order
from trainplan.optimizer.problem import Job, Problem, job_model_flops
from trainplan.optimizer.space import SearchSpace, Shape, legal_shapes
from trainplan.optimizer.table_blocks import (
    BLOCK_SHAPES,
    FIRST_BLOCK_SHAPES,
    MIN_BLOCK_SHAPES,
    WHOLE_REST_MARGIN,
    Pace,
    block_shapes,
    blocks,
    round_shapes,
    rounds,
)

__all__ = [
    "CostTables",
    "TableProgress",
    "build_tables",
    "illegal_reason",
    "job_shapes",
    "empty_columns",
    "fill_job_rows",
    "job_model_flops",
    "peak_table",
    "fit_columns",
    "objective_divisor",
    "MAX_ROWS",
    "BLOCK_SHAPES",
    "MIN_BLOCK_SHAPES",
    "block_shapes",
    "round_shapes",
    "FIRST_BLOCK_SHAPES",
    "WHOLE_REST_MARGIN",
    "blocks",
    "MAX_SHAPES_PER_JOB",
]

MAX_ROWS = 2_000_000
"""Refuse tables larger than this many (shape × modifier) rows; narrow the space instead."""
MAX_SHAPES_PER_JOB = 200_000
"""Refuse a job with more legal shapes than this (the arrays of one job live in memory at once)."""


class TableProgress(Protocol):
    """The cost tables' progress (:func:`build_tables`): ``(done, total)`` shapes after each job
    or block, and once more with ``cut`` (:meth:`CostTables.cut`'s words) when a time limit
    cut the building short, before the solve starts (the CLI's terminal line, the page's
    progress stream)."""

    def __call__(self, done: int, total: int, cut: str | None = None, /) -> None: ...


@dataclass(frozen=True, slots=True, eq=False)
class CostTables:
    """Every term of every candidate. Arrays are numpy; S shapes, Z ZeRO stages, R recompute
    modes, P the most pipeline stages of any shape (missing stages hold 0)."""

    jobs: tuple[Job, ...]
    shapes: tuple[Shape, ...]
    job_of: np.ndarray
    """[S] job index of each shape."""
    zero_stages: tuple[int, ...]
    recomputes: tuple[Recompute, ...]
    state_ceil: np.ndarray
    """[S, Z, R, P] model-state bytes in forward/backward, rounded up (within a byte of exact)."""
    step_ceil: np.ndarray
    """[S, Z, R, P] model-state bytes during the optimizer step, rounded up."""
    legal: np.ndarray
    """[S, Z, R] whether shape s breaks no legality rule at ZeRO stage z and recompute mode r
    (:func:`model.legality.legality`)."""
    act_ceil: np.ndarray
    """[S, R, P] activation bytes (layers + embedding + transient), rounded up."""
    fits: np.ndarray
    """[S, Z, R] legal, and every stage's exact reserved peak (max of state + activations and
    the step's bytes, plus the side streams' pools; without them under
    :attr:`allocator_retries_ok`) within capacity × (1 − headroom)."""
    t1_ns: np.ndarray
    """[S, R] compute, bubble and exposed tp/cp/ep/pp time, ns, with the launch order kept
    (:mod:`optimizer.launch_tables`)."""
    t1_unordered_ns: np.ndarray
    """[S, R] the same without it (Megatron-FSDP before Blackwell: no async tp or cp overlap)."""
    unordered: np.ndarray
    """[S, Z] whether the shape at the ZeRO stage reads :attr:`t1_unordered_ns`
    (:func:`model.launch_order.launch_order_kept` False)."""
    t2_ns: np.ndarray
    """[S, Z, R] exposed dp time, the optimizer step and offload, ns."""
    capacity: np.ndarray
    """[S] usable bytes per GPU of the shape's job."""
    model_flops: np.ndarray
    """[S, R] model FLOPs per step (for MFU bounds), as float."""
    peak_ceil: np.ndarray
    """[S, Z, R] the busiest stage's bytes (each term rounded up): the memory objective."""
    job_shapes_in_all: tuple[int, ...] = ()
    """How many shapes the space holds for each job (in :attr:`jobs`' order); more in all than
    ``len(shapes)`` when a time limit stopped table building, which keeps the blocks filled by
    then (:func:`build_tables`: each job's first shapes in order, jobs in order, each row as a
    complete build has it; empty: all)."""
    allocator_retries_ok: bool = False
    """Whether :attr:`fits` accepts a candidate whose reserved bytes exceed the capacity while its
    allocated ones fit (:attr:`optimizer.problem.Constraints.allocator_retries_ok`)."""

    @property
    def complete(self) -> bool:
        """Whether every shape of every job was tabulated (no time limit cut table building
        short)."""
        return not self.job_shapes_in_all or sum(self.job_shapes_in_all) == len(self.shapes)

    def cut(self) -> str | None:
        """What a time limit left out, in words (None: nothing): the shapes tabulated of all, the
        first in tie-break order, and with several jobs each job's share (:func:`build_tables`
        fills the jobs round-robin, a block of each in turn, so a cut leaves each job its first
        shapes; the words say how many, so that a comparison of GPU counts or parts under a
        cut is read as one of those shares)."""
        if self.complete:
            return None
        words = (
            f"the time limit cut the cost tables at {len(self.shapes):,} of "
            f"{sum(self.job_shapes_in_all):,} shapes, the first in tie-break order (fewest "
            "model-parallel GPUs first)"
        )
        if len(self.jobs) == 1:
            return words
        held = np.bincount(self.job_of, minlength=len(self.jobs))
        each = (
            f"{job.label} {'none' if not n else f'{n:,}'} of {total:,}"
            for job, n, total in zip(self.jobs, held.tolist(), self.job_shapes_in_all, strict=True)
        )
        return f"{words}: {'; '.join(each)}"

    def step_ns(self) -> np.ndarray:
        """[S, Z, R] step time in ns as the solver sees it."""
        t1 = with_launch_order(self.t1_ns, self.t1_unordered_ns, self.unordered)
        return t1 + self.t2_ns

    def t1_at(self, s: int, z: int, r: int) -> int:
        """The pipeline term of candidate (s, z, r), ns, at its launch order."""
        t1 = self.t1_unordered_ns if self.unordered[s, z] else self.t1_ns
        return int(t1[s, r])

    def num_gpus(self) -> np.ndarray:
        """[S] GPUs of each shape's job."""
        return np.array([self.jobs[j].num_gpus for j in self.job_of], dtype=np.int64)


def illegal_reason(tables: CostTables) -> str | None:
    """Why no row of ``tables`` is legal at any ZeRO stage of the space — the legality rule's
    own line (:func:`model.legality.legality`) for the first shape at the first ZeRO stage its
    framework has (Apex's ``distributed_fused_adam`` with ``--zero 0``) — or None when some row is legal or
    there is no row. A search that finds nothing says this, not "divisibility"."""
    if not tables.shapes or tables.legal.any():
        return None
    job = tables.jobs[int(tables.job_of[0])]
    shape = tables.shapes[0]
    # the first stage its framework has: a stage it has not would hide the recipe's rule
    runs = [z for z in tables.zero_stages if z in ZERO_STAGES[Framework(shape.framework)]]
    layout = shape.layout((runs or tables.zero_stages)[0], tables.recomputes[0])
    c = job.case
    setting = Setting.of(c.model, c.training, job.num_gpus, c.options, c.device)
    return str(legality(setting, LayoutFields(layout, c.training.global_batch_size))[1]) or None


def build_tables(
    problem: Problem,
    progress: TableProgress | None = None,
    deadline: float | None = None,
    fit_only: bool = False,
    enough: Callable[[CostTables], bool] | None = None,
) -> CostTables:
    """Evaluate the cost model's terms for every job × shape × modifier (``fit_only``: a job,
    or under a deadline a block, none of whose candidates fits gets no time terms,
    :func:`optimizer.job_rows._job_rows`: those rows are never an answer).

    Each job's shapes are in their tie-break order (:func:`optimizer.space.legal_shapes`: fewest
    model-parallel GPUs first; no cheaper principled order ranks shapes before their terms are
    evaluated). Without a ``deadline`` each job is filled whole, job after job. With one (a
    :func:`time.perf_counter` value) the jobs are filled round-robin in growing blocks, and the
    blocks that would end past the deadline are left out once every job holds its first block
    and the tables so far are ``enough`` (an answer rather than none; default: some candidate
    fits; the layout search passes its solver's mask, :func:`optimizer.rules.allowed`):
    :class:`optimizer.table_blocks.Pace` and its module say how. A cut leaves
    :attr:`CostTables.complete` False, each held row as a build without the deadline has it
    (under ``fit_only`` a block none of whose candidates fits gets zero time terms, rows never
    an answer; the search reports ``feasible``, not proven). ``progress(done, total)`` (shapes)
    is called after each job or block, and ``progress(held, total, cut)`` once after a cut.

    Raises
    ------
    InputError
        When a model has no dimensions, or the space is larger than :data:`MAX_ROWS` rows.
    """
    zs, rs, c = problem.space.zero_stages, _recomputes(problem), problem.constraints
    per_job = job_shapes(problem, len(zs) * len(rs))
    S = sum(len(found) for _, found in per_job)
    P = max((s.pp for _, shapes in per_job for s in shapes), default=1)
    cols = empty_columns(S, len(zs), len(rs), P)
    memo: dict = {}
    totals = tuple(len(found) for _, found in per_job)
    starts = np.concatenate([[0], np.cumsum(totals)]).astype(int).tolist()
    filled = [0] * len(per_job)  # each job's shapes filled so far, its first in order
    tables = partial(_held, problem, zs, rs, per_job, starts, filled, cols)
    found = lambda: bool(enough(tables()) if enough else cols["fits"].any())  # noqa: E731
    pace = Pace(deadline, totals, filled, found)
    for j, block in (
        blocks(per_job, None) if deadline is None else rounds(per_job, filled, pace.size)
    ):
        if pace.would_cut(len(block)) and pace.answer():
            break
        began = time.perf_counter()
        fill_job_rows(
            cols, starts[j] + filled[j], per_job[j][0], block, zs, rs, c.headroom, memo,
            c.allocator_retries_ok, fit_only,
        )  # fmt: skip
        pace.per_shape_s = (time.perf_counter() - began) / len(block)
        filled[j] += len(block)
        if progress:
            progress(sum(filled), S)
    held = tables()  # cut short: the tabulated blocks' rows
    if progress and not held.complete:
        progress(len(held.shapes), S, held.cut())
    return held


def _held(
    problem: Problem,
    zs: tuple[int, ...],
    rs: tuple[Recompute, ...],
    per_job: list[tuple[Job, tuple[Shape, ...]]],
    starts: list[int],
    filled: list[int],
    cols: dict[str, np.ndarray],
) -> CostTables:
    """The rows :func:`build_tables` has filled so far as :class:`CostTables`: each job's first
    ``filled[j]`` shapes, from its row ``starts[j]`` (``starts``: each job's first row and, last,
    the rows in all), jobs in order (all filled: the columns as they are)."""
    totals = tuple(len(found) for _, found in per_job)
    if list(filled) == list(totals):
        held, shapes = cols, [s for _, found in per_job for s in found]
    else:
        rows = np.concatenate(
            [np.arange(a, a + n, dtype=np.int64) for a, n in zip(starts[:-1], filled, strict=True)]
        )
        held = {name: column[rows] for name, column in cols.items()}
        shapes = [s for (_, found), n in zip(per_job, filled, strict=True) for s in found[:n]]
    job_of = np.repeat(np.arange(len(per_job), dtype=np.int64), filled)
    return CostTables(
        tuple(problem.jobs), tuple(shapes), job_of, tuple(zs), tuple(rs), **held,
        peak_ceil=peak_table(held["state_ceil"], held["step_ceil"], held["act_ceil"]),
        job_shapes_in_all=totals,
        allocator_retries_ok=problem.constraints.allocator_retries_ok,
    )  # fmt: skip


def job_shapes(problem: Problem, per_shape: int) -> list[tuple[Job, tuple[Shape, ...]]]:
    """Each job with its legal shapes (:func:`optimizer.space.legal_shapes` over the space
    at the job's GPU count).

    Raises
    ------
    InputError
        A model without dimensions, or more than :data:`MAX_ROWS` candidates (shapes ×
        ``per_shape`` modifiers) in all.
    """
    per_job: list[tuple[Job, tuple[Shape, ...]]] = []
    total = 0
    for job in problem.jobs:
        if job.case.model.arch is None:
            raise InputError(
                "search: needs a model with dimensions (a catalogue model, a config.json, or --layers …)"
            )
        job_space = SearchSpace(**{**_fields(problem.space), "num_gpus": job.num_gpus})
        found = tuple(legal_shapes(job.case.model, job.case.training, job_space))
        total += len(found)
        if total * per_shape > MAX_ROWS:
            raise InputError(
                f"search: over {MAX_ROWS:,} candidates; narrow the space (--tp, --pp, --max-micro-batch, fewer GPU counts)"
            )
        per_job.append((job, found))
    return per_job


def empty_columns(S: int, Z: int, R: int, P: int) -> dict[str, np.ndarray]:
    """The :class:`CostTables` arrays :func:`build_tables` fills, by field name, zeroed: S
    shapes, Z ZeRO stages, R recompute modes, P the most pipeline stages."""
    return {
        "state_ceil": np.zeros((S, Z, R, P), dtype=np.int64),
        "step_ceil": np.zeros((S, Z, R, P), dtype=np.int64),
        "legal": np.zeros((S, Z, R), dtype=bool),
        "act_ceil": np.zeros((S, R, P), dtype=np.int64),
        "fits": np.zeros((S, Z, R), dtype=bool),
        "t1_ns": np.zeros((S, R), dtype=np.int64),
        "t1_unordered_ns": np.zeros((S, R), dtype=np.int64),
        "unordered": np.zeros((S, Z), dtype=bool),
        "t2_ns": np.zeros((S, Z, R), dtype=np.int64),
        "capacity": np.zeros(S, dtype=np.int64),
        "model_flops": np.zeros((S, R), dtype=float),
    }


def peak_table(state: np.ndarray, step: np.ndarray, act: np.ndarray) -> np.ndarray:
    """[S, Z, R] the busiest stage's bytes (:func:`model.terms.peak.peak_over_phases` of the
    rounded-up terms, ``state`` and ``step`` [S, Z, R, P], ``act`` [S, R, P]); a loop over z
    keeps the temporary at [S, R, P]."""
    S, Z, R = state.shape[0], state.shape[1], act.shape[1]
    peak = np.zeros((S, Z, R), dtype=np.int64)
    for z in range(Z):
        if S:
            peak[:, z, :] = pk.peak_over_phases(state[:, z], act, step[:, z]).max(axis=2)
    return peak


def _recomputes(problem: Problem) -> tuple[Recompute, ...]:
    """The space's recompute modes that some framework of the space runs with some job's
    recipe (:func:`model.legality.refusal`: activation offload keeps none or selective).

    Raises
    ------
    InputError
        None is left: the rule's own line.
    """
    kept, first = [], ""
    for r in problem.space.recomputes:
        why = [
            refusal(Setting(job.case.model, job.case.training), framework=fw, recompute=r,
                    recompute_layers=None)
            for job in problem.jobs
            for fw in problem.space.frameworks
        ]  # fmt: skip
        if not all(why):
            kept.append(r)
        first = first or next((w for w in why if w), "")
    if not kept:  # the rule's line as evaluate prints it, headed by the parameter it names
        raise InputError(first)
    return tuple(kept)


def _fields(space) -> dict:
    return {f.name: getattr(space, f.name) for f in fields(space)}
