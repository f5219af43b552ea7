"""What a finished sweep says: points by status, why points are infeasible or refused, and the
best point of each group — as the ``--json`` object and as text."""

from __future__ import annotations

from typing import Any

from trainplan.interface.render.chart_layout import layout_key
from trainplan.interface.render.report import duration, table_text
from trainplan.interface.sweep.results import records
from trainplan.model.errors import InputError

__all__ = ["summary_json", "summary_text", "rank_column", "ANSWERED"]

ANSWERED = ("optimal", "feasible", "fits")
"""Statuses of points with a layout (a row with every answer column filled)."""


def rank_column(frame: Any, meta: dict[str, Any]) -> tuple[str, str]:
    """The column the best point of a group has the least of, and its name: a search's own
    objective (``meta``: the results' description); for evaluate the cost, else the time to
    train, else GPU-seconds per token."""
    if meta.get("command", "search") == "search":
        return "objective_value", str(meta.get("objective") or "step-time")
    for column, name in (("cost_usd", "cost"), ("time_to_train_s", "time-to-train")):
        if frame[column].notna().any():
            return column, name
    return "gpu_s_per_token", "GPU-seconds per token"


def _why(frame: Any, status: str) -> list[dict[str, Any]]:
    """Rows of ``status`` grouped by the rule that stopped them (the reason's text before its
    first ``:``), most points first, with an example."""
    rows = frame[frame["status"] == status]
    if rows.empty:
        return []
    family = rows["reason"].fillna("").str.split(":").str[0]
    out = []
    for name, group in rows.groupby(family, sort=False):
        first = group.iloc[0]
        out.append(
            {
                "why": name,
                "points": int(len(group)),
                "example_point": int(first["point"]),
                "example": str(first["reason"]),
            }
        )
    return sorted(out, key=lambda d: -d["points"])


def check_group_by(group_by: tuple[str, ...], columns: Any) -> None:
    """Refuse a ``group_by`` column not among ``columns`` (the results' columns; checked before a
    sweep runs, so a misspelled column is not found only after its last point).

    Raises
    ------
    InputError
        ``group_by: 'modle' is not a results column (e.g. model, …)``.
    """
    for column in group_by:
        if column not in columns:
            raise InputError(
                f"group_by: {column!r} is not a results column (e.g. model, gpu, part, gpus, "
                "seq_len, recipe, framework or a what-if)"
            )


def summary_json(
    frame: Any, meta: dict[str, Any], group_by: tuple[str, ...] = ("model",)
) -> dict[str, Any]:
    """The summary of a results table (``frame``: :func:`interface.sweep.results.load_results`'s
    DataFrame; ``meta``: its description): ``points``, ``statuses`` (count each),
    ``infeasible`` and ``errors`` (grouped by rule: ``why``, ``points``, an example), ``best``
    (per ``group_by`` values, the row with the least ``ranked_by``), ``ranked_by``, ``notes``
    (what the grid itself is noted for, from ``meta``: a price no point uses).

    Raises
    ------
    InputError
        A ``group_by`` column the results do not have.
    """
    check_group_by(group_by, frame.columns)
    frame = frame.copy()
    frame["gpu_s_per_token"] = frame["gpus"] / frame["tokens_per_s"]
    column, name = rank_column(frame, meta)
    answered = frame[frame["status"].isin(ANSWERED) & frame[column].notna()]
    best = []
    if not answered.empty:
        winners = answered.loc[answered.groupby(list(group_by), sort=False)[column].idxmin()]
        best = records(winners)
    return {
        "grid": meta.get("grid"),
        "command": meta.get("command"),
        "objective": meta.get("objective"),
        "points": int(len(frame)),
        "statuses": {str(k): int(v) for k, v in frame["status"].value_counts().items()},
        "infeasible": _why(frame, "infeasible") + _why(frame, "does-not-fit"),
        "errors": _why(frame, "error"),
        "internal_errors": int(frame["reason"].fillna("").str.startswith("internal error").sum()),
        "group_by": list(group_by),
        "ranked_by": name,
        "best": best,
        "notes": list(meta.get("notes") or []),
    }


TOLD = ("model", "seq_len", "global_batch", "framework", "recipe")
"""Inputs a best-per table names beside its groups (the part, GPU count and layout are always
columns): the model always, the others where the rows differ in them."""


def _told(best: list[dict[str, Any]], group_by: list[str]) -> list[str]:
    """The :data:`TOLD` columns a best-per table shows besides ``group_by``: ``model`` always (a
    row per GPU count of a grid of several models named none), each other where ``best``'s rows
    take more than one value of it.

    >>> rows = [{"model": "a", "seq_len": 8192, "recipe": None}, {"model": "b", "seq_len": 4096}]
    >>> _told(rows, ["gpus"]), _told(rows, ["model"])
    (['model', 'seq_len'], ['seq_len'])
    """
    varies = [c for c in TOLD[1:] if len({str(r.get(c)) for r in best}) > 1]
    return [c for c in ("model", *varies) if c not in group_by]


def _money(usd: float | None) -> str:
    return "—" if usd is None else f"${usd:,.0f}"


def summary_text(s: dict[str, Any], head: str) -> str:
    """The summary as the terminal shows it, under the ``head`` line."""
    lines = [head]
    lines.append(", ".join(f"{n:,} {k}" for k, n in s["statuses"].items()))
    lines += [f"Note: {n}" for n in s.get("notes", [])]
    for title, items in (("Infeasible", s["infeasible"]), ("Refused (error)", s["errors"])):
        if items:
            lines.append(f"\n{title}, by rule:")
            for item in items[:10]:
                lines.append(
                    f"  {item['why']}: {item['points']:,} point(s), e.g. point {item['example_point']}: {item['example']}"
                )
    if s["best"]:
        lines.append(f"\nBest per {', '.join(s['group_by'])} (least {s['ranked_by']}):")
        shown = [*s["group_by"], *_told(s["best"], s["group_by"])]
        table = [
            {
                **{c: str(r[c]) for c in shown},
                "part": r["part"],
                "GPUs": f"{r['gpus']:,}",
                "layout": layout_key(r, False),
                "step": duration(r["step_s"]),
                "MFU": f"{r['mfu']:.1%}",
                "time to train": "—"
                if r.get("time_to_train_s") is None
                else duration(r["time_to_train_s"]),
                "cost": _money(r.get("cost_usd")),
            }
            for r in s["best"]
        ]
        lines.append(table_text(table))
    if s["internal_errors"]:
        lines.append(
            f"\n{s['internal_errors']} point(s) hit an internal error (a bug): see their reason"
        )
    return "\n".join(lines)
