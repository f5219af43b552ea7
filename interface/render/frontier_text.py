"""A Pareto frontier as the terminal prints it (``trainplan frontier``): a row per point, the
objective's own column first where it is not the step time."""

from __future__ import annotations

from typing import Any

from trainplan.interface.render.per_stage_report import gap_text
from trainplan.interface.render.report import (
    dollars,
    duration,
    gb,
    percent_text,
    seconds_text,
    table_text,
)

__all__ = ["OBJECTIVE_COLUMNS", "frontier_text"]


OBJECTIVE_COLUMNS = {
    "time-to-train": ("time to train", "objective_s", duration),
    "cost": ("cost", "objective_usd", lambda usd: dollars(usd, cents=False)),
    "tokens-per-gpu": ("tokens/s/GPU", "objective_gpu_s_per_token", lambda v: f"{1 / v:,.0f}"),
}
"""A frontier's first column where its objective is not the step time: the header, the row's key
(:func:`optimizer.problem.objective_value`'s, in its base unit) and how it is written."""


def frontier_text(rows: list[dict[str, Any]], against: str, objective: str = "step-time") -> str:
    """The frontier as a terminal table: the objective where it is not the step time (time to
    train, cost, tokens/s per GPU: :data:`OBJECTIVE_COLUMNS`), step time, the second axis,
    ``fit_bytes``, MFU, the job, the framework (always, as the search's answer names it: two
    frameworks' layouts can otherwise print alike) and the layout; rows of the per-stage frontier
    (``plan`` set) add the plan's kind, its layers and recomputed layers per stage, its proven
    gap (``gap_s``, written as ``search --per-stage`` writes it:
    :func:`interface.render.per_stage_report.gap_text`), the uniform step time there and the
    gain."""
    second = {"memory": "memory/GPU", "gpus": "GPUs", "price": "price"}[against]
    out = []
    for r in rows:
        line = {}
        # a per-stage row's objective_s is its step time, whatever the objective
        if (
            objective in OBJECTIVE_COLUMNS
            and OBJECTIVE_COLUMNS[objective][1] in r
            and "plan" not in r
        ):
            header, key, written = OBJECTIVE_COLUMNS[objective]
            line[header] = written(r[key])
        line |= {
            "step": seconds_text(r["step_s"]),
            second: (
                gb(r["total_bytes"])
                if against == "memory"
                else f"{r['num_gpus']:,}"
                if against == "gpus"
                else dollars(r.get("price_per_hour"), "/hour")
            ),
            "fit/GPU": gb(r["fit_bytes"]),
            "MFU": percent_text(r["mfu"]),
            "GPUs": f"{r['num_gpus']:,} × {r['gpu']}",
            "framework": r["framework"],
            "layout": (
                f"dp {r['dp']} tp {r['tp']} pp {r['pp']} cp {r['cp']} ep {r['ep']} ZeRO-{r['zero_stage']} "
                f"{r['recompute']} b {r['micro_batch_size']} {r['schedule']}"
                + (f" v{r['virtual_stages']}" if r["virtual_stages"] > 1 else "")
            ),
        }
        if "plan" in r:
            per_stage = r["stage_layers"] is not None
            line["plan"] = r["plan"] + ("" if r.get("proven", True) else ", not proven")
            line["layers / recomputed per stage"] = (
                "/".join(map(str, r["stage_layers"]))
                + " / "
                + "/".join(map(str, r["recompute_layers"]))
                if per_stage
                else "—"
            )
            line["proven gap"] = gap_text(r["gap_s"])  # as search --per-stage writes it
            line["uniform step"] = seconds_text(r["uniform_step_s"])
            line["gain"] = "—" if r["gain"] is None else f"{r['gain']:.3f}×"
        out.append(line)
    return table_text(out)
