"""The rule an example's ``expect`` figures are checked by (``scenarios/examples.toml``), shared by
the tests that run the examples in-process and as separate ``trainplan example`` processes.

A key is found at any depth of the JSON object (outside ``zero_table``) and every occurrence must
agree; the ZeRO-table figures are read from the ``zero_table`` rows in stage order; plain numbers
match to a relative 1e-6 (TOML integers exactly); ``{value, rel}`` / ``{values, rel}`` use the
given tolerance; lists compare element-wise; a key ending ``_min`` is a lower bound.
"""

from __future__ import annotations

import math
from typing import Any

ZERO_TABLE_KEYS = {
    "zero_table_bytes": "model_state_bytes",
    "zero_table_reduction": "reduction",
    "dp_bytes_per_step": "dp_bytes_per_step",
}


def find_all(obj: Any, key: str) -> list[Any]:
    """Every value of ``key`` at any depth of ``obj`` (not inside ``zero_table``)."""
    found = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key:
                found.append(v)
            if k != "zero_table":
                found.extend(find_all(v, key))
    elif isinstance(obj, list):
        for v in obj:
            found.extend(find_all(v, key))
    return found


def lookup(out: dict[str, Any], key: str) -> Any:
    """The one value of ``key`` in an example's JSON object (the ZeRO table's column in stage
    order for its keys)."""
    if key in ZERO_TABLE_KEYS:
        tables = find_all(out, "zero_table")
        assert len(tables) == 1, f"'zero_table' occurs {len(tables)} times"
        rows = sorted(tables[0], key=lambda r: r["zero_stage"])
        assert [r["zero_stage"] for r in rows] == [0, 1, 2, 3]
        return [r[ZERO_TABLE_KEYS[key]] for r in rows]
    values = find_all(out, key)
    assert values, f"'{key}' is not in the JSON"
    assert all(v == values[0] for v in values[1:]), f"'{key}' differs between occurrences: {values}"
    return values[0]


def close(got: Any, want: Any, rel: float | None) -> bool:
    """``got`` equals ``want`` under the file's rule (see the module)."""
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(close(g, w, rel) for g, w in zip(got, want, strict=True))
        )
    if isinstance(want, (bool, str)):
        return got == want
    if isinstance(want, int) and rel is None:
        return isinstance(got, (int, float)) and not isinstance(got, bool) and got == want
    return isinstance(got, (int, float)) and math.isclose(
        got, want, rel_tol=rel or 1e-6, abs_tol=1e-12
    )


def check_expect(out: dict[str, Any], expect: dict[str, Any], name: str = "") -> None:
    """Assert every figure of an example's ``expect`` table in its JSON object ``out``."""
    assert expect, f"{name}: every example states a figure"
    for key, spec in expect.items():
        want, rel = spec, None
        if isinstance(spec, dict):
            want, rel = (spec["values"] if "values" in spec else spec["value"]), spec.get("rel")
        if key.endswith("_min"):
            got = lookup(out, key.removesuffix("_min"))
            assert got >= want, f"{name}: {key[:-4]} = {got!r}, want at least {want!r}"
            continue
        got = lookup(out, key)
        assert close(got, want, rel), f"{name}: {key} = {got!r}, want {want!r} (rel {rel})"
