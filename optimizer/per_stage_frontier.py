"""The Pareto frontier of step time with per-stage layers and recomputation (issue 13, item 3:
``frontier`` can use it): every point is the better of the best uniform layout and the best
per-stage plan (:func:`optimizer.per_stage.per_stage_search`) meeting its second-axis value —
peak bytes per GPU, GPU count, or cluster price per hour, the axes of
:func:`optimizer.search.frontier`.

* ``gpus`` / ``price``: each job (GPU count × accelerator …) alone, cheapest first; a job can
  be a point only if it is faster than every cheaper point, so that step time is the per-stage
  search's cap (``cap_ns``: shapes and stage rows that cannot beat it are skipped). A job where
  no uniform layout fits is still searched per stage (``without_uniform``).
* ``memory``: ε-constraint as the uniform frontier: the fastest plan whose every stage needs at
  most ε bytes (uniform and per-stage alike, ``max_bytes``), then ε = its peak − 1 byte, until
  nothing fits or ``max_points``.

Every plan is one :func:`optimizer.per_stage.per_stage_search` (re-evaluated with
``evaluate()`` there); the points kept are the non-dominated ones.

Two budgets end a frontier before its last point. ``max_searches`` counts per-stage searches,
each run to its proof: the points are then the same on every machine, loaded or not (each
search's CP-SAT solves run with the one rule of :func:`optimizer.solver.solve`: a fixed seed, a
fixed number of workers, no wall-clock limit unless one is asked for, so a proven optimum does
not depend on the machine's load). ``time_limit_s`` is wall-clock: a search it cuts keeps its
best so far, which another run, on a machine more or less busy, may not find; such a point says
so (:attr:`FrontierPoint.proven`); the cost tables get the limit less the first search's floor
(:func:`optimizer.per_stage.tables_limit`), and the first search runs even when they took their
share, given at least :data:`optimizer.search.SOLVE_FLOOR_S` as the layout search's solve
(:meth:`Budget.time_limit`), so that a limit spent on the tables still gives a point. Ctrl-C
(:func:`optimizer.solver.interrupt`) ends it as a spent budget does, with the points found.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from trainplan.model.errors import InfeasibleError
from trainplan.model.estimate import Estimate
from trainplan.optimizer.per_stage import (
    PerStageResult,
    check_objective,
    interleaved_space,
    peak_bytes,
    per_stage_search,
    proof_scope,
    tables_limit,
    uniform_within,
)
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import SOLVE_FLOOR_S, Answer, prepare
from trainplan.optimizer.solver import STAGE_WORKERS, interrupted
from trainplan.optimizer.stage_solve import step_ns

__all__ = [
    "FrontierPoint",
    "Budget",
    "FrontierRun",
    "non_dominated",
    "PerStageFrontier",
    "per_stage_frontier",
    "memory_frontier",
    "job_frontier",
    "ValueSearch",
    "value_search",
    "axis_value",
    "time_left",
]


@dataclass(frozen=True, slots=True)
class FrontierPoint:
    """One point of the per-stage frontier."""

    kind: str
    """``uniform`` (no per-stage plan is faster) or ``per-stage``."""
    job: Job
    estimate: Estimate
    """The plan, evaluated (``stage_layers`` and ``recompute_layers`` set when per-stage)."""
    step_ns: int
    """Its step time, whole ns (:func:`model.estimate.objective_ns`, summed)."""
    value: int
    """Its second-axis value: peak bytes per GPU of the busiest stage, rounded up (memory: a
    uniform plan's as the uniform frontier rounds it, :attr:`optimizer.search.Answer.peak_bytes`;
    a per-stage plan's as the stage tables do, :func:`optimizer.per_stage.peak_bytes`), GPUs
    (gpus), or whole cents per hour (price, :attr:`optimizer.problem.Job.cents_per_hour`)."""
    uniform: Answer | None
    """The best uniform layout meeting the same value (≤ ``value`` bytes, or over the jobs of at
    most ``value`` GPUs or cents per hour): the uniform frontier there; None when none fits."""
    uniform_ns: int | None
    """Its step time, whole ns."""
    proven: bool = True
    """Whether the searches behind this point were proven (the per-stage search over the shapes
    it takes, and the uniform one); False when a wall-clock ``time_limit_s`` cut them, so that
    another run may find a faster plan at this value."""
    gap_ns: int | None = None
    """The step less a proven lower bound on every split of the shapes its per-stage search took
    at this value, whole ns (:attr:`optimizer.per_stage.PerStageResult.gap_ns`: 0, or a ns or so,
    when proven); None where a time limit left no bound."""

    @property
    def gain(self) -> float | None:
        """Uniform step time ÷ this point's (≥ 1); None when no uniform layout meets the value."""
        return None if self.uniform_ns is None else self.uniform_ns / self.step_ns


@dataclass(frozen=True, slots=True)
class PerStageFrontier:
    """The per-stage frontier of step time against ``against``."""

    against: str
    """``memory``, ``gpus`` or ``price``."""
    points: tuple[FrontierPoint, ...]
    """Non-dominated, step time ascending (second-axis value descending), as the uniform
    frontier's."""
    status: str
    """``optimal`` when every per-stage search and uniform search it rests on was proven
    (per-stage: over the base layouts each searched) and the frontier ran to its end;
    ``feasible`` when a budget ended it first (:attr:`stopped`) or a point is not proven."""
    searches: int
    """Per-stage searches run (one per job, or one per ε)."""
    seconds: float
    """Wall time, tables included."""
    stopped: str | None = None
    """What ended the frontier before its last point: ``searches`` (``max_searches``, the same
    points on every machine), ``time`` (``time_limit_s``, wall-clock), ``interrupted``
    (Ctrl-C: :func:`optimizer.solver.interrupt`), or None (it ran to the end: nothing fits below
    the last point, or ``max_points``)."""
    cuts: tuple[str, ...] = ()
    """What a time limit left out of the uniform cost tables the searches rest on
    (:meth:`optimizer.tables.CostTables.cut`), one entry per table cut: against memory the one
    table every point is searched over; against GPUs or price each job's own, headed by the job
    (:attr:`optimizer.problem.Job.label`). Empty: nothing was cut."""
    equal_chunks: bool = False
    """Whether the space held interleaved shapes, so each point's proof covers only their splits
    whose chunks on a stage are equal (:func:`optimizer.per_stage.interleaved_space`,
    :attr:`proof_scope`); ``optimal`` is said with that scope."""

    @property
    def proof_scope(self) -> str:
        """What each point's search is proven over, in words
        (:func:`optimizer.per_stage.proof_scope`)."""
        return proof_scope(self.equal_chunks)


def axis_value(against: str, result: PerStageResult) -> int:
    """A per-stage search's plan on the frontier's second axis (:attr:`FrontierPoint.value`)."""
    if against == "gpus":
        return result.job.num_gpus
    if against == "price":
        return result.job.cents_per_hour
    if result.per_stage or result.uniform is None:
        return peak_bytes(result.plan)
    return result.uniform.peak_bytes


def _frontier(against: str, run: FrontierRun, t0: float) -> PerStageFrontier:
    """The result: the non-dominated points of ``run``, proven or not, with the searches run,
    the seconds since ``t0`` (:func:`time.perf_counter`) and what stopped it (``interrupted``
    whenever Ctrl-C came, even during the last search: it may have cut that one short)."""
    stopped = "interrupted" if interrupted() else run.stopped
    proven = run.proven and stopped is None
    return PerStageFrontier(
        against,
        non_dominated(run.points),
        "optimal" if proven else "feasible",
        run.searches,
        time.perf_counter() - t0,
        stopped,
        run.cuts,
    )


def non_dominated(points: list[FrontierPoint]) -> tuple[FrontierPoint, ...]:
    """The points no other point dominates (another with at most its value and less step time,
    or the same step time and less value), step time ascending: each kept point is strictly
    faster than every point of lesser or equal value. The one place the frontier's points are
    filtered: what :func:`per_stage_frontier` returns, the CLI prints and the page shows.

    Examples
    --------
    >>> from types import SimpleNamespace as P
    >>> pts = [P(step_ns=263_446, value=81_56), P(step_ns=274_094, value=81_35),
    ...        P(step_ns=263_454, value=79_45), P(step_ns=263_454, value=80_00)]
    >>> [(p.step_ns, p.value) for p in non_dominated(pts)]
    [(263446, 8156), (263454, 7945)]
    """
    out: list[FrontierPoint] = []
    for p in sorted(points, key=lambda p: (p.value, p.step_ns)):
        if not out or p.step_ns < out[-1].step_ns:  # equal values: the fastest came first
            out.append(p)
    return tuple(reversed(out))


def per_stage_frontier(
    problem: Problem,
    against: str = "memory",
    top_shapes: int | None = None,
    time_limit_s: float | None = None,
    workers: int = STAGE_WORKERS,
    max_points: int = 64,
    progress: Callable[[int, int], None] | None = None,
    max_searches: int | None = None,
) -> PerStageFrontier:
    """The Pareto frontier of step time against ``against`` where every point is the better of
    the best uniform layout and the best per-stage plan meeting that value (module docstring).
    ``top_shapes``: per search, the shapes searched per stage
    (:func:`optimizer.stage_bases.ranked_bases`). ``time_limit_s`` bounds the whole frontier
    (then status ``feasible``, the points found so far). ``progress(searches, points)`` is
    called after each point's searches (each ε of the memory axis, each value of the GPU or
    price axis) with the searches run and the frontier's points so far. ``max_searches``: at
    most this many per-stage searches (each to its proof; then status ``feasible``, stopped
    ``searches``, the points the same on every machine); None: no cap.

    Raises
    ------
    InputError
        An axis that is not memory, gpus or price, or price without every accelerator's price
        (:meth:`Problem.check_frontier_axis`); an objective other than step time
        (:func:`optimizer.per_stage.check_objective`); a model or layout the per-stage search
        does not model (:func:`optimizer.stage_rules.check_per_stage`).
    InfeasibleError
        Nothing fits, uniform or per stage.
    """
    problem.check_frontier_axis(against)
    check_objective(problem)
    t0 = time.perf_counter()
    budget = Budget(None if time_limit_s is None else t0 + time_limit_s, max_searches)
    if against == "memory":
        run = memory_frontier(
            problem, top_shapes, time_limit_s, workers, max_points, progress, budget
        )
    else:
        run = job_frontier(problem, against, top_shapes, workers, max_points, progress, budget)
    return replace(_frontier(against, run, t0), equal_chunks=interleaved_space(problem))


@dataclass(frozen=True, slots=True)
class Budget:
    """What may end a frontier before its last point (module docstring)."""

    deadline: float | None
    """Wall-clock end, :func:`time.perf_counter` seconds (None: none)."""
    max_searches: int | None
    """Per-stage searches at most (None: no cap): the deterministic budget."""

    def spent(self, searches: int) -> str | None:
        """``searches`` or ``time`` when that budget is spent after ``searches`` searches,
        ``interrupted`` after Ctrl-C (:func:`optimizer.solver.interrupt`), else None."""
        if interrupted():
            return "interrupted"
        if self.max_searches is not None and searches >= self.max_searches:
            return "searches"
        rest = time_left(self.deadline)
        # the first search runs even when the tables took the limit (:meth:`time_limit`)
        return "time" if searches and rest is not None and rest <= 0 else None

    def time_limit(self, searches: int) -> float | None:
        """Seconds the next search may take after ``searches`` searches: what is left to the
        deadline, and for the first at least :data:`optimizer.search.SOLVE_FLOOR_S`, as the
        layout search gives CP-SAT after its tables (:func:`optimizer.search._remaining`), so
        that a limit spent on the cost tables still reads an answer (the first point, not
        proven) rather than none: Llama 3 70B on 256..1,024 H100s, ``--time-limit 2``, gave 0
        points, no search run. None without a deadline."""
        rest = time_left(self.deadline)
        return rest if rest is None or searches else max(SOLVE_FLOOR_S, rest)


@dataclass(frozen=True, slots=True)
class FrontierRun:
    """What :func:`memory_frontier` or :func:`job_frontier` leaves."""

    points: list[FrontierPoint]
    proven: bool
    """Whether every search run was proven."""
    searches: int
    stopped: str | None
    """:attr:`PerStageFrontier.stopped`."""
    cuts: tuple[str, ...] = ()
    """:attr:`PerStageFrontier.cuts`."""


def time_left(deadline: float | None) -> float | None:
    """Seconds to ``deadline`` (:func:`time.perf_counter`'s clock); None without one."""
    return None if deadline is None else deadline - time.perf_counter()


def memory_frontier(
    problem: Problem,
    top_shapes: int | None,
    time_limit_s: float | None,
    workers: int,
    max_points: int,
    progress: Callable[[int, int], None] | None,
    budget: Budget,
) -> FrontierRun:
    """The run of :func:`per_stage_frontier` against memory: the ε-constraint method, each
    per-stage search within ε bytes per GPU (one less than the last point's value) over the
    uniform tables prepared once, until nothing fits, ``max_points`` points or the ``budget``
    is spent.

    Raises
    ------
    InfeasibleError
        Nothing fits at all (the first search's).
    """
    points: list[FrontierPoint] = []
    prepared = prepare(problem, time_limit_s=tables_limit(time_limit_s))
    proven, searches = prepared[0].complete, 0  # tables cut short by a time limit prove nothing
    cut = prepared[0].cut()
    cuts = () if cut is None else (cut,)
    eps: int | None = None
    while len(non_dominated(points)) < max_points:
        stopped = budget.spent(searches)
        if stopped is not None:
            return FrontierRun(points, proven, searches, stopped, cuts)
        try:
            r = per_stage_search(
                problem, top_shapes, budget.time_limit(searches), workers,
                max_bytes=eps, without_uniform=True, prepared=prepared,
            )  # fmt: skip
        except InfeasibleError:
            if eps is None:
                raise
            break  # nothing needs at most ε bytes: the frontier ends
        searches += 1
        sure = r.status == "optimal"
        value = axis_value("memory", r)
        uniform = r.uniform
        if uniform is not None and uniform.peak_bytes > value:
            # the uniform frontier at this point's own value, not at ε
            try:
                at = uniform_within(problem, prepared, value, time_left(budget.deadline), workers)
                uniform, sure = at.best, sure and at.status == "optimal"
            except InfeasibleError:
                uniform = None
        proven &= sure
        points.append(_point(r, value, uniform, sure and prepared[0].complete))
        if progress is not None:
            progress(searches, len(non_dominated(points)))
        eps = value - 1
    return FrontierRun(points, proven, searches, None, cuts)


def job_frontier(
    problem: Problem,
    against: str,
    top_shapes: int | None,
    workers: int,
    max_points: int,
    progress: Callable[[int, int], None] | None,
    budget: Budget,
) -> FrontierRun:
    """The run of :func:`per_stage_frontier` against GPUs or price: the jobs by ascending value,
    each value's jobs searched by :func:`value_search` below the frontier's fastest point so
    far; a value whose best is faster adds a point.

    Raises
    ------
    InfeasibleError
        Every job was searched and none has a plan that fits (the last job's reason); a
        budget spent before the last job returns no point instead.
    """
    jobs = sorted(problem.jobs, key=lambda j: axis_value_of_job(against, j))
    points: list[FrontierPoint] = []
    proven, searches = True, 0
    best_ns: int | None = None  # the frontier so far: its fastest point
    best_uniform: tuple[int, Answer] | None = None  # the fastest uniform layout of the jobs so far
    nothing: InfeasibleError | None = None  # the last job's reason when none fits
    stopped: str | None = None
    cuts: list[str] = []
    for value, group in itertools.groupby(jobs, key=lambda j: axis_value_of_job(against, j)):
        if len(points) >= max_points:
            break
        g = value_search(
            problem, list(group), best_ns, best_uniform, top_shapes, workers, budget, searches
        )
        searches, proven = searches + g.searches, proven and g.proven
        cuts += g.cuts
        best_uniform, nothing = g.best_uniform, g.nothing or nothing
        if g.found is not None:
            uniform = None if best_uniform is None else best_uniform[1]
            points.append(_point(g.found, value, uniform, g.proven))
            best_ns = g.found.plan_ns
        if progress is not None:
            progress(searches, len(non_dominated(points)))
        if g.stopped is not None:
            stopped = g.stopped
            break
    if not points and nothing is not None and stopped is None:
        raise nothing  # every job searched, none fits (a spent budget left some unsearched)
    return FrontierRun(points, proven, searches, stopped, tuple(cuts))


@dataclass(frozen=True, slots=True)
class ValueSearch:
    """The per-stage searches of one axis value's jobs (:func:`value_search`)."""

    found: PerStageResult | None
    """The fastest plan below the cap, None when none is."""
    best_uniform: tuple[int, Answer] | None
    """(step ns, answer) of the fastest uniform layout of the jobs so far, these included."""
    searches: int
    proven: bool
    nothing: InfeasibleError | None
    """The last of these jobs' reason when none fits."""
    stopped: str | None
    """The budget spent before every job was searched (:meth:`Budget.spent`), else None."""
    cuts: tuple[str, ...] = ()
    """What a time limit left out of each searched job's uniform tables, headed by the job
    (:attr:`PerStageFrontier.cuts`)."""


def value_search(
    problem: Problem,
    jobs: list[Job],
    best_ns: int | None,
    best_uniform: tuple[int, Answer] | None,
    top_shapes: int | None,
    workers: int,
    budget: Budget,
    done: int = 0,
) -> ValueSearch:
    """One per-stage search per job of ``jobs`` (one axis value), each capped below the
    frontier's fastest point so far (``best_ns``) and the fastest plan of these jobs so far;
    ``best_uniform`` (the fastest uniform layout of the jobs before) updated with theirs.
    ``done``: the frontier's searches before these (``budget``'s ``max_searches`` counts
    them all)."""
    found: PerStageResult | None = None
    searches, proven, nothing = 0, True, None
    cuts: list[str] = []
    for job in jobs:
        stopped = budget.spent(done + searches)
        if stopped is not None:
            return ValueSearch(found, best_uniform, searches, False, nothing, stopped, tuple(cuts))
        caps = [best_ns] + ([] if found is None else [found.plan_ns])
        cap = min((c for c in caps if c is not None), default=None)
        searches += 1
        try:
            r = per_stage_search(
                replace(problem, jobs=(job,)), top_shapes, budget.time_limit(done + searches - 1),
                workers,
                cap_ns=cap, without_uniform=True,
            )  # fmt: skip
        except InfeasibleError as err:
            nothing = err
            proven = proven and budget.spent(done + searches) not in ("time", "interrupted")
            continue
        proven &= r.status == "optimal"
        cuts += [f"{job.label}: {r.cut}"] if r.cut else []
        if r.uniform_ns is not None and (best_uniform is None or r.uniform_ns < best_uniform[0]):
            assert r.uniform is not None
            best_uniform = (r.uniform_ns, r.uniform)
        if cap is None or r.plan_ns < cap:
            found = r
    return ValueSearch(found, best_uniform, searches, proven, nothing, None, tuple(cuts))


def axis_value_of_job(against: str, job: Job) -> int:
    """A job's GPUs (``gpus``) or whole cents per hour (``price``)."""
    return job.num_gpus if against == "gpus" else job.cents_per_hour


def _point(r: PerStageResult, value: int, uniform: Answer | None, proven: bool) -> FrontierPoint:
    uniform_ns = None if uniform is None else step_ns(uniform.estimate)
    kind = "per-stage" if r.per_stage else "uniform"
    return FrontierPoint(
        kind, r.job, r.plan, r.plan_ns, value, uniform, uniform_ns, proven, r.gap_ns
    )
