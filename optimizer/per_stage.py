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
from dataclasses import dataclass

from trainplan.model.errors import InfeasibleError, InputError, LayoutError
from trainplan.model.estimate import Estimate, objective_ns
from trainplan.model.layout import Layout, validate
from trainplan.optimizer.case import Case
from trainplan.optimizer.cpsat import LayoutModel
from trainplan.optimizer.problem import Job, Objective, Problem
from trainplan.optimizer.rules import allowed
from trainplan.optimizer.search import Answer, SearchResult, TermMismatch, prepare, search
from trainplan.optimizer.stage_bases import plan_layout, ranked_bases
from trainplan.optimizer.stage_cpsat import StageModel
from trainplan.optimizer.stage_tables import (
    NO_SPLIT,
    OutOfTime,
    StageTables,
    build_stage_tables,
    pipeline_lower_bound,
    stage_capacity,
)
from trainplan.optimizer.tables import CostTables

__all__ = [
    "ShapePlan",
    "PerStageResult",
    "solve_shape",
    "per_stage_search",
    "check_objective",
    "uniform_within",
    "peak_bytes",
    "step_ns",
]


@dataclass(frozen=True, slots=True)
class ShapePlan:
    """The per-stage optimum of one base layout (shape, ZeRO stage, base recompute mode)."""

    layout: Layout
    """The base layout (1F1B with v = 1 or interleaved with its v, recompute none or selective,
    the default split)."""
    status: str
    """``optimal`` (proven), ``feasible`` (time limit: the best found), ``infeasible`` (no split
    fits) or ``no-gain`` (proven: no split that fits is faster than the cap it was given, the
    best plan so far)."""
    estimate: Estimate | None
    """The chosen layout (``stage_layers``, ``recompute_layers``) re-evaluated exactly."""
    objective_ns: int | None
    """Its step time in whole ns (:func:`model.estimate.objective_ns`, summed)."""
    solves: int
    """CP-SAT solves (one more per (A, B, C) triple whose rest was added)."""
    tables_seconds: float
    solve_seconds: float
    rows: int
    """Table rows (stage options that fit) over all stages."""


@dataclass(frozen=True, slots=True)
class PerStageResult:
    """The per-stage plan beside the best uniform plan of the same problem."""

    status: str
    """``optimal`` when every shape's per-stage optimum was proven and the uniform search was;
    else ``feasible``."""
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
    solve_seconds: float

    @property
    def per_stage(self) -> bool:
        """Whether the plan is a per-stage one (strictly faster than the uniform layout, or the
        only plan that fits)."""
        return self.uniform_ns is None or self.plan_ns < self.uniform_ns

    @property
    def gain(self) -> float | None:
        """Uniform step time ÷ per-stage step time (≥ 1); None when no uniform layout fits."""
        return None if self.uniform_ns is None else self.uniform_ns / self.plan_ns


def step_ns(est: Estimate) -> int:
    """An evaluated layout's step time in whole ns, as the searches compare it: the sum of
    :func:`model.estimate.objective_ns`'s two terms."""
    assert est.time_terms is not None
    return sum(objective_ns(est.time_terms))


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
    workers: int = 2,
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


def _check(tables: StageTables, est: Estimate, paced_ns: int) -> None:
    """Every stage's tabulated peak and the pipeline term agree with ``evaluate()`` (bytes to a
    byte after rounding up, time to 2 ns); a difference raises :class:`TermMismatch`."""
    options = {
        (s, o.layers, o.recomputed): o for s, rows in enumerate(tables.options) for o in rows
    }
    lay = est.layout
    assert lay.stage_layers is not None and lay.recompute_layers is not None
    paced = []
    arch = est.model.arch
    mtp = arch.mtp_layers if arch is not None else 0
    for s, stage in enumerate(est.stages):
        layers = stage.num_layers - (mtp if s == lay.pp - 1 else 0)  # the MTP blocks ride along
        row = options.get((s, layers, lay.recompute_layers[s]))
        if row is None or abs(math.ceil(stage.total_bytes) - row.peak_bytes) > 1:
            raise TermMismatch(f"stage {s}: evaluate {stage.total_bytes} B != table {row}")
        if stage.total_bytes > tables.capacity:
            raise TermMismatch(f"stage {s}: tabulated as fitting, evaluates to a misfit")
        paced.append(row.paced_ns)
    if max(paced) != paced_ns:
        raise TermMismatch(f"pipeline term: table {max(paced)} != solver {paced_ns}")
    # the evaluator's own pipeline term: m·t_mb·(1 + bubble_ratio) = compute_and_pipeline − pp
    assert est.time_terms is not None
    pp_row = next(r for r in est.traffic if r.traffic.axis == "pp")
    evaluated = (est.time_terms.compute_and_pipeline_s - (pp_row.exposed_seconds or 0.0)) * 1e9
    if abs(evaluated - paced_ns) > 2:
        raise TermMismatch(f"pipeline term: evaluate {evaluated:.0f} ns != table {paced_ns} ns")


def solve_shape(
    case: Case,
    layout: Layout,
    headroom: float = 0.0,
    time_limit_s: float | None = None,
    workers: int = 2,
    cap_ns: int | None = None,
    max_bytes: int | None = None,
) -> ShapePlan:
    """The per-stage optimum of ``layout``'s shape on ``case``: the least step time over every
    stage's layer count and recomputed layers whose stages all fit.

    Loop: solve; if the rest of the step for the optimum's (A, B, C) triple is not yet known,
    evaluate the optimum's layout, add its rest (exact) and solve again; the first optimum whose
    triple is known is proven (every other triple's rest is at least the lower bound used).

    ``cap_ns``: only splits faster than this are sought (the best plan so far); none is
    ``no-gain``. ``max_bytes``: every stage's peak at most this many bytes per GPU besides the
    device's capacity (:func:`optimizer.stage_tables.build_stage_tables`).

    Raises
    ------
    InputError
        What the per-stage search does not model (:func:`optimizer.stage_rules.check_per_stage`).
    """
    t0 = time.perf_counter()
    deadline = None if time_limit_s is None else t0 + time_limit_s
    base = case.evaluate(layout)
    pp_row = next(r for r in base.traffic if r.traffic.axis == "pp")
    lower = math.floor((pp_row.exposed_seconds or 0.0) * 1e9) - 2
    capacity = stage_capacity(case, layout, headroom, max_bytes)
    bound = pipeline_lower_bound(case, layout, capacity)
    if bound >= NO_SPLIT:
        return ShapePlan(layout, "infeasible", None, None, 0, time.perf_counter() - t0, 0.0, 0)
    if cap_ns is not None and bound + lower >= cap_ns:
        return ShapePlan(layout, "no-gain", None, None, 0, time.perf_counter() - t0, 0.0, 0)
    try:
        tables = build_stage_tables(case, layout, headroom, cap_ns, lower, max_bytes, deadline)
    except OutOfTime:  # the time limit: this shape is not searched, nothing is proven
        return ShapePlan(layout, "feasible", None, None, 0, time.perf_counter() - t0, 0.0, 0)
    t_tables = time.perf_counter() - t0
    rows = sum(len(r) for r in tables.options)
    reach = sum(max((o.layers for o in r), default=-1) for r in tables.options)
    if any(not r for r in tables.options) or reach < tables.num_layers:
        # some stage has no option (or the options cannot hold L layers): nothing fits, or
        # nothing beats cap_ns
        none = "infeasible" if cap_ns is None else "no-gain"
        return ShapePlan(layout, none, None, None, 0, t_tables, 0.0, rows)
    model = StageModel(tables, lower)
    best: tuple[int, Estimate] | None = None
    hint = None
    status, solves, seconds = "feasible", 0, 0.0
    while True:
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            break
        sol = model.solve(left, workers, hint)
        solves += 1
        if sol is None:
            if best is None:
                out_of_time = deadline is not None and time.perf_counter() >= deadline
                status = "feasible" if out_of_time else "infeasible"
            break
        seconds += sol.seconds
        known = sol.key in model.known  # before this solve: then the optimum is proven
        lay = plan_layout(layout, sol.layers, sol.recomputed)
        est = case.evaluate(lay)
        _check(tables, est, sol.paced_ns)
        total = step_ns(est)
        model.add_rest(sol.key, total - sol.paced_ns)
        if best is None or total < best[0]:
            best = (total, est)
            hint = (sol.layers, sol.recomputed)
        if known:
            status = sol.status
            break
    if best is None:
        return ShapePlan(layout, status, None, None, solves, t_tables, seconds, rows)
    if cap_ns is not None and best[0] >= cap_ns and status == "optimal":
        # rows at or above the cap were left out, so this is no proof for the shape: it has
        # nothing faster than the cap (the plan found is not kept)
        return ShapePlan(layout, "no-gain", None, None, solves, t_tables, seconds, rows)
    return ShapePlan(layout, status, best[1], best[0], solves, t_tables, seconds, rows)


def per_stage_search(
    problem: Problem,
    top_shapes: int | None = None,
    time_limit_s: float | None = None,
    workers: int = 2,
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
    (:func:`optimizer.search.prepare`), tightened to ``max_bytes`` for good.

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
    prepared = prepared or prepare(problem, time_limit_s=time_limit_s)
    left = None if time_limit_s is None else time_limit_s - (time.perf_counter() - t0)
    uniform: Answer | None = None
    uniform_ns: int | None = None
    no_uniform: InfeasibleError | None = None
    try:
        found_uniform = uniform_within(problem, prepared, max_bytes, left, workers)
    except InfeasibleError as err:
        if not without_uniform:
            raise
        no_uniform, proven = err, True
    else:
        uniform = found_uniform.best
        uniform_ns = step_ns(uniform.estimate)
        proven = found_uniform.status == "optimal"
    t_uniform = time.perf_counter() - t0
    plans: list[tuple[Job, ShapePlan]] = []
    bases: list[tuple[int, int, Job, Layout]] = []
    refusal: InputError | None = None
    headroom = problem.constraints.headroom
    for job, base in ranked_bases(problem, prepared, top_shapes, max_bytes):
        case = job.case
        try:
            validate(base, case.model, case.training)
            bound = pipeline_lower_bound(case, base)  # time alone: memory's bound when solved
        except LayoutError:
            continue
        except InputError as err:  # a rule of check_per_stage: said if no base is left
            refusal = refusal or err
            continue
        bases.append((bound, len(bases), job, base))
    if not bases and refusal is not None:
        raise refusal
    min_mfu = problem.constraints.min_mfu
    for bound, _, job, base in sorted(bases, key=lambda b: b[:2]):  # the most promising first
        case = job.case
        left = None
        if time_limit_s is not None:
            left = time_limit_s - (time.perf_counter() - t0)
            if left <= 0:
                proven = False
                break
        caps = [c for c in (uniform_ns, cap_ns) if c is not None]
        caps += [p.objective_ns for _, p in plans if p.objective_ns is not None]
        cap = min(caps, default=None)
        if cap is not None and bound >= cap:
            # the pipeline alone cannot beat the best so far (nor, sorted, any base after it)
            plans.append((job, ShapePlan(base, "no-gain", None, None, 0, 0.0, 0.0, 0)))
            continue
        plan = solve_shape(case, base, headroom, left, workers, cap, max_bytes)
        proven &= plan.status in ("optimal", "infeasible", "no-gain")
        if plan.estimate is not None and min_mfu is not None:
            # the shape's fastest plan: when it misses min_mfu, every plan of it does
            if (plan.estimate.mfu or 0.0) < min_mfu:
                plan = ShapePlan(
                    plan.layout, "infeasible", None, None, plan.solves,
                    plan.tables_seconds, plan.solve_seconds, plan.rows,
                )  # fmt: skip
        plans.append((job, plan))
    found = [(p.objective_ns, i) for i, (_, p) in enumerate(plans) if p.objective_ns is not None]
    best = min(found, default=None)
    if uniform is not None and uniform_ns is not None:
        plan_est, plan_ns, job = uniform.estimate, uniform_ns, uniform.job
        if best is not None and best[0] < uniform_ns:
            job, shape = plans[best[1]]
            assert shape.estimate is not None
            plan_est, plan_ns = shape.estimate, best[0]
    elif best is not None:
        job, shape = plans[best[1]]
        assert shape.estimate is not None
        plan_est, plan_ns = shape.estimate, best[0]
    else:
        assert no_uniform is not None
        line = f"per_stage: no split of the {len(bases)} base layout(s) searched fits either"
        raise InfeasibleError(str(no_uniform), [*no_uniform.explanation, line])
    return PerStageResult(
        "optimal" if proven else "feasible",
        uniform,
        uniform_ns,
        plan_est,
        plan_ns,
        job,
        tuple(p for _, p in plans),
        t_uniform,
        sum(p.tables_seconds for _, p in plans),
        sum(p.solve_seconds for _, p in plans),
    )
