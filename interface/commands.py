"""What each command computes, as the JSON object its ``--json`` prints: one function per command,
called by the command line (:mod:`interface.cli`) and the web app (:mod:`interface.web`) alike, so
both answer the same inputs with the same object and refuse the same bad input with the same line.

Parameters arrive as the CLI's options parse them (click's names: ``model``, ``tp``,
``seq_len``…; numbers already exact or still text, which the model's parsers read). Nothing here
prints or writes files: the callers present the object.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainplan.interface.flags import with_flags
from trainplan.interface.inputs import DIM_KEYS, build_case
from trainplan.interface.render.report_dict import estimate_to_dict
from trainplan.interface.scenario import CLUSTER_KEYS, SPACE_KEYS
from trainplan.model.errors import InfeasibleError, InputError
from trainplan.model.estimate import Estimate

__all__ = [
    "evaluate_json",
    "models_json",
    "gpus_json",
    "search_problem",
    "search_json",
    "frontier_json",
    "per_stage_frontier_json",
    "infeasible_json",
    "SearchRun",
    "to_json",
    "parse_overlap",
    "uploaded_model",
]

_SPACE = tuple(sorted(SPACE_KEYS))
_CLUSTER = tuple(sorted(CLUSTER_KEYS - {"overlap"}))
_TOP: tuple[str, ...] = ("model", "params", *DIM_KEYS, "gpus", "gpu", "seq_len", "global_batch")
_TOP += ("global_batch_tokens", "objective", "tokens", "gpu_hour_price", "max_layers", "mtp_layers")


def _default(obj: Any) -> Any:
    if isinstance(obj, Fraction):
        return int(obj) if obj.denominator == 1 else float(obj)
    if isinstance(obj, Estimate):
        return estimate_to_dict(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def to_json(data: Any, indent: int | None = 2) -> str:
    """``data`` as the JSON text every ``--json`` prints: exact Fractions become int when whole,
    else float (bytes stay exact integers; times in seconds; rates as 0–1 fractions)."""
    return json.dumps(data, indent=indent, default=_default)


def parse_overlap(values: tuple[str, ...] | list[str]) -> dict[str, float]:
    """``AXIS=FRACTION`` texts (``--overlap dp=0.5``, repeatable) as {axis: fraction hidden behind
    compute}; the fractions' range is checked by the cost model's options.

    Raises
    ------
    InputError
        An item that is not AXIS=FRACTION.
    """
    out = {}
    for item in values:
        axis, sep, frac = item.partition("=")
        try:
            out[axis.strip()] = float(frac)
        except ValueError:
            raise InputError(f"--overlap: {item!r} must be AXIS=FRACTION, e.g. dp=0.5") from None
        if not sep:
            raise InputError(f"--overlap: {item!r} must be AXIS=FRACTION, e.g. dp=0.5")
    return out


def evaluate_json(params: dict[str, Any], per_stage: bool = False) -> dict[str, Any]:
    """The planner (``trainplan evaluate --json``): memory, ZeRO table, traffic, bubble, step time
    and MFU of one layout, with ``defaults_used`` (and ``stages`` with ``per_stage``).

    ``params`` are the evaluate options by their parameter names (bytes, seconds and 0–1 rates
    out; docs/concepts/conventions.md; sources in :mod:`model`). ``overlap`` may be a tuple of
    ``AXIS=FRACTION`` texts, as the option gives it.

    Raises
    ------
    PlannerError
        Any bad or inapplicable input, one line naming the parameter, value and rule
        (:func:`interface.inputs.build_case`).
    """
    params = dict(params)
    sets = params.pop("set", None) or {}
    if sets:  # --set KEY=VALUE: scenario keys, read as a file's (interface.scenario_keys)
        from trainplan.interface.scenario_keys import merge

        merge(params, sets)
        params.update(sets)
    overlap = params.get("overlap") or ()
    params["overlap"] = overlap if isinstance(overlap, dict) else parse_overlap(tuple(overlap))
    case = build_case(params)
    out = estimate_to_dict(case.evaluate(), per_stage)
    out["defaults_used"] = case.defaults_used
    out["notes"] = [*out["notes"], *case.notes]
    return out


MAX_CONFIG_CHARS = 1_000_000
"""Largest uploaded config.json read (a Hugging Face config is a few kB)."""


RLHF_SEED_ARGS = (
    "algorithm",
    "train_mfu",
    "prompts",
    "prompt_tokens",
    "completion_tokens",
    "epochs",
)
"""``trainplan rlhf`` options passed on even when unset or false (the original planner's own defaults)."""


def old_log_prob_flag(value: str | None) -> bool | None:
    """``--old-log-prob recompute|engine`` → True (a scoring pass recomputes them) / False.

    Raises
    ------
    InputError
        Any other value.
    """
    if value is None:
        return None
    low = value.lower()
    if low not in ("recompute", "engine"):
        raise InputError(f"old_log_prob: {value!r} is not one of recompute, engine")
    return low == "recompute"


def rlhf_json(kw: dict[str, Any]) -> dict[str, Any]:
    """``trainplan rlhf --json`` of the command's parsed options (display-only ones such as
    ``width`` dropped): the original planner's figures, and the faithful accounting with ``model``."""
    from trainplan.interface import tabs

    kw = {k: v for k, v in kw.items() if k not in ("width", "as_json")}
    kw["old_log_prob"] = old_log_prob_flag(kw.get("old_log_prob"))
    kw = {k: v for k, v in kw.items() if v is not None and v is not False or k in RLHF_SEED_ARGS}
    return tabs.rlhf_report(**kw)


def uploaded_model(text: str, name: str | None = None) -> Any:
    """A :class:`~model.specs.ModelSpec` from the text of a Hugging Face ``config.json`` (the web
    app's upload; the CLI reads the same keys from a path, :meth:`ModelSpec.from_hf_config`),
    named ``name``, else by its ``_name_or_path``, else ``uploaded``.

    Raises
    ------
    ScenarioError
        Text that is not a JSON object (a key twice, nesting too deep:
        :func:`model.hf_config.parse_config_json`), too long, or a config the mapping refuses
        (:func:`model.hf_families.architecture_from_hf`, naming the key).
    """
    from trainplan.model.errors import ScenarioError
    from trainplan.model.hf_config import parse_config_json
    from trainplan.model.hf_families import architecture_from_hf
    from trainplan.model.model_spec import ModelSpec

    where = "config: the uploaded config.json"
    if len(text) > MAX_CONFIG_CHARS:
        raise ScenarioError(f"{where} has {len(text):,} characters, over {MAX_CONFIG_CHARS:,}")
    config = parse_config_json(text, where)
    arch = architecture_from_hf(config, where)
    label = name or str(config.get("_name_or_path") or "uploaded").rstrip("/").split("/")[-1]
    return ModelSpec(name=label, source="Hugging Face config.json (uploaded)", arch=arch)


def models_json() -> list[dict[str, Any]]:
    """The model catalogue (``trainplan models --json``): name, exact parameter counts, the
    published s and B, and each model's source (``scenarios/models/*.toml``)."""
    from trainplan.model.params import count_params
    from trainplan.scenarios.catalogue import get_model, model_names

    rows: list[dict[str, Any]] = []
    for name in model_names():
        entry = get_model(name)
        counts = count_params(entry.model.arch)
        rows.append(
            {
                "name": name,
                "num_params": counts.total,
                "num_active_params": counts.active,
                "seq_len": entry.training.get("seq_len"),
                "global_batch_size": entry.training.get("global_batch_size"),
                "source": entry.model.source,
            }
        )
    return rows


def gpus_json() -> list[dict[str, Any]]:
    """The accelerator table (``trainplan gpus --json``): memory, dense BF16 peak, links, each
    row with its source (``topology/accelerators.toml``)."""
    from trainplan.topology.accelerators import accelerator_rows

    return accelerator_rows()


def search_problem(kw: dict[str, Any], objective: str | None = None) -> Any:
    """The search :class:`~optimizer.problem.Problem` of the search/frontier options ``kw``
    (a scenario file's values under them, the options winning; ``kw["scenario"]`` is the file's
    path, or its values already read and checked, :func:`interface.scenario.check_scenario`).

    Raises
    ------
    PlannerError
        A bad value, an unknown model or GPU, an unreadable scenario file.
    """
    from trainplan.interface.scenario import build_problem, load_scenario

    scenario = kw.get("scenario")
    if isinstance(scenario, dict):  # a scenario's values already read and checked (a sweep's point)
        file_values = scenario
    else:
        file_values = load_scenario(scenario) if scenario else {}
    file_values = _with_sets(file_values, kw)
    cli_values: dict[str, Any] = {k: kw.get(k) for k in _TOP}
    if objective:
        cli_values["objective"] = objective
    cli_values["space"] = {k: kw.get(k) for k in _SPACE}
    cli_values["constraints"] = {k: kw.get(k) for k in ("headroom", "min_mfu", "tp_in_nvlink")}
    cluster = {k: kw.get(k) for k in _CLUSTER}
    if kw.get("overlap"):
        cluster["overlap"] = parse_overlap(kw["overlap"])
    cli_values["cluster"] = cluster
    return build_problem(file_values, cli_values)


def _with_sets(file_values: dict[str, Any], kw: dict[str, Any]) -> dict[str, Any]:
    """The scenario's values with ``kw["set"]`` (``--set KEY=VALUE``, read and checked as a file's
    keys) over them, each in its table; a key a flag also gives is refused."""
    from trainplan.interface.scenario_keys import merge, table_of

    sets = kw.get("set") or {}
    merge(kw, sets)
    out = {**file_values}
    for key, value in sets.items():
        table = table_of(key)
        if table is None:
            out[key] = value
        else:
            out[table] = {**out.get(table, {}), key: value}
    return out


def _time_limit(kw: dict[str, Any]) -> float | None:
    return None if kw.get("time_limit") is None else float(kw["time_limit"])


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


TableProgress = Callable[[int, int], None]
"""``(shapes tabulated, shapes in all)`` after each job."""
SolutionProgress = Callable[[int, str], None]
"""``(solutions found, best objective so far as text)`` as CP-SAT improves."""


def search_json(
    kw: dict[str, Any],
    top: int = 1,
    maximize: str | None = None,
    on_tables: TableProgress | None = None,
    on_solution: SolutionProgress | None = None,
) -> SearchRun:
    """The best layout (``trainplan search --json``): the answer's evaluate object plus
    ``status``, ``solve_seconds``, ``tables_seconds``, ``shapes``, ``candidates``, ``jobs``,
    ``job``, ``objective_kind``, the objective under a key naming its unit and
    ``objective_text`` (``top``: the next answers; with ``top`` > 1 all under ``answers``),
    ``time_limit_s`` and ``time_limit_note`` (:func:`time_limit_note`), ``interrupted``.

    Raises
    ------
    PlannerError
        Bad input (one line).
    InfeasibleError
        No layout meets the constraints; its ``explanation`` names the blocking families.
    """
    from trainplan.interface.render.report import objective_text
    from trainplan.optimizer.search import prepare, search

    kw = {**kw, "max_layers": kw.get("max_layers")}
    problem = search_problem(kw, "params" if maximize else None)
    limit = _time_limit(kw)
    prepared = prepare(problem, on_tables, limit)
    in_units = _in_units(problem, prepared)
    progress = None
    if on_solution is not None:
        report = on_solution

        def progress(count: int, best: float) -> None:
            report(count, objective_text(str(problem.objective), *in_units(best), problem.tokens))

    result = search(problem, top, limit, kw.get("workers") or 2, progress, prepared=prepared)
    answers = []
    for a in result.answers:
        d = estimate_to_dict(a.estimate)
        key, value = in_units(a.objective)
        d.update({"job": a.job.label, key: value, "objective_kind": str(problem.objective)})
        d["objective_text"] = objective_text(str(problem.objective), key, value, problem.tokens)
        d.update(_prices(a.job.num_gpus, a.job.gpu_hour_price, d["time"]["step_s"]))
        answers.append(d)
    meta = {
        "status": result.status,
        "solve_seconds": result.solve_seconds,
        "tables_seconds": result.tables_seconds,
        "shapes": result.num_shapes,
        "candidates": result.num_candidates,
        "jobs": len(problem.jobs),
        "time_limit_s": limit,
        "time_limit_note": time_limit_note(limit, result.tables_seconds, result.solve_seconds),
    }
    out = {**answers[0], **meta, "top": answers[1:]} if top == 1 else {**meta, "answers": answers}
    return SearchRun(out, str(problem.objective), len(problem.jobs))


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


def time_limit_note(limit: float | None, tables_s: float, solve_s: float) -> str | None:
    """What ``--time-limit`` did when the search took longer (None when it held, or none was
    given): a job's cost tables are built whole once started (jobs not started in time are left
    out), and CP-SAT gets at least :data:`optimizer.search.SOLVE_FLOOR_S` to read an answer."""
    from trainplan.optimizer.search import SOLVE_FLOOR_S

    if limit is None or tables_s + solve_s <= limit:
        return None
    return (
        f"the time limit of {limit:g} s was passed ({tables_s:.2f} s of cost tables + "
        f"{solve_s:.2f} s of CP-SAT): a job's tables are built whole once started, and CP-SAT "
        f"is given at least {SOLVE_FLOOR_S:g} s to read an answer; the status says whether "
        "that answer is proven"
    )


PER_STAGE_SHAPES: int | None = None
"""The shapes each per-stage search takes by default (``--per-stage-shapes``): None, every
legal shape whose model state can fit (:func:`optimizer.stage_bases.ranked_bases`)."""


def per_stage_shapes(per_stage: bool, shapes: int | None) -> int | None:
    """``--per-stage-shapes`` as the per-stage search takes it: ``shapes`` or the default (None:
    every shape).

    Raises
    ------
    InputError
        ``shapes`` given without ``--per-stage`` (it would do nothing).
    """
    if shapes is not None and not per_stage:
        raise InputError(
            f"per_stage_shapes: {shapes} applies to the per-stage search only; add --per-stage "
            "(or per_stage = true in the scenario)"
        )
    return PER_STAGE_SHAPES if shapes is None else shapes


def per_stage_json(kw: dict[str, Any], shapes: int | None = PER_STAGE_SHAPES) -> SearchRun:
    """The per-stage search (``trainplan search --per-stage --json``): the plan's evaluate
    object, plus ``per_stage``: ``status`` (``optimal`` proven over the ``shapes`` fastest
    uniform shapes, or ``feasible``), ``stage_layers``, ``recompute_layers``, ``step_s``,
    ``uniform`` (the best uniform layout's ``layout`` line fields and ``step_s``), ``gain``
    (uniform ÷ per-stage step time, ≥ 1), ``shapes`` (per base layout: its status, step time,
    solves, seconds), ``uniform_seconds``, ``tables_seconds``, ``solve_seconds``; and
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
    from trainplan.interface.launch import megatron_flags, single_count_layout, torchtitan_toml
    from trainplan.optimizer.per_stage import per_stage_search

    problem = search_problem(kw)
    result = per_stage_search(problem, shapes, _time_limit(kw), kw.get("workers") or 2)
    assert result.uniform is not None and result.uniform_ns is not None  # without_uniform unset
    plan, uniform = result.plan, result.uniform.estimate
    d = estimate_to_dict(plan)
    lay = plan.layout
    arch = plan.model.arch
    assert arch is not None
    counts = lay.recompute_layers or tuple(0 for _ in range(lay.pp))
    megatron = megatron_flags(arch, lay, plan.training.global_batch_size, plan.training)
    titan = torchtitan_toml(arch, lay)
    single = single_count_layout(lay, arch)
    megatron_step = None
    notes = list(megatron.notes)
    if single is not None:
        megatron_step = result.job.case.evaluate(single).step_s
        if (
            megatron_step is not None
            and uniform.step_s is not None
            and megatron_step >= uniform.step_s
        ):
            notes.append(
                f"with one --recompute-num-layers (stock Megatron-LM) this plan takes "
                f"{megatron_step:.2f} s a step, no faster than the best uniform plan's "
                f"{uniform.step_s:.2f} s: launch the uniform plan unless the block method is "
                "patched for per-stage counts"
            )
    d["per_stage"] = {
        "status": result.status,
        "job": result.job.label,
        "stage_layers": [s.num_layers for s in plan.stages],
        "recompute_layers": list(counts),
        "step_s": result.plan_ns / 1e9,
        "uniform": {
            "layout": estimate_to_dict(uniform)["layout"],
            "step_s": result.uniform_ns / 1e9,
        },
        "gain": result.gain,
        "shapes": [
            {
                "dp": s.layout.dp,
                "tp": s.layout.tp,
                "pp": s.layout.pp,
                "cp": s.layout.cp,
                "micro_batch_size": s.layout.micro_batch_size,
                "zero_stage": s.layout.zero_stage,
                "recompute": str(s.layout.recompute),
                "schedule": str(s.layout.schedule),
                "virtual_stages": s.layout.virtual_stages,
                "framework": str(s.layout.framework),
                "status": s.status,
                "step_s": None if s.objective_ns is None else s.objective_ns / 1e9,
                "solves": s.solves,
                "tables_seconds": s.tables_seconds,
                "solve_seconds": s.solve_seconds,
            }
            for s in result.shapes
        ],
        "uniform_seconds": result.uniform_seconds,
        "tables_seconds": result.tables_seconds,
        "solve_seconds": result.solve_seconds,
    }
    d["launch"] = {
        "megatron": list(megatron.flags),
        "megatron_notes": notes,
        "megatron_step_s": megatron_step,
        "torchtitan": list(titan.flags),
        "torchtitan_notes": list(titan.notes),
    }
    return SearchRun(d, str(problem.objective), len(problem.jobs))


def frontier_json(
    kw: dict[str, Any], against: str = "memory", on_tables: TableProgress | None = None
) -> SearchRun:
    """The Pareto frontier (``trainplan frontier --json``): ``status``, ``against``,
    ``solve_seconds``, ``tables_seconds``, ``candidates`` and ``points``, one CSV row each
    (:func:`interface.render.report.frontier_row`: every layout field, memory term, traffic per axis,
    step time, MFU; units in the names), objective ascending.

    Raises
    ------
    PlannerError
        Bad input (one line; an axis that needs what was not given, e.g. price without prices).
    InfeasibleError
        No layout meets the constraints.
    """
    from trainplan.interface.render.report import frontier_row
    from trainplan.optimizer.search import frontier, prepare

    problem = search_problem(kw)
    problem.check_frontier_axis(against)  # bad input before the tables are built
    limit = _time_limit(kw)
    prepared = prepare(problem, on_tables, limit)
    result = frontier(problem, against, limit, kw.get("workers") or 2, prepared=prepared)
    rows = []
    in_units = _in_units(problem, prepared)
    for a in result.points:
        row = frontier_row(
            estimate_to_dict(a.estimate), a.job.label, in_units(a.objective), a.peak_bytes
        )
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
    }
    return SearchRun(out, str(problem.objective), len(problem.jobs))


PER_STAGE_FRONTIER_TIME_LIMIT_S = 120.0
"""Seconds ``frontier --per-stage`` runs when no ``--time-limit`` is given: its per-stage
searches are one CP-SAT search per point (Mixtral 8x7B on 64 GPUs ran about five minutes);
past it the answer is the points found, status ``feasible``, and the answer says the limit."""


def per_stage_frontier_json(
    kw: dict[str, Any],
    against: str = "memory",
    shapes: int | None = PER_STAGE_SHAPES,
    progress: Callable[[int, int], None] | None = None,
) -> SearchRun:
    """The per-stage frontier (``trainplan frontier --per-stage --json``): ``status``
    (``optimal``: every per-stage and uniform search it rests on proven, per-stage over the
    ``shapes`` fastest shapes each), ``against``, ``per_stage`` (true), ``searches``,
    ``seconds`` and ``points``, step time ascending (as the uniform frontier), one CSV row each:
    :func:`interface.render.report.frontier_row`'s fields (``objective_s`` the step time,
    ``peak_bytes_ceil`` the memory axis) plus ``plan`` (``uniform`` or ``per-stage``),
    ``stage_layers`` and ``recompute_layers`` (per stage; null for a uniform plan),
    ``chunk_layers`` (per model chunk in model order, what ``--stage-layers`` takes; the same as
    ``stage_layers`` when v = 1),
    ``uniform_step_s`` (the best uniform layout meeting the same axis value; null when none
    fits), ``gain`` (uniform ÷ this step time) and ``price_per_hour`` when priced
    (:func:`optimizer.per_stage_frontier.per_stage_frontier`); ``time_limit_s`` the limit it
    ran under (:data:`PER_STAGE_FRONTIER_TIME_LIMIT_S` unless ``time_limit`` is given) and
    ``time_limit_default`` whether it was that default. ``progress(searches, points)`` after
    each per-stage search.

    Raises
    ------
    PlannerError
        Bad input (one line): an axis that needs what was not given, an objective other than
        step time, a model the per-stage search does not model.
    InfeasibleError
        Nothing fits, uniform or per stage.
    """
    from trainplan.interface.render.report import frontier_row
    from trainplan.optimizer.per_stage import peak_bytes
    from trainplan.optimizer.per_stage_frontier import per_stage_frontier

    problem = search_problem(kw)
    given = _time_limit(kw)
    limit = PER_STAGE_FRONTIER_TIME_LIMIT_S if given is None else given
    workers = kw.get("workers") or 2
    result = per_stage_frontier(problem, against, shapes, limit, workers, progress=progress)
    rows = []
    for p in result.points:
        lay = p.estimate.layout
        per_stage = p.kind == "per-stage"
        peak = p.value if against == "memory" else peak_bytes(p.estimate)
        row = frontier_row(
            estimate_to_dict(p.estimate), p.job.label, ("objective_s", p.step_ns / 1e9), peak
        )
        if p.job.gpu_hour_price is not None:
            row["price_per_hour"] = p.job.num_gpus * p.job.gpu_hour_price
        row.update(
            {
                "plan": p.kind,
                "stage_layers": [s.num_layers for s in p.estimate.stages] if per_stage else None,
                "chunk_layers": list(lay.stage_layers or ()) if per_stage else None,
                "recompute_layers": list(lay.recompute_layers or ()) if per_stage else None,
                "uniform_step_s": None if p.uniform_ns is None else p.uniform_ns / 1e9,
                "gain": p.gain,
            }
        )
        rows.append(row)
    out = {
        "status": result.status,
        "against": against,
        "per_stage": True,
        "searches": result.searches,
        "seconds": result.seconds,
        "time_limit_s": limit,
        "time_limit_default": given is None,
        "points": rows,
    }
    return SearchRun(out, str(problem.objective), len(problem.jobs))


def infeasible_json(err: InfeasibleError) -> dict[str, Any]:
    """What ``search --json`` and ``frontier --json`` print when no layout meets the constraints
    (exit code 1): ``status`` infeasible (or unknown: the time limit ran out before an answer),
    the ``explanation`` lines and the ``message``."""
    return {
        "status": err.status,
        "explanation": [with_flags(line) for line in err.explanation],
        "message": with_flags(str(err)),
    }
