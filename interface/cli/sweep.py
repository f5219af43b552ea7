"""``trainplan sweep`` and ``trainplan sweep-plot``: many searches from a grid file, on a local
process pool or on Ray, into resumable Parquet results; and the study's standard figures."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from trainplan.interface.cli import cli
from trainplan.interface.cli.common import COUNT, WHOLE, echo_json, fail, list_option, output
from trainplan.interface.cli.options import Decorator, option_groups
from trainplan.interface.outputs import writing
from trainplan.model.errors import InputError, check_applicable


class _Progress:
    """A tqdm bar on stderr (points done, rate, time left), only on a terminal and never with
    --json; made when the sweep knows how many points it runs."""

    def __init__(self, show: bool) -> None:
        self.show = show and sys.stderr.isatty()
        self.bar: Any = None

    def start(self, todo: int, total: int) -> None:
        if self.show:
            from tqdm import tqdm

            desc = f"sweep ({total - todo:,} of {total:,} done before)" if todo < total else "sweep"
            self.bar = tqdm(
                total=todo, desc=desc, unit="point", file=sys.stderr, dynamic_ncols=True
            )

    def rows(self, batch: list[dict[str, Any]]) -> None:
        if self.bar is not None:
            self.bar.update(len(batch))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _default_out(grid: str) -> str:
    return str(Path(grid).with_suffix(".parquet"))


RESULTS: list[Decorator] = [
    click.option(
        "--out",
        type=output(".parquet"),
        help="Results file (Parquet), written as points finish; default GRID with .parquet. Run "
        "the same command again to resume a stopped sweep.",
    ),
    click.option("--csv", "csv_path", type=output(".csv"), help="Also write the results as CSV."),
    click.option(
        "--restart", is_flag=True, help="Discard results already in --out and run every point."
    ),
]
"""Where the rows go, and whether a sweep resumes."""

ENGINE: list[Decorator] = [
    click.option(
        "--engine",
        type=click.Choice(["pool", "ray"], case_sensitive=False),
        default="pool",
        show_default=True,
        help="pool: local processes, no server; ray: a local Ray instance, or --address's cluster.",
    ),
    click.option(
        "--workers", type=COUNT, help="Processes (pool) or CPUs (local Ray); default every core."
    ),
    click.option(
        "--address",
        help="With --engine ray: an existing cluster (ray://host:10001 or host:6379, or auto).",
    ),
]
"""Where the points run."""

REPORT: list[Decorator] = [
    list_option(
        "--point",
        "points",
        type=WHOLE,
        help="Run only these points (numbered from 0; several: repeat it, or 3;7), alone in "
        "this process, and print their rows; nothing is written.",
    ),
    list_option(
        "--group-by",
        "group_by",
        help="Columns the summary's best points are per (several: repeat it, or model;gpu; "
        "default model).",
    ),
    click.option(
        "--json", "as_json", is_flag=True, help="Print the summary (or the --point rows) as JSON."
    ),
]
"""What the command prints."""


@cli.command("sweep")
@click.argument("grid", type=click.Path(exists=True, dir_okay=False))
@option_groups(("Results", RESULTS), ("Engine", ENGINE), ("Output", REPORT))
def sweep_cmd(
    grid: str,
    out: str | None,
    csv_path: str | None,
    engine: str,
    workers: int | None,
    address: str | None,
    restart: bool,
    points: tuple[int, ...],
    group_by: tuple[str, ...],
    as_json: bool,
) -> None:
    """Many searches (or evaluations) over models, accelerators, GPU counts, sequence lengths,
    batches, frameworks, recipes and hardware what-ifs: every point of GRID (a TOML file) is one
    search with the single command's inputs and answer. Rows go to Parquet as they finish; a
    summary follows (points by status, why the infeasible ones are, the best per group).

    Example: trainplan sweep study.toml --csv study.csv
    """
    from trainplan.interface import sweep
    from trainplan.interface.sweep.engines import WorkerLost
    from trainplan.interface.sweep.points import columns
    from trainplan.interface.sweep.summary import check_group_by

    g = sweep.load_grid(grid)
    if points:
        given = {"out": out, "csv": csv_path, "workers": workers, "address": address}
        given |= {"restart": restart or None, "engine": None if engine == "pool" else engine}
        why = "--point runs the points alone in this process and writes nothing"
        check_applicable(given, dict.fromkeys(given, why))
        check_applicable(  # read only by the summary, which --point does not print
            {"group_by": ";".join(group_by) or None},
            {"group_by": "--point prints the points' rows, not the summary it groups"},
        )
        _points_alone(g, points, as_json)
        return
    check_group_by(group_by, {name for name, _ in columns(g)})  # before the sweep, not after it
    runner = sweep.engine(engine, workers, address)
    out_path = out or str(output(".parquet").convert(_default_out(grid), None, None))
    bar = _Progress(not as_json)
    try:
        run = sweep.run_sweep(g, out_path, runner, restart, bar.start, bar.rows)
    except KeyboardInterrupt:
        fail(
            f"interrupted; the rows done are kept beside {out_path}: run the same command to resume",
            130,
        )
        return
    except WorkerLost as err:
        fail(f"{err} beside {out_path}: run the same command to resume", 1)
        return
    finally:
        bar.close()
        runner.close()
    if csv_path is not None:
        with writing(csv_path, "--csv"):
            run.frame.to_csv(csv_path, index=False)
    _summary(g, run, out_path, csv_path, runner.describe(), group_by or ("model",), as_json)


def _summary(
    g: Any,
    run: Any,
    out: str,
    csv_path: str | None,
    where: str,
    group_by: tuple[str, ...],
    as_json: bool,
) -> None:
    from trainplan.interface.sweep.results import results_meta
    from trainplan.interface.sweep.summary import summary_json, summary_text

    s = summary_json(run.frame, results_meta(out), group_by)
    s.update(out=out, csv=csv_path, ran=run.ran, seconds=run.seconds, engine=where)
    if as_json:
        echo_json(s)
    else:
        what = f"{g.command}" + (f", objective {s['objective']}" if g.command == "search" else "")
        before = f"; {s['points'] - run.ran:,} were done before" if run.ran < s["points"] else ""
        head = (
            f"Swept {s['points']:,} point{'' if s['points'] == 1 else 's'} of {g.source} "
            f"({what}): {run.ran:,} run in "
            f"{run.seconds:,.1f} s on a {where}{before}"
        )
        click.echo(summary_text(s, head))
        click.echo(f"\nResults: {out}" + (f"; CSV: {csv_path}" if csv_path else ""))
    if s["internal_errors"]:
        sys.exit(1)


def _points_alone(g: Any, points: tuple[int, ...], as_json: bool) -> None:
    from trainplan.interface.sweep.points import run_points

    rows = run_points(g, [g.point(i).index for i in points])
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        click.echo("\n".join(f"{k:>18}  {v}" for k, v in row.items() if v is not None))
        click.echo("")


FIGURE: list[Decorator] = [
    click.option(
        "--png",
        "png_path",
        required=True,
        type=output(".png", ".svg", ".pdf"),
        help="The figure: .png, .svg or .pdf.",
    ),
    click.option(
        "--kind",
        type=click.Choice(["scaling", "heatmap"], case_sensitive=False),
        default="scaling",
        show_default=True,
        help="scaling: the metric against GPU count, a line per part, a panel per model; "
        "heatmap: the metric under each multiplier of --what-if, a row per model.",
    ),
    click.option(
        "--metric",
        type=click.Choice(["time-to-train", "cost", "step-time", "mfu"], case_sensitive=False),
        help="The figure's value: time to train the grid's tokens, its cost (the grid's "
        "gpu_hour_price), seconds per step, or MFU (default: time-to-train where the grid gives "
        "tokens, else step-time).",
    ),
    click.option(
        "--what-if", "what_if", help="With --kind heatmap: the what-if (e.g. hbm_capacity)."
    ),
]
"""The figure drawn."""


@cli.command("sweep-plot")
@click.argument("results")
@option_groups(("Figure", FIGURE))
def sweep_plot_cmd(
    results: str, png_path: str, kind: str, metric: str | None, what_if: str | None
) -> None:
    """The standard figures of a sweep, from its results file (a sweep still running included):
    time to train, cost, step time or MFU against the GPU count per part, or a heat map of a
    hardware what-if against model size.

    Example: trainplan sweep-plot study.parquet --png scaling.png --metric cost
    """
    from trainplan.interface.render import plots
    from trainplan.interface.sweep import charts, load_results

    if kind == "scaling":
        check_applicable({"what_if": what_if}, {"what_if": "it applies to --kind heatmap"})
    elif what_if is None:  # raised, so that the refusal names the flag (--what-if:)
        raise InputError("what_if: --kind heatmap needs it, e.g. --what-if hbm_capacity")
    frame = load_results(results)
    metric = metric or charts.default_metric(frame)
    if kind == "scaling":
        series, m, note = charts.scaling_series(frame, metric)
        plots.sweep_scaling_chart(series, m.label, note, png_path, m.bounded)
    else:
        assert what_if is not None
        plots.sweep_heatmap(charts.heatmap_cells(frame, what_if, metric), png_path)
    click.echo(f"Figure: {png_path}")
