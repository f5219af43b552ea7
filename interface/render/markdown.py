"""Markdown text for the manual's generated pages (the CLI and API references): one cell or
paragraph of a table, escaped so that it renders as the text it is."""

from __future__ import annotations

__all__ = ["cell_text"]


def cell_text(text: str) -> str:
    """``text`` for a Markdown table cell or paragraph: no HTML, emphasis or cell breaks
    (backslash, ``*`` and ``|`` escaped, ``<`` and ``>`` as entities).

    >>> cell_text("a|b <x> *y*")
    'a\\\\|b &lt;x&gt; \\\\*y\\\\*'
    """
    for a, b in (("\\", "\\\\"), ("*", "\\*"), ("|", "\\|"), ("<", "&lt;"), (">", "&gt;")):
        text = text.replace(a, b)
    return text
