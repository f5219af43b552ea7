"""What search, frontier and the per-stage search compute, as the JSON objects their ``--json``
prints (:mod:`interface.commands` has the other commands'): each from the command's request
(:class:`interface.requests.SearchRequest`), for the command line and the web app alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainplan.interface.render.report_dict import estimate_to_dict
from trainplan.interface.requests import (
    SearchRequest,
    limit_start,
    search_request,
    seconds_left,
    startup_seconds,
)
from trainplan.interface.search_notes import (
    frontier_limit_notes,
    headroom_note,
    headroom_notes,
    infeasible_json,
    limit_given,
    params_meta,
    schedule_note,
    search_meta,
    startup_field,
    time_limit_note,
    unused_note,
    with_headroom,
    with_unused,
)
from trainplan.model.errors import InfeasibleError
from trainplan.model.rank_split import stage_layers_of

if TYPE_CHECKING:  # the cost tables' progress (shapes after each block; a cut's words)
    from trainplan.optimizer.tables import TableProgress

__all__ = [
    "infeasible_json",
    "time_limit_note",
    "search_problem",
    "search_json",
    "frontier_json",
    "per_stage_json",
    "SearchRun",
    "per_stage_request",
]


def search_problem(request: SearchRequest | Mapping[str, Any], objective: str | None = None) -> Any:
    """The search :class:`~optimizer.problem.Problem` of search's or frontier's request, or of
    its options (:func:`interface.requests.search_request`: a scenario file's values under
    ``--set``'s under the options; ``scenario`` a file's path, or its values already read and
    checked, :func:`interface.scenario.check_scenario`).

    Raises
    ------
    PlannerError
        A bad value, an unknown model or GPU, an unreadable scenario file.
    """
    from trainplan.interface.scenario import problem_of

    return problem_of(search_request(request, objective))


def per_stage_request(request: SearchRequest | Mapping[str, Any]) -> SearchRequest:
    """The request of a per-stage command: its options with the per-stage search asked for
    (unless the request or its ``--set`` already says so)."""
    if isinstance(request, SearchRequest):
        return request
    if request.get("per_stage") is None and "per_stage" not in (request.get("set") or {}):
        request = {**request, "per_stage": True}
    return search_request(request)


def _in_units(problem: Any, prepared: Any) -> Callable[[float], tuple[str, float]]:
    """The solver's objective value → (JSON key naming the unit, value in that unit)."""
    from trainplan.optimizer.problem import objective_value
    from trainplan.optimizer.tables import objective_divisor

    divisor = objective_divisor(problem, prepared[0])
    return lambda value: objective_value(problem.objective, round(value), divisor)


@dataclass(frozen=True, slots=True)
class SearchRun:
    """A search's or a frontier's JSON object with what its text needs besides."""

    json: dict[str, Any]
    """The ``--json`` object (seconds, bytes, 0–1 rates)."""
    objective: str
    """The objective's name (``step-time``…)."""
    jobs: int
    """Jobs (model × GPU count × accelerator × batch) searched."""

    def __post_init__(self) -> None:
        # whether Ctrl-C stopped the search (the command line sets it: interface.cli.interrupt)
        self.json.setdefault("interrupted", False)


SolutionProgress = Callable[[int, str], None]
"""``(solutions found, best objective so far as text)`` as CP-SAT improves."""


def search_json(
    kw: SearchRequest | Mapping[str, Any],
    top: int = 1,
    maximize: str | None = None,
    on_tables: TableProgress | None = None,
    on_solution: SolutionProgress | None = None,
    compare: bool = True,
    web: bool = False,
) -> SearchRun:
    """The best layout (``trainplan search --json``): the answer's evaluate object plus
    ``status``, ``solve_seconds``, ``tables_seconds``, ``shapes``, ``candidates``, ``jobs``,
    ``job``, ``objective_kind``, the objective under a key naming its unit and
    ``objective_text`` (``top``: the next answers; with ``top`` > 1 all under ``answers``),
    ``time_limit_seconds`` and ``time_limit_note`` (:func:`time_limit_note`), ``interrupted``, and
    ``settings_cost``: the search without the user's choice settings
    (:func:`interface.setting_cost.settings_cost`; null when none is set or ``compare`` is
    False, as a sweep's points, whose recipes are the sweep's own axis), its note naming each
    setting by its flag (``web``: by the web API's query parameter); ``textbook_note``
    (:func:`interface.textbook_note.textbook_json`).

    Raises
    ------
    PlannerError
        Bad input (one line).
    InfeasibleError
        No layout meets the constraints; its ``explanation`` names the blocking families, and
        the best layout without the user's choice settings when there is one.
    """
    from trainplan.interface.setting_cost import settings_json
    from trainplan.interface.textbook_note import textbook_json
    from trainplan.optimizer.axis_rules import unused_values

    request = search_request(kw, "params" if maximize else None)
    started = limit_start(request)
    problem = search_problem(request)
    limit = request.time_limit
    before = startup_seconds(request.started)  # the command's, counted by its limit
    extra: dict[str, Any] = {}  # the params objective's fields (_params_run)
    if str(problem.objective) == "params":  # member by member (optimizer.params_search)
        run = _params_limited(request, problem, top, started, on_tables, on_solution)
        result, prepared, searched, extra = run
    else:
        searched = problem
        result, prepared = _step_run(
            request, problem, top, on_tables, on_solution, compare, started
        )
    in_units = _in_units(searched, prepared)
    unused = unused_note(unused_values(searched, prepared[0]))
    answers = [_answer(a, problem, in_units) for a in result.answers]
    for d in answers:
        d["notes"] += [unused] if unused else []
        d["notes"] += filter(None, [schedule_note(searched.space.schedules, d["layout"])])
    meta = search_meta(result, len(problem.jobs), limit, before) | extra
    best = in_units(result.best.objective)[1]
    cost = settings_json(request, problem, best, started, on_tables, web) if compare else None
    meta["settings_cost"] = cost
    meta["textbook_note"] = textbook_json(problem, answers[0], request, started, on_tables)
    out = {**answers[0], **meta, "top": answers[1:]} if top == 1 else {**meta, "answers": answers}
    return SearchRun(out, str(problem.objective), len(problem.jobs))


def _step_run(
    request: SearchRequest,
    problem: Any,
    top: int,
    on_tables: TableProgress | None,
    on_solution: SolutionProgress | None,
    compare: bool,
    started: float,
) -> tuple[Any, Any]:
    """Every objective but ``params``: the search's result and prepared tables; where nothing
    fits, :class:`InfeasibleError` with the unused values and (``compare``) the best layout
    without the user's choice settings (:func:`interface.setting_cost.best_without`)."""
    from trainplan.interface.setting_cost import best_without
    from trainplan.optimizer.search import prepare, search

    limit = seconds_left(request.time_limit, started)  # the command's limit, what is left of it
    prepared = prepare(problem, on_tables, limit)
    progress = _solutions(on_solution, problem, _in_units(problem, prepared))
    try:
        return search(
            problem, top, limit, request.layout_workers, progress, prepared=prepared
        ), prepared
    except InfeasibleError as err:
        err = with_headroom(with_unused(err, problem, prepared[0]), problem.constraints)
        raise (
            best_without(err, request, problem, started, on_tables) if compare else err
        ) from None


def _params_limited(
    request: SearchRequest,
    problem: Any,
    top: int,
    started: float,
    on_tables: TableProgress | None,
    on_solution: SolutionProgress | None,
) -> tuple[Any, Any, Any, dict[str, Any]]:
    """:func:`_params_run` with what is left of the command's limit; a refusal's words name
    the limit given (:func:`limit_given`), not what was left of it."""
    limit = request.time_limit
    left = seconds_left(limit, started)
    try:
        return _params_run(problem, top, left, request.layout_workers, on_tables, on_solution)
    except InfeasibleError as err:
        raise limit_given(err, left, None if request.started is None else limit) from None


def _params_run(
    problem: Any,
    top: int,
    limit: float | None,
    workers: int,
    on_tables: TableProgress | None,
    on_solution: SolutionProgress | None,
) -> tuple[Any, Any, Any, dict[str, Any]]:
    """The ``params`` objective's search (:func:`optimizer.params_search.params_search`, the
    solver's progress in the unit of the member searched): its result, the winning member's
    prepared tables and problem, and its own fields of ``--json`` (:func:`interface.search_notes.params_meta`)."""
    from trainplan.optimizer.params_search import params_search

    def progress_of(member: Any, prepared: Any) -> Any:
        return _solutions(on_solution, problem, _in_units(member, prepared))

    run = params_search(problem, top, limit, workers, None, on_tables, progress_of)
    return run.result, run.prepared, run.problem, params_meta(run)


def _solutions(
    on_solution: SolutionProgress | None,
    problem: Any,
    in_units: Callable[[float], tuple[str, float]],
) -> Callable[[int, float], None] | None:
    """CP-SAT's progress ``(solutions, best objective)`` as ``on_solution`` takes it (the best as
    text); None without ``on_solution``."""
    from trainplan.interface.render.report import objective_text

    if on_solution is None:
        return None
    report = on_solution

    def progress(count: int, best: float) -> None:
        report(count, objective_text(str(problem.objective), *in_units(best), problem.tokens))

    return progress


def _answer(a: Any, problem: Any, in_units: Callable[[float], tuple[str, float]]) -> dict[str, Any]:
    """One answer of the search (:class:`optimizer.search.Answer`) as its JSON object: the
    evaluate object with the search's memory rule, ``job``, the objective under its unit's key,
    ``objective_kind``, ``objective_text`` (under the params objective the member's size first,
    then this layout's step) and the prices (:func:`_prices`)."""
    from trainplan.interface.render.report import objective_text

    d = estimate_to_dict(a.estimate)
    _with_fit_rule(d, problem, a.estimate)
    key, value = in_units(a.objective)
    d.update({"job": a.job.label, key: value, "objective_kind": str(problem.objective)})
    d["objective_text"] = objective_text(str(problem.objective), key, value, problem.tokens)
    if str(problem.objective) == "params":  # the size is the objective; the step its layout's
        model = d["model"]
        d["objective_text"] = (
            f"{model['num_params']:,} parameters ({model['name']}) at " + d["objective_text"]
        )
    d.update(_prices(a.job.num_gpus, a.job.gpu_hour_price, d["time"]["step_s"]))
    return d


def _prices(gpus: int, price: float | None, step_s: float | None) -> dict[str, float]:
    """What a priced answer costs whatever the objective: ``price_per_hour`` ($ per hour for
    the job's GPUs, ``gpus × price``) and ``price_per_step`` ($ per optimizer step,
    ``price_per_hour × step_s / 3600``); empty when no ``gpu_hour_price`` was given, no
    ``price_per_step`` without a step time."""
    if price is None:
        return {}
    per_hour = gpus * price
    if step_s is None:
        return {"price_per_hour": per_hour}
    return {"price_per_hour": per_hour, "price_per_step": per_hour * step_s / 3600}


def per_stage_json(kw: SearchRequest | Mapping[str, Any]) -> SearchRun:
    """The per-stage search (``trainplan search --per-stage --json``): the plan's evaluate
    object with ``stages`` (each stage's memory, as ``evaluate --per-stage``), plus
    ``per_stage``: ``status`` (``optimal`` proven over the ``shapes`` fastest uniform shapes, or
    ``feasible``), ``proof_scope`` (what ``optimal`` is proven over, in words: :attr:`optimizer.
    per_stage.PerStageResult.proof_scope`), ``stage_layers``, ``recompute_layers``, ``step_s``,
    ``uniform`` (the best uniform layout's ``layout`` line fields and ``step_s``), ``gain``
    (uniform ÷ per-stage step time, ≥ 1), ``gap_s`` (the step less a proven lower bound on
    every split searched, under 1F1B by the order's own step: 0 or a ns or so when proven, null
    when the time limit left no bound: :attr:`optimizer.per_stage.PerStageResult.gap_ns`),
    ``shapes`` (per base layout: its status, step time, gap, solves, seconds, and ``note``: why
    a ``not-searched`` one was not, else null), ``uniform_seconds``, ``tables_seconds``,
    ``solve_seconds``, ``cut`` (what a time limit left out of the uniform search's cost tables,
    whose rows give the bases; null: nothing), ``startup_seconds`` with a time limit
    (:func:`interface.search_notes.startup_field`); and
    ``launch``: ``megatron`` and ``torchtitan`` flags with their ``notes``, and
    ``megatron_step_s`` — the step time of what Megatron-LM's one ``--recompute-num-layers``
    runs (null when the plan's counts are one number).

    Raises
    ------
    PlannerError
        Bad input (one line), an objective other than step time, a model the per-stage search
        does not model.
    InfeasibleError
        No uniform layout fits.
    """
    from trainplan.optimizer.per_stage import per_stage_search

    request = per_stage_request(kw)
    problem = search_problem(request)
    before = startup_seconds(request.started)  # the command's, counted by its limit
    left = seconds_left(request.time_limit, request.started)  # the command's limit, what is left
    result = per_stage_search(problem, request.per_stage_shapes, left, request.stage_workers)
    assert result.uniform is not None and result.uniform_ns is not None  # without_uniform unset
    plan = result.plan
    d = estimate_to_dict(plan, per_stage=True)  # every stage's memory rows, as evaluate's
    _with_fit_rule(d, problem, plan)
    counts = plan.layout.recompute_layers or tuple(0 for _ in range(plan.layout.pp))
    d["per_stage"] = {
        "status": result.status,
        "proof_scope": result.proof_scope,
        "job": result.job.label,
        "stage_layers": stage_layers_of(plan),
        "recompute_layers": list(counts),
        "step_s": result.plan_ns / 1e9,
        "uniform": {
            "layout": estimate_to_dict(result.uniform.estimate)["layout"],
            "step_s": result.uniform_ns / 1e9,
        },
        "gain": result.gain,
        "gap_s": None if result.gap_ns is None else result.gap_ns / 1e9,  # no bound: null
        "shapes": [_shape_row(s) for s in result.shapes],
        "uniform_seconds": result.uniform_seconds,
        "tables_seconds": result.tables_seconds,
        "solve_seconds": result.solve_seconds,
        "cut": result.cut,
    } | startup_field(request.time_limit, before)
    d["launch"] = _launch(result)
    return SearchRun(d, str(problem.objective), len(problem.jobs))


def _with_fit_rule(d: dict[str, Any], problem: Any, est: Any) -> None:
    """Add the search's memory rule to an answer: the headroom kept free to its ``notes``
    (:func:`interface.search_notes.headroom_note`), and :func:`optimizer.problem.fit_rule` to its
    ``assumptions`` where the space holds fsdp2, the one framework whose reserved bytes exceed
    the allocated peak (:func:`model.terms.peak.stream_pool_term`), and set its
    ``memory.fit_bytes`` to the figure that rule compared (:func:`fit_figure` of the estimate
    ``est``)."""
    from trainplan.interface.render.report_dict import fit_figure
    from trainplan.optimizer.problem import fit_rule

    d["memory"]["fit_bytes"] = fit_figure(est, problem.constraints.allocator_retries_ok)
    if any(str(fw) == "fsdp2" for fw in problem.space.frameworks):
        d["assumptions"].append(fit_rule(problem.constraints.allocator_retries_ok))
    held = headroom_note(problem.constraints, est.capacity_bytes)
    d["notes"] += [held] if held else []


def _shape_row(s: Any) -> dict[str, Any]:
    """One base layout the per-stage search took (:class:`optimizer.stage_solve.ShapePlan`):
    its layout fields, status, step time (s), gap (s, :attr:`~optimizer.stage_solve.ShapePlan.
    gap_ns`), solves, seconds and note (:attr:`~optimizer.stage_solve.ShapePlan.note`)."""
    lay = s.layout
    return {
        "dp": lay.dp,
        "tp": lay.tp,
        "pp": lay.pp,
        "cp": lay.cp,
        "micro_batch_size": lay.micro_batch_size,
        "zero_stage": lay.zero_stage,
        "recompute": str(lay.recompute),
        "schedule": str(lay.schedule),
        "virtual_stages": lay.virtual_stages,
        "framework": str(lay.framework),
        "status": s.status,
        "step_s": None if s.objective_ns is None else s.objective_ns / 1e9,
        "gap_s": None if s.gap_ns is None else s.gap_ns / 1e9,
        "solves": s.solves,
        "tables_seconds": s.tables_seconds,
        "solve_seconds": s.solve_seconds,
        "note": s.note,
    }


def _launch(result: Any) -> dict[str, Any]:
    """The per-stage plan's launch flags (:mod:`interface.launch`): Megatron-LM's with the
    environment it runs under (``megatron_env``, ``NAME=VALUE`` each), torchtitan e347b1e5e's TOML
    (``torchtitan``, its first line names the commit) and the same plan as assignments on a
    ``Trainer.Config`` for torchtitan's HEAD (``torchtitan_head``, its notes beyond the TOML's in
    ``torchtitan_head_notes``: :mod:`interface.launch_torchtitan_head`), with their notes, and
    ``megatron_step_s``, the step time of what stock Megatron-LM's one
    ``--recompute-num-layers`` runs (None when the plan's counts are one number), with a note
    when that is no faster than the best uniform plan."""
    from trainplan.interface.launch import megatron_flags, single_count_layout, torchtitan_toml
    from trainplan.interface.launch_torchtitan_head import torchtitan_config

    plan, uniform = result.plan, result.uniform.estimate
    lay, arch = plan.layout, plan.model.arch
    assert arch is not None
    megatron = megatron_flags(
        arch, lay, plan.training.global_batch_size, plan.training, plan.options, plan.device.part
    )
    titan = torchtitan_toml(arch, lay, plan.training)
    head = torchtitan_config(titan, lay)
    single = single_count_layout(lay, arch)
    megatron_step = None if single is None else result.job.case.evaluate(single).step_s
    notes = list(megatron.notes)
    if megatron_step is not None and uniform.step_s is not None and megatron_step >= uniform.step_s:
        notes.append(
            f"with one --recompute-num-layers (stock Megatron-LM) this plan takes "
            f"{megatron_step:,.2f} s a step, no faster than the best uniform plan's "
            f"{uniform.step_s:,.2f} s: launch the uniform plan unless the block method is "
            "patched for per-stage counts"
        )
    return {
        "megatron": list(megatron.flags),
        "megatron_env": list(megatron.env),
        "megatron_notes": notes,
        "megatron_step_s": megatron_step,
        "torchtitan": list(titan.flags),
        "torchtitan_notes": list(titan.notes),
        "torchtitan_head": list(head.flags),
        "torchtitan_head_notes": [n for n in head.notes if n not in titan.notes],
    }


def frontier_json(
    kw: SearchRequest | Mapping[str, Any],
    against: str = "memory",
    on_tables: TableProgress | None = None,
    web: bool = False,
) -> SearchRun:
    """The Pareto frontier (``trainplan frontier --json``): ``status``, ``against``,
    ``solve_seconds``, ``tables_seconds``, ``candidates`` and ``points``, one CSV row each
    (:func:`interface.render.report.frontier_row`: every layout field, memory term, traffic per axis,
    step time, MFU; units in the names), objective ascending; ``notes``, what ``--headroom`` held
    every point to (:func:`interface.search_notes.headroom_notes`; empty without it) and what a
    time limit did (:func:`interface.search_notes.frontier_limit_notes`); ``settings_cost`` (as
    :func:`search_json`'s, against the frontier's fastest point).

    Raises
    ------
    PlannerError
        Bad input (one line; an axis that needs what was not given, e.g. price without prices).
    InfeasibleError
        No layout meets the constraints.
    """
    from trainplan.interface.render.report import frontier_row
    from trainplan.interface.render.report_dict import fit_figure
    from trainplan.interface.setting_cost import best_without, settings_json
    from trainplan.optimizer.search import frontier, prepare

    request = search_request(kw)
    started = limit_start(request)
    problem = search_problem(request)
    problem.check_frontier_axis(against)  # bad input before the tables are built
    limit, before = request.time_limit, startup_seconds(request.started)
    left = seconds_left(limit, started)  # the command's limit, what is left of it
    prepared = prepare(problem, on_tables, left)
    try:
        result = frontier(problem, against, left, request.layout_workers, prepared=prepared)
    except InfeasibleError as err:
        err = with_headroom(with_unused(err, problem, prepared[0]), problem.constraints)
        raise best_without(err, request, problem, started, on_tables) from None
    rows = []
    in_units = _in_units(problem, prepared)
    for a in result.points:
        d = estimate_to_dict(a.estimate)
        d["memory"]["fit_bytes"] = fit_figure(a.estimate, problem.constraints.allocator_retries_ok)
        row = frontier_row(d, a.job.label, in_units(a.objective), a.peak_bytes)
        if a.job.gpu_hour_price is not None:
            row["price_per_hour"] = a.job.num_gpus * a.job.gpu_hour_price
        rows.append(row)
    out = {
        "status": result.status,
        "against": against,
        "solve_seconds": result.solve_seconds,
        "tables_seconds": result.tables_seconds,
        "candidates": result.num_candidates,
        "points": rows,
        "notes": headroom_notes(problem.constraints, rows)
        + frontier_limit_notes(prepared[0].cut(), limit, result, before),
    } | startup_field(limit, before)
    fastest = in_units(result.points[0].objective)[1]
    out["settings_cost"] = settings_json(request, problem, fastest, started, on_tables, web)
    return SearchRun(out, str(problem.objective), len(problem.jobs))
