"""The pipeline timeline at page width: the figure no wider than the pipeline page shows it, its
smallest type 9 px or more on screen at the narrowest showing, and a block's label written only
where it fits inside the block (read back from the drawn figure, not pixels)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from matplotlib.text import Text  # noqa: E402

from trainplan.interface.render import figure, plots  # noqa: E402
from trainplan.interface.render.timeline_layout import (  # noqa: E402
    SHOWN_PX,
    TEXT_PT,
    WIDTH_IN,
    frame,
    label_fits,
    smallest_text_px,
    tick_stride,
)
from trainplan.interface.tabs import pipeline_report  # noqa: E402

CSS = Path(__file__).resolve().parents[2] / "interface" / "web" / "static" / "style.css"


def test_the_page_shows_the_timeline_640_to_807_6_px_wide():
    """The figure box's width on the pipeline page, by hand from style.css (1 rem = 16 px): at
    main's max-width 1,280 less its 2 × 1.2 rem padding, the 400 px form column, the 1.2 rem gap,
    the box's 2 × 0.4 rem padding and 2 × 1 px border: 807.6 px; never under the SVG's
    min-width of 640 px (the box scrolls). 8.4 in is 806.4 px unscaled, 840 px as PNG."""
    css = CSS.read_text()
    for rule in (
        "main { max-width: 1280px; margin: 0 auto; padding: 0.5rem 1.2rem 3rem; }",
        ".layout { display: grid; grid-template-columns: 400px minmax(0, 1fr); gap: 1.2rem;",
        ".figure { background: #fff; border: 1px solid var(--line); border-radius: 6px; "
        "padding: 0.4rem;",
        ".figure svg { width: 100%; min-width: 640px;",
    ):
        assert rule in css
    widest = 1280 - 2 * 1.2 * 16 - 400 - 1.2 * 16 - 2 * 0.4 * 16 - 2 * 1
    assert SHOWN_PX == (640.0, pytest.approx(widest)) and widest == pytest.approx(807.6)
    assert WIDTH_IN * 96 == pytest.approx(806.4) and WIDTH_IN * 96 <= SHOWN_PX[1]
    assert smallest_text_px() == pytest.approx(9 * 640 / 604.8) == pytest.approx(9.5238, abs=1e-4)


def test_rows_and_ticks_by_hand():
    """0.32 in rows (23.04 pt) up to 18 stages; 6 in shared beyond: 32 rows of 13.5 pt keep
    every label (≥ 12 pt apart), 64 rows of 6.75 pt label every 2nd, 256 of 1.6875 every 8th.
    1F1B 4 × 8 has 33 time units on 532.8 pt of axes: 16.1 pt a unit, so a forward of one unit
    holds "7" (5.76 + 2 pt) and a 3-unit DualPipe F&B half at 9.87 pt a unit holds "12'"."""
    assert [tick_stride(n) for n in (4, 18, 32, 36, 37, 64, 256)] == [1, 1, 1, 1, 2, 2, 8]
    fr = frame(4, 1, ["forward", "backward", "idle (bubble)"])
    assert fr.row_pt == pytest.approx(23.04) and fr.axes_width_pt == pytest.approx(532.8)
    assert label_fits("7", 532.8 / 33, 0.8 * 23.04)
    assert not label_fits("10'", 532.8 / 54, 0.8 * 23.04)  # a 1-unit pass of DualPipe 8 × 16
    assert label_fits("12'", 3 * 532.8 / 54, 0.4 * 23.04)


CASES = [
    ("1f1b", 4, 8, None),
    ("interleaved", 8, 16, 2),
    ("zb-v", 8, 16, None),
    ("dualpipe", 8, 16, None),
    ("dualpipe", 16, 32, None),
]


@pytest.mark.parametrize(("schedule", "p", "m", "v"), CASES)
def test_timeline_fits_the_page_with_type_of_9_px_or_more(schedule, p, m, v):
    plt = figure.pyplot()
    report = pipeline_report(p, m, schedule, v)
    fig = plots.pipeline_figure(report)
    ax = fig.axes[0]
    assert fig.get_figwidth() == WIDTH_IN and fig.get_figwidth() * 96 <= SHOWN_PX[1]
    assert fig.get_figwidth() * fig.dpi <= 1280  # the PNG: 840 px at 100 dpi
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert min(t.get_fontsize() for t in texts) == TEXT_PT
    assert min(t.get_fontsize() for t in texts) * 640 / (fig.get_figwidth() * 72) >= 9
    # every label inside its block: the block whose centre is the label's x, on its row
    renderer = fig.canvas.get_renderer()
    pt_per_unit = ax.get_window_extent(renderer).width * 72 / fig.dpi / report["step_time_units"]
    width = {
        (round((s["start"] + s["end"]) / 2, 6), row["stage"]): s["end"] - s["start"]
        for row in report["timeline"]
        for s in row["slots"]
    }
    assert bool(ax.texts) is (schedule != "zb-v")  # 103 units: 5.2 pt a unit holds no digit
    for t in ax.texts:
        x, y = t.get_position()
        block_pt = width[(round(x, 6), p - 1 - round(y))] * pt_per_unit
        assert t.get_window_extent(renderer).width * 72 / fig.dpi <= block_pt, t.get_text()
    if schedule == "1f1b":  # 16.1 pt a unit: every pass labelled
        assert len(ax.texts) == 4 * 8 * 2
    plt.close(fig)
