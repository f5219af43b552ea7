"""Three of the other tabs: ``pipeline``, ``mfu``, ``ckpt`` (``rlhf`` is in
:mod:`interface.cli.rlhf`).

Options are read as text into each tab's request (:mod:`interface.tab_requests`) and parsed by
:mod:`interface.tabs` (numbers as 4e6, 4,000,000, 4e 6, 70B), so that any bad value is one
``Error: …`` line and exit code 2, naming the tab's parameter and quoting the value as typed; the
help names a number option's kind as evaluate's typed options do (``COUNT``, ``NUMBER``).
"""

from __future__ import annotations

import math
import shutil
import sys
import textwrap
import time
from fractions import Fraction
from typing import Any

import click

from trainplan.interface import tabs
from trainplan.interface.cli import cli
from trainplan.interface.cli.common import COUNT, POSITIVE, echo_json, output
from trainplan.interface.render.chart_layout import chunk_letter, pass_label
from trainplan.interface.render.timeline_text import render_split_timeline, split_summary
from trainplan.interface.tab_requests import CkptRequest, MfuRequest, PipelineRequest, tab_request
from trainplan.interface.tab_values import fmt_number
from trainplan.model.checkpointing import tensor_state
from trainplan.model.frameworks import Framework
from trainplan.model.schedule import TIMELINE_SCHEDULES

__all__ = ["pipeline_cmd", "mfu_cmd", "ckpt_cmd", "render_timeline", "render_step"]

JSON = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


# ------------------------------------------------------------------------------------ pipeline
MAX_BANDS = 4
"""A labelled timeline wider than the terminal wraps into at most this many bands of rows; a
longer one is drawn scaled (one column per time bin, F/B/# for the pass running there)."""


def render_timeline(report: dict[str, Any], width: int = 120) -> list[str]:
    """The timeline as text, one row per stage, no line longer than ``width`` columns.

    Each pass is labelled: ``F3`` the forward of micro-batch 3, ``B3`` its backward; with
    interleaving the model chunk's letter follows (``F3a``, ``B3b``: chunk a, b, … of the
    stage). A chunk's forward gets the columns its label needs, a backward ``backward_ratio``
    times as many (filled ``-`` and ``=``); ``.`` is idle, the bubble. When the labelled timeline
    is wider than ``width`` it wraps into bands (each headed by its start time), up to
    :data:`MAX_BANDS`; beyond that the time axis is scaled and each column shows the pass at its
    middle (``F``, ``B``, ``#`` both). The last lines are the legend. Split-backward schedules:
    :func:`interface.render.timeline_text.render_split_timeline`.
    """
    if "pass_times" in report:
        return render_split_timeline(report, width)
    p, v = report["stages"], report["virtual_stages"]
    total = Fraction(report["step_time_units"]).limit_denominator(10**6)
    prefix = len(f"stage {p - 1} |")
    cols = max(10, width - prefix)
    unit = Fraction(1, v)  # one chunk's forward
    units = math.ceil(total / unit)
    slots = [
        [
            (
                Fraction(s["start"]).limit_denominator(10**6),
                Fraction(s["end"]).limit_denominator(10**6),
                "F" if s["pass"] == "forward" else "B",
                pass_label(s, v),
            )
            for s in row["slots"]
        ]
        for row in report["timeline"]
    ]
    need = 1 + max((len(x[3]) for row in slots for x in row), default=1)
    per_unit = max(need, cols // units)
    scaled = per_unit * units > cols * MAX_BANDS
    if scaled:
        dt, ncols = total / cols, cols
        grid = [_scaled_cells([(a, b, k, 0) for a, b, k, _ in row], dt, ncols) for row in slots]
    else:
        dt, ncols = unit / per_unit, math.ceil(total / (unit / per_unit))
        grid = [_labelled_cells(row, dt, ncols) for row in slots]
    lines: list[str] = []
    bands = math.ceil(ncols / cols)  # of equal width, each a whole number of forward slots
    band = min(cols, math.ceil(ncols / bands / per_unit) * per_unit) if bands > 1 else ncols
    for start in range(0, ncols, band):
        if band < ncols:
            lines += [""] if start else []
            lines.append(f"{'t = ':>{prefix}}{float(start * dt):g}")
        for stage, cells in enumerate(grid):
            lines.append(
                f"stage {stage:>{len(str(p - 1))}} |" + "".join(cells[start : start + band])
            )
    return lines + _timeline_legend(v, p, float(dt) if scaled else None, width)


def _labelled_cells(
    slots: list[tuple[Fraction, Fraction, str, str]], dt: Fraction, ncols: int
) -> list[str]:
    """One stage's row: each pass its label and fill (``F3a-``, ``B3a===``), ``.`` idle."""
    cells = ["."] * ncols
    for a, b, kind, label in slots:
        lo, hi = round(a / dt), round(b / dt)
        text = label if len(label) <= hi - lo else kind
        cells[lo:hi] = text + ("-" if kind == "F" else "=") * (hi - lo - len(text))
    return cells


def _timeline_legend(v: int, p: int, scaled_dt: float | None, width: int) -> list[str]:
    """The legend under the timeline, wrapped at ``width``."""
    if scaled_dt is not None:
        text = (
            f"scaled: 1 column = {scaled_dt:.3g} forward times; F forward, B backward, # both, "
            ". idle (the bubble)"
        )
    elif v == 1:
        text = "F3-- forward of micro-batch 3, B3==== its backward, . idle (the bubble)"
    else:
        letters = ", ".join(chunk_letter(c) for c in range(v))
        text = (
            f"F3a- forward of micro-batch 3 on model chunk a, B3a=== its backward, . idle (the "
            f"bubble); chunks {letters}: chunk c of stage i holds virtual stage c·{p} + i"
        )
    return textwrap.wrap(text, max(20, width))


def _scaled_cells(
    slots: list[tuple[Fraction, Fraction, str, int]], dt: Fraction, ncols: int
) -> list[str]:
    """Per column: ``F`` / ``B`` when only that pass runs in it, ``#`` both, ``.`` mostly idle."""
    busy = [{"F": Fraction(0), "B": Fraction(0)} for _ in range(ncols)]
    for a, b, kind, _ in slots:
        for c in range(int(a / dt), min(ncols, math.ceil(b / dt))):
            busy[c][kind] += max(Fraction(0), min(b, (c + 1) * dt) - max(a, c * dt))
    cells = []
    for col in busy:
        if col["F"] + col["B"] <= dt / 2:
            cells.append(".")
        else:
            cells.append("#" if col["F"] and col["B"] else "F" if col["F"] else "B")
    return cells


@cli.command("pipeline")
@click.option(
    "--stages",
    "-p",
    metavar="COUNT",
    required=True,
    help="Pipeline stages (ranks) p, at most 256 (one timeline row each).",
)
@click.option(
    "--microbatches",
    "-m",
    metavar="COUNT",
    required=True,
    help="Micro-batches per step m (DualPipe: both ends).",
)
@click.option(
    "--schedule",
    default="1f1b",
    show_default=True,
    help=f"One of {', '.join(TIMELINE_SCHEDULES)}: classic, or with the backward split into input "
    "and weight gradients.",
)
@click.option(
    "--virtual-stages",
    "-v",
    metavar="COUNT",
    help="Chunks per rank (default 1; 2 under zb-v, dualpipe, dualpipev; interleaved needs 2 or "
    "more and m a multiple of p).",
)
@click.option(
    "--backward-ratio",
    metavar="NUMBER",
    help="Classic schedules: backward / forward time (default 2).",
)
@click.option(
    "--t-f",
    "t_f",
    metavar="NUMBER",
    help="Split schedules: one chunk's forward time T_F (default 1).",
)
@click.option(
    "--t-b",
    "t_b",
    metavar="NUMBER",
    help="Split schedules: input-gradient backward time T_B (default 1).",
)
@click.option(
    "--t-w",
    "t_w",
    metavar="NUMBER",
    help="Split schedules: weight-gradient backward time T_W (default 1).",
)
@click.option(
    "--t-fb",
    "t_fb",
    metavar="NUMBER",
    help="DualPipe: overlapped forward + backward block time F&B (default T_F + T_B + T_W).",
)
@click.option(
    "--framework",
    help=f"Refuse a schedule this framework cannot run ({', '.join(f.value for f in Framework)}).",
)
@click.option(
    "--width",
    type=COUNT,
    help="Columns of the text timeline (default: the terminal's width; 120 when not a terminal).",
)
@click.option("--png", type=output(".png"), help="Write the chart as PNG (plot extra).")
@click.option("--svg", type=output(".svg"), help="Write the chart as SVG (plot extra).")
@JSON
def pipeline_cmd(width, png, svg, as_json, **kw) -> None:
    """Pipeline bubble and timeline: GPipe, 1F1B, interleaved 1F1B, zero-bubble (ZB-H1, ZB-H2,
    ZB-V), DualPipe and DualPipeV, with every stage taking the same time (evaluate times each
    stage of a model, the embedding and the output layer on the end stages, so its bubble
    differs where the stages do)."""
    r = tabs.pipeline_report(tab_request(PipelineRequest, kw))
    for path in (png, svg):
        if path is not None:
            from trainplan.interface.render import plots

            plots.pipeline_chart(r, path)
    if as_json:
        echo_json(r)
        return
    lines = split_summary(r) if "pass_times" in r else _classic_summary(r)
    columns = width or shutil.get_terminal_size((120, 24)).columns
    for line in [*lines, "", *render_timeline(r, columns)]:
        click.echo(line)


def _classic_summary(r: dict[str, Any]) -> list[str]:
    held = " ".join(f"{h:g}" for h in r["held_per_stage"])
    return [
        f"{r['schedule']}: {r['stages']} stages × {r['microbatches']} micro-batches, "
        f"v = {r['virtual_stages']}, backward = {r['backward_ratio']} × forward, every stage the "
        "same time (evaluate times each stage of a model: its bubble differs where they do)",
        f"bubble_fraction {r['bubble_fraction_exact']} = {_pct(r['bubble_fraction'])}   "
        f"idle share of the step, {r['bubble_fraction_formula']}",
        f"bubble_ratio    {_pct(r['bubble_ratio'])}   bubble / ideal compute, "
        f"{r['bubble_ratio_formula']}",
        f"held per stage  {held}   micro-batches of activations at the peak",
    ]


# ------------------------------------------------------------------------------------ MFU
@cli.command("mfu")
@click.option("--params", metavar="NUMBER", help="Model parameters N (70e9, 70B).")
@click.option(
    "--model",
    help="A catalogue model or a config.json (as evaluate's), instead of --params and the "
    "dimensions: N its active parameters.",
)
@click.option("--tokens", metavar="NUMBER", help="Tokens in one step (all chips).")
@click.option("--step-seconds", metavar="NUMBER", help="Seconds per step (7, 7s or 7000ms).")
@click.option("--tokens-per-second", metavar="NUMBER", help="Training throughput, all chips.")
@click.option(
    "--achieved-pflops",
    metavar="NUMBER",
    help="Reported model FLOP rate of the whole job, PFLOP/s.",
)
@click.option(
    "--achieved-tflops-per-gpu",
    metavar="NUMBER",
    help="Reported model FLOP rate per chip, TFLOP/s.",
)
@click.option(
    "--gpu",
    help="Accelerator: a name from the table or a PATH.toml describing one (peak from there).",
)
@click.option(
    "--peak-tflops",
    metavar="NUMBER",
    help="Dense BF16 peak per chip, TFLOP/s (989 or 0.989PFLOPS; instead of --gpu).",
)
@click.option("--chips", metavar="COUNT", default="1", show_default=True, help="Chips in the job.")
@click.option(
    "--attention/--no-attention",
    default=False,
    help="Count attention FLOPs: PaLM's 12·L·H·Q·T from the dimensions, or with --model the "
    "model's own per-layer count. Default off: 6·N per token only (PaLM's MFU without them).",
)
@click.option(
    "--causal/--non-causal",
    default=None,
    help="Attention over the causal mask's pairs, or PaLM's full s² a layer. Default: with "
    "--model the model's own, causal (evaluate's count); without, non-causal (PaLM's).",
)
@click.option("--layers", metavar="COUNT", help="Layers L (attention FLOPs).")
@click.option("--heads", metavar="COUNT", help="Attention heads H.")
@click.option("--head-dim", metavar="COUNT", help="Head dimension Q.")
@click.option(
    "--hidden", metavar="COUNT", help="Hidden size (= H·Q), instead of --heads/--head-dim."
)
@click.option("--seq-len", metavar="COUNT", help="Sequence length T.")
@click.option(
    "--recomputed-flops-pct",
    metavar="NUMBER",
    help="Recomputed FLOPs as a percentage of model FLOPs (HFU): 25 or 25% is a quarter; 0.25 "
    "is 0.25 %.",
)
@click.option(
    "--recompute",
    help="none, selective or full: derive the recomputed FLOPs, those the MFU counts (without "
    "--attention no attention core: full the layers' matmuls, selective none).",
)
@JSON
def mfu_cmd(as_json: bool, **kw: Any) -> None:
    """MFU and HFU from a measured step, a throughput or a reported FLOP rate."""
    r = tabs.mfu_report(tab_request(MfuRequest, kw))
    if as_json:
        echo_json(r)
        return
    model = r["model"]
    if model:
        of = "" if model["params_total"] == model["params_active"] else " active"
        total = "" if not of else f" of {fmt_number(model['params_total'])}"
        seq = {"catalogue": f"; seq_len {model['seq_len']} the catalogue's"}.get(
            model["seq_len_from"] or "", ""
        )
        click.echo(
            f"model {model['name']}: N = {fmt_number(model['params_active'])}{of}{total}{seq}"
        )
    click.echo(f"mfu  {r['arithmetic']}")
    if r["attention"]["included"]:
        click.echo(
            f"     without attention FLOPs: {_pct(r['mfu_without_attention'])}; "
            f"attention {r['attention']['formula']}"
        )
    click.echo(f"hfu  {r['hfu_arithmetic']}")
    click.echo(f"peak {r['peak_flops_per_s'] / 1e12:g} TFLOP/s per chip — {r['peak_source']}")


# ------------------------------------------------------------------------------------ ckpt
_CELL = {"recomputed": "R", "kept": "C", "held": "#", "discarded": "x", "free": "."}


_CELLS = 80
"""The most tensors :func:`render_step` draws a cell each; above it a bar of those held."""
_BAR = 60
"""The bar's columns for all n + 1 tensors."""


def render_step(report: dict[str, Any], st: dict[str, Any]) -> str:
    """One step as a text line: a cell per tensor (``C`` checkpoint, ``#`` held, ``R``
    recomputed, ``x`` discarded now, ``.`` free) and the count against no checkpointing."""
    n = report["layers"]
    if n + 1 <= _CELLS:
        cells = []
        for j in range(n + 1):
            name = _name(report, j)
            cells.append(_CELL[tensor_state(st, name)])
        picture = "".join(cells)
    else:
        picture = "#" * round(st["held"] * _BAR / (n + 1))
    return (
        f"{st['step']:>4} {st['phase']:<9} layer {st['layer']:<4} {picture}  "
        f"{st['held']:>3} held (no checkpointing: {st['held_without_checkpointing']})"
    )


def _name(report: dict[str, Any], j: int) -> str:
    if report["labels"] == "outputs":
        return "input" if j == 0 else f"out{j}"
    return "output" if j == report["layers"] else f"in{j + 1}"


@cli.command("ckpt")
@click.option("--layers", "-n", metavar="COUNT", required=True, help="Layers n.")
@click.option(
    "--every", "-k", metavar="COUNT", help="Checkpoint every k layers [default: round(√n)]."
)
@click.option(
    "--labels",
    default="outputs",
    show_default=True,
    help="Name tensors by layer outputs or inputs.",
)
@click.option("--step", metavar="COUNT", help="Show only step S (1 … 3n).")
@click.option("--play", is_flag=True, help="Animate the steps in the terminal.")
@click.option(
    "--delay",
    type=POSITIVE,
    default="0.6",
    show_default=True,
    help="Seconds per frame with --play and --gif.",
)
@click.option("--gif", type=output(".gif"), help="Write the animation (plot extra).")
@click.option(
    "--chart",
    type=output(".png", ".svg", ".pdf"),
    help="Write tensors held over time, both lines, as PNG/SVG (plot extra).",
)
@JSON
def ckpt_cmd(layers, every, labels, step, play, delay, gif, chart, as_json) -> None:
    """Walk through activation checkpointing of an n-layer chain, step by step."""
    request = {"layers": layers, "every": every, "labels": labels, "step": step}
    r = tabs.ckpt_report(tab_request(CkptRequest, request))
    if gif is not None or chart is not None:
        from trainplan.interface.render import plots

        if gif is not None:
            plots.ckpt_gif(r, gif, delay)
        if chart is not None:
            plots.held_chart(r, chart)
    if as_json:
        echo_json(r)
        return
    head = (
        f"{r['layers']} layers, checkpoint every {r['every']} "
        f"(checkpoints: {', '.join(r['checkpoints'])})\n"
        f"peak held {r['peak_held']} ({r['peak_held_formula']}) vs "
        f"{r['peak_held_without_checkpointing']} without checkpointing; "
        f"recompute overhead +{r['recompute_overhead']:.1%} "
        f"({r['recompute_overhead_formula']})"
    )
    legend = (
        "cells: C checkpoint, # held, R recomputed, x discarded now, . free"
        if r["layers"] + 1 <= _CELLS
        else f"bar: tensors held, one # per {(r['layers'] + 1) / _BAR:.3g} tensors (over "
        f"{_CELLS} tensors a cell each would not fit a line)"
    )
    if play and sys.stdout.isatty():
        for st in r["steps"]:
            click.clear()
            click.echo(f"{head}\n{legend}\n\n{render_step(r, st)}")
            time.sleep(float(delay))
        return
    click.echo(f"{head}\n{legend}")
    for st in r["steps"]:
        click.echo(render_step(r, st))


# The rlhf tab lives in its own module with rlhf-plan; importing this one registers it too (the
# tab tests register "the tabs" by importing this module).
from trainplan.interface.cli import rlhf as _rlhf  # noqa: E402, F401
