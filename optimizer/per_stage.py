"""Per-stage layers and recomputation, proven optimal (issue 13): the outer choice of dp, tp,
pp, cp, ZeRO stage, framework and micro-batch is the uniform search's (its top shapes); for
each, CP-SAT chooses every stage's layer count and how many of its layers are fully recomputed
(:mod:`optimizer.stage_cpsat` over :mod:`optimizer.stage_tables`), and every answer is
re-evaluated with ``evaluate()`` (a tabulated figure that differs raises
:class:`optimizer.search.TermMismatch`).

Mist (Zhu et al., EuroSys 2025) and AdaPipe (Sun et al., ASPLOS 2024) co-optimise the same per
stage; Llama 3 (Dubey et al. 2024 §3.3.2) takes a layer off its first and last stages;
Megatron-LM's ``--recompute-num-layers`` recomputes only some layers of a stage.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from trainplan.model.errors import InfeasibleError, InputError, LayoutError
from trainplan.model.estimate import Estimate
from trainplan.model.layout import Layout, validate
from trainplan.model.pipeline import Schedule
from trainplan.optimizer.cpsat import LayoutModel
from trainplan.optimizer.problem import Job, Objective, Problem
from trainplan.optimizer.rules import allowed
from trainplan.optimizer.search import SOLVE_FLOOR_S, Answer, SearchResult, prepare, search
from trainplan.optimizer.solver import LAYOUT_WORKERS, STAGE_WORKERS, interrupted
from trainplan.optimizer.stage_bases import ranked_bases
from trainplan.optimizer.stage_bounds import pipeline_lower_bound
from trainplan.optimizer.stage_rules import equal_chunks_note
from trainplan.optimizer.stage_solve import ShapePlan, solve_shape, step_ns
from trainplan.optimizer.tables import CostTables

__all__ = [
    "PerStageResult",
    "UniformBest",
    "per_stage_search",
    "best_uniform",
    "ordered_bases",
    "solve_bases",
    "per_stage_result",
    "check_objective",
    "uniform_within",
    "peak_bytes",
    "interleaved_space",
    "proof_scope",
    "tables_limit",
    "EQUAL_CHUNKS_SCOPE",
    "ALL_SPLITS_SCOPE",
]

ALL_SPLITS_SCOPE = "the shapes searched"
"""What ``optimal`` covers where the space holds no interleaved shape: every split of them."""
EQUAL_CHUNKS_SCOPE = (
    "the shapes searched, interleaved ones (v > 1) only over splits whose chunks on a stage are "
    "equal, not the unequal chunks of --pipeline-model-parallel-layout"
)
"""What ``optimal`` covers where the space holds interleaved shapes (pp > 1, v > 1): the stage
tables give an interleaved stage only multiples of v layers, its chunks equal
(:func:`optimizer.stage_rules.layer_counts`), while Megatron-Core also builds unequal chunks
(megatron/core/transformer/pipeline_parallel_layer_layout.py ``PipelineParallelLayerLayout``)
and ``evaluate`` prices them."""


def interleaved_space(problem: Problem) -> bool:
    """Whether ``problem``'s space holds interleaved shapes: the interleaved schedule, a pp
    above 1 and a v above 1 allowed (None: the defaults, which hold both). A space that does
    has its per-stage proof scoped to equal chunks (:data:`EQUAL_CHUNKS_SCOPE`)."""
    sp = problem.space
    return (
        Schedule.INTERLEAVED in sp.schedules
        and (sp.pp is None or any(p > 1 for p in sp.pp))
        and (sp.virtual_stages is None or any(v > 1 for v in sp.virtual_stages))
    )


def proof_scope(equal_chunks: bool) -> str:
    """What a per-stage ``optimal`` is proven over, in words (the CLI's headline, ``--json``'s
    ``proof_scope``, the page): :data:`EQUAL_CHUNKS_SCOPE` or :data:`ALL_SPLITS_SCOPE`."""
    return EQUAL_CHUNKS_SCOPE if equal_chunks else ALL_SPLITS_SCOPE


@dataclass(frozen=True, slots=True)
class PerStageResult:
    """The per-stage plan beside the best uniform plan of the same problem."""

    status: str
    """``optimal`` when every shape's per-stage optimum was proven and the uniform search was;
    else ``feasible``. ``optimal`` is a proof over a stated space, :attr:`proof_scope`: where
    the space holds interleaved shapes, over their splits whose chunks on a stage are equal
    only. It stays ``optimal`` there rather than ``feasible`` because the proof over that space
    is complete and ``feasible`` says a time limit or gap stopped it (more time would change
    nothing); every place that shows the status shows the scope beside it."""
    uniform: Answer | None
    """The best uniform layout (:func:`optimizer.search.search`); None only when
    ``without_uniform`` was asked and no uniform layout fits."""
    uniform_ns: int | None
    """Its step time, whole ns (None with ``uniform``)."""
    plan: Estimate
    """The answer: the best per-stage plan, or the uniform one where no per-stage plan is
    faster (never slower than ``uniform``). With ``cap_ns``, per-stage plans are sought only
    below the cap: the plan is the per-stage optimum when that is below both the cap and the
    uniform step time, else the uniform layout."""
    plan_ns: int
    """Its step time, whole ns (:func:`model.estimate.objective_ns`, summed)."""
    job: Job
    shapes: tuple[ShapePlan, ...]
    uniform_seconds: float
    """The uniform search (its tables and CP-SAT)."""
    tables_seconds: float
    """The shapes' stage tables, :attr:`optimizer.stage_solve.ShapePlan.tables_seconds` summed
    (their base layouts' own evaluations not counted)."""
    solve_seconds: float
    """The shapes' CP-SAT seconds, :attr:`optimizer.stage_solve.ShapePlan.solve_seconds` summed."""
    equal_chunks: bool = False
    """Whether the space held interleaved shapes (:func:`interleaved_space`), so the proof covers
    only their splits whose chunks on a stage are equal (:attr:`proof_scope`)."""
    cut: str | None = None
    """What the time limit left out of the uniform search's cost tables, in words
    (:meth:`optimizer.tables.CostTables.cut`; the bases come from those rows); None: nothing."""

    @property
    def proof_scope(self) -> str:
        """What :attr:`status` is proven over, in words (:func:`proof_scope`)."""
        return proof_scope(self.equal_chunks)

    @property
    def per_stage(self) -> bool:
        """Whether the plan is a per-stage one (strictly faster than the uniform layout, or the
        only plan that fits)."""
        return self.uniform_ns is None or self.plan_ns < self.uniform_ns

    @property
    def gap_ns(self) -> int | None:
        """The plan's step less a proven lower bound on every split of the shapes searched, whole
        ns: each shape's by the order's own step, 1F1B or interleaved
        (:attr:`optimizer.stage_solve.ShapePlan.gap_ns`: 0, or a ns or a few, when proven), a
        shape left ``no-gain``, ``infeasible`` or ``not-searched`` none below the plan; None where a shape's
        search stopped before any bound (the time limit), or where no base layout was searched
        and nothing proves the plan (a time limit or Ctrl-C before the first: nothing bounds a
        split, so a gap of 0 would claim a proof that was not made)."""
        if not self.shapes and self.status != "optimal":
            return None
        least = self.plan_ns
        for shape in self.shapes:
            if shape.status in ("no-gain", "infeasible", "not-searched"):
                continue
            if shape.objective_ns is None:
                return None
            if shape.gap_ns is None:
                if shape.status != "optimal":
                    return None
                least = min(least, shape.objective_ns)
            else:
                least = min(least, shape.objective_ns - shape.gap_ns)
        return max(0, self.plan_ns - least)

    @property
    def gain(self) -> float | None:
        """Uniform step time ÷ per-stage step time (≥ 1); None when no uniform layout fits."""
        return None if self.uniform_ns is None else self.uniform_ns / self.plan_ns


def peak_bytes(est: Estimate) -> int:
    """The busiest stage's peak bytes per GPU, rounded up once (``ceil(total_bytes)`` of
    :func:`model.estimate.stage_memory_at`): the per-stage tables' measure
    (:attr:`optimizer.stage_tables.StageOption.peak_bytes`). The uniform tables round each term
    up (:attr:`optimizer.search.Answer.peak_bytes`), at most a few bytes more."""
    return max(math.ceil(stage.total_bytes) for stage in est.stages)


def check_objective(problem: Problem) -> None:
    """The per-stage search minimises step time.

    Raises
    ------
    InputError
        Another objective (one line).
    """
    if problem.objective is not Objective.STEP_TIME:
        raise InputError(
            f"per_stage: objective {problem.objective} — the per-stage search minimises step-time"
        )


def uniform_within(
    problem: Problem,
    prepared: tuple[CostTables, LayoutModel, float],
    max_bytes: int | None = None,
    time_limit_s: float | None = None,
    workers: int = LAYOUT_WORKERS,
) -> SearchResult:
    """The best uniform layout (:func:`optimizer.search.search`) whose busiest stage needs at
    most ``max_bytes`` bytes per GPU (each term rounded up: the uniform frontier's memory axis,
    :attr:`optimizer.search.Answer.peak_bytes`). ``prepared``'s model is tightened for good
    (:meth:`optimizer.cpsat.LayoutModel.forbid_above`): for a sweep whose bound only decreases.

    Raises
    ------
    InfeasibleError
        No uniform layout fits and meets the constraints (the search's explanation), or none
        within ``max_bytes``.
    """
    tables, lm, _ = prepared
    if max_bytes is not None:
        ok = allowed(problem, tables)
        if ok.any():
            if not (ok & (tables.peak_ceil <= max_bytes)).any():
                line = f"memory: no uniform layout within {max_bytes:,} B per GPU"
                raise InfeasibleError(f"search: {line}", [line])
            lm.forbid_above(lm.per_candidate(tables.peak_ceil), max_bytes)
    return search(problem, time_limit_s=time_limit_s, workers=workers, prepared=prepared)


def per_stage_search(
    problem: Problem,
    top_shapes: int | None = None,
    time_limit_s: float | None = None,
    workers: int = STAGE_WORKERS,
    *,
    cap_ns: int | None = None,
    max_bytes: int | None = None,
    without_uniform: bool = False,
    prepared: tuple[CostTables, LayoutModel, float] | None = None,
) -> PerStageResult:
    """The fastest layout with per-stage layers and recomputation among the base layouts of the
    ``top_shapes`` shapes whose uniform layouts are fastest (:func:`optimizer.stage_bases.ranked_bases`), beside the
    best uniform layout (:func:`optimizer.search.search`, proven); never slower than it (when no
    per-stage plan is faster the uniform one is the plan). ``optimal`` means proven over those
    shapes' per-stage spaces; GPipe shapes are taken as 1F1B, interleaved ones both as
    interleaved (per-chunk counts) and as 1F1B (:func:`optimizer.stage_bases.base_layouts`). A per-stage plan
    below ``min_mfu`` is not taken.

    ``cap_ns``: per-stage plans are sought only below this step time, whole ns (a frontier's
    best cheaper point; see :attr:`PerStageResult.plan`). ``max_bytes``: every stage of the
    uniform and the per-stage plans at most this many bytes per GPU (:func:`uniform_within`,
    :func:`optimizer.stage_tables.build_stage_tables`). ``without_uniform``: when no uniform
    layout fits (or none within ``max_bytes``) the per-stage search still runs, over the shapes
    where none fits; ``uniform`` is then None. ``prepared``: the uniform tables and model
    (:func:`optimizer.search.prepare`), tightened to ``max_bytes`` for good. ``workers``: CP-SAT
    threads of every solve, one by default (:data:`optimizer.solver.STAGE_WORKERS`: two splits
    that tie to the ns come out the same on every run).

    Raises
    ------
    InputError
        An objective other than step time (:func:`check_objective`); a rule of
        :func:`optimizer.stage_rules.check_per_stage` that leaves no base layout.
    InfeasibleError
        No uniform layout fits (the uniform search's explanation); with ``without_uniform``,
        only when no per-stage plan fits either.
    """
    check_objective(problem)
    t0 = time.perf_counter()
    prepared = prepared or prepare(problem, time_limit_s=tables_limit(time_limit_s))
    left = None if time_limit_s is None else time_limit_s - (time.perf_counter() - t0)
    uniform = best_uniform(problem, prepared, max_bytes, left, workers, without_uniform)
    t_uniform = time.perf_counter() - t0
    deadline = None if time_limit_s is None else t0 + time_limit_s
    bases = ordered_bases(problem, prepared, top_shapes, max_bytes, deadline)
    caps = [c for c in (uniform.ns, cap_ns) if c is not None]
    plans, proven = solve_bases(problem, bases, caps, max_bytes, deadline, workers)
    proven &= deadline is None or time.perf_counter() < deadline or bool(plans)
    result = per_stage_result(uniform, plans, proven and uniform.proven, len(bases), t_uniform)
    return replace(result, equal_chunks=interleaved_space(problem), cut=prepared[0].cut())


def tables_limit(time_limit_s: float | None) -> float | None:
    """The seconds of a per-stage search's limit (or a frontier's, whose first point is one)
    its uniform cost tables may take: the limit less what the per-stage solves after them are
    given at least (:data:`optimizer.search.SOLVE_FLOOR_S`, or half the limit when that is
    less), so that the answer is read within the limit rather than after it: ``frontier
    --per-stage`` on Llama 3 70B and 256 H100s, ``--time-limit 5``, took 5.96 s when the tables
    had the whole limit (4.93 s of them, then the first search's 1 s). None without a limit.

    >>> tables_limit(5.0), tables_limit(1.0), tables_limit(None)
    (4.0, 0.5, None)
    """
    return None if time_limit_s is None else time_limit_s - min(SOLVE_FLOOR_S, time_limit_s / 2)


@dataclass(frozen=True, slots=True)
class UniformBest:
    """The best uniform layout :func:`per_stage_search` compares its plans with."""

    answer: Answer | None
    """The uniform search's best (None when none fits and the search runs without it)."""
    ns: int | None
    """Its step time, whole ns (:func:`optimizer.stage_solve.step_ns`)."""
    proven: bool
    """Whether the uniform search proved it optimal (True when none fits)."""
    refusal: InfeasibleError | None
    """Why no uniform layout fits, when none does."""


def best_uniform(
    problem: Problem,
    prepared: tuple[CostTables, LayoutModel, float],
    max_bytes: int | None,
    time_limit_s: float | None,
    workers: int,
    without_uniform: bool,
) -> UniformBest:
    """:func:`uniform_within`'s best as a :class:`UniformBest`.

    Raises
    ------
    InfeasibleError
        No uniform layout fits, unless ``without_uniform``.
    """
    try:
        found = uniform_within(problem, prepared, max_bytes, time_limit_s, workers)
    except InfeasibleError as err:
        if not without_uniform:
            raise
        return UniformBest(None, None, True, err)
    return UniformBest(found.best, step_ns(found.best.estimate), found.status == "optimal", None)


def ordered_bases(
    problem: Problem,
    prepared: tuple[CostTables, LayoutModel, float],
    top_shapes: int | None,
    max_bytes: int | None,
    deadline: float | None = None,
) -> list[tuple[int, Job, Layout]]:
    """(pipeline lower bound ns, job, base layout) of :func:`optimizer.stage_bases.ranked_bases`
    that are legal layouts the per-stage search takes, the most promising (lowest bound) first,
    ties in ranked order. The bound is of time alone
    (:func:`optimizer.stage_bounds.pipeline_lower_bound`; memory's bound comes when solved).
    At ``deadline`` (:func:`time.perf_counter` seconds; None: none) it stops with the bases
    bounded so far: each bound takes 15 to 30 ms (Llama 3 70B on 256 H100s: 149 bases, 2 to 4 s
    on a 2-core machine), which overran a short ``--time-limit`` by as much, and
    :func:`solve_bases` solves none once the deadline has passed.

    Raises
    ------
    InputError
        A rule of :func:`optimizer.stage_rules.check_per_stage` that leaves no base layout.
    """
    bases: list[tuple[int, int, Job, Layout]] = []
    refusal: InputError | None = None
    for job, base in ranked_bases(problem, prepared, top_shapes, max_bytes):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        try:
            case = job.case
            validate(base, case.model, case.training, nvlink_domain=case.device.placement_domain)
            bound = pipeline_lower_bound(job.case, base)
        except LayoutError:
            continue
        except InputError as err:  # a rule of check_per_stage: said if no base is left
            refusal = refusal or err
            continue
        bases.append((bound, len(bases), job, base))
    if not bases and refusal is not None:
        raise refusal
    return [(bound, job, base) for bound, _, job, base in sorted(bases, key=lambda b: b[:2])]


def solve_bases(
    problem: Problem,
    bases: list[tuple[int, Job, Layout]],
    caps: list[int],
    max_bytes: int | None,
    deadline: float | None,
    workers: int,
) -> tuple[list[tuple[Job, ShapePlan]], bool]:
    """(each base's plan, whether the answer is proven over them: each plan proven, or a feasible
    one's floor, step − gap, at or above the best found) of :func:`ordered_bases`' ``bases``, in
    order, each sought below the best so far (``caps``, whole ns, and the plans found): a base
    whose pipeline alone cannot beat it is ``no-gain`` unsolved; a shape whose fastest plan
    misses ``min_mfu`` is ``infeasible`` (every plan of it does); an interleaved one whose L
    layers have no split into equal chunks is ``not-searched``
    (:func:`optimizer.stage_rules.equal_chunks_note`), counted as proven over the equal-chunk
    splits the tables hold (:data:`EQUAL_CHUNKS_SCOPE`). Stops, unproven, at ``deadline``
    (:func:`time.perf_counter` seconds; None: none) or when interrupted (Ctrl-C:
    :func:`optimizer.solver.interrupt`)."""
    plans: list[tuple[Job, ShapePlan]] = []
    proven = True
    min_mfu = problem.constraints.min_mfu
    for bound, job, base in bases:
        left = None if deadline is None else deadline - time.perf_counter()
        if (left is not None and left <= 0) or interrupted():  # a time limit or Ctrl-C
            return plans, False
        cap = min(
            caps + [p.objective_ns for _, p in plans if p.objective_ns is not None], default=None
        )
        if (skip := _not_searched(job, base)) is not None:
            plans.append((job, skip))
            continue
        if cap is not None and bound >= cap:
            # the pipeline alone cannot beat the best so far (nor, sorted, any base after it)
            plans.append((job, ShapePlan(base, "no-gain", None, None, 0, 0.0, 0.0, 0)))
            continue
        plan = solve_shape(
            job.case, base, problem.constraints.headroom, left, workers, cap, max_bytes,
            problem.constraints.allocator_retries_ok,
        )  # fmt: skip
        proven &= plan.status in ("optimal", "infeasible", "no-gain")
        if plan.estimate is not None and min_mfu is not None:
            # the shape's fastest plan: when it misses min_mfu, every plan of it does
            if (plan.estimate.mfu or 0.0) < min_mfu:
                plan = ShapePlan(
                    plan.layout, "infeasible", None, None, plan.solves,
                    plan.tables_seconds, plan.solve_seconds, plan.rows,
                )  # fmt: skip
        plans.append((job, plan))
    # a feasible shape (stopped with a gap) whose floor, step − gap, is at or above the best
    # found cannot beat it: the proof over the shapes stands
    best = min(caps + [p.objective_ns for _, p in plans if p.objective_ns is not None], default=0)
    open_ = [p for _, p in plans if p.status == "feasible"]
    sure = all(
        p.gap_ns is not None and p.objective_ns is not None and p.objective_ns - p.gap_ns >= best
        for p in open_
    )
    return plans, proven or sure


def _not_searched(job: Job, base: Layout) -> ShapePlan | None:
    """The ``not-searched`` plan of an interleaved ``base`` whose layers have no split into
    equal chunks (:func:`optimizer.stage_rules.equal_chunks_note`); None when it has one."""
    arch = job.case.model.arch
    note = (
        None if arch is None else equal_chunks_note(arch.num_layers, base.pp, base.virtual_stages)
    )
    if note is None:
        return None
    return ShapePlan(base, "not-searched", None, None, 0, 0.0, 0.0, 0, note=note)


def per_stage_result(
    uniform: UniformBest,
    plans: list[tuple[Job, ShapePlan]],
    proven: bool,
    searched: int,
    uniform_seconds: float,
) -> PerStageResult:
    """The :class:`PerStageResult` of the best of ``plans`` (the least step time, then the least
    peak memory) against ``uniform``: the uniform layout unless a per-stage plan is strictly
    faster (plans are sought below the uniform's time, so an equal-time plan is never found).

    Raises
    ------
    InfeasibleError
        No uniform layout and no plan of the ``searched`` base layouts fits.
    """
    found = [
        (p.objective_ns, p.estimate.total_bytes, i)
        for i, (_, p) in enumerate(plans)
        if p.objective_ns is not None and p.estimate is not None
    ]  # equal step times: the plan with the least peak memory, then the first searched
    best = min(found, default=None)
    if uniform.answer is not None and uniform.ns is not None:
        plan_est, plan_ns, job = uniform.answer.estimate, uniform.ns, uniform.answer.job
        if best is not None and best[0] < uniform.ns:
            job, shape = plans[best[2]]
            assert shape.estimate is not None
            plan_est, plan_ns = shape.estimate, best[0]
    elif best is not None:
        job, shape = plans[best[2]]
        assert shape.estimate is not None
        plan_est, plan_ns = shape.estimate, best[0]
    else:
        assert uniform.refusal is not None
        line = f"per_stage: no split of the {searched} base layout(s) searched fits either"
        raise InfeasibleError(str(uniform.refusal), [*uniform.refusal.explanation, line])
    return PerStageResult(
        "optimal" if proven else "feasible",
        uniform.answer,
        uniform.ns,
        plan_est,
        plan_ns,
        job,
        tuple(p for _, p in plans),
        uniform_seconds,
        sum(p.tables_seconds for _, p in plans),
        sum(p.solve_seconds for _, p in plans),
    )
