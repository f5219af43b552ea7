"""The pictures read back from the figures' own data (lines, patches, texts, images), not pixels:
the frontier's staircase, the interleaved timeline's chunks, the summarised long timeline."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from trainplan.interface.render import figure, pipeline_plots, plots  # noqa: E402
from trainplan.interface.render.chart_layout import staircase  # noqa: E402
from trainplan.interface.tabs import pipeline_report  # noqa: E402


def _row(gb: float, step: float, **layout) -> dict:
    base = {"dp": 64, "tp": 8, "pp": 32, "cp": 1, "ep": 1, "zero_stage": 1, "recompute": "none",
            "micro_batch_size": 1, "schedule": "interleaved", "virtual_stages": 4,
            "num_gpus": 16384, "gpu": "H100-SXM"}  # fmt: skip
    return {**base, **layout, "total_bytes": gb * 1e9, "step_s": step}


LLAMA3_405B = [  # trainplan frontier --model llama3-405b --gpus 16384 --gpu H100-SXM (fastest first)
    _row(78.045, 7.153),
    _row(73.263, 8.543, dp=32, pp=64, virtual_stages=2),
    _row(41.725, 8.746, dp=256, pp=8, recompute="sqrt", virtual_stages=8),
    _row(22.568, 8.761, dp=128, pp=16, recompute="sqrt", virtual_stages=8),
    _row(13.042, 9.687, recompute="sqrt"),
]
"""The frontier the staircase was once drawn wrong for: its 7.15 s level reached 73 GB, where only
8.54 s is possible."""


def _levels(xy) -> list[tuple[float, float, float]]:
    """The line's horizontal segments as (level, left x, right x)."""
    return [
        (a[1], min(a[0], b[0]), max(a[0], b[0]))
        for a, b in zip(xy[:-1], xy[1:], strict=True)
        if a[1] == b[1] and a[0] != b[0]
    ]


def test_frontier_staircase_levels_start_at_their_own_points():
    plt = figure.pyplot()
    fig = plots.frontier_figure(LLAMA3_405B, "memory")
    line = fig.axes[0].lines[0]
    assert line.get_drawstyle() == "default"  # the vertices are the steps, drawn as given
    xy = line.get_xydata()
    points = {round(r["step_s"], 3): r["total_bytes"] / 1e9 for r in LLAMA3_405B}
    levels = _levels(xy)
    assert len(levels) == len(LLAMA3_405B) - 1  # every level but the fastest runs to the next
    for level, left, right in levels:
        assert left == pytest.approx(points[round(level, 3)])  # starts at its own point
        faster = [x for y, x in points.items() if y < level]
        assert right == pytest.approx(min(faster))  # ends where a faster point becomes affordable
    # the 7.15 s level is never drawn below the 78 GB its layout needs
    assert all(x >= 78.045 - 1e-9 for x, y in xy if y == pytest.approx(7.153))
    assert all(x >= 73.263 - 1e-9 for x, y in xy if y == pytest.approx(8.543))
    plt.close(fig)


def test_staircase_is_the_budget_function():
    """Hand derivation: points (x, y) = (1, 9), (2, 5), (4, 3); with a budget of 3 the best is 5,
    so the line holds 5 over [2, 4] and drops to 3 at 4."""
    assert staircase([4, 1, 2], [3, 9, 5]) == ([1, 2, 2, 4, 4], [9, 9, 5, 5, 3])
    assert staircase([7.0], [1.0]) == ([7.0], [1.0])


def test_frontier_labels_are_numbers_clear_of_each_other_with_full_layouts_beside():
    plt = figure.pyplot()
    rows = [*LLAMA3_405B, _row(13.1, 9.69, recompute="full"), _row(13.05, 9.70, zero_stage=2)]
    rows.sort(key=lambda r: r["step_s"])
    fig = plots.frontier_figure(rows, "memory")
    ax, side = fig.axes
    fig.canvas.draw()
    notes = [t for t in ax.texts if t.get_text().isdigit()]
    assert [t.get_text() for t in notes] == [str(i) for i in range(1, len(rows) + 1)]
    boxes = [t.get_window_extent() for t in notes]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    table = side.texts[0].get_text().splitlines()
    for i, r in enumerate(rows):  # what tells points apart: ZeRO stage and recompute
        assert f"ZeRO-{r['zero_stage']}, recompute {r['recompute']}" in table[i]
    plt.close(fig)


def _bars(ax) -> list[Rectangle]:
    return [p for p in ax.patches if isinstance(p, Rectangle)]


def test_interleaved_timeline_gives_each_chunk_its_colour_and_label():
    plt = figure.pyplot()
    report = pipeline_report(4, 8, "interleaved", 2)
    fig = plots.pipeline_figure(report)
    ax = fig.axes[0]
    bars = _bars(ax)
    assert len(bars) == sum(len(r["slots"]) for r in report["timeline"]) == 4 * 8 * 2 * 2
    slots = [s for r in report["timeline"] for s in r["slots"]]
    colour = {}
    for bar, s in zip(bars, slots, strict=True):
        colour.setdefault((s["pass"], s["chunk"]), set()).add(to_hex(bar.get_facecolor()))
    assert all(len(c) == 1 for c in colour.values())  # one colour per (pass, chunk)
    assert len({next(iter(c)) for c in colour.values()}) == 4  # and all four differ
    labels = {t.get_text() for t in ax.texts}
    assert {"0a", "0b", "7a", "7b"} <= labels  # micro-batch and chunk letter in the boxes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["forward, chunk a", "forward, chunk b", "backward, chunk a",
                      "backward, chunk b", "idle (bubble)"]  # fmt: skip
    plt.close(fig)


def test_long_timeline_is_summarised_to_a_size_a_browser_holds():
    """64 stages × 512 micro-batches are 65,536 passes: drawn as one image of time bins (no box
    per pass), titled as summarised, and the SVG stays under 1 MB (it was 18 MB)."""
    plt = figure.pyplot()
    report = pipeline_report(64, 512)
    fig = plots.pipeline_figure(report)
    ax = fig.axes[0]
    assert len(_bars(ax)) == 0 and not ax.texts
    (image,) = [a for a in ax.get_children() if isinstance(a, AxesImage)]
    assert image.get_array().shape[:2] == (64, pipeline_plots.SUMMARY_BINS)
    assert "summarised: 65,536 passes" in ax.get_title()
    plt.close(fig)
    assert len(plots.svg(lambda out: plots.pipeline_chart(report, out))) < 1_000_000
    small = pipeline_report(4, 8)  # below the bound every pass is its own box
    fig = plots.pipeline_figure(small)
    assert len(_bars(fig.axes[0])) == 64 <= plots.MAX_BOXES
    plt.close(fig)
