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
    peak_bytes,
    per_stage_search,
    step_ns,
    uniform_within,
)
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import Answer, prepare

__all__ = ["FrontierPoint", "PerStageFrontier", "per_stage_frontier", "axis_value"]


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
    (per-stage: over the base layouts each searched); ``feasible`` (time limit: the best so
    far)."""
    searches: int
    """Per-stage searches run (one per job, or one per ε)."""
    seconds: float
    """Wall time, tables included."""


def axis_value(against: str, result: PerStageResult) -> int:
    """A per-stage search's plan on the frontier's second axis (:attr:`FrontierPoint.value`)."""
    if against == "gpus":
        return result.job.num_gpus
    if against == "price":
        return result.job.cents_per_hour
    if result.per_stage or result.uniform is None:
        return peak_bytes(result.plan)
    return result.uniform.peak_bytes


def _frontier(
    against: str, points: list[FrontierPoint], proven: bool, searches: int, t0: float
) -> PerStageFrontier:
    """The result: the non-dominated ``points``, proven or not, with the searches run and the
    seconds since ``t0`` (:func:`time.perf_counter`)."""
    return PerStageFrontier(
        against,
        _non_dominated(points),
        "optimal" if proven else "feasible",
        searches,
        time.perf_counter() - t0,
    )


def _non_dominated(points: list[FrontierPoint]) -> tuple[FrontierPoint, ...]:
    """Each point strictly faster than every point of lesser or equal value; step time
    ascending."""
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
    workers: int = 2,
    max_points: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> PerStageFrontier:
    """The Pareto frontier of step time against ``against`` where every point is the better of
    the best uniform layout and the best per-stage plan meeting that value (module docstring).
    ``top_shapes``: per search, the shapes searched per stage
    (:func:`optimizer.stage_bases.ranked_bases`). ``time_limit_s`` bounds the whole frontier
    (then status ``feasible``, the points found so far). ``progress(searches, points)`` is
    called after each point's searches (each ε of the memory axis, each value of the GPU or
    price axis) with the searches run and the frontier's points so far.

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
    deadline = None if time_limit_s is None else t0 + time_limit_s

    def left() -> float | None:
        return None if deadline is None else deadline - time.perf_counter()

    points: list[FrontierPoint] = []
    proven, searches = True, 0
    if against == "memory":
        prepared = prepare(problem, time_limit_s=time_limit_s)
        proven = prepared[0].complete  # a time limit that cut the tables short proves nothing
        eps: int | None = None
        while len(_non_dominated(points)) < max_points:
            rest = left()
            if rest is not None and rest <= 0:
                proven = False
                break
            try:
                r = per_stage_search(
                    problem, top_shapes, rest, workers,
                    max_bytes=eps, without_uniform=True, prepared=prepared,
                )  # fmt: skip
            except InfeasibleError:
                if eps is None:
                    raise
                break  # nothing needs at most ε bytes: the frontier ends
            searches += 1
            proven &= r.status == "optimal"
            value = axis_value(against, r)
            uniform = r.uniform
            if uniform is not None and uniform.peak_bytes > value:
                # the uniform frontier at this point's own value, not at ε
                try:
                    at = uniform_within(problem, prepared, value, left(), workers)
                    uniform, proven = at.best, proven and at.status == "optimal"
                except InfeasibleError:
                    uniform = None
            points.append(_point(r, value, uniform))
            if progress is not None:
                progress(searches, len(_non_dominated(points)))
            eps = value - 1
        return _frontier(against, points, proven, searches, t0)
    jobs = sorted(problem.jobs, key=lambda j: axis_value_of_job(against, j))
    best_ns: int | None = None  # the frontier so far: its fastest point
    best_uniform: tuple[int, Answer] | None = None  # the fastest uniform layout of the jobs so far
    stopped = False
    nothing: InfeasibleError | None = None  # the last job's reason when none fits
    for value, group in itertools.groupby(jobs, key=lambda j: axis_value_of_job(against, j)):
        if len(points) >= max_points:
            break
        found: PerStageResult | None = None
        for job in group:
            rest = left()
            if rest is not None and rest <= 0:
                stopped = True
                break
            caps = [best_ns] + ([] if found is None else [found.plan_ns])
            cap = min((c for c in caps if c is not None), default=None)
            try:
                r = per_stage_search(
                    replace(problem, jobs=(job,)), top_shapes, rest, workers,
                    cap_ns=cap, without_uniform=True,
                )  # fmt: skip
            except InfeasibleError as err:
                searches += 1
                nothing = err
                if deadline is not None and time.perf_counter() >= deadline:
                    proven = False
                continue
            searches += 1
            proven &= r.status == "optimal"
            if r.uniform_ns is not None and (
                best_uniform is None or r.uniform_ns < best_uniform[0]
            ):
                assert r.uniform is not None
                best_uniform = (r.uniform_ns, r.uniform)
            if cap is None or r.plan_ns < cap:
                found = r
        if found is not None:
            points.append(_point(found, value, None if best_uniform is None else best_uniform[1]))
            best_ns = found.plan_ns
        if progress is not None:
            progress(searches, len(_non_dominated(points)))
        if stopped:
            proven = False
            break
    if not points and nothing is not None and not stopped:
        raise nothing
    return _frontier(against, points, proven, searches, t0)


def axis_value_of_job(against: str, job: Job) -> int:
    """A job's GPUs (``gpus``) or whole cents per hour (``price``)."""
    return job.num_gpus if against == "gpus" else job.cents_per_hour


def _point(r: PerStageResult, value: int, uniform: Answer | None) -> FrontierPoint:
    uniform_ns = None if uniform is None else step_ns(uniform.estimate)
    kind = "per-stage" if r.per_stage else "uniform"
    return FrontierPoint(kind, r.job, r.plan, r.plan_ns, value, uniform, uniform_ns)
