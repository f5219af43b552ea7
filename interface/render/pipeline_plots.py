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
from trainplan.interface.render.figure import Target, cell_ink, chart_output, pyplot, save_figure
from trainplan.interface.render.timeline_layout import (
    TEXT_PT,
    TICK_PT,
    TITLE_PT,
    WIDTH_IN,
    Frame,
    frame,
    label_fits,
)

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
        fig = pipeline_figure(report)
        save_figure(fig, out)
    plt.close(fig)
    return out


def _timeline_axes(
    plt: Any, report: dict[str, Any], word: str, text: tuple[str, str], handles: list[Any]
) -> tuple[Any, Any, Frame]:
    """The figure and axes of a timeline at page width (:mod:`interface.render.timeline_layout`):
    one row per stage, ``word`` naming it (``stage 0`` on top), time on x from 0 to the step,
    ``text`` the title and the x axis's label, the legend ``handles`` under the axes."""
    p, total = report["stages"], float(report["step_time_units"])
    title, xlabel = text
    fr = frame(p, title.count("\n") + 1, [h.get_label() for h in handles])
    fig, ax = plt.subplots(figsize=(WIDTH_IN, fr.height_in))
    fig.subplots_adjust(left=fr.left, right=fr.right, bottom=fr.bottom, top=fr.top)
    shown = range(0, p, fr.stride)
    ax.set_yticks([p - 1 - i for i in shown], [f"{word} {i}" for i in shown], fontsize=TICK_PT)
    ax.tick_params(axis="x", labelsize=TICK_PT)
    ax.set_xlim(0, total)
    ax.set_ylim(-0.5, p - 0.5)
    ax.set_xlabel(xlabel, fontsize=TICK_PT)
    ax.set_title(title, fontsize=TITLE_PT)
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0),
              bbox_transform=fig.transFigure, ncol=fr.columns, fontsize=TEXT_PT,
              frameon=False)  # fmt: skip
    return fig, ax, fr


def _idle_rows(ax: Any, rows: int, total: float) -> None:
    """Each row's full span in the idle grey under its blocks: the bubble is what stays grey."""
    for y in range(rows):
        ax.broken_barh([(0, total)], (y - 0.4, 0.8), facecolors=IDLE_COLOUR, zorder=0)


def _idle_handle() -> Any:
    from matplotlib.patches import Patch

    return Patch(facecolor=IDLE_COLOUR, label="idle (bubble)")


def pipeline_figure(report: dict[str, Any]) -> Any:
    """Gantt chart of a simulated pipeline step at page width (:data:`WIDTH_IN` inches, type of
    :data:`TEXT_PT` points or more, :mod:`interface.render.timeline_layout`): one row per stage,
    forward in blues and backward in oranges on the idle grey that is the bubble. Each pass is
    a box labelled with its micro-batch where the label fits at that size (:func:`label_fits`),
    else left unlabelled; with interleaving each model chunk has its own shade and hatch and its
    letter after the micro-batch where it fits (``3a``: micro-batch 3 on chunk a; chunk c of
    stage i holds the layers of virtual stage c·p + i, Narayanan et al. 2021 §2.2.2), all named
    in the legend under the axes. Beyond :data:`MAX_BOXES` passes the timeline is summarised
    (:data:`SUMMARY_BINS` time bins per stage, coloured by their forward, backward and idle
    shares), as the title says. A split-backward schedule's report (``pass_times`` in it) is
    drawn by :func:`_split_pipeline_figure`. The caller closes the figure.

    Raises
    ------
    InputError
        matplotlib missing.
    """
    plt = pyplot()
    if "pass_times" in report:  # split-backward schedules: F, B, I, W and overlapped blocks
        return _split_pipeline_figure(plt, report)
    p, v = report["stages"], report["virtual_stages"]
    total = float(report["step_time_units"])
    boxes = sum(len(row["slots"]) for row in report["timeline"])
    summarised = boxes > MAX_BOXES
    title = (
        f"{report['schedule']}: p={p}, m={report['microbatches']}, "
        f"v={v}; bubble {report['bubble_fraction']:.1%}"
        + (f"\nsummarised: {boxes:,} passes shown as {SUMMARY_BINS:,} time bins per stage"
           if summarised else "")
    )  # fmt: skip
    xlabel = "time (one stage's forward of one micro-batch = 1)" + (
        "" if summarised else "; numbers are micro-batches"
    )
    handles = _summary_legend() if summarised else [*_chunk_legend(plt, v), _idle_handle()]
    fig, ax, fr = _timeline_axes(plt, report, "stage", (title, xlabel), handles)
    if summarised:
        _summary_raster(ax, report)
    else:
        _idle_rows(ax, p, total)
        _pipeline_boxes(plt, ax, report, (fr.axes_width_pt / total, fr.row_pt))
    return fig


def _pipeline_boxes(plt: Any, ax: Any, report: dict[str, Any], scale: tuple[float, float]) -> None:
    """One box per pass, labelled where the label fits (``scale``: points per time unit and per
    row): the micro-batch and chunk letter, else the micro-batch alone, else nothing."""
    from matplotlib.colors import to_rgba

    p, v = report["stages"], report["virtual_stages"]
    for row in report["timeline"]:
        y = p - 1 - row["stage"]
        for s in row["slots"]:
            forward, chunk = s["pass"] == "forward", s.get("chunk", 0)
            colour = _chunk_colour(plt, forward, chunk, v)
            ax.barh(y, s["end"] - s["start"], left=s["start"], height=0.8, color=colour,
                    hatch=_HATCHES[chunk % len(_HATCHES)] if v > 1 else "",
                    edgecolor="white", linewidth=0.5)  # fmt: skip
            size = ((s["end"] - s["start"]) * scale[0], 0.8 * scale[1])
            label = next(
                (t for t in (pass_label(s, v, kind=False), str(s["microbatch"]))
                 if label_fits(t, *size)), None,
            )  # fmt: skip
            if label:
                ax.text((s["start"] + s["end"]) / 2, y, label, ha="center", va="center",
                        fontsize=TEXT_PT, color=cell_ink(to_rgba(colour)))  # fmt: skip


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
        Patch(facecolor="none", edgecolor="none", label="a bin's colour mixes its shares"),
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
    place: tuple[float, float],
    scale: tuple[float, float],
) -> None:
    """One pass at ``place`` (row centre, height in rows), kept in ``bars`` by (row centre,
    height, hatch) to be drawn with its row's others as one collection (:func:`_draw_bars`), its
    micro-batch written inside where it fits (``scale``: points per time unit and per row)."""
    from matplotlib.colors import to_rgba

    (y, height), colour = place, _PASS_COLOURS[s["pass"]]
    hatch = "//" if s.get("chunk", 0) else ""
    bars.setdefault((y, height, hatch), []).append((s["start"], s["end"] - s["start"], colour))
    mb = str(s["microbatch"]) + ("'" if s.get("direction") else "")
    if label_fits(mb, (s["end"] - s["start"]) * scale[0], height * scale[1]):
        ax.text((s["start"] + s["end"]) / 2, y, mb, ha="center", va="center", fontsize=TEXT_PT,
                color=cell_ink(to_rgba(colour)))  # fmt: skip


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


def _split_handles(report: dict[str, Any]) -> list[Any]:
    """The split timeline's legend: the passes it has, the second chunk's hatch and the
    overlapped block's border where there are such, the idle grey."""
    from matplotlib.patches import Patch

    slots = [s for row in report["timeline"] for s in row["slots"]]
    kinds = {s["pass"] for s in slots}
    handles = [
        Patch(facecolor=_PASS_COLOURS[k], label=_LABEL[k]) for k in _PASS_COLOURS if k in kinds
    ]
    if any(s.get("chunk", 0) for s in slots):
        handles.append(Patch(facecolor="white", edgecolor="grey", hatch="//", label="second chunk"))
    if any(s.get("overlapped") for s in slots):
        handles.append(Patch(facecolor="white", edgecolor="black", label="overlapped F&B block"))
    return [*handles, _idle_handle()]


def _split_pipeline_figure(plt: Any, report: dict[str, Any]) -> Any:
    """The timeline of a split-backward schedule (ZB-H1, ZB-H2, ZB-V, DualPipe,
    DualPipeV) at page width, as :func:`pipeline_figure`: one row per rank; forward blue, full
    backward orange, input-gradient backward red, weight-gradient backward green, on the idle
    grey; a rank's second chunk hatched (the V placements' returning chunk, DualPipe's
    reverse-direction stage); an overlapped forward-and-backward block (DualPipe's F&B) as its
    two halves stacked inside one black border, as the DualPipe README's figure marks them."""
    p, total = report["stages"], float(report["step_time_units"])
    title = (
        f"{report['schedule']}: {p} ranks, m={report['microbatches']}; "
        f"bubble {report['bubble_fraction']:.1%}, span bubble {report['span_bubble_units']:g}"
    )
    xlabel = "time (the pass times given); numbers are micro-batches, ' fed from the other end"
    fig, ax, fr = _timeline_axes(plt, report, "rank", (title, xlabel), _split_handles(report))
    _idle_rows(ax, p, total)
    scale = (fr.axes_width_pt / total, fr.row_pt)
    bars: dict[tuple[float, float, str], list[tuple[float, float, str]]] = {}
    blocks: list[tuple[float, float, float]] = []  # (start, width, row): overlapped F&B borders
    for row in report["timeline"]:
        y, slots, i = p - 1 - row["stage"], row["slots"], 0
        while i < len(slots):
            s = slots[i]
            if s.get("overlapped") and i + 1 < len(slots):
                _bar(bars, ax, s, (y + 0.2, 0.4), scale)
                _bar(bars, ax, slots[i + 1], (y - 0.2, 0.4), scale)
                blocks.append((s["start"], s["end"] - s["start"], y))
                i += 2
                continue
            _bar(bars, ax, s, (y, 0.8), scale)
            i += 1
    _draw_bars(ax, bars)
    for y in sorted({b[2] for b in blocks}):
        edges = [(x, w) for x, w, row_y in blocks if row_y == y]
        ax.broken_barh(edges, (y - 0.4, 0.8), facecolors="none", edgecolor="black", lw=0.9)
    return fig


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
