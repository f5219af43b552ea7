"""The pipeline tab's charts: every rank's forward and backward boxes per micro-batch (a summary
raster past :data:`MAX_BOXES`), the split-backward schedules' figure and the micro-batches each
rank holds (:func:`held_chart`). Drawn by :mod:`interface.render.figure`; each takes the tab's
``--json`` object."""

from __future__ import annotations

import math
from typing import Any

from trainplan.interface.render.chart_layout import (
    chunk_letter,
    pass_label,
)
from trainplan.interface.render.figure import Target, chart_output, pyplot, save_figure

__all__ = ["pipeline_chart", "pipeline_figure", "held_chart", "MAX_BOXES"]

_FWD, _BWD, IDLE_COLOUR = "#4c78a8", "#f58518", "#eeeeee"
"""Forward, backward and idle colours (idle: also the checkpointing chart's free memory)."""


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
    out = chart_output(path, (".png", ".svg", ".pdf"))
    plt = pyplot()
    with plt.rc_context({"hatch.linewidth": 0.6}):
        if "pass_times" in report:  # split-backward schedules: F, B, I, W and overlapped blocks
            _split_pipeline_figure(plt, report, out)
            return out
        fig = pipeline_figure(report)
        fig.tight_layout()
        save_figure(fig, out)
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
    plt = pyplot()
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
        Patch(facecolor=IDLE_COLOUR, label="idle (bubble)"),
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
        + idle[:, :, None] * np.array(to_rgb(IDLE_COLOUR))
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


def _bar(
    bars: dict[tuple[float, float, str], list[tuple[float, float, str]]],
    ax: Any,
    s: dict[str, Any],
    y: float,
    height: float,
    numbers: bool,
) -> None:
    """One pass, kept in ``bars`` by (row centre, height, hatch) to be drawn with its row's others
    as one collection (:func:`_draw_bars`)."""
    hatch = "//" if s.get("chunk", 0) else ""
    bars.setdefault((y, height, hatch), []).append(
        (s["start"], s["end"] - s["start"], _PASS_COLOURS[s["pass"]])
    )
    if numbers:
        mb = str(s["microbatch"]) + ("'" if s.get("direction") else "")
        ax.text((s["start"] + s["end"]) / 2, y, mb, ha="center", va="center", fontsize=6,
                color="white")  # fmt: skip


def _draw_bars(
    ax: Any, bars: dict[tuple[float, float, str], list[tuple[float, float, str]]]
) -> None:
    """Each group of :func:`_bar` as one ``broken_barh`` collection: a patch a pass (8,944 at 32
    ranks × 128 micro-batches of DualPipe) took ~18 s to add and ~10 s to write."""
    for (y, height, hatch), group in bars.items():
        ax.broken_barh(
            [(x, w) for x, w, _ in group],
            (y - height / 2, height),
            facecolors=[c for _, _, c in group],
            hatch=hatch or None,
            edgecolor="white",
            linewidth=0.4,
        )


def _split_pipeline_figure(plt: Any, report: dict[str, Any], out: Any) -> None:
    """Draw and write the timeline of a split-backward schedule (ZB-H1, ZB-H2, ZB-V, DualPipe,
    DualPipeV): one row per rank; forward blue, full backward orange, input-gradient backward
    red, weight-gradient backward green; a rank's second chunk hatched (the V placements'
    returning chunk, DualPipe's reverse-direction stage); an overlapped forward-and-backward block
    (DualPipe's F&B) as its two halves stacked inside one black border, as the DualPipe README's
    figure marks them."""
    from matplotlib.patches import Patch

    p, total = report["stages"], report["step_time_units"]
    fig, ax = plt.subplots(figsize=(min(6 + total / 4, 26), max(2.2, 1.2 + 0.5 * p)))
    numbers = report["microbatches"] <= 32
    bars: dict[tuple[float, float, str], list[tuple[float, float, str]]] = {}
    blocks: list[tuple[float, float, float]] = []  # (start, width, row): overlapped F&B borders
    for row in report["timeline"]:
        y = p - 1 - row["stage"]
        slots = row["slots"]
        i = 0
        while i < len(slots):
            s = slots[i]
            if s.get("overlapped") and i + 1 < len(slots):
                _bar(bars, ax, s, y + 0.2, 0.4, numbers)
                _bar(bars, ax, slots[i + 1], y - 0.2, 0.4, numbers)
                blocks.append((s["start"], s["end"] - s["start"], y))
                i += 2
                continue
            _bar(bars, ax, s, y, 0.8, numbers)
            i += 1
    _draw_bars(ax, bars)
    for y in sorted({b[2] for b in blocks}):
        edges = [(x, w) for x, w, row_y in blocks if row_y == y]
        ax.broken_barh(edges, (y - 0.4, 0.8), facecolors="none", edgecolor="black", lw=0.9)
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
    save_figure(fig, out)
    plt.close(fig)


def held_chart(report: dict[str, Any], path: Target) -> Any:
    """Tensors held over time, with and without checkpointing (checkpointing tab).

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    out = chart_output(path, (".png", ".svg", ".pdf"))
    plt = pyplot()
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
    save_figure(fig, out)
    plt.close(fig)
    return out
