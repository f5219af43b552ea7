"""The per-stage frontier's command (``trainplan frontier --per-stage``, ``/api/frontier`` with
``per-stage``): its budget of searches, its JSON object, and its proof in words the CLI's
headline and the page both print."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trainplan.interface.render.report import frontier_row
from trainplan.interface.render.report_dict import estimate_to_dict, fit_figure
from trainplan.interface.requests import SearchRequest, seconds_left, startup_seconds
from trainplan.interface.search_commands import SearchRun, per_stage_request, search_problem
from trainplan.interface.search_notes import (
    headroom_notes,
    per_stage_limit_notes,
    startup_field,
)
from trainplan.model.errors import InputError
from trainplan.model.rank_split import stage_layers_of
from trainplan.optimizer.per_stage import peak_bytes
from trainplan.optimizer.per_stage_frontier import PerStageFrontier, per_stage_frontier

__all__ = [
    "PER_STAGE_FRONTIER_SEARCHES",
    "per_stage_frontier_json",
    "per_stage_proof",
    "check_searches_apply",
]


PER_STAGE_FRONTIER_SEARCHES = 4
"""Per-stage searches ``frontier --per-stage`` runs at most when no ``--per-stage-searches`` is
given: each is a search of its own, run to its proof (Llama 3 70B on 64 H100: 30 to 50 s each
on a loaded 2-core machine; Mixtral 8x7B on 64 GPUs minutes), so the frontier is cut after a
count of them, never after a wall-clock time: the same points on every machine, loaded or not
(:class:`optimizer.per_stage_frontier.Budget`). Past it the answer is the points found, status
``feasible``, ``stopped`` ``searches``, and the answer says the budget. Against memory only:
the ε walk has no end of its own but nothing fitting; against GPUs or price every job given is
searched (one search each, capped by the cheaper points: the list given bounds the work)."""


def per_stage_frontier_json(
    kw: SearchRequest | Mapping[str, Any],
    against: str = "memory",
    progress: Callable[[int, int], None] | None = None,
    max_searches: int | None = None,
) -> SearchRun:
    """The per-stage frontier (``trainplan frontier --per-stage --json``): ``status``
    (``optimal``: every per-stage and uniform search it rests on proven, per-stage over the
    ``shapes`` fastest shapes each, and the frontier run to its end), ``against``,
    ``per_stage`` (true), ``searches``, ``seconds`` and ``points``, step time ascending (as the
    uniform frontier), one CSV row each: :func:`interface.render.report.frontier_row`'s fields
    (``objective_s`` the step time, ``peak_bytes_ceil`` the memory axis) plus ``plan``
    (``uniform`` or ``per-stage``), ``proven`` (whether this point's searches were proven:
    false only when ``--time-limit`` cut them), ``gap_s`` (the step less a proven lower bound on
    every split its search took, s: 0 or a ns or so when proven, null when a time limit left no
    bound: :attr:`optimizer.per_stage_frontier.FrontierPoint.gap_ns`), ``stage_layers`` and
    ``recompute_layers`` (per stage; null for a uniform plan), ``chunk_layers`` (per model
    chunk in model order; the same as ``stage_layers`` when v = 1; either is what
    ``--stage-layers`` takes), ``uniform_step_s`` (the best uniform layout meeting the same axis
    value; null when none fits), ``gain``
    (uniform ÷ this step time) and ``price_per_hour`` when priced
    (:func:`optimizer.per_stage_frontier.per_stage_frontier`); ``max_searches`` the per-stage
    searches it may run (``max_searches``, else :data:`PER_STAGE_FRONTIER_SEARCHES` against
    memory, null against GPUs or price: every job) and
    ``max_searches_default`` whether it was that default; ``time_limit_seconds`` the wall-clock limit
    given (``time_limit``; null: none); ``stopped`` what ended it before its last point
    (``searches``, ``time``, ``interrupted`` — Ctrl-C — or null); ``proof_scope`` what an
    ``optimal`` point is proven over, in words (interleaved shapes only over splits whose chunks
    on a stage are equal: :attr:`optimizer.per_stage_frontier.PerStageFrontier.proof_scope`);
    ``proof`` what it proves, in the words the CLI's headline and the page print
    (:func:`per_stage_proof`); ``notes``, what ``--headroom`` held every point to
    (:func:`interface.search_notes.headroom_notes`) and what a time limit did, the shapes it left
    out or the limit passed (:func:`interface.search_notes.per_stage_limit_notes`).
    ``progress(searches, points)`` after each per-stage search.

    Raises
    ------
    PlannerError
        Bad input (one line): an axis that needs what was not given, an objective other than
        step time, a model the per-stage search does not model.
    InfeasibleError
        Nothing fits, uniform or per stage.
    """
    request = per_stage_request(kw)
    problem = search_problem(request)
    default = PER_STAGE_FRONTIER_SEARCHES if against == "memory" else None
    budget = default if max_searches is None else max_searches
    before = startup_seconds(request.started)  # the command's, counted by its limit
    result = per_stage_frontier(
        problem,
        against,
        request.per_stage_shapes,
        seconds_left(request.time_limit, request.started),
        request.stage_workers,
        progress=progress,
        max_searches=budget,
    )
    limit = request.time_limit
    out = _frontier_object(result, problem, budget, max_searches is None, limit, before)
    return SearchRun(out, str(problem.objective), len(problem.jobs))


def _frontier_object(
    result: PerStageFrontier,
    problem: Any,
    budget: int | None,
    default: bool,
    limit: float | None,
    before: float = 0.0,
) -> dict[str, Any]:
    """:func:`per_stage_frontier_json`'s object of ``result``: its points as rows, the
    ``budget`` of searches (``default`` whether it was :data:`PER_STAGE_FRONTIER_SEARCHES`),
    the wall-clock ``limit`` given (counted from the command's start, ``before`` seconds before
    the frontier's), what stopped it, and its proof in words."""
    retries_ok = problem.constraints.allocator_retries_ok
    rows = [_frontier_point(p, result.against, peak_bytes, retries_ok) for p in result.points]
    out = {
        "status": result.status,
        "against": result.against,
        "per_stage": True,
        "searches": result.searches,
        "seconds": result.seconds,
        "max_searches": budget,
        "max_searches_default": default,
        "time_limit_seconds": limit,
        "stopped": result.stopped,
        "points": rows,
        "notes": headroom_notes(problem.constraints, rows)
        + per_stage_limit_notes(result.cuts, limit, result.seconds, before),
        "proof_scope": result.proof_scope,
    } | startup_field(limit, before)
    out["proof"] = per_stage_proof(out)
    return out


def check_searches_apply(searches: int | None, per_stage: bool) -> None:
    """Refuse a budget of per-stage searches (``--per-stage-searches``) without the per-stage
    frontier, where it would do nothing.

    Raises
    ------
    InputError
        ``searches`` given and ``per_stage`` false.
    """
    if searches is not None and not per_stage:
        raise InputError(
            f"per_stage_searches: {searches} applies to the per-stage frontier only; add "
            "--per-stage"
        )


def per_stage_proof(out: dict[str, Any]) -> str:
    """What the per-stage frontier ``out`` (:func:`interface.commands.per_stage_frontier_json`)
    proves, and what stopped it: its budget of searches (the same points on every machine) or
    the wall-clock ``--time-limit`` or Ctrl-C (points found so far, not proven); ``optimal`` said
    with ``out["proof_scope"]`` (:attr:`optimizer.per_stage_frontier.PerStageFrontier.proof_scope`:
    interleaved shapes only over splits whose chunks on a stage are equal)."""
    if out["stopped"] == "interrupted":
        return "interrupted (Ctrl-C): the points found before it, not proven"
    if out["stopped"] == "time":
        limit = "" if out["time_limit_seconds"] is None else f" of {out['time_limit_seconds']:g} s"
        return f"best found within the time limit{limit}, not proven"
    if out["stopped"] == "searches":
        default = (
            ", the default; --per-stage-searches sets it" if out["max_searches_default"] else ""
        )
        return (
            f"each point optimal over {out['proof_scope']}; cut at the budget of "
            f"{out['max_searches']} searches{default}: the frontier may go on past its last point"
        )
    if out["status"] != "optimal":  # ran to its end, but a point's search was not proven
        return "over the shapes searched, a point not proven (its plan says so)"
    return f"optimal over {out['proof_scope']}"


def _frontier_point(
    p: Any, against: str, peak_bytes: Callable[[Any], int], retries_ok: bool
) -> dict[str, Any]:
    """One point of the per-stage frontier as its CSV row (:func:`per_stage_frontier_json`;
    ``fit_bytes`` by the search's memory rule, ``retries_ok`` its allocator_retries_ok)."""

    lay = p.estimate.layout
    per_stage = p.kind == "per-stage"
    peak = p.value if against == "memory" else peak_bytes(p.estimate)
    d = estimate_to_dict(p.estimate)
    d["memory"]["fit_bytes"] = fit_figure(p.estimate, retries_ok)
    row = frontier_row(d, p.job.label, ("objective_s", p.step_ns / 1e9), peak)
    if p.job.gpu_hour_price is not None:
        row["price_per_hour"] = p.job.num_gpus * p.job.gpu_hour_price
    row.update(
        {
            "plan": p.kind,
            "proven": p.proven,
            "gap_s": None if p.gap_ns is None else p.gap_ns / 1e9,
            "stage_layers": stage_layers_of(p.estimate) if per_stage else None,
            "chunk_layers": list(lay.stage_layers or ()) if per_stage else None,
            "recompute_layers": list(lay.recompute_layers or ()) if per_stage else None,
            "uniform_step_s": None if p.uniform_ns is None else p.uniform_ns / 1e9,
            "gain": p.gain,
        }
    )
    return row
