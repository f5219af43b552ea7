"""``trainplan frontier``: the Pareto frontier of the search's objective against memory per GPU,
GPU count or price (uniform layouts, or with ``--per-stage`` the better of uniform and per-stage
plans at each point)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from trainplan.interface.cli import cli
from trainplan.interface.cli.clock import command_started
from trainplan.interface.cli.common import COUNT, echo_json, output
from trainplan.interface.cli.interrupt import interruptible, stop_between_tables
from trainplan.interface.cli.options import Decorator
from trainplan.interface.cli.search import (
    exit_if,
    infeasible,
    search_options,
    settings_note,
    table_progress,
)
from trainplan.interface.commands import (
    PER_STAGE_FRONTIER_SEARCHES,
    check_searches_apply,
    frontier_json,
    per_stage_frontier_json,
)
from trainplan.interface.render.frontier_text import frontier_text
from trainplan.interface.render.report import write_csv
from trainplan.interface.requests import search_request
from trainplan.model.errors import InfeasibleError

__all__ = ["frontier_cmd", "FRONTIER_OPTIONS"]


@contextmanager
def _frontier_progress(as_json: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A tqdm bar on stderr while ``frontier --per-stage`` runs its searches (searches run, the
    frontier's points so far, elapsed time) — on a terminal only, never with --json (as
    ``rlhf-plan`` and ``sweep`` show theirs)."""
    if as_json or not sys.stderr.isatty():
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(desc="per-stage searches", unit=" search", leave=False, file=sys.stderr)

    def report(searches: int, points: int) -> None:
        bar.update(searches - bar.n)
        bar.set_postfix_str(f"{points} points")

    try:
        yield report
    finally:
        bar.close()


FRONTIER_OPTIONS: list[Decorator] = [
    click.option(
        "--against",
        type=click.Choice(["memory", "gpus", "price"], case_sensitive=False),
        default="memory",
        show_default=True,
        help="Second axis: memory per GPU, GPU count, or cluster $/hour.",
    ),
    click.option(
        "--csv", "csv_path", type=output(".csv"), help="Write the frontier as CSV (pandas)."
    ),
    click.option(
        "--png",
        "png_path",
        type=output(".png", ".svg", ".pdf"),
        help="Plot it: .png, .svg or .pdf (plot extra).",
    ),
    click.option(
        "--per-stage",
        "per_stage",
        is_flag=True,
        default=None,
        help="Every point the better of the best uniform layout and the best per-stage plan (each "
        "stage's layers and fully recomputed layers, as search --per-stage) meeting its axis value; "
        "prints which, and the gain over the uniform layout.",
    ),
    click.option(
        "--per-stage-shapes",
        "per_stage_shapes",
        type=COUNT,
        default=None,
        help="With --per-stage: each search takes only this many shapes per stage; default every "
        "shape.",
    ),
    click.option(
        "--per-stage-searches",
        "per_stage_searches",
        type=COUNT,
        default=None,
        help="With --per-stage: run at most this many per-stage searches, each to its proof "
        f"(default against memory {PER_STAGE_FRONTIER_SEARCHES}; against gpus or price every "
        "job); a count, not a time, so every machine finds the same points.",
    ),
]


@cli.command("frontier")
@search_options("frontier", ("Frontier", FRONTIER_OPTIONS))
def frontier_cmd(
    as_json: bool,
    against: str,
    csv_path: str | None,
    png_path: str | None,
    per_stage: bool | None,
    per_stage_shapes: int | None,
    per_stage_searches: int | None,
    **kw: Any,
) -> None:
    """The Pareto frontier of step time (or the objective) against memory per GPU, GPU count or price.

    Example: trainplan frontier --model llama3-405b --gpus 16384 --csv frontier.csv
    """
    options = {**kw, "per_stage": per_stage, "per_stage_shapes": per_stage_shapes}
    request = search_request(
        {**options, "started": command_started()}
    )  # --time-limit: the command's
    per_stage = request.per_stage
    check_searches_apply(per_stage_searches, per_stage)
    tables = stop_between_tables(table_progress(as_json))
    try:
        if per_stage:
            with _frontier_progress(as_json) as progress:
                run, stopped = interruptible(
                    lambda: per_stage_frontier_json(request, against, progress, per_stage_searches)
                )
        else:
            run, stopped = interruptible(lambda: frontier_json(request, against, tables))
    except InfeasibleError as err:
        infeasible(err, as_json)
        return
    out = run.json
    out["interrupted"] = stopped
    rows = out["points"]
    if csv_path is not None:
        write_csv(rows, csv_path)
    if png_path is not None:
        from trainplan.interface.render.plots import frontier_chart

        frontier_chart(rows, against, png_path)
    if as_json:
        echo_json(out)
        exit_if(stopped)
        return
    if stopped:
        click.echo("Interrupted (Ctrl-C): the points found before it, not proven")
    click.echo(_headline(out, run.objective, against, per_stage))
    for note in out["notes"]:
        click.echo(f"Note: {note}")
    settings_note(out)
    click.echo(frontier_text(rows, against, run.objective))
    if csv_path is not None:
        click.echo(f"CSV: {csv_path}")
    exit_if(stopped)


def _headline(out: dict[str, Any], objective: str, against: str, per_stage: bool) -> str:
    """The frontier's first line: what against what, how many points, its status and times
    (per stage: the searches run and the time limit, saying when it is the default).

    >>> _headline({"points": [{}], "proof": "not proven", "searches": 1, "seconds": 10.0},
    ...           "step-time", "memory", True)
    'Pareto frontier, uniform or per stage: step-time against memory, 1 point (not proven; 1 per-stage search, 10.00 s)'
    """
    rows = out["points"]
    if not per_stage:
        return (
            f"Pareto frontier: {objective} against {against}, {len(rows)} "
            f"point{'' if len(rows) == 1 else 's'} of "
            f"{out['candidates']:,} candidates ({out['status']}; tables "
            f"{out['tables_seconds']:.2f} s, CP-SAT {out['solve_seconds']:.2f} s)"
        )
    return (
        f"Pareto frontier, uniform or per stage: {objective} against {against}, "
        f"{len(rows)} point{'' if len(rows) == 1 else 's'} ({out['proof']}; {out['searches']} "
        f"per-stage search{'' if out['searches'] == 1 else 'es'}, {out['seconds']:.2f} s)"
    )
