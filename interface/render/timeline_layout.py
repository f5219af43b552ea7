"""The pipeline timeline's geometry at page width, which :mod:`interface.render.pipeline_plots`
draws: one figure width for every schedule and size, the widths at which the pipeline page shows
it, type sizes that stay 9 px or more on screen there, row heights and stage ticks for 1 to 256
rows, the legend's columns under the axes, and whether a block's label fits inside the block.
Arithmetic in inches and points (1 in = 72 pt); no matplotlib here."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "WIDTH_IN",
    "SHOWN_PX",
    "TEXT_PT",
    "TICK_PT",
    "TITLE_PT",
    "Frame",
    "frame",
    "label_fits",
    "legend_columns",
    "row_inches",
    "smallest_text_px",
    "tick_stride",
]

WIDTH_IN = 8.4
"""Figure width, inches, whatever the schedule or step length: 604.8 pt, which a browser draws
806.4 CSS px wide unscaled (96 px an inch) and a PNG holds in 840 px at matplotlib's default
``figure.dpi`` of 100 — under the pipeline page's widest showing, :data:`SHOWN_PX`. A longer step
gets narrower blocks, not a wider figure (its labels go first, :func:`label_fits`)."""

SHOWN_PX = (640.0, 807.6)
"""Narrowest and widest width, CSS px, at which the pipeline page shows the figure (an SVG at
``width: 100%``), from interface/web/static/style.css (1 rem = 16 px): ``.figure svg {
min-width: 640px }`` (a narrower box scrolls), and at ``main { max-width: 1280px }`` 1,280 −
2 × 19.2 (main's 1.2 rem padding) − 400 (the form's column) − 19.2 (the 1.2 rem gap) − 2 × 6.4
(the figure box's 0.4 rem padding) − 2 × 1 (its border) = 807.6."""

TEXT_PT, TICK_PT, TITLE_PT = 9.0, 10.0, 11.0
"""Type sizes, points: the blocks' labels and the legend; the axes' ticks and labels; the title.
On screen a point of the figure is ``shown px / (WIDTH_IN × 72)`` px, so 9 pt is 9.5 px at the
narrowest showing and 12.0 px at the widest (:func:`smallest_text_px`)."""

CHAR_EM = 0.64
"""Widest advance of a label's character, em: DejaVu Sans's digits (1,303 of 2,048 font units,
matplotlib's default font; its lower-case letters, ``'``, ``,`` and the space are narrower)."""

LEGEND_EM = 0.58
"""A legend label's mean character advance, em: DejaVu Sans's lower-case letters, space and
punctuation average under 0.58 (``B backward (input and weights)``: 143.3 pt at 9 pt, 30
characters, 0.53 em each, by matplotlib's ``TextToPath.get_text_width_height_descent``)."""

ROW_IN, AXES_IN = 0.32, 6.0
"""A stage's row height, inches, up to 18 rows (23 pt: a bar of 0.4 row, DualPipe's half of an
overlapped block, still holds a 9-pt label), and the axes' height beyond (the rows share 6 in)."""

_LEFT_IN, _RIGHT_IN = 0.85, 0.15
"""Margins, inches: the y labels (``stage 255`` at 10 pt is 45 pt, plus the tick and its pad,
7 pt) and the last x tick's half."""


def smallest_text_px(size_pt: float = TEXT_PT) -> float:
    """On-screen height, CSS px, of ``size_pt`` points of the figure at the page's narrowest
    showing (:data:`SHOWN_PX`): 9 pt → 9 × 640 / 604.8 = 9.52 px."""
    return size_pt * SHOWN_PX[0] / (WIDTH_IN * 72)


def row_inches(rows: int) -> float:
    """Height of one row (a stage or rank), inches: :data:`ROW_IN` up to 18 rows, then
    :data:`AXES_IN` / ``rows`` (0.1875 at 32 rows, 0.0234 at 256)."""
    return min(ROW_IN, AXES_IN / max(rows, 1))


def tick_stride(rows: int) -> int:
    """Rows between two labelled ticks of the y axis: the least power of two that keeps the
    10-point labels a line (1.2 × :data:`TICK_PT`) apart (1 up to 36 rows, 2 at 64, 8 at
    256)."""
    stride, row_pt = 1, row_inches(rows) * 72
    while stride * row_pt < 1.2 * TICK_PT:
        stride *= 2
    return stride


def legend_columns(labels: Sequence[str]) -> int:
    """Columns of a legend of ``labels`` across the figure: as many as fit a column of handle
    (2 em), pad (0.8 em), the longest label at :data:`LEGEND_EM` a character and column spacing
    (2 em) — matplotlib's ``legend.handlelength``, ``handletextpad`` and ``columnspacing``
    defaults — at :data:`TEXT_PT`; at least 1, at most ``len(labels)``.

    Raises
    ------
    ValueError
        ``labels`` empty.
    """
    column = TEXT_PT * (4.8 + LEGEND_EM * max(len(s) for s in labels))
    return max(1, min(len(labels), int(WIDTH_IN * 72 // column)))


@dataclass(frozen=True)
class Frame:
    """Where a timeline's axes sit in its figure (:func:`frame`)."""

    height_in: float
    """Figure height, inches (its width is :data:`WIDTH_IN`)."""
    left: float
    """Axes' left edge, a fraction of the figure's width (matplotlib's ``subplots_adjust``)."""
    right: float
    """Axes' right edge, a fraction of the figure's width."""
    bottom: float
    """Axes' bottom edge, a fraction of the figure's height, above the x labels and legend."""
    top: float
    """Axes' top edge, a fraction of the figure's height, under the title."""
    row_pt: float
    """One row's height, points (:func:`row_inches`)."""
    stride: int
    """Rows between labelled y ticks (:func:`tick_stride`)."""
    columns: int
    """Legend columns (:func:`legend_columns`)."""
    axes_width_pt: float
    """Axes' width, points: 532.8, the time axis's length."""


def frame(rows: int, title_lines: int, legend_labels: Sequence[str]) -> Frame:
    """The layout of a timeline of ``rows`` rows under a title of ``title_lines`` lines, with a
    legend of ``legend_labels`` under the x axis. Heights, points: title lines 1.25 ×
    :data:`TITLE_PT` and 9 pad; x tick labels and axis label 36 (each 10 pt with its pad); legend
    rows 1.5 × :data:`TEXT_PT` (``legend.labelspacing`` 0.5 em) and 7 pad.

    Raises
    ------
    ValueError
        ``legend_labels`` empty.
    """
    columns = legend_columns(legend_labels)
    legend_pt = math.ceil(len(legend_labels) / columns) * 1.5 * TEXT_PT + 7
    bottom_in, top_in = (36 + legend_pt) / 72, (title_lines * 1.25 * TITLE_PT + 9) / 72
    height = rows * row_inches(rows) + bottom_in + top_in
    return Frame(
        height_in=height,
        left=_LEFT_IN / WIDTH_IN,
        right=1 - _RIGHT_IN / WIDTH_IN,
        bottom=bottom_in / height,
        top=1 - top_in / height,
        row_pt=row_inches(rows) * 72,
        stride=tick_stride(rows),
        columns=columns,
        axes_width_pt=(WIDTH_IN - _LEFT_IN - _RIGHT_IN) * 72,
    )


def label_fits(text: str, width_pt: float, height_pt: float) -> bool:
    """Whether ``text`` at :data:`TEXT_PT` fits inside a block ``width_pt`` wide and
    ``height_pt`` tall, points: its width at :data:`CHAR_EM` a character plus 2 pt, and one
    type size of height. A block too small is left unlabelled (its colour and the legend say
    what it is), never labelled in smaller type."""
    return len(text) * CHAR_EM * TEXT_PT + 2 <= width_pt and TEXT_PT <= height_pt
