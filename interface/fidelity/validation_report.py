"""The validation report: every published run of :mod:`interface.fidelity.validation` against the cost
model, its step-time and memory errors, and the mean, median and largest |error| per framework,
per model family (dense / MoE) and per accelerator. ``python -m trainplan.interface.fidelity
--validation`` prints it (``--markdown``: the page ``docs/fidelity-validation.md``; ``--json``:
:func:`report_dict`).

Errors are predicted / published − 1 (step time: positive means the model is too slow; memory:
positive means it counts too many bytes). The statistics take the rows the model can express;
the rest are listed with their reason and their stand-in's figures.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from trainplan.interface.fidelity.validation import ValidationResult, ValidationTable, evaluate_all
from trainplan.interface.render.report import table_text

__all__ = [
    "GROUPS",
    "GOALS",
    "error_stats",
    "goal_table",
    "report_dict",
    "text_report",
    "markdown_report",
    "report_text",
]

GROUPS: dict[str, Callable[[ValidationResult], str]] = {
    "framework": lambda r: r.run.table.framework_as_run,
    "family": lambda r: r.family,
    "part": lambda r: r.part,
}
"""How the statistics group rows: by what ran, by dense / MoE, by accelerator."""

_BREAKDOWN = ("compute_s", "bubble_s", "exposed_comm_s", "optimizer_s", "grad_accumulation_s")


def _does_not_fit_line(count: int) -> str:
    """The header's sentence on published runs the model calls "does not fit" (``count`` ≥ 0)."""
    if count == 1:
        return 'One run that ran is called "does not fit".'
    return f'{count} runs that ran are called "does not fit".'


def _stats(errors: Sequence[float]) -> dict[str, float | int]:
    """Count, mean, median and max of |error|, in percent."""
    absolute = [100 * abs(e) for e in errors]
    return {
        "rows": len(absolute),
        "mean_pct": statistics.fmean(absolute),
        "median_pct": statistics.median(absolute),
        "max_pct": max(absolute),
    }


def error_stats(
    results: Sequence[ValidationResult], metric: str
) -> dict[str, dict[str, dict[str, float | int]]]:
    """``{"all": {"all": stats}, "framework": {name: stats}, "family": …, "part": …}`` of the
    counted rows' ``metric`` (``time`` or ``memory``; memory over the rows that publish a peak).
    Each stats: ``rows``, ``mean_pct``, ``median_pct``, ``max_pct`` of |error| in percent."""
    rows: list[tuple[ValidationResult, float]] = []
    for r in results:
        if r.run.counted and r.error is None:
            error = r.time_error if metric == "time" else r.memory_error
            if error is not None:
                rows.append((r, error))
    out: dict[str, dict[str, dict[str, float | int]]] = {}
    if not rows:
        return out
    out["all"] = {"all": _stats([e for _, e in rows])}
    for name, key in GROUPS.items():
        groups: dict[str, list[float]] = {}
        for r, e in rows:
            groups.setdefault(key(r), []).append(e)
        out[name] = {g: _stats(errs) for g, errs in sorted(groups.items())}
    return out


GOALS: dict[str, float] = {
    "dense_mean_pct": 5.0,
    "moe_mean_pct": 10.0,
    "max_pct": 15.0,
    "memory_mean_pct": 10.0,
}
"""The targets the validation set is held to (percent |error|): mean step-time error on dense
models and on MoE models, the largest step-time error of any counted run, the mean peak-memory
error; and no run that ran called "does not fit"."""


def goal_table(results: Sequence[ValidationResult]) -> list[str]:
    """The validation set against :data:`GOALS`, as Markdown table lines (target, where the model
    stands, met or not): the README and the validation page print it."""
    time = error_stats(results, "time")
    memory = error_stats(results, "memory")
    family = time.get("family", {})
    counted = [r for r in results if r.run.counted and r.error is None]
    beyond = [
        r
        for r in counted
        if r.time_error is not None and abs(r.time_error) * 100 > GOALS["max_pct"]
    ]
    too_big = sum(not r.fits for r in counted)
    listed = sum(not r.fits for r in results if not r.run.counted and r.error is None)
    big_text = str(too_big) + (f" (+{listed} the model cannot express)" if listed else "")

    def mean(stats: dict[str, float | int] | None) -> float:
        return float(stats["mean_pct"]) if stats else float("nan")

    rows = [
        ("step time, dense models: mean \\|error\\|", f"≤ {GOALS['dense_mean_pct']:g} %",
         f"{mean(family.get('dense')):.1f} % ({family.get('dense', {}).get('rows', 0)} runs)",
         mean(family.get("dense")) <= GOALS["dense_mean_pct"]),
        ("step time, MoE models: mean \\|error\\|", f"≤ {GOALS['moe_mean_pct']:g} %",
         f"{mean(family.get('moe')):.1f} % ({family.get('moe', {}).get('rows', 0)} runs)",
         mean(family.get("moe")) <= GOALS["moe_mean_pct"]),
        (f"step time: runs beyond {GOALS['max_pct']:g} %", "none",
         f"{len(beyond)} of {len(counted)}", not beyond),
        ("peak memory: mean \\|error\\|", f"≤ {GOALS['memory_mean_pct']:g} %",
         f"{mean(memory.get('all', {}).get('all')):.1f} % ({memory.get('all', {}).get('all', {}).get('rows', 0)} runs)",
         mean(memory.get("all", {}).get("all")) <= GOALS["memory_mean_pct"]),
        ('runs that ran called "does not fit"', "none", big_text, too_big + listed == 0),
    ]  # fmt: skip
    return [
        "| measure | goal | now | met |",
        "|---|---|---|---|",
        *[f"| {m} | {g} | {n} | {'yes' if ok else '**no**'} |" for m, g, n, ok in rows],
    ]


def _layout(r: ValidationResult) -> str:
    lay = r.value("layout")
    text = f"dp {lay['dp']} tp {lay['tp']} pp {lay['pp']}"
    if lay["virtual_stages"] > 1:
        text += f" v {lay['virtual_stages']}"
    text += f" cp {lay['cp']}"
    if lay["ep"] > 1:
        text += f" ep {lay['ep']} etp {lay['etp']}"
    return (
        f"{text}, b {lay['micro_batch_size']}, B {lay['global_batch_size']:,}, "
        f"s {lay['seq_len']:,}, ZeRO-{lay['zero_stage']}, {lay['precision']}, "
        f"recompute {lay['recompute']}"
    )


def _row(r: ValidationResult) -> dict[str, Any]:
    run = r.run
    out: dict[str, Any] = {
        "key": run.key,
        "framework_as_run": run.table.framework_as_run,
        "framework": run.params["framework"],
        "published_figure": run.published_figure,
        "published_step_s": run.published_step_s,
        "published_memory_bytes": run.published_memory_bytes,
        "memory_kind": run.table.memory_kind if run.published_memory_bytes else None,
        "counted": run.counted,
        "cannot_express": run.cannot_express,
        "unmodelled": list(run.all_unmodelled),
        "source": run.source,
        "error": r.error,
    }
    if r.error is None:
        out |= {
            "model": r.value("model", "name"),
            "family": r.family,
            "part": r.part,
            "layout": _layout(r),
            "predicted_step_s": r.step_s,
            "time_error": r.time_error,
            "predicted_memory_bytes": r.memory_bytes,
            "memory_error": r.memory_error,
            "fits": r.fits,
            "step_shares": {term: r.share(term) for term in _BREAKDOWN},
        }
    return out


def report_dict(results: Sequence[ValidationResult] | None = None) -> dict[str, Any]:
    """The report as one JSON-able object: ``rows`` (one per run, :func:`_row`), ``stats``
    (``time`` and ``memory``, :func:`error_stats`), ``cannot_express`` (keys and reasons) and
    ``does_not_fit`` (runs that ran and the model calls too big)."""
    results = evaluate_all() if results is None else results
    ok = [r for r in results if r.error is None]
    return {
        "rows": [_row(r) for r in results],
        "stats": {"time": error_stats(results, "time"), "memory": error_stats(results, "memory")},
        "cannot_express": [
            {"key": r.run.key, "reason": r.run.cannot_express} for r in results if not r.run.counted
        ],
        "does_not_fit": [r.run.key for r in ok if not r.fits],
    }


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.1f}%"


def _gib(x: int | None) -> str:
    return "—" if x is None else f"{x / 2**30:.1f}"


def _stats_lines(stats: dict[str, dict[str, dict[str, float | int]]], what: str) -> list[str]:
    lines = [
        f"| {what}: group | rows | mean abs. error | median | max |",
        "|---|---|---|---|---|",
    ]
    for grouping, groups in stats.items():
        for name, s in groups.items():
            label = "all counted rows" if grouping == "all" else f"{grouping}: {name}"
            lines.append(
                f"| {label} | {s['rows']} | {s['mean_pct']:.1f}% | {s['median_pct']:.1f}% | "
                f"{s['max_pct']:.1f}% |"
            )
    return lines


def _shares(r: ValidationResult) -> str:
    return " / ".join(f"{100 * r.share(t):.0f}" for t in _BREAKDOWN)


def _table_line(r: ValidationResult) -> str:
    run = r.run
    if r.error is not None:
        return f"| {run.key} | error: {r.error} |" + " |" * 11
    return (
        f"| {run.key} | {r.value('model', 'name')} | {r.part} | {run.params['framework']} | "
        f"{_layout(r)} | {run.published_figure} | {run.published_step_s:.3f} | {r.step_s:.3f} | "
        f"{_pct(r.time_error)} | {_gib(run.published_memory_bytes)} | "
        f"{_gib(r.memory_bytes)} | {_pct(r.memory_error)} | {'yes' if r.fits else 'NO'} | "
        f"{_shares(r)} |"
    )


_HEAD = (
    "| run | model | part | profile | layout | published | step s, published | step s, model | "
    "time error | peak GiB, published | peak GiB, model | memory error | fits | "
    "model step: compute / bubble / exposed comm / optimizer / grad accumulation % |"
)


def _sources(results: Sequence[ValidationResult]) -> list[str]:
    """One entry per source table: source, convention, recipe, assumptions, unmodelled."""
    seen: dict[tuple[str, str], ValidationTable] = {}
    for r in results:
        seen.setdefault((r.run.table.file, r.run.table.source), r.run.table)
    lines: list[str] = []
    for (file, _), t in seen.items():
        lines += ["", f"### {file}", "", f"- Source: {t.source}", f"- Ran with: "
                  f"{t.framework_as_run}; evaluated under the `{t.framework}` profile"]  # fmt: skip
        lines += [f"- Figure: {t.convention}", f"- Recipe: {t.recipe}"]
        if t.memory_kind:
            lines.append(f"- Memory: the published peak is the allocator's {t.memory_kind} bytes")
        lines += [f"- Assumed: {a}" for a in t.assumed]
        lines += [f"- Not modelled (stand-in): {u}" for u in t.unmodelled]
        if t.cannot_express:
            lines.append(f"- Cannot express: {t.cannot_express}")
    return lines


def _row_notes(results: Sequence[ValidationResult]) -> list[str]:
    lines = []
    for r in results:
        run = r.run
        notes = [f"source: {run.row_source}"] if run.row_source else []
        notes += [f"assumed: {a}" for a in run.assumed]
        notes += [f"not modelled: {u}" for u in run.unmodelled]
        if notes:
            lines.append(f"- **{run.key}**: " + "; ".join(notes))
    return lines


def markdown_report(results: Sequence[ValidationResult] | None = None) -> str:
    """The page ``docs/fidelity-validation.md``."""
    results = evaluate_all() if results is None else results
    counted = [r for r in results if r.run.counted]
    listed = [r for r in results if not r.run.counted]
    ok = [r for r in results if r.error is None]
    lines = [
        "# Validation against published training runs",
        "",
        "Generated by `python -m trainplan.interface.fidelity --validation --markdown`; checked "
        "by `tests/test_validation.py`. Each row is a published end-to-end training run "
        "(`scenarios/validation/*.toml`, every table with its source), evaluated under the "
        "framework profile it ran with by `trainplan evaluate --json`. These runs validate the "
        "model: none of them is fitted. Errors are predicted / published − 1: a positive time "
        "error means the model predicts a slower step, a positive memory error that it counts "
        "more bytes. A published throughput becomes a step time as global batch × sequence "
        "length / (tokens/s/GPU × GPUs).",
        "",
        f"{len(results)} runs: {len(counted)} in the statistics, {len(listed)} listed with a "
        "mechanism the model cannot express. " + _does_not_fit_line(sum(not r.fits for r in ok)),
        "",
        "## Against the goals",
        "",
        *goal_table(results),
        "",
        "## Error statistics",
        "",
        *_stats_lines(error_stats(results, "time"), "step time"),
        "",
        *_stats_lines(error_stats(results, "memory"), "peak memory"),
        "",
        "## Runs in the statistics",
        "",
        _HEAD,
        "|" + "---|" * 14,
        *[_table_line(r) for r in counted],
        "",
        "## Runs the model cannot express",
        "",
        "Evaluated under the stand-in their reason names; not in the statistics.",
        "",
        "| run | reason |",
        "|---|---|",
        *[f"| {r.run.key} | {r.run.cannot_express} |" for r in listed],
        "",
        _HEAD,
        "|" + "---|" * 14,
        *[_table_line(r) for r in listed],
        "",
        "## Notes per run",
        "",
        *_row_notes(results),
        "",
        "## Sources, conventions and assumptions",
        *_sources(results),
    ]
    return "\n".join(lines) + "\n"


def text_report(results: Sequence[ValidationResult] | None = None) -> str:
    """The report for the terminal: one line per run, then the statistics."""
    results = evaluate_all() if results is None else results
    rows = []
    for r in results:
        row: dict[str, Any] = {"run": r.run.key, "counted": "yes" if r.run.counted else "no"}
        if r.error is None:
            row |= {
                "part": r.part,
                "published s": f"{r.run.published_step_s:.3f}",
                "model s": f"{r.step_s:.3f}",
                "time error": _pct(r.time_error),
                "peak GiB published": _gib(r.run.published_memory_bytes),
                "peak GiB model": _gib(r.memory_bytes),
                "memory error": _pct(r.memory_error),
                "fits": "yes" if r.fits else "NO",
            }
        else:
            row["error"] = r.error
        rows.append(row)
    out = [table_text(rows), ""]
    for metric in ("time", "memory"):
        for grouping, groups in error_stats(results, metric).items():
            for name, s in groups.items():
                out.append(
                    f"{metric} {grouping} {name}: {s['rows']} rows, mean {s['mean_pct']:.1f}%, "
                    f"median {s['median_pct']:.1f}%, max {s['max_pct']:.1f}%"
                )
    return "\n".join(out) + "\n"


def report_text(
    results: Sequence[ValidationResult] | None = None,
    markdown: bool = False,
    as_json: bool = False,
) -> str:
    """The report of ``results`` (default: the set as it stands): text, the Markdown page, or
    the JSON object (one of the two flags)."""
    import json

    if markdown and as_json:
        raise SystemExit("--markdown and --json: choose one")
    if as_json:
        return json.dumps(report_dict(results), indent=1) + "\n"
    return (markdown_report if markdown else text_report)(results)
