"""What a sweep's standard figures show, from its results table (pandas, no matplotlib;
:mod:`interface.render.plots` draws them):

* **scaling**: a metric (time to train, cost, step time, MFU) against the GPU count, one line per
  part, one panel per model;
* **heat map**: a metric under each multiplier of one hardware what-if (columns) for each model
  by size (rows), as a ratio to the ×1 part when the grid has it.

Where other axes vary too (sequence lengths, recipes, other what-ifs), a cell or a line point is
the best over them (least time, cost or step time; most MFU), and the title says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainplan.interface.sweep.summary import ANSWERED
from trainplan.model.errors import InputError

__all__ = [
    "METRICS",
    "Metric",
    "check_ran",
    "default_metric",
    "metrics_of",
    "scaling_series",
    "heatmap_cells",
    "Heatmap",
]


@dataclass(frozen=True, slots=True)
class Metric:
    column: str
    scale: float
    """Multiplier from the column's unit to the axis's."""
    label: str
    best_is_least: bool = True
    bounded: bool = False
    """A rate with a fixed range (MFU, 0–100 %): its axis is linear whatever its span
    (:func:`interface.render.plots.value_scale`)."""


METRICS = {
    "time-to-train": Metric("time_to_train_s", 1 / 86400, "time to train (days)"),
    "cost": Metric("cost_usd", 1.0, "cost ($)"),
    "step-time": Metric("step_s", 1.0, "step time (s)"),
    "mfu": Metric("mfu", 100.0, "MFU (%)", best_is_least=False, bounded=True),
}
"""The metrics a figure may show, by name (``--metric``)."""


def default_metric(frame: Any) -> str:
    """The figure's metric when none is named: time to train where the results have it (the
    grid gives ``tokens``), else the step time, which every answered point has."""
    column = METRICS["time-to-train"].column
    has = column in frame and frame[column].notna().any()
    return "time-to-train" if has else "step-time"


def metrics_of(frame: Any) -> list[str]:
    """The names of :data:`METRICS` some point of the results has (time to train needs the
    grid's ``tokens``, cost its ``gpu_hour_price`` too), in their order: what a figure may show.

    >>> import pandas as pd
    >>> metrics_of(pd.DataFrame({"time_to_train_s": [None], "cost_usd": [None], "step_s": [1.0],
    ...                          "mfu": [0.4]}))
    ['step-time', 'mfu']
    """
    return [n for n, m in METRICS.items() if m.column in frame and frame[m.column].notna().any()]


def check_ran(frame: Any) -> None:
    """Refuse results of which no point has an answer (every point errored, was infeasible or
    did not fit): a figure has nothing to draw, and the metric is not what is missing.

    Raises
    ------
    InputError
        ``results: no point of these results ran (2 points: 2 errored); the first error, point 0:
        objective cost: …``.

    >>> import pandas as pd
    >>> check_ran(pd.DataFrame({"point": [0, 1], "status": ["error", "infeasible"],
    ...                         "reason": ["objective cost: no price", "no layout fits"]}))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: results: no point ...(2 points: 1 errored, 1 infeasible); the first error, point 0: obj...
    """
    if frame["status"].isin(ANSWERED).any():
        return
    counts = frame["status"].value_counts()
    said = ", ".join(
        f"{n} {'errored' if status == 'error' else status}"
        for status, n in sorted(counts.items(), key=lambda x: (x[0] != "error", x[0]))
    )
    errors = frame[frame["status"] == "error"]
    first = "".join(
        f"; the first error, point {int(r.point)}: {r.reason}" for r in errors.head(1).itertuples()
    )
    s = "" if len(frame) == 1 else "s"
    raise InputError(
        f"results: no point of these results ran ({len(frame)} point{s}: {said}){first}"
    )


def _metric(frame: Any, name: str) -> Metric:
    check_ran(frame)
    if name not in METRICS:
        raise InputError(f"metric: {name!r} is not one of {', '.join(METRICS)}")
    m = METRICS[name]
    if not frame[m.column].notna().any():
        need = " (the grid needs tokens" + (" and gpu_hour_price)" if name == "cost" else ")")
        raise InputError(
            f"metric: {name!r}: no point of these results has it{need if m.column != 'step_s' else ''}"
        )
    return m


def _best(frame: Any, keys: list[str], m: Metric) -> Any:
    """One row per ``keys`` value: the best of the answered rows by ``m``."""
    rows = frame[frame["status"].isin(ANSWERED) & frame[m.column].notna()]
    pick = rows.groupby(keys, sort=False)[m.column]
    index = pick.idxmin() if m.best_is_least else pick.idxmax()
    return rows.loc[index.values]


def _others(frame: Any, fixed: list[str]) -> list[str]:
    """Input columns besides ``fixed`` that take several values for one ``fixed`` value (what a
    line's point or a cell is the best over)."""
    meta = frame.attrs.get("sweep", {})
    inputs = ["seq_len", "global_batch", "recipe", "framework", *meta.get("what_ifs", []), "gpu"]
    inputs.append("gpus")
    groups = frame.groupby(fixed, dropna=False)
    return [c for c in inputs if c not in fixed and groups[c].nunique().max() > 1]


def scaling_series(
    frame: Any, metric: str = "time-to-train"
) -> tuple[dict[str, dict[str, list[tuple[int, float]]]], Metric, str]:
    """``{model: {part: [(gpus, value), …]}}`` in the metric's axis unit, GPU counts ascending,
    models by size; the metric; a note naming the axes each point is the best over ("" if
    none).

    Raises
    ------
    InputError
        An unknown metric, or one no point has (time to train without a token budget).
    """
    m = _metric(frame, metric)
    best = _best(frame, ["model", "part", "gpus"], m)
    order = best.groupby("model")["num_params"].max().sort_values().index
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for model in order:
        lines: dict[str, list[tuple[int, float]]] = {}
        for part, rows in best[best["model"] == model].groupby("part", sort=False):
            rows = rows.sort_values("gpus")
            lines[str(part)] = [
                (int(g), float(v) * m.scale)
                for g, v in zip(rows["gpus"], rows[m.column], strict=True)
            ]
        out[str(model)] = lines
    others = _others(frame, ["model", "part", "gpus"])
    note = f"best over {', '.join(others)}" if others else ""
    return out, m, note


@dataclass(frozen=True, slots=True)
class Heatmap:
    rows: list[str]
    """Models, smallest first, with their size (``llama3-8b (8.0B)``)."""
    columns: list[str]
    """The what-if's multipliers (``×1``, ``×1.5``…)."""
    values: list[list[float | None]]
    """[row][column]: the metric (or its ratio to ×1), None where no point fits."""
    title: str
    relative: bool
    """Whether the values are ratios to the ×1 column."""


def heatmap_cells(frame: Any, what_if: str, metric: str = "time-to-train") -> Heatmap:
    """The heat map of ``what_if``'s multipliers against the models.

    Raises
    ------
    InputError
        A what-if the results do not sweep, an unknown metric or one no point has.
    """
    swept = frame.attrs.get("sweep", {}).get("what_ifs", [])
    if what_if not in swept:
        raise InputError(
            f"what_if: {what_if!r} is not swept in these results ({', '.join(swept) or 'none'})"
        )
    m = _metric(frame, metric)
    best = _best(frame, ["model", what_if], m)
    sizes = best.groupby("model")["num_params"].max().sort_values()
    multipliers = sorted(best[what_if].unique())
    relative = 1.0 in multipliers
    values: list[list[float | None]] = []
    for model in sizes.index:
        by = {
            float(k): float(v)
            for k, v in best[best["model"] == model].set_index(what_if)[m.column].items()
        }
        base = by.get(1.0)
        row: list[float | None] = []
        for k in multipliers:
            v = by.get(float(k))
            if v is None or (relative and base is None):
                row.append(None)
            else:
                row.append(v / base if relative and base else v * m.scale)
        values.append(row)
    others = [c for c in _others(frame, ["model", what_if]) if c != "part"]
    what = f"{m.label.split(' (')[0]} ÷ its ×1 value" if relative else m.label
    title = f"{what_if}: {what}" + (f" (best over {', '.join(others)})" if others else "")
    labels = [f"{model} ({size / 1e9:,.1f}B)" for model, size in sizes.items()]
    return Heatmap(labels, [f"×{k:g}" for k in multipliers], values, title, relative)
