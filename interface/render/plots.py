"""Charts of the planner, pipeline, checkpointing and frontier: the only matplotlib import
(optional extra).

``pip install 'trainplan[plot]'`` (or ``[web]``) installs matplotlib; without it every function
here raises an :class:`~model.errors.InputError` saying so. Each function takes a ``--json``
object (:mod:`interface.tabs`, :mod:`interface.commands`) and writes one file, whose format follows
the suffix (``.png``, ``.svg``, ``.pdf``; ``.gif`` for the animation), or SVG into a binary stream
(:func:`svg`, the web app's figures).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from trainplan.interface.render.chart_layout import (
    MEMORY_PARTS,
    STATE_LEGEND,
    chunk_letter,
    layout_key,
    pass_label,
    staircase,
    tensor_label,
)
from trainplan.interface.render.chart_layout import place_labels as _place_labels
from trainplan.model.checkpointing import tensor_state
from trainplan.model.errors import InputError
from trainplan.model.units import parse_positive

__all__ = [
    "pipeline_chart",
    "held_chart",
    "ckpt_gif",
    "ckpt_frame",
    "memory_chart",
    "frontier_chart",
    "frontier_figure",
    "pipeline_figure",
    "MAX_BOXES",
    "sweep_scaling_chart",
    "sweep_heatmap",
    "svg",
]

Target = str | Path | IO[bytes]
"""Where a chart goes: a file path, or a binary stream that receives SVG."""

_FWD, _BWD, _IDLE = "#4c78a8", "#f58518", "#eeeeee"


def _pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend, or a clear error."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError(
            "plots: matplotlib is not installed; pip install 'trainplan[plot]'"
        ) from None
    return plt


def _suffix(path: Target, allowed: tuple[str, ...]) -> Any:
    """The output file, checked by the one rule for output paths (interface.inputs.output_path);
    a stream passes as it is."""
    from trainplan.interface.inputs import output_path

    return path if hasattr(path, "write") else output_path(path, "path", allowed)  # type: ignore[arg-type]


def _save(fig: Any, out: Any) -> None:
    """Write a figure (SVG into a stream); what the file system refuses is an InputError
    (interface.inputs.writing)."""
    from trainplan.interface.inputs import writing

    if hasattr(out, "write"):
        fig.savefig(out, format="svg")
        return
    with writing(out, "path"):
        fig.savefig(out)


_LOCK = threading.Lock()
"""pyplot's state is global: one figure at a time (the web app draws from several threads)."""


def svg(draw: Callable[[IO[bytes]], Any]) -> str:
    """The SVG text of what ``draw(stream)`` writes (one of this module's charts given a stream),
    with text kept as text (selectable, searchable; the browser's fonts), one figure at a time.

    Raises
    ------
    InputError
        matplotlib missing (the ``[web]`` or ``[plot]`` extra).
    """
    import io

    plt = _pyplot()
    with _LOCK, plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "trainplan"}):
        buf = io.BytesIO()
        draw(buf)
    return buf.getvalue().decode()


_HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "++", "--")
"""Hatch of model chunk 0, 1, 2, … (cycled), so chunks stay apart in greyscale too."""


def _chunk_colour(plt: Any, forward: bool, chunk: int, chunks: int) -> Any:
    """Forward in blues, backward in oranges, darker for later model chunks (one shade when v = 1)."""
    if chunks == 1:
        return _FWD if forward else _BWD
    cmap = plt.get_cmap("Blues" if forward else "Oranges")
    return cmap(0.45 + 0.45 * chunk / (chunks - 1))


MAX_BOXES = 3000
"""Passes drawn one box each; a longer timeline (64 stages × 512 micro-batches has 65,536) is
drawn summarised, as time bins coloured by the share of forward, backward and idle time in each,
so the figure stays small for a browser (a few hundred kB, not 18 MB)."""
SUMMARY_BINS = 1600
"""Time bins per stage of a summarised timeline."""


def pipeline_chart(report: dict[str, Any], path: Target) -> Any:
    """Write :func:`pipeline_figure` to ``path`` (SVG into a stream).

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    out = _suffix(path, (".png", ".svg", ".pdf"))
    plt = _pyplot()
    with plt.rc_context({"hatch.linewidth": 0.6}):
        if "pass_times" in report:  # split-backward schedules: F, B, I, W and overlapped blocks
            _split_pipeline_figure(plt, report, out)
            return out
        fig = pipeline_figure(report)
        fig.tight_layout()
        _save(fig, out)
    plt.close(fig)
    return out


def pipeline_figure(report: dict[str, Any]) -> Any:
    """Gantt chart of a simulated pipeline step: one row per stage, forward in blues and backward
    in oranges, the bubble left blank. Each pass is a box labelled with its micro-batch where the
    label fits; with interleaving each model chunk has its own shade and hatch and its letter
    after the micro-batch (``3a``: micro-batch 3 on chunk a; chunk c of stage i holds the layers
    of virtual stage c·p + i, Narayanan et al. 2021 §2.2.2), all named in the legend. Beyond
    :data:`MAX_BOXES` passes the timeline is summarised (:data:`SUMMARY_BINS` time bins per
    stage, coloured by their forward, backward and idle shares), as the title says. The caller
    closes the figure.

    Raises
    ------
    InputError
        matplotlib missing.
    """
    plt = _pyplot()
    p, v = report["stages"], report["virtual_stages"]
    total = float(report["step_time_units"])
    fig, ax = plt.subplots(figsize=(min(6 + total / 4, 26), min(16, max(2.2, 1.2 + 0.5 * p))))
    boxes = sum(len(row["slots"]) for row in report["timeline"])
    summarised = boxes > MAX_BOXES
    if summarised:
        _summary_raster(ax, report)
        handles = _summary_legend()
    else:
        _pipeline_boxes(plt, ax, report, fig.get_figwidth() * 0.75 * 72 / total)
        handles = _chunk_legend(plt, v)
    ax.set_yticks(range(p), [f"stage {p - 1 - i}" for i in range(p)])
    ax.set_xlabel(
        "time (one stage's forward of one micro-batch = 1)"
        + ("" if summarised else "; numbers are micro-batches")
    )
    ax.set_title(
        f"{report['schedule']}: p={p}, m={report['microbatches']}, "
        f"v={v}; bubble {report['bubble_fraction']:.1%}"
        + (
            f"\nsummarised: {boxes:,} passes shown as {SUMMARY_BINS:,} time bins per stage"
            if summarised
            else ""
        )
    )
    ax.set_xlim(0, total)
    ax.legend(
        handles=handles,
        loc="center left",
        bbox_to_anchor=(1.01, 0.5),
        ncol=2 if v > 1 and not summarised else 1,
        fontsize=7,
        frameon=False,
    )
    return fig


_CHAR_PT = 4.4
"""Width of one character of the boxes' 7-point labels, in points (DejaVu Sans digits)."""


def _pipeline_boxes(plt: Any, ax: Any, report: dict[str, Any], pt_per_unit: float) -> None:
    """One box per pass, labelled where the label fits (``pt_per_unit``: points per time unit)."""
    p, v = report["stages"], report["virtual_stages"]
    for row in report["timeline"]:
        y = p - 1 - row["stage"]
        for s in row["slots"]:
            forward, chunk = s["pass"] == "forward", s.get("chunk", 0)
            ax.barh(
                y,
                s["end"] - s["start"],
                left=s["start"],
                height=0.8,
                color=_chunk_colour(plt, forward, chunk, v),
                hatch=_HATCHES[chunk % len(_HATCHES)] if v > 1 else "",
                edgecolor="white",
                linewidth=0.5,
            )
            label = pass_label(s, v, kind=False)
            if len(label) * _CHAR_PT + 2 <= (s["end"] - s["start"]) * pt_per_unit:
                ax.text(
                    (s["start"] + s["end"]) / 2,
                    y,
                    label,
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if v == 1 or chunk > 0 else "black",
                )


def _chunk_legend(plt: Any, v: int) -> list[Any]:
    from matplotlib.patches import Patch

    return [
        Patch(
            facecolor=_chunk_colour(plt, forward, c, v),
            hatch=_HATCHES[c % len(_HATCHES)] if v > 1 else "",
            edgecolor="white",
            label=f"{'forward' if forward else 'backward'}"
            + (f", chunk {chunk_letter(c)}" if v > 1 else ""),
        )
        for forward in (True, False)
        for c in range(v)
    ]


def _summary_legend() -> list[Any]:
    from matplotlib.patches import Patch

    return [
        Patch(facecolor=_FWD, label="forward"),
        Patch(facecolor=_BWD, label="backward"),
        Patch(facecolor=_IDLE, label="idle (bubble)"),
        Patch(facecolor="none", edgecolor="none", label="a bin's colour mixes\nits shares"),
    ]


def _summary_raster(ax: Any, report: dict[str, Any]) -> None:
    """The timeline as an image: per stage, :data:`SUMMARY_BINS` bins coloured by the share of
    each bin's time spent in forward, backward or idle (one image, whatever the pass count)."""
    import numpy as np
    from matplotlib.colors import to_rgb

    p, total = report["stages"], float(report["step_time_units"])
    width = total / SUMMARY_BINS
    share = np.zeros((2, p, SUMMARY_BINS))  # [forward/backward, stage, bin]
    for row in report["timeline"]:
        for s in row["slots"]:
            a, b = float(s["start"]), float(s["end"])
            kind = 0 if s["pass"] == "forward" else 1
            for i in range(int(a // width), min(SUMMARY_BINS, math.ceil(b / width))):
                share[kind, row["stage"], i] += min(b, (i + 1) * width) - max(a, i * width)
    share = np.clip(share / width, 0, 1)
    idle = np.clip(1 - share.sum(axis=0), 0, 1)
    rgb = (
        share[0, :, :, None] * np.array(to_rgb(_FWD))
        + share[1, :, :, None] * np.array(to_rgb(_BWD))
        + idle[:, :, None] * np.array(to_rgb(_IDLE))
    )
    ax.imshow(
        np.clip(rgb, 0, 1),
        aspect="auto",
        interpolation="nearest",
        extent=(0, total, -0.5, p - 0.5),
        origin="upper",
    )


_PASS_COLOURS = {
    "forward": "#4c78a8",
    "backward": "#f58518",
    "backward_input": "#e45756",
    "backward_weight": "#54a24b",
}
"""Colour of each pass of the split-backward timelines (JSON names of
:data:`model.pipeline_sim.PASS_NAMES`)."""

_LABEL = {
    "forward": "F forward",
    "backward": "B backward (input and weights)",
    "backward_input": "I backward, input gradient",
    "backward_weight": "W backward, weight gradient",
}


def _bar(ax: Any, s: dict[str, Any], y: float, height: float, numbers: bool) -> None:
    chunk = s.get("chunk", 0)
    ax.barh(
        y,
        s["end"] - s["start"],
        left=s["start"],
        height=height,
        color=_PASS_COLOURS[s["pass"]],
        hatch="//" if chunk else "",
        edgecolor="white",
        linewidth=0.4,
    )
    if numbers:
        mb = str(s["microbatch"]) + ("'" if s.get("direction") else "")
        ax.text((s["start"] + s["end"]) / 2, y, mb, ha="center", va="center", fontsize=6,
                color="white")  # fmt: skip


def _split_pipeline_figure(plt: Any, report: dict[str, Any], out: Any) -> None:
    """Draw and write the timeline of a split-backward schedule (ZB-H1, ZB-H2, ZB-V, DualPipe,
    DualPipeV): one row per rank; forward blue, full backward orange, input-gradient backward
    red, weight-gradient backward green; a rank's second chunk hatched (the V placements'
    returning chunk, DualPipe's reverse-direction stage); an overlapped forward-and-backward block
    (DualPipe's F&B) as its two halves stacked inside one black border, as the DualPipe README's
    figure marks them."""
    from matplotlib.patches import Patch, Rectangle

    p, total = report["stages"], report["step_time_units"]
    fig, ax = plt.subplots(figsize=(min(6 + total / 4, 26), max(2.2, 1.2 + 0.5 * p)))
    numbers = report["microbatches"] <= 32
    for row in report["timeline"]:
        y = p - 1 - row["stage"]
        slots = row["slots"]
        i = 0
        while i < len(slots):
            s = slots[i]
            if s.get("overlapped") and i + 1 < len(slots):
                _bar(ax, s, y + 0.2, 0.4, numbers)
                _bar(ax, slots[i + 1], y - 0.2, 0.4, numbers)
                width = s["end"] - s["start"]
                ax.add_patch(Rectangle((s["start"], y - 0.4), width, 0.8, fill=False, lw=0.9))
                i += 2
                continue
            _bar(ax, s, y, 0.8, numbers)
            i += 1
    ax.set_yticks(range(p), [f"rank {p - 1 - i}" for i in range(p)])
    ax.set_xlabel(
        "time (the pass times given); numbers are micro-batches, ' those fed from the other end"
    )
    ax.set_title(
        f"{report['schedule']}: {p} ranks, m={report['microbatches']}; "
        f"bubble {report['bubble_fraction']:.1%}, span bubble {report['span_bubble_units']:g}"
    )
    ax.set_xlim(0, total)
    kinds = {s["pass"] for row in report["timeline"] for s in row["slots"]}
    handles = [
        Patch(facecolor=_PASS_COLOURS[k], label=_LABEL[k]) for k in _PASS_COLOURS if k in kinds
    ]
    handles.append(Patch(facecolor="white", edgecolor="grey", hatch="//", label="second chunk"))
    if any(s.get("overlapped") for row in report["timeline"] for s in row["slots"]):
        handles.append(Patch(facecolor="white", edgecolor="black", label="overlapped F&B block"))
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7,
              frameon=False)  # fmt: skip
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)


def held_chart(report: dict[str, Any], path: Target) -> Any:
    """Tensors held over time, with and without checkpointing (checkpointing tab).

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    out = _suffix(path, (".png", ".svg", ".pdf"))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for key, label in (
        ("checkpointing", f"checkpoint every {report['every']}"),
        ("without_checkpointing", "no checkpointing"),
    ):
        t, h = zip(*report["held_over_time"][key], strict=True)
        ax.step(t, h, where="post", label=label)
    ax.axhline(report["peak_held"], ls=":", color="grey")
    ax.set_xlabel("time (forward of one layer = 1, backward = 2)")
    ax.set_ylabel("tensors held")
    ax.set_title(
        f"{report['layers']} layers: peak {report['peak_held']} vs "
        f"{report['peak_held_without_checkpointing']}, "
        f"+{report['recompute_overhead']:.0%} compute"
    )
    ax.legend()
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out


def _colours() -> dict[str, str]:
    """Colour of each tensor state, in the text legend's order (C, #, R, x, .)."""
    return {
        "kept": "#4c78a8",
        "held": "#9ecae1",
        "recomputed": "#2ca02c",
        "discarded": "#d62728",
        "free": _IDLE,
    }


def _ckpt_frames(plt: Any, report: dict[str, Any]) -> tuple[Any, Any]:
    """(figure, draw) of the walk-through: ``draw(i)`` paints step i, a cell per tensor coloured
    by its state, with the colour legend (the text walk-through's C, #, R, x and .)."""
    from matplotlib.patches import Patch

    steps, n = report["steps"], report["layers"]
    names = [tensor_label(report, j) for j in range(n + 1)]
    fig, ax = plt.subplots(figsize=(max(6.5, min(2 + 0.5 * (n + 1), 20)), 2.6))
    legend = [Patch(facecolor=c, label=STATE_LEGEND[state]) for state, c in _colours().items()]

    def draw(i: int) -> None:
        ax.clear()
        st = steps[i]
        colours = [_colours()[tensor_state(st, tensor_label(report, j))] for j in range(n + 1)]
        ax.bar(range(n + 1), [1] * (n + 1), color=colours, edgecolor="white")
        ax.set_xticks(range(n + 1), names if n <= 24 else [""] * (n + 1), fontsize=7)
        ax.set_yticks([])
        ax.set_title(
            f"step {st['step']}: {st['phase']} layer {st['layer']} — {st['held']} held "
            f"(peak {report['peak_held']}, no checkpointing {n + 1})",
            fontsize=9,
        )
        ax.legend(
            handles=legend,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.22),
            ncol=len(legend),
            fontsize=7,
            frameon=False,
        )
        fig.subplots_adjust(bottom=0.32)

    return fig, draw


def ckpt_frame(report: dict[str, Any], index: int, path: Target) -> Any:
    """One frame of :func:`ckpt_gif`: ``report["steps"][index]``, a cell per tensor coloured by
    its state, with the colour legend (the web app steps and plays these).

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    out = _suffix(path, (".png", ".svg", ".pdf"))
    plt = _pyplot()
    fig, draw = _ckpt_frames(plt, report)
    draw(index)
    _save(fig, out)
    plt.close(fig)
    return out


def ckpt_gif(report: dict[str, Any], path: str | Path, delay_s: float = 0.6) -> Path:
    """Animated walk-through: one frame per step, a cell per tensor coloured by its state
    (checkpoint, held, recomputed, discarded, free; the legend names each colour), the tensors
    named as in the text walk-through (``labels``).

    Raises
    ------
    InputError
        matplotlib missing, a path not ending in .gif or not in a writable folder, a report of
        one step only, or a delay that is not positive.
    """
    out = _suffix(path, (".gif",))
    plt = _pyplot()
    from matplotlib.animation import FuncAnimation, PillowWriter

    if len(report["steps"]) < 2:
        raise InputError("gif: needs every step (leave out --step)")
    frame_s = float(parse_positive(delay_s, "delay"))
    fig, draw = _ckpt_frames(plt, report)
    anim = FuncAnimation(fig, draw, frames=len(report["steps"]))
    from trainplan.interface.inputs import writing

    fps: Any = 1 / frame_s  # a float is fine: Pillow shows each frame 1000/fps ms
    with writing(out, "path"):
        anim.save(out, writer=PillowWriter(fps=fps))
    plt.close(fig)
    return out


def frontier_chart(
    rows: list[dict[str, Any]], against: str, path: Target, links: list[str] | None = None
) -> Any:
    """Write :func:`frontier_figure` to ``path`` (SVG into a stream).

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    out = _suffix(path, (".png", ".svg", ".pdf"))
    plt = _pyplot()
    fig = frontier_figure(rows, against, links)
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out


def frontier_figure(
    rows: list[dict[str, Any]], against: str, links: list[str] | None = None
) -> Any:
    """Step time against the second axis of a Pareto frontier: the staircase of the best step
    time within each budget (:func:`interface.render.chart_layout.staircase`: each level starts at its
    own point), one numbered marker per point (labels placed clear of each other), and beside
    the plot each number's full layout — degrees, ZeRO stage, recompute, micro-batch and schedule
    (and GPUs unless against memory). With ``links`` (SVG), marker i is a link to ``links[i]`` in
    a group with id ``point-<i+1>``. The caller closes the figure.

    Raises
    ------
    InputError
        matplotlib missing.
    """
    plt = _pyplot()
    key = {"memory": "total_bytes", "gpus": "num_gpus", "price": "price_per_hour"}[against]
    scale = 1e9 if against == "memory" else 1
    xs = [r[key] / scale for r in rows]
    ys = [r["step_s"] for r in rows]
    keys = [f"{i:>2}  {layout_key(r, against != 'memory')}" for i, r in enumerate(rows, 1)]
    height = max(4.5, 1.2 + 0.16 * sum(k.count("\n") + 1 for k in keys))
    fig, (ax, side) = plt.subplots(
        1, 2, figsize=(12, height), gridspec_kw={"width_ratios": [3, 2.2]}
    )
    ax.plot(*staircase(xs, ys), "-", color="#4c78a8", label="best step time within the budget")
    ax.plot(xs, ys, "o", markersize=4, color="#4c78a8")
    for i, url in enumerate(links or ()):
        (mark,) = ax.plot([xs[i]], [ys[i]], "o", markersize=9, color="#4c78a8", alpha=0.35)
        mark.set_url(url)
        mark.set_gid(f"point-{i + 1}")
    ax.set_xlabel(
        {"memory": "memory per GPU (GB)", "gpus": "GPUs", "price": "cluster $ per hour"}[against]
    )
    ax.set_ylabel("step time (s)")
    ax.set_title(f"Pareto frontier: step time against {against} ({len(rows)} points)")
    ax.grid(alpha=0.3)
    ax.margins(0.08)
    _place_labels(ax, xs, ys, [str(i) for i in range(1, len(rows) + 1)])
    side.axis("off")
    side.text(
        0,
        1,
        "\n".join(keys),
        va="top",
        ha="left",
        family="monospace",
        fontsize=7 if sum(k.count("\n") + 1 for k in keys) <= 40 else 6,
        transform=side.transAxes,
    )
    return fig


def memory_chart(d: dict[str, Any], path: Target) -> Any:
    """The planner's memory per GPU (busiest stage) as stacked bars in GB, one per phase of the
    step — forward/backward (model state, gathered weights, buffers, activations, transient) and
    the optimizer step (model state and what the step materialises) — against the usable
    capacity, with the total at the peak and the verdict in the title. ``d`` is the evaluate
    ``--json`` object (:func:`interface.commands.evaluate_json`).

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    out = _suffix(path, (".png", ".svg", ".pdf"))
    plt = _pyplot()
    m = d["memory"]
    phases = {"forward/backward": [k for k, *_ in MEMORY_PARTS[:-1]]}
    if m.get("optimizer_step_bytes"):
        phases["optimizer step"] = [k for k, *_ in MEMORY_PARTS[:3]] + ["optimizer_step_bytes"]
    fig, ax = plt.subplots(figsize=(9, 1.9 + 0.5 * len(phases)))
    for y, keys in enumerate(reversed(phases.values())):
        left = 0.0
        for key, label, colour in MEMORY_PARTS:
            if key in keys and m.get(key):
                ax.barh(y, m[key] / 1e9, left=left, color=colour, label=label, height=0.6)
                left += m[key] / 1e9
    cap = m["capacity_bytes"] / 1e9
    ax.axvline(cap, color="black", ls="--", lw=1.2, label=f"capacity {cap:,.2f} GB")
    ax.set_yticks(range(len(phases)), list(reversed(phases)))
    ax.set_xlabel("GB per GPU (10^9 bytes), busiest pipeline stage")
    verdict = "fits" if m["fits"] else f"DOES NOT FIT: over by {m['overflow_bytes'] / 1e9:,.2f} GB"
    ax.set_title(
        f"total {m['total_bytes'] / 1e9:,.2f} GB at the peak ({m.get('peak_phase', 'forward-backward')})"
        f", usable {cap:,.2f} GB on {d['gpu']['name']}\nverdict: {verdict}",
        fontsize=9,
        loc="left",
    )
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    order = [label for _, label, _ in MEMORY_PARTS if label in unique]
    order += [k for k in unique if k.startswith("capacity")]
    ax.legend([unique[k] for k in order], order, loc="center left", bbox_to_anchor=(1.01, 0.5),
              fontsize=7, frameon=False)  # fmt: skip
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out


def sweep_scaling_chart(
    series: dict[str, dict[str, list[tuple[int, float]]]], label: str, note: str, path: Target
) -> Any:
    """A sweep's metric against the GPU count: a panel per model, a line per part
    (:func:`interface.sweep.charts.scaling_series` gives ``series`` in the axis unit ``label``;
    ``note`` says what each point is the best over). Log scales on both axes.

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    out = _suffix(path, (".png", ".svg", ".pdf"))
    plt = _pyplot()
    n = max(1, len(series))
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows + 0.6), squeeze=False)
    parts = sorted({p for lines in series.values() for p in lines})
    bases = list(dict.fromkeys(p.split("[")[0] for p in parts))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ("-", "--", ":", "-.")
    look: dict[
        str, tuple[str, str]
    ] = {}  # a catalogue part's colour; its what-if variants' line styles
    for p in parts:
        base = p.split("[")[0]
        variant = sum(q.split("[")[0] == base for q in look)
        look[p] = (colours[bases.index(base) % len(colours)], styles[variant % len(styles)])
    whole = plt.FuncFormatter(lambda x, _: f"{x:,.0f}")
    for ax, (model, lines) in zip(axes.flat, series.items(), strict=False):
        for part, points in lines.items():
            colour, style = look[part]
            ax.plot([g for g, _ in points], [v for _, v in points], marker="o", markersize=3,
                    color=colour, linestyle=style, label=part)  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(whole)
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("GPUs", fontsize=8)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3, which="both")
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    handles: dict[str, Any] = {}
    for ax in axes.flat:
        for h, name in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(name, h)
    ncol = min(5, max(1, len(handles)))
    legend_rows = -(-len(handles) // ncol)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=ncol, fontsize=8,
               frameon=False)  # fmt: skip
    fig.suptitle(f"{label} against GPU count" + (f" ({note})" if note else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0.02 + 0.045 * legend_rows * 3.4 / fig.get_figheight(), 1, 0.97))
    _save(fig, out)
    plt.close(fig)
    return out


def sweep_heatmap(cells: Any, path: Target) -> Any:
    """A sweep's heat map: models (rows) against a what-if's multipliers (columns), each cell
    annotated (:func:`interface.sweep.charts.heatmap_cells`; blank where nothing fits).

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    import numpy as np

    out = _suffix(path, (".png", ".svg", ".pdf"))
    plt = _pyplot()
    data = np.array(
        [[np.nan if v is None else v for v in row] for row in cells.values], dtype=float
    )
    fig, ax = plt.subplots(figsize=(2.2 + 1.1 * len(cells.columns), 1.4 + 0.45 * len(cells.rows)))
    image = ax.imshow(data, cmap="viridis_r" if cells.relative else "viridis", aspect="auto")
    ax.set_xticks(range(len(cells.columns)), cells.columns, fontsize=8)
    ax.set_yticks(range(len(cells.rows)), cells.rows, fontsize=8)
    for (i, j), v in np.ndenumerate(data):
        if not np.isnan(v):
            text = f"{v:.2f}" if cells.relative else f"{v:,.3g}"
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white")
    fig.colorbar(image, ax=ax, shrink=0.8)
    ax.set_title(cells.title, fontsize=9)
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out
