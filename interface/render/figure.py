"""Where every chart is drawn: matplotlib's pyplot on the non-interactive Agg backend (loaded
here only; :func:`_pyplot` says how to install it when it is missing), a chart's file
by its suffix, and SVG into a binary stream for the web app (:func:`svg`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from trainplan.model.errors import InputError

__all__ = ["Target", "svg"]

Target = str | Path | IO[bytes]
"""Where a chart goes: a file path, or a binary stream that receives SVG."""


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
    """The output file, checked by the one rule for output paths (interface.outputs.output_path);
    a stream passes as it is."""
    from trainplan.interface.outputs import output_path

    return path if hasattr(path, "write") else output_path(path, "path", allowed)  # type: ignore[arg-type]


def _save(fig: Any, out: Any) -> None:
    """Write a figure (SVG into a stream); what the file system refuses is an InputError
    (interface.outputs.writing)."""
    from trainplan.interface.outputs import writing

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
