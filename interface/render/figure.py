"""Where every chart is drawn: matplotlib's pyplot on the non-interactive Agg backend (loaded
here only; :func:`pyplot` says how to install it when it is missing), a chart's file
by its suffix (:func:`chart_output`, :func:`save_figure`), SVG into a binary stream for the
web app (:func:`svg`), and the ink of a number on a coloured cell (:func:`cell_ink`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from trainplan.interface.outputs import output_path, writing
from trainplan.model.errors import InputError

__all__ = ["Target", "pyplot", "chart_output", "save_figure", "svg", "cell_ink"]

Target = str | Path | IO[bytes]
"""Where a chart goes: a file path, or a binary stream that receives SVG."""


def pyplot() -> Any:
    """matplotlib.pyplot (the module) on the non-interactive Agg backend.

    Raises
    ------
    InputError
        matplotlib missing (the ``[plot]`` or ``[web]`` extra).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("plots: matplotlib is not installed; pip install -e '.[plot]'") from None
    return plt


def chart_output(path: Target, allowed: tuple[str, ...]) -> Any:
    """Where a chart goes: ``path`` checked by the one rule for output paths
    (:func:`interface.outputs.output_path`, the parameter named ``path``) against the file
    suffixes ``allowed`` (``(".png", ".svg", ".pdf")``); a binary stream passes as it is.

    Raises
    ------
    InputError
        An empty path, a suffix not in ``allowed``, a folder, or a folder that does not exist
        or may not be written (naming ``path`` and the broken rule).
    """
    return path if hasattr(path, "write") else output_path(path, "path", allowed)  # type: ignore[arg-type]


def save_figure(fig: Any, out: Any) -> None:
    """Write the matplotlib figure ``fig`` to ``out`` (:func:`chart_output`'s answer): a file
    in the format of its suffix, or SVG into a binary stream.

    Raises
    ------
    InputError
        What the file system refuses (:func:`interface.outputs.writing`).
    """
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

    plt = pyplot()
    with _LOCK, plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "trainplan"}):
        buf = io.BytesIO()
        draw(buf)
    return buf.getvalue().decode()


def cell_ink(rgba: tuple[float, ...]) -> str:
    """``"black"`` or ``"white"``: the text colour that contrasts more with a cell of colour
    ``rgba`` (red, green, blue in [0, 1], alpha ignored: a colormap's colour). WCAG 2.2's
    relative luminance of the sRGB colour, L = 0.2126 R + 0.7152 G + 0.0722 B over the
    linearised channels (c / 12.92 up to 0.04045, else ((c + 0.055) / 1.055)^2.4), and its
    contrast ratios (L + 0.05) / 0.05 against black and 1.05 / (L + 0.05) against white, equal
    at L = √(1.05 · 0.05) − 0.05 = 0.179: black above.

    >>> cell_ink((0.993, 0.906, 0.144)), cell_ink((0.267, 0.005, 0.329))  # viridis's ends
    ('black', 'white')
    """
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return "black" if luminance > (1.05 * 0.05) ** 0.5 - 0.05 else "white"
