"""Layout search over the cost model's tables with CP-SAT: the best layout (or the top k), the
Pareto frontier and the largest model that fits (why nothing fits: :mod:`optimizer.no_answer`).

Every answer is re-evaluated with ``evaluate()`` and every tabulated term is compared with it
(docs/concepts/search.md "One cost model, two uses"): a difference raises :class:`TermMismatch`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainplan.model.errors import InfeasibleError, InputError
from trainplan.model.estimate import Estimate, objective_ns
from trainplan.model.terms.peak import reserved_over_capacity
from trainplan.optimizer.axis_rules import axis_refusal, recipe_refusal
from trainplan.optimizer.cpsat import Candidate, LayoutModel, interrupted
from trainplan.optimizer.launch_tables import objective_grid
from trainplan.optimizer.no_answer import no_answer, nothing_legal
from trainplan.optimizer.problem import Job, Objective, Problem
from trainplan.optimizer.rules import allowed, mfu_table, tie_ranks, tp_cp_in_nvlink
from trainplan.optimizer.tables import CostTables, TableProgress, build_tables, illegal_reason

__all__ = [
    "Answer",
    "SearchResult",
    "search",
    "frontier",
    "prepare",
    "layout_model",
    "TermMismatch",
    "tie_ranks",
    "mfu_table",
]

Progress = Callable[[int, float], None]


class TermMismatch(AssertionError):
    """The solver's table and ``evaluate()`` disagree: a bug, never a user error."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One layout the search returns, with its job and its evaluation."""

    job: Job
    estimate: Estimate
    objective: int
    """The solver's objective value (ns of step time for the default objective)."""
    peak_bytes: int
    """Busiest stage's bytes, each term rounded up (the frontier's memory axis)."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    status: str
    """``optimal`` (proven), ``feasible`` (time limit; best found, not proven) or ``infeasible``."""
    answers: tuple[Answer, ...]
    solve_seconds: float
    tables_seconds: float
    num_shapes: int
    num_candidates: int
    explanation: list[str] = field(default_factory=list)
    params_unproven: int | None = None
    """``params`` objective stopped by the time limit: the parameter count of the largest family
    member not yet checked (the answer's own count ≤ the true largest ≤ this); None when proven
    or another objective (:func:`optimizer.params_search.params_search`)."""
    cut: str | None = None
    """What the time limit left out of the cost tables, in words (:meth:`CostTables.cut`); None
    when every shape was tabulated."""

    @property
    def best(self) -> Answer:
        return self.answers[0]


def _families(problem: Problem, tables: CostTables) -> dict[str, np.ndarray]:
    """Each constraint family's [S, Z, R] mask of the legal candidates it forbids."""
    legal = tables.legal
    out = {"memory": legal & ~tables.fits}
    if problem.constraints.min_mfu is not None:
        out["min_mfu"] = legal & (mfu_table(tables) < problem.constraints.min_mfu)
    if problem.constraints.tp_in_nvlink:
        far = np.array([not tp_cp_in_nvlink(tables, s) for s in range(len(tables.shapes))])
        out["nvlink"] = legal & far[:, None, None]
    return out


def prepare(
    problem: Problem,
    progress: TableProgress | None = None,
    time_limit_s: float | None = None,
) -> tuple[CostTables, LayoutModel, float]:
    """Tables, the CP-SAT model with every constraint family, and the seconds it took.
    ``time_limit_s`` bounds table building too: the blocks of shapes not started within it are
    left out (:func:`optimizer.tables.build_tables`)."""
    t0 = time.perf_counter()
    deadline = None if time_limit_s is None else t0 + time_limit_s
    # cut by the deadline only once the solver has an answer among the rows (its own mask)
    tables = build_tables(
        problem, progress, deadline, enough=lambda held: bool(allowed(problem, held).any())
    )
    illegal = illegal_reason(tables)
    if illegal:  # every shape breaks a rule of the recipe at every ZeRO stage: that rule, exit 2
        raise InputError(illegal)
    if not tables.shapes:
        for job in problem.jobs:  # a recipe no framework runs: its rule, exit 2
            refusal = recipe_refusal(problem.space, job.case.training, job.case.model)
            if refusal:
                raise InputError(refusal)
        space = problem.space
        for job in problem.jobs:  # every given value of an axis breaks a rule of its own: exit 2
            refusal = axis_refusal(space, job.case.training, job.case.model)
            if refusal:
                raise InputError(refusal)
        gpus = sorted({job.num_gpus for job in problem.jobs})
        batches = sorted({job.case.training.global_batch_size for job in problem.jobs})
        counts = ", ".join(f"{g:,}" for g in gpus[:4]) + (", …" if len(gpus) > 4 else "")
        why = [
            "divisibility: no legal combination of degrees, batch and micro-batch: no "
            f"dp·tp·pp·cp of the allowed degrees equals {counts} GPUs with the global batch "
            f"({', '.join(f'{b:,}' for b in batches[:4])} sequences) divisible by micro-batch × "
            "dp (--global-batch, or a GPU count whose dp divides it)"
        ]
        for axis in ("tp", "pp", "cp", "ep"):
            given = getattr(space, axis)
            if given and not any(g % d == 0 for d in given for g in gpus):
                shown = ", ".join(map(str, given))
                why.insert(0, f"{axis}: {shown} divides no GPU count searched ({counts})")
        raise InfeasibleError(
            "search: no legal layout: no dp·tp·pp·cp of the allowed degrees equals the GPU count with "
            "B divisible by b·dp",
            why,
        )
    return tables, layout_model(problem, tables), time.perf_counter() - t0


def layout_model(problem: Problem, tables: CostTables) -> LayoutModel:
    """The CP-SAT model of ``problem``'s tables: its objective grid, the allowed candidates and
    each constraint family (for :meth:`LayoutModel.explain`)."""
    objective = objective_grid(problem, tables)
    return LayoutModel(tables, objective, allowed(problem, tables), _families(problem, tables))


BYTE_TOLERANCE = 1
"""Bytes a table term may differ from the exact evaluation after rounding up (the tables are
float64: a whole number of bytes may come out a hair above and round up once more)."""
NS_TOLERANCE = 1
"""Nanoseconds a table's time term may differ from the exact evaluation's (float64 sums in
another order)."""


def check_against_evaluate(tables: CostTables, choice: Candidate) -> Estimate:
    """Re-evaluate a chosen candidate exactly; fail loudly if any tabulated term differs by more
    than :data:`BYTE_TOLERANCE` / :data:`NS_TOLERANCE`, or the fit verdict differs."""
    s, z, r = choice
    job = tables.jobs[tables.job_of[s]]
    est = job.case.evaluate(tables.shapes[s].layout(tables.zero_stages[z], tables.recomputes[r]))
    for stage in est.stages:
        acts = stage.activations.total_bytes if stage.activations else 0
        # in both phases' state columns: model.terms.peak.held_in_both_phases
        held = stage.both_phases_bytes
        got = (
            math.ceil(stage.state.backward_bytes + held),
            math.ceil(stage.state.optimizer_step_bytes + held),
            math.ceil(acts),
        )
        i = stage.stage
        want = (
            int(tables.state_ceil[s, z, r, i]),
            int(tables.step_ceil[s, z, r, i]),
            int(tables.act_ceil[s, r, i]),
        )
        if any(abs(a - b) > BYTE_TOLERANCE for a, b in zip(got, want, strict=True)):
            raise TermMismatch(f"stage {stage.stage} memory: evaluate {got} != table {want}")
    table_time = (tables.t1_at(s, z, r), int(tables.t2_ns[s, z, r]))
    if est.time_terms is None or any(
        abs(a - b) > NS_TOLERANCE
        for a, b in zip(objective_ns(est.time_terms), table_time, strict=True)
    ):
        raise TermMismatch(f"time terms: evaluate {est.time_terms} != table {table_time}")
    fits = est.fits and (
        tables.allocator_retries_ok or not reserved_over_capacity(est.stages, est.capacity_bytes)
    )
    if bool(tables.fits[s, z, r]) != (
        fits if est.capacity_bytes == tables.capacity[s] else bool(tables.fits[s, z, r])
    ):
        raise TermMismatch("fits: evaluate and table disagree")
    return est


def _answer(tables: CostTables, choice: Candidate, objective: int) -> Answer:
    s, z, r = choice
    return Answer(
        tables.jobs[tables.job_of[s]],
        check_against_evaluate(tables, choice),
        objective,
        int(tables.peak_ceil[s, z, r]),
    )


def _solve_one(
    lm: LayoutModel,
    tables: CostTables,
    time_limit: float | None,
    workers: int,
    progress: Progress | None,
):
    """Optimum of the objective, then the tie-break."""
    active: list[Any] = []
    seconds = 0.0
    proven = True
    res = lm.solve(
        lm.objective, active=active, time_limit_s=time_limit, workers=workers, progress=progress
    )
    seconds += res.seconds
    if res.choice is None:
        return res.status, None, None, seconds
    proven &= res.status == "optimal"
    assert res.value is not None
    if not active and res.status == "optimal":
        # nothing but the objective binds: the first of the optimal candidates by tie rank
        return (
            "optimal" if proven else "feasible",
            lm.first_at(res.value),
            res.value,
            seconds,
        )
    active.append(lm.bound(lm.objective, res.value))
    tie = lm.solve(lm.tie_rank(), active=active, time_limit_s=time_limit, workers=workers)
    seconds += tie.seconds
    proven &= tie.status == "optimal"
    choice = tie.choice or res.choice
    return ("optimal" if proven else "feasible"), choice, res.value, seconds


def search(
    problem: Problem,
    top: int = 1,
    time_limit_s: float | None = None,
    workers: int = 2,
    progress: Progress | None = None,
    prepared: tuple[CostTables, LayoutModel, float] | None = None,
) -> SearchResult:
    """The best layout (least objective) whose every stage fits and which meets the
    constraints; with ``top`` > 1 the next best distinct layouts too (Ctrl-C,
    :func:`optimizer.solver.interrupt`, ends them with those found, status ``feasible``). Equal
    objectives go to the least peak memory (:func:`optimizer.rules.tie_keys`). The ``params``
    objective is :func:`optimizer.params_search.params_search`'s (member by member, each a
    step-time search).

    Raises
    ------
    InfeasibleError
        When nothing satisfies the constraints; ``explanation`` names the blocking families.
    InputError
        The ``params`` objective.
    """
    if problem.objective is Objective.PARAMS:
        raise InputError(
            "objective: params is searched member by member (optimizer.params_search.params_search)"
        )
    tables, lm, t_tables = _own(problem, prepared, time_limit_s)
    time_limit_s = _remaining(time_limit_s, t_tables)
    answers: list[Answer] = []
    seconds, status = 0.0, "optimal"
    for _ in range(top):
        if not tables.legal.any():
            raise nothing_legal(problem)
        if answers and interrupted():  # Ctrl-C (optimizer.solver.interrupt): the answers so far
            status = "feasible"
            break
        st, choice, value, sec = _solve_one(lm, tables, time_limit_s, workers, progress)
        seconds += sec
        if choice is None and answers and interrupted():
            status = "feasible"  # Ctrl-C stopped this solve before its answer: the answers so far
            break
        if choice is None and (st == "unknown" or not answers):
            raise no_answer("search", problem, tables, lm, st)
        if choice is None:
            break
        if st != "optimal":
            status = "feasible"
        answers.append(_answer(tables, choice, int(value)))
        if len(answers) < top:  # on this call's copy of a prepared model (_own)
            lm.exclude(choice)
    n = len(tables.shapes) * len(tables.zero_stages) * len(tables.recomputes)
    if not tables.complete:
        status = "feasible"  # the best of the rows tabulated within the time limit
    return SearchResult(
        status, tuple(answers), seconds, t_tables, len(tables.shapes), n, cut=tables.cut()
    )


def _own(
    problem: Problem,
    prepared: tuple[CostTables, LayoutModel, float] | None,
    time_limit_s: float | None,
) -> tuple[CostTables, LayoutModel, float]:
    """The tables and a model this call may tighten: ``prepared``'s model copied
    (:meth:`LayoutModel.copy`: the top-k exclusions and the frontier's ε bounds stay in the
    copy, so the same ``prepared`` answers again alike), or a fresh :func:`prepare`."""
    if prepared is None:
        return prepare(problem, time_limit_s=time_limit_s)
    tables, lm, t_tables = prepared
    return tables, lm.copy(), t_tables


SOLVE_FLOOR_S = 1.0
"""The least a solve is given after the tables, to read an answer even on a loaded machine (a
0.1 s floor returned no answer with the CPUs shared)."""


def _remaining(time_limit_s: float | None, spent: float) -> float | None:
    """What a time limit leaves the solver after the tables (at least :data:`SOLVE_FLOOR_S`)."""
    return None if time_limit_s is None else max(SOLVE_FLOOR_S, time_limit_s - spent)


_LEAST_SOLVE_S = 0.01
"""The least a solve past its deadline is given (CP-SAT's ``max_time_in_seconds`` must be
positive, and :func:`optimizer.solver.solve` reads 0 as no limit): it stops at once."""


def _until(deadline: float | None) -> float | None:
    """Seconds to ``deadline`` (:func:`time.perf_counter`'s clock), at least
    :data:`_LEAST_SOLVE_S` once it has passed; None without one."""
    return None if deadline is None else max(_LEAST_SOLVE_S, deadline - time.perf_counter())


@dataclass(frozen=True, slots=True)
class FrontierResult:
    against: str
    """``memory``, ``gpus`` or ``price``."""
    points: tuple[Answer, ...]
    """Non-dominated answers, objective ascending."""
    status: str
    solve_seconds: float
    tables_seconds: float
    num_candidates: int


def _second_axis(against: str, tables: CostTables, lm: LayoutModel) -> tuple[Any, np.ndarray]:
    """The frontier's second axis as a CP-SAT expression and its value per candidate."""
    if against == "memory":
        return lm.memory(), lm.per_candidate(tables.peak_ceil)
    if against == "gpus":
        per_shape = np.asarray(tables.num_gpus(), dtype=np.int64)
    elif against == "price":
        per_shape = np.array([tables.jobs[j].cents_per_hour for j in tables.job_of], dtype=np.int64)
    else:
        raise InputError(f"against: {against!r} is not one of memory, gpus, price")
    return lm.linear(per_shape), per_shape[lm.candidates[:, 0]]


def frontier(
    problem: Problem,
    against: str = "memory",
    time_limit_s: float | None = None,
    workers: int = 2,
    max_points: int = 64,
    prepared: tuple[CostTables, LayoutModel, float] | None = None,
) -> FrontierResult:
    """The Pareto frontier of the objective against peak memory per GPU, GPU count, or cluster
    price per hour (ε-constraint: least objective with the second axis ≤ ε, then the least
    second axis at that objective, then the tie-break; ε moves just below the point found).
    A time limit or Ctrl-C (:func:`optimizer.solver.interrupt`) ends it with the points found,
    status ``feasible``.

    Raises
    ------
    InputError
        An axis that is not memory, gpus or price, or price without a $ per GPU-hour for every
        accelerator (:meth:`Problem.check_frontier_axis`).
    InfeasibleError
        When nothing satisfies the constraints; ``explanation`` names the blocking families.
    """
    problem.check_frontier_axis(against)  # bad input (exit 2) before any table is built
    tables, lm, t_tables = _own(problem, prepared, time_limit_s)
    time_limit_s = _remaining(time_limit_s, t_tables)
    # one deadline for the whole walk, not the limit again for each solve: Llama 3 70B on 256
    # H100s with --time-limit 5 ran 5.6 s of tables then 3.6 s of solves, each given 1 s
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    proven = tables.complete
    second, second_values = _second_axis(against, tables, lm)
    points: list[Answer] = []
    seconds = 0.0
    while len(points) < max_points:
        past = deadline is not None and time.perf_counter() >= deadline
        if points and (interrupted() or past):
            proven = False  # Ctrl-C (optimizer.solver.interrupt) or the limit: the points so far
            break
        res = lm.solve(lm.objective, time_limit_s=_until(deadline), workers=workers)
        seconds += res.seconds
        if res.choice is None:
            if not points:  # a time limit that left no answer is no proof that none exists
                raise no_answer("frontier", problem, tables, lm, res.status)
            proven &= res.status != "unknown"
            break
        point, least, sec, sure = lm.least_second(second, res, _until(deadline), workers)
        seconds += sec
        proven &= sure
        assert res.value is not None  # an answer (res.choice) has its objective
        points.append(_answer(tables, point, res.value))
        if least is None:  # the time limit or Ctrl-C stopped the point's second solve
            proven = False
            break
        lm.forbid_above(second_values, least - 1)  # ε only tightens: fixed variables
    n = len(tables.shapes) * len(tables.zero_stages) * len(tables.recomputes)
    return FrontierResult(
        against, tuple(points), "optimal" if proven else "feasible", seconds, t_tables, n
    )
