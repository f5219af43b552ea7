"""One sweep point run as the single command runs it, and its results row.

A search point calls :func:`interface.commands.search_json` — the function ``trainplan search``
calls — with the point's scenario values (:meth:`Grid.scenario`); an evaluate point calls
:func:`interface.commands.evaluate_json`. The row keeps what a study compares (:data:`COLUMNS`):
the inputs, the status and why, the layout, the memory, the step time, MFU, the time to train and
the cost, and the seconds the point took (wall and CPU). Nothing here knows about processes: the engines
(:mod:`interface.sweep.engines`) call :func:`run_points` wherever they run.
"""

from __future__ import annotations

import time
from typing import Any

from trainplan.interface.commands import evaluate_json, search_json, search_problem
from trainplan.interface.flags import as_keys
from trainplan.interface.sweep.grid import Grid, Point
from trainplan.model.errors import InfeasibleError, InputError, PlannerError
from trainplan.model.params import count_params
from trainplan.model.units import parse_count, parse_number

__all__ = ["COLUMNS", "TIMING_COLUMNS", "LAYOUT_COLUMNS", "columns", "run_point", "run_points"]

LAYOUT_COLUMNS = (
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "etp",
    "zero_stage",
    "micro_batch_size",
    "num_microbatches",
    "virtual_stages",
)
_LAYOUT_TEXT = ("recompute", "schedule", "cp_kind")
COLUMNS: tuple[tuple[str, str], ...] = (
    ("point", "int"),
    ("model", "str"),
    ("num_params", "int"),
    ("gpu", "str"),
    ("part", "str"),
    ("gpus", "int"),
    ("seq_len", "int"),
    ("global_batch", "int"),
    ("recipe", "str"),
    ("framework", "str"),
    ("status", "str"),
    ("reason", "str"),
    *((c, "int") for c in LAYOUT_COLUMNS),
    *((c, "str") for c in _LAYOUT_TEXT),
    ("peak_bytes", "int"),
    ("capacity_bytes", "int"),
    ("step_s", "float"),
    ("mfu", "float"),
    ("tokens_per_s", "float"),
    ("time_to_train_s", "float"),
    ("cost_usd", "float"),
    ("objective", "str"),
    ("objective_value", "float"),
    ("candidates", "int"),
    ("tables_s", "float"),
    ("solve_s", "float"),
    ("search_s", "float"),
    ("cpu_s", "float"),
)
"""Every row's columns and their kinds, in order; the grid's what-if multipliers (one float
column each, ``hbm_capacity``…) follow ``part`` (:func:`columns`). Units: bytes (``peak_bytes``:
the busiest stage's total at its peak; ``capacity_bytes``: what a layout may use), seconds,
dollars, 0–1 rates; ``num_params`` counts every parameter (MoE: all experts); ``search_s`` is
the point's wall time, ``cpu_s`` the CPU time its process spent on it (below ``search_s`` when
other work shares the cores)."""
TIMING_COLUMNS = ("tables_s", "solve_s", "search_s", "cpu_s")
"""Columns that measure the run rather than answer it: they differ from run to run; every other
column is the same whatever the engine, the batch or the order (the tests compare them)."""
STATUSES = ("optimal", "feasible", "infeasible", "fits", "does-not-fit", "error")
"""``optimal`` (proven) and ``feasible`` (not proven) for search; ``fits`` / ``does-not-fit``
for evaluate; ``infeasible`` (no layout fits, ``reason`` says why); ``error`` (the point's input
is refused, ``reason`` is the line the single command prints)."""


def columns(grid: Grid) -> list[tuple[str, str]]:
    """The grid's results columns: :data:`COLUMNS` with a float column per what-if after
    ``part``."""
    cut = [c for c, _ in COLUMNS].index("part") + 1
    return [*COLUMNS[:cut], *((k, "float") for k in grid.what_ifs), *COLUMNS[cut:]]


def run_points(grid: Grid, indices: list[int]) -> list[dict[str, Any]]:
    """The rows of points ``indices`` of ``grid``, in that order (one process, one after another:
    points of one model and part share its caches)."""
    return [run_point(grid, grid.point(i)) for i in indices]


def run_point(grid: Grid, point: Point) -> dict[str, Any]:
    """One point's row: the single command's answer, or why there is none.

    A point whose input the command refuses (a what-if the part cannot take, FP8 on an A100) is
    an ``error`` row with the command's line; a bug is an ``error`` row whose reason starts
    ``internal error`` (the sweep goes on; the command exits 1 at the end).
    """
    row: dict[str, Any] = {c: None for c, _ in columns(grid)}
    row.update(
        point=point.index,
        model=grid.model(point),
        gpu=grid.gpu(point),
        part=grid.part_name(point),
        gpus=point.get("gpus") or grid.base.get("gpus"),
        seq_len=point.get("seq_len") or grid.base.get("seq_len"),
        global_batch=point.get("global_batch") or grid.base.get("global_batch"),
        recipe=point.recipe,
        framework=point.get("framework") or grid.base.get("framework"),
        objective=str(grid.base.get("objective") or "step-time")
        if grid.command == "search"
        else None,
    )
    for key in grid.what_ifs:
        row[key] = float(dict(point.what_if).get(key, 1))
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        if grid.command == "search":
            _search(grid, point, row)
        else:
            _evaluate(grid, point, row)
    except InfeasibleError as err:
        row.update(status="infeasible", reason="; ".join(err.explanation) or str(err))
        _fill_inputs(grid, point, row)
    except PlannerError as err:
        row.update(status="error", reason=as_keys(str(err)))  # the grid's keys, not flags
    except Exception as err:  # a bug: recorded, counted, the sweep goes on
        row.update(status="error", reason=f"internal error: {type(err).__name__}: {err}")
    row["search_s"] = time.perf_counter() - t0
    row["cpu_s"] = time.process_time() - c0  # this process's CPU, all its threads
    return row


def _search(grid: Grid, point: Point, row: dict[str, Any]) -> None:

    # compare=False: a recipe is an axis of the sweep, compared by the sweep itself
    run = search_json({"scenario": grid.scenario(point), "workers": 1}, compare=False)
    d = run.json
    _answer(grid, point, d, row)
    key = next(
        k for k in d if k.startswith("objective_") and k not in ("objective_kind", "objective_text")
    )
    row.update(
        status=d["status"],
        objective_value=d[key],
        candidates=d["candidates"],
        tables_s=d["tables_seconds"],
        solve_s=d["solve_seconds"],
    )


def _evaluate(grid: Grid, point: Point, row: dict[str, Any]) -> None:

    values = grid.scenario(point)
    params: dict[str, Any] = {**values.pop("cluster", {}), **grid.layout}
    if "overlap" in params:
        params["overlap"] = tuple(f"{k}={v}" for k, v in params["overlap"].items())
    gpus = values["gpus"]
    if "dp" not in params:
        group = 1
        for axis in ("tp", "pp", "cp"):
            group *= int(params.get(axis, 1))
        if gpus % group:
            raise InputError(f"gpus: {gpus} is not a multiple of tp·pp·cp = {group}")
        params["dp"] = gpus // group
    params.update(model=values.get("model"), gpu=values["gpu"], num_gpus=gpus)
    params.update(seq_len=values.get("seq_len"), framework=values.get("framework"))
    if values.get("global_batch") is not None:
        params["global_batch_size"] = values["global_batch"]
    elif values.get("global_batch_tokens") is not None:  # in sequences as evaluate reads it
        params["global_batch_tokens"] = values["global_batch_tokens"]
    d = evaluate_json(params, layout_keys=False)  # the sweep's settings: each point reads its own
    _answer(grid, point, d, row)
    memory = d["memory"]
    fits = memory["fits"]
    row["status"] = "fits" if fits else "does-not-fit"
    if not fits:
        row["reason"] = (
            f"memory: needs {memory['total_bytes'] / 1e9:,.2f} GB per GPU of "
            f"{memory['capacity_bytes'] / 1e9:,.2f} GB"
        )


def _answer(grid: Grid, point: Point, d: dict[str, Any], row: dict[str, Any]) -> None:
    """The columns every answer fills, from the command's JSON object."""
    lay, t = d["layout"], d["time"]
    row.update({c: lay[c] for c in LAYOUT_COLUMNS})
    row.update({c: lay[c] for c in _LAYOUT_TEXT})
    row.update(
        num_params=d["model"]["num_params"],
        gpus=d["num_gpus"],
        seq_len=lay["seq_len"],
        global_batch=lay["global_batch_size"],
        framework=lay["framework"],
        peak_bytes=d["memory"]["total_bytes"],
        capacity_bytes=d["memory"]["capacity_bytes"],
        step_s=t["step_s"],
        mfu=t["mfu"],
        tokens_per_s=t["tokens_per_s"],
    )
    row.update(_time_and_cost(grid, point, t["tokens_per_s"], d["num_gpus"]))


def _time_and_cost(
    grid: Grid, point: Point, tokens_per_s: float | None, gpus: int
) -> dict[str, Any]:
    """Time to train the grid's ``tokens`` (seconds: tokens ÷ tokens per second, the definition of
    :class:`optimizer.problem.Objective` ``time-to-train``) and its cost (dollars: that time in
    hours × GPUs × the part's price per GPU-hour, :class:`Objective` ``cost``); None without a
    token budget, a rate or a price."""
    tokens = grid.base.get("tokens")
    if tokens is None or not tokens_per_s:
        return {}

    seconds = parse_count(tokens, "tokens") / tokens_per_s
    price = grid.price(point)
    cost = (
        None
        if price is None
        else seconds / 3600 * gpus * float(parse_number(price, "gpu_hour_price"))
    )
    return {"time_to_train_s": seconds, "cost_usd": cost}


def _fill_inputs(grid: Grid, point: Point, row: dict[str, Any]) -> None:
    """An infeasible search point's s, B, frameworks searched and parameter count, as the search
    read them."""
    try:
        problem = search_problem({"scenario": grid.scenario(point)})
    except PlannerError:
        return
    case = problem.jobs[0].case
    row.update(seq_len=case.training.seq_len, global_batch=case.training.global_batch_size)
    row["framework"] = row["framework"] or ",".join(str(f) for f in problem.space.frameworks)
    if case.model.arch is not None:
        row["num_params"] = count_params(case.model.arch).total
