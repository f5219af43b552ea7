"""Strict checks of published per-operation tables (``scenarios/kernels/*.toml``), shared by
:mod:`model.kernel_tables`' dataclasses and parsers: a value of the type a field's annotation
names, one dataclass per TOML table with unknown keys refused and required keys demanded, lists
of equal length, values from a closed set, strictly ascending sequences. Every failure is one
:class:`~trainplan.model.errors.ScenarioError` naming the file, the table and the key. Pure
functions, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, fields
from types import MappingProxyType
from typing import Any

from trainplan.model.errors import ScenarioError

__all__ = [
    "row_where",
    "check_value",
    "build_row",
    "same_length",
    "one_of",
    "ascending",
    "KIND_OF",
    "field_kinds",
    "checked_mapping",
]


def row_where(file: str, table: str, index: int, row: Mapping[str, Any]) -> str:
    label = row.get("part") or row.get("library") or row.get("kernel") or ""
    return f"scenarios/kernels/{file}: {table} {index + 1}" + (f" ({label})" if label else "")


def check_value(value: Any, kind: str, where: str, key: str) -> Any:
    """``value`` of the type ``kind`` names; lists become tuples."""
    scalar = {
        "str": lambda v: isinstance(v, str) and bool(v.strip()),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
        "num": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v >= 0,
        "bool": lambda v: isinstance(v, bool),
    }
    if kind.endswith("s") and kind[:-1] in scalar:
        ok = isinstance(value, list) and value and all(scalar[kind[:-1]](v) for v in value)
        if not ok:
            raise ScenarioError(f"{where}: key '{key}' must be a non-empty list of {kind[:-1]}")
        return tuple(value)
    if kind == "numss":
        ok = isinstance(value, list) and value and all(isinstance(r, list) for r in value)
        if not ok:
            raise ScenarioError(f"{where}: key '{key}' must be a list of lists of numbers")
        return tuple(check_value(r, "nums", where, key) for r in value)
    if not scalar[kind](value):
        raise ScenarioError(f"{where}: key '{key}' must be a {kind} (positive), got {value!r}")
    return value


def build_row(cls: type, row: Any, where: str, kinds: Mapping[str, str]) -> Any:
    """One dataclass from one TOML table: every field of ``cls`` by its kind in ``kinds``;
    fields with a default are optional, unknown keys refused."""
    if not isinstance(row, dict):
        raise ScenarioError(f"{where}: expected a table, got {row!r}")
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(row) - set(names))
    if unknown:
        raise ScenarioError(f"{where}: unknown key '{unknown[0]}' (allowed: {', '.join(names)})")
    values = {}
    for f in fields(cls):
        if f.name in row:
            values[f.name] = check_value(row[f.name], kinds[f.name], where, f.name)
        elif f.default is MISSING:
            raise ScenarioError(f"{where}: missing required key '{f.name}'")
    return cls(**values)


def same_length(obj: Any, names: tuple[str, ...], where: str) -> None:
    lengths = {n: len(getattr(obj, n)) for n in names if getattr(obj, n) is not None}
    if len(set(lengths.values())) > 1:
        raise ScenarioError(
            f"{where}: {', '.join(lengths)} must have one value each, got {lengths}"
        )


def one_of(value: str, allowed: tuple[str, ...], where: str, key: str) -> None:
    if value not in allowed:
        raise ScenarioError(f"{where}: key '{key}' is {value!r}, not one of {', '.join(allowed)}")


def ascending(values: tuple[float, ...], where: str, key: str) -> None:
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise ScenarioError(f"{where}: key '{key}' must be strictly ascending, got {values}")


KIND_OF = {
    "str": "str",
    "int": "int",
    "float": "num",
    "bool": "bool",
    "tuple[int, ...]": "ints",
    "tuple[float, ...]": "nums",
    "tuple[str, ...]": "strs",
    "tuple[tuple[float, ...], ...]": "numss",
}
"""The check each field's annotation asks for (:func:`check_value`); ``X | None`` as ``X``."""


def field_kinds(cls: type) -> dict[str, str]:
    return {f.name: KIND_OF[str(f.type).removesuffix(" | None")] for f in fields(cls)}


def checked_mapping(raw: Any, where: str, kind: str) -> Mapping[str, Any]:
    if not isinstance(raw, dict) or not raw:
        raise ScenarioError(f"{where}: expected a non-empty table, got {raw!r}")
    return MappingProxyType({k: check_value(v, kind, where, k) for k, v in raw.items()})
