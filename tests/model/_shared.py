"""The project's reference tables, read from the installed package (``scenarios/published.toml``
and ``scenarios/examples.toml``, each table with its source): nothing outside the repository."""

from __future__ import annotations

from typing import Any

from trainplan import scenarios

_FILES = {"published.toml": "published", "seed_examples.toml": "examples"}


def load(name: str) -> dict[str, Any]:
    """A data file of the package by its file name (``published.toml``, ``seed_examples.toml``)."""
    return scenarios.data(_FILES[name])


def table_rows(name: str, table: str) -> list[dict[str, Any]]:
    """Rows of a ``[[table]]`` with ``columns`` and ``rows``, as dicts."""
    tab = load(name)[table][0]
    return [dict(zip(tab["columns"], row, strict=True)) for row in tab["rows"]]


def table_meta(name: str, table: str) -> dict[str, Any]:
    """The ``[[table]]`` itself (``rel``, ``note``…)."""
    return load(name)[table][0]
