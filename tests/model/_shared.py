"""Paths to the project's shared case files (``../shared/cases`` next to the repository root)."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
CASES = REPO_ROOT.parent / "shared" / "cases"


@cache
def load(name: str) -> dict[str, Any]:
    """A TOML file of ``../shared/cases`` (``published.toml``, ``seed_examples.toml``)."""
    return tomllib.loads((CASES / name).read_text())


def table_rows(name: str, table: str) -> list[dict[str, Any]]:
    """Rows of a ``[[table]]`` with ``columns`` and ``rows``, as dicts."""
    tab = load(name)[table][0]
    return [dict(zip(tab["columns"], row, strict=True)) for row in tab["rows"]]


def table_meta(name: str, table: str) -> dict[str, Any]:
    """The ``[[table]]`` itself (``rel``, ``note``…)."""
    return load(name)[table][0]
