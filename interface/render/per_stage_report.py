"""The per-stage search's text (``trainplan search --per-stage``): the plan beside the best
uniform one, the layers and fully recomputed layers per stage, and the launch flags."""

from __future__ import annotations

import shlex
from typing import Any

from trainplan.interface.render.report import duration, table_text
from trainplan.model.pipeline_onef import one_chunk

__all__ = ["per_stage_text"]


def _layout_line(lay: dict[str, Any]) -> str:
    """A layout's degrees, ZeRO stage, recompute, schedule and micro-batch on one line."""
    return (
        f"dp {lay['dp']} × tp {lay['tp']} × pp {lay['pp']} × cp {lay['cp']}, "
        f"{lay.get('framework', 'megatron')} ZeRO-{lay['zero_stage']}, recompute "
        f"{lay['recompute']}, {lay['schedule']}"
        + (f" v={lay['virtual_stages']}" if lay["virtual_stages"] > 1 else "")
        + f", b {lay['micro_batch_size']}"
    )


def per_stage_text(d: dict[str, Any]) -> str:
    """The per-stage search's summary (``trainplan search --per-stage``) from its JSON object:
    proof status, per-stage plan beside the best uniform plan, gain, and the launch flags."""
    ps, launch = d["per_stage"], d["launch"]
    proof = {
        "optimal": "OPTIMAL (proven over the shapes searched)",
        "feasible": "FEASIBLE (best found within the time limit, not proven)",
    }[ps["status"]]
    lay = d["layout"]
    counts = ps["recompute_layers"]
    out = [
        f"Per-stage search ({ps['job']}): {proof}; uniform search {ps['uniform_seconds']:.2f} s, "
        f"stage tables {ps['tables_seconds']:.2f} s, CP-SAT {ps['solve_seconds']:.2f} s over "
        f"{len(ps['shapes'])} base layout(s)",
        "",
        f"best uniform:  {_layout_line(ps['uniform']['layout'])}: "
        f"{duration(ps['uniform']['step_s'])} per step",
        f"per-stage:     {_layout_line(lay)}: {duration(ps['step_s'])} per step "
        f"({ps['gain']:.3f}× the uniform)",
    ]
    v, pp = lay["virtual_stages"], lay["pp"]
    if one_chunk(lay["schedule"], pp):
        out.append(
            f"  {lay['schedule']}: the split is proven best under the closed-form bubble "
            "(m + pp − 1)·t_max, an upper bound; the step printed is evaluate()'s, the order's own "
            "on stages of unequal time (model.pipeline_onef)"
        )
    if any(counts) or lay.get("recompute_layers") is not None:
        chunks = lay.get("chunk_layers")
        rows = []
        for i, (n, k) in enumerate(zip(ps["stage_layers"], counts, strict=True)):
            row = {"stage": i, "layers": n}
            if v > 1 and chunks is not None:  # per chunk: Megatron-LM's count is per chunk
                row["chunks"] = "+".join(str(c) for c in chunks[i::pp])
                row["recomputed (full) per chunk"] = k
            else:
                row["recomputed (full)"] = k
            rows.append({**row, "others": lay["recompute"]})
        out.append(table_text(rows))
    elif ps["gain"] == 1:
        out.append("no per-stage plan is faster than the uniform one: the plan is the uniform one")
    out += [""]
    if launch["megatron_env"]:  # validate_args asserts it (interface.launch_parallel.megatron_env)
        out.append("Megatron-LM environment: " + shlex.join(launch["megatron_env"]))
    out.append("Megatron-LM: " + shlex.join(launch["megatron"]))  # quoted for a shell
    out += [f"  note: {n}" for n in launch["megatron_notes"]]
    if launch["megatron_step_s"] is not None:
        out.append(
            f"  with one --recompute-num-layers for every stage: {duration(launch['megatron_step_s'])}"
            " per step"
        )
    out += ["", "torchtitan:", *("  " + line for line in launch["torchtitan"])]
    out += [f"  note: {n}" for n in launch["torchtitan_notes"]]
    out += ["", "torchtitan HEAD (Python configuration):"]
    out += ["  " + line for line in launch["torchtitan_head"]]
    out += [f"  note: {n}" for n in launch["torchtitan_head_notes"]]
    return "\n".join(out)
