"""Charts of the planner, pipeline, checkpointing, frontier and sweeps, with matplotlib (optional
extra) loaded by :mod:`interface.render.figure`; the pipeline tab's charts are
:mod:`interface.render.pipeline_plots`' (named here too, for the callers of this module).

``pip install -e '.[plot]'`` (or ``[web]``) installs matplotlib; without it every function
here raises an :class:`~model.errors.InputError` saying so. Each function takes a ``--json``
object (:mod:`interface.tabs`, :mod:`interface.commands`) and writes one file, whose format follows
the suffix (``.png``, ``.svg``, ``.pdf``; ``.gif`` for the animation), or SVG into a binary stream
(:func:`svg`, the web app's figures).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainplan.interface.outputs import writing
from trainplan.interface.render.chart_layout import (
    MEMORY_PARTS,
    STATE_LEGEND,
    fitted_legend,
    layout_key,
    memory_bars,
    staircase,
    tensor_label,
)
from trainplan.interface.render.chart_layout import place_labels as _place_labels
from trainplan.interface.render.figure import (
    Target,
    cell_ink,
    chart_output,
    pyplot,
    save_figure,
    svg,
)
from trainplan.interface.render.pipeline_plots import (
    IDLE_COLOUR,
    MAX_BOXES,
    held_chart,
    pipeline_chart,
    pipeline_figure,
)
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
    "MAX_GPU_TICKS",
    "sweep_heatmap",
    "svg",
]


def _colours() -> dict[str, str]:
    """Colour of each tensor state, in the text legend's order (C, #, R, x, .)."""
    return {
        "kept": "#4c78a8",
        "held": "#9ecae1",
        "recomputed": "#2ca02c",
        "discarded": "#d62728",
        "free": IDLE_COLOUR,
    }


_BAR_CELLS = 200
"""Tensors up to which the walk-through draws a bar a cell; beyond, the row is one image."""
_LABELS = 25
"""Most tensor names under the walk-through's row (every k-th tensor beyond)."""


def _ckpt_frames(plt: Any, report: dict[str, Any]) -> tuple[Any, Any]:
    """(figure, draw) of the walk-through: ``draw(i)`` paints step i, a cell per tensor coloured
    by its state, with the colour legend (the text walk-through's C, #, R, x and .)."""
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    steps, n = report["steps"], report["layers"]
    names = [tensor_label(report, j) for j in range(n + 1)]
    fig, ax = plt.subplots(figsize=(max(6.5, min(2 + 0.5 * (n + 1), 10)), 2.6))
    legend = [Patch(facecolor=c, label=STATE_LEGEND[state]) for state, c in _colours().items()]

    def draw(i: int) -> None:
        ax.clear()
        st = steps[i]
        palette = _colours()
        colours = [palette[tensor_state(st, names[j])] for j in range(n + 1)]
        if n + 1 <= _BAR_CELLS:  # a bar a cell, white between them
            ax.bar(range(n + 1), [1] * (n + 1), color=colours, edgecolor="white")
        else:  # one image of the row: 1,001 bars took ~2 s and 400 KB of SVG at n = 1,000
            rgb = [[to_rgb(c) for c in colours]]
            ax.imshow(rgb, aspect="auto", interpolation="nearest", extent=(-0.5, n + 0.5, 0, 1))
        ax.set_xlim(-0.5, n + 0.5)
        # every k-th tensor named, at most ~25 labels: 101 labels at n = 100 overlapped; a tick
        # a cell cost ~3 s at n = 1,000
        least = -(-(n + 1) // _LABELS)
        every = min(m * 10**e for e in range(8) for m in (1, 2, 5) if m * 10**e >= least)
        shown = range(0, n + 1, every)
        ax.set_xticks(list(shown), [names[j] for j in shown], fontsize=7)
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
    out = chart_output(path, (".png", ".svg", ".pdf"))
    plt = pyplot()
    fig, draw = _ckpt_frames(plt, report)
    draw(index)
    save_figure(fig, out)
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
    out = chart_output(path, (".gif",))
    plt = pyplot()
    from matplotlib.animation import FuncAnimation, PillowWriter

    if len(report["steps"]) < 2:
        raise InputError("gif: needs every step (leave out --step)")
    frame_s = float(parse_positive(delay_s, "delay"))
    fig, draw = _ckpt_frames(plt, report)
    anim = FuncAnimation(fig, draw, frames=len(report["steps"]))

    fps: Any = 1 / frame_s  # a float is fine: Pillow shows each frame 1000/fps ms
    with writing(out, "path"):
        anim.save(out, writer=PillowWriter(fps=fps))
    plt.close(fig)
    return out


def frontier_chart(
    rows: list[dict[str, Any]],
    against: str,
    path: Target,
    links: list[str] | None = None,
    listed: bool = True,
) -> Any:
    """Write :func:`frontier_figure` to ``path`` (SVG into a stream); ``listed=False`` leaves out
    the list of layouts beside the plot (the web page's table lists them).

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    out = chart_output(path, (".png", ".svg", ".pdf"))
    plt = pyplot()
    fig = frontier_figure(rows, against, links, listed)
    fig.tight_layout()
    save_figure(fig, out)
    plt.close(fig)
    return out


def frontier_figure(
    rows: list[dict[str, Any]],
    against: str,
    links: list[str] | None = None,
    listed: bool = True,
) -> Any:
    """Step time against the second axis of a Pareto frontier: the staircase of the best step
    time within each budget (:func:`interface.render.chart_layout.staircase`: each level starts at its
    own point), one numbered marker per point (labels placed clear of each other), and beside
    the plot each number's full layout — degrees, ZeRO stage, recompute, micro-batch and schedule
    (and GPUs unless against memory). With ``links`` (SVG), marker i is a link to ``links[i]`` in
    a group with id ``point-<i+1>``. ``listed=False``: the plot alone, 8 inches wide (the web
    page, whose table beside lists the layouts: in a 12-inch figure scaled to the page the list
    read at ~6 px). The caller closes the figure.

    Raises
    ------
    InputError
        matplotlib missing.
    """
    plt = pyplot()
    key = {"memory": "total_bytes", "gpus": "num_gpus", "price": "price_per_hour"}[against]
    scale = 1e9 if against == "memory" else 1
    xs = [r[key] / scale for r in rows]
    ys = [r["step_s"] for r in rows]
    keys = [f"{i:>2}  {layout_key(r, against != 'memory')}" for i, r in enumerate(rows, 1)]
    fig, ax, side = _frontier_axes(plt, keys, listed)
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
    points = f"{len(rows)} point" + ("" if len(rows) == 1 else "s")
    if listed:
        ax.set_title(f"Pareto frontier: step time against {against} ({points})")
    else:  # the page's plot, under the page's own "Pareto frontier" heading: a short title on
        # the right, above the fastest points, where a phone's view of the chart starts
        # (interface/web/static/frontier.js scrolls it to its right end)
        ax.set_title(f"step time against {against}: {points}", loc="right")
    ax.grid(alpha=0.3)
    ax.margins(0.08)
    _place_labels(ax, xs, ys, [str(i) for i in range(1, len(rows) + 1)])
    if side is not None:
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


def _frontier_axes(plt: Any, keys: list[str], listed: bool) -> tuple[Any, Any, Any]:
    """(figure, plot axes, list axes or None): 12 inches with the layouts' list beside the plot,
    its height by the list's lines; 8 × 4.5 inches, the plot alone, without it."""
    if not listed:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        return fig, ax, None
    height = max(4.5, 1.2 + 0.16 * sum(k.count("\n") + 1 for k in keys))
    fig, (ax, side) = plt.subplots(
        1, 2, figsize=(12, height), gridspec_kw={"width_ratios": [3, 2.2]}
    )
    return fig, ax, side


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
    out = chart_output(path, (".png", ".svg", ".pdf"))
    plt = pyplot()
    m = d["memory"]
    phases = memory_bars(m)
    look = {key: (label, colour) for key, label, colour in MEMORY_PARTS}
    fig, ax = plt.subplots(figsize=(9, 1.9 + 0.5 * len(phases)))
    for y, parts in enumerate(reversed(phases.values())):
        left = 0.0
        for key, value in parts:
            label, colour = look[key]
            ax.barh(y, value / 1e9, left=left, color=colour, label=label, height=0.6)
            left += value / 1e9
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
    save_figure(fig, out)
    plt.close(fig)
    return out


MAX_GPU_TICKS = 10
"""Most GPU counts a sweep's scaling panel labels one by one (256 to 4,096 in 1.5× and 2× steps is
nine); with more, the log axis's powers of two are labelled."""


LOG_SPAN = 10.0
"""A panel's values go on a log axis only where the largest is more than this many times the
smallest (more than a decade); a narrower range (MFU 44.04–44.11 %) reads on a linear axis."""


def value_scale(values: list[float], bounded: bool) -> str:
    """``"log"`` or ``"linear"``: the axis of a scaling panel's ``values`` (its metric in the
    axis unit). A bounded metric (MFU, a fraction: ``bounded``) is always linear; another is log
    only where every value is positive and they span more than :data:`LOG_SPAN`.

    >>> value_scale([44.04, 44.11], True), value_scale([1.15e6, 1.16e6], False)
    ('linear', 'linear')
    >>> value_scale([2.0, 30.0], False), value_scale([2.0, 30.0], True)
    ('log', 'linear')
    """
    low, high = min(values, default=0.0), max(values, default=0.0)
    return "log" if not bounded and low > 0 and high > LOG_SPAN * low else "linear"


def tick_decimals(locs: list[float]) -> int:
    """The fewest decimals (at most 6) that write every tick of ``locs`` exactly, to a millionth
    of the smallest step between them (or of the value where there is one tick).

    >>> tick_decimals([44.04, 44.06, 44.08]), tick_decimals([1.1e6, 1.15e6, 1.2e6])
    (2, 0)
    >>> tick_decimals([0.025, 0.05, 0.075]), tick_decimals([0.01, 0.1, 1.0, 10.0])
    (3, 2)
    """
    steps = [b - a for a, b in zip(locs, locs[1:], strict=False) if b > a]
    scale = min(steps) if steps else max((abs(v) for v in locs), default=1.0) or 1.0
    for decimals in range(7):
        if all(abs(round(v, decimals) - v) <= 1e-6 * scale for v in locs):
            return decimals
    return 6


def plain_ticks() -> Any:
    """A matplotlib tick formatter writing each label as a plain number with thousands
    separators, to :func:`tick_decimals` of the axis's ticks (1,151,750; 44.06), or on a log axis
    of the tick itself (0.01, 1,000), instead of an offset or a power of ten (4.404×10¹)."""
    from matplotlib.ticker import Formatter

    class Plain(Formatter):  # type: ignore[misc]
        ticks: list[float] = []

        def set_locs(self, locs: Any) -> None:  # the axis's ticks, before it asks for labels
            self.ticks = [float(v) for v in locs]

        def __call__(self, x: float, pos: int | None = None) -> str:
            scale = getattr(self.axis, "get_scale", lambda: "linear")()
            each = scale == "log"  # a log axis's ticks are decades: 0.01, 10
            text = f"{x:,.{tick_decimals([x] if each else self.ticks)}f}"
            return "0" if text.lstrip("-").strip("0.,") == "" else text

    return Plain()


def sweep_scaling_chart(
    series: dict[str, dict[str, list[tuple[int, float]]]], label: str, note: str, path: Target,
    bounded: bool = False,
) -> Any:  # fmt: skip
    """A sweep's metric against the GPU count: a panel per model, a line per part
    (:func:`interface.sweep.charts.scaling_series` gives ``series`` in the axis unit ``label``;
    ``note`` says what each point is the best over; ``bounded``: a rate such as MFU). GPU axis
    log 2, each GPU count a labelled tick (at most :data:`MAX_GPU_TICKS`, else the powers of
    two); value axis log only past a decade (:func:`_value_axis`).

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    out = chart_output(path, (".png", ".svg", ".pdf"))
    plt = pyplot()
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
    for ax, (model, lines) in zip(axes.flat, series.items(), strict=False):
        for part, points in lines.items():
            colour, style = look[part]
            ax.plot([g for g, _ in points], [v for _, v in points], marker="o", markersize=3,
                    color=colour, linestyle=style, label=part)  # fmt: skip
        _gpu_axis(ax, plt, sorted({g for points in lines.values() for g, _ in points}))
        _value_axis(ax, plt, [v for points in lines.values() for _, v in points], bounded)
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("GPUs", fontsize=8)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3, which="both")
        ax.tick_params(which="both", labelsize=7)  # the minor labels a short log axis gets too
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    handles: dict[str, Any] = {}
    for ax in axes.flat:
        for h, name in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(name, h)
    legend_rows = fitted_legend(fig, list(handles.values()), list(handles), 5)
    fig.suptitle(f"{label} against GPU count" + (f" ({note})" if note else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0.02 + 0.045 * legend_rows * 3.4 / fig.get_figheight(), 1, 0.97))
    save_figure(fig, out)
    plt.close(fig)
    return out


def _value_axis(ax: Any, plt: Any, values: list[float], bounded: bool) -> None:
    """A scaling panel's value axis: :func:`value_scale`'s, labelled by :func:`plain_ticks`
    (major ticks only: a short log axis's minor labels were powers of ten too)."""
    ax.set_yscale(value_scale(values, bounded))
    ax.yaxis.set_major_formatter(plain_ticks())
    ax.yaxis.set_minor_formatter(plt.NullFormatter())


def _gpu_axis(ax: Any, plt: Any, counts: list[int]) -> None:
    """A scaling panel's GPU axis: log 2, whole numbers with thousands separators, a labelled
    tick at each of the panel's GPU ``counts`` (384 between 256 and 512) where there are at most
    :data:`MAX_GPU_TICKS`, else at the powers of two."""
    ax.set_xscale("log", base=2)
    if len(counts) <= MAX_GPU_TICKS:
        ax.set_xticks(counts)
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x:,.0f}"))


def sweep_heatmap(cells: Any, path: Target) -> Any:
    """A sweep's heat map: models (rows) against a what-if's multipliers (columns), each cell
    annotated (:func:`interface.sweep.charts.heatmap_cells`; blank where nothing fits).

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    import numpy as np

    out = chart_output(path, (".png", ".svg", ".pdf"))
    plt = pyplot()
    data = np.array(
        [[np.nan if v is None else v for v in row] for row in cells.values], dtype=float
    )
    size = (2.2 + 1.1 * len(cells.columns), 1.4 + 0.45 * len(cells.rows))
    fig, ax = plt.subplots(figsize=size, layout="constrained")
    image = ax.imshow(data, cmap="viridis_r" if cells.relative else "viridis", aspect="auto")
    ax.set_xticks(range(len(cells.columns)), cells.columns, fontsize=8)
    ax.set_yticks(range(len(cells.rows)), cells.rows, fontsize=8)
    for (i, j), v in np.ndenumerate(data):
        if not np.isnan(v):
            text = f"{v:.2f}" if cells.relative else f"{v:,.3g}"
            ink = cell_ink(image.cmap(image.norm(v)))
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color=ink)
    fig.colorbar(image, ax=ax, shrink=0.8)
    ax.set_title(cells.title, fontsize=9, wrap=True)
    save_figure(fig, out)
    plt.close(fig)
    return out
