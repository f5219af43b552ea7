"""The per-stage search's text (``trainplan search --per-stage``): the plan beside the best
uniform one, the layers and fully recomputed layers per stage, and the launch flags."""

from __future__ import annotations

import shlex
from typing import Any

from trainplan.interface.render.report import gb, seconds_text, step_text, table_text
from trainplan.model.pipeline_onef import one_chunk
from trainplan.model.pipeline_report import interleaved_order

__all__ = ["per_stage_text", "gap_text"]


def _layout_line(lay: dict[str, Any]) -> str:
    """A layout's degrees, ZeRO stage, recompute, schedule and micro-batch on one line."""
    return (
        f"dp {lay['dp']:,} × tp {lay['tp']} × pp {lay['pp']} × cp {lay['cp']}, "
        f"{lay.get('framework', 'megatron')} ZeRO-{lay['zero_stage']}, recompute "
        f"{lay['recompute']}, {lay['schedule']}"
        + (f" v={lay['virtual_stages']}" if lay["virtual_stages"] > 1 else "")
        + f", b {lay['micro_batch_size']}"
    )


def gap_text(seconds: float | None) -> str:
    """A proven gap (a per-stage search's ``gap_s``, a per-stage frontier point's: the step less
    a proven lower bound on every split searched, s; None where a time limit left no bound) in
    the unit it is read in: ns below a µs, µs below a ms, then as a table writes seconds.

    >>> gap_text(3e-9), gap_text(2.5e-5), gap_text(0.0125), gap_text(None)
    ('3 ns', '25.0 µs', '12.5 ms', 'none proven (time limit)')
    """
    if seconds is None:
        return "none proven (time limit)"
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    return f"{seconds * 1e6:,.1f} µs" if seconds < 1e-3 else seconds_text(seconds)


def _exact_line(
    ps: dict[str, Any], interleaved: bool = False, stopper: str = "the time limit"
) -> str:
    """What the per-stage answer is proven under: best under the order's own step, the one-chunk
    order's on stages of unequal time (1F1B, :mod:`model.pipeline_onef`) or, ``interleaved``,
    Megatron-Core's on the model chunks as timed (:mod:`model.pipeline_uneven`) — the
    evaluator's; lower bounds by its paths, :mod:`optimizer.stage_exact` — with the proven gap
    where one is left (a time limit; or, interleaved past 32 groups of pp micro-batches, where
    the evaluator may charge its proven upper bound on the order's step,
    :data:`model.pipeline_uneven.RUN_GROUPS`); ``stopper``: what stopped an unfinished search
    (the time limit, or Ctrl-C).

    >>> _exact_line({"status": "optimal", "gap_s": 0.0})
    "the split is proven best under the order's own step on stages of unequal time \
(model.pipeline_onef), the step printed (bounds by the order's paths)"
    >>> _exact_line({"status": "feasible", "gap_s": 0.0125}, interleaved=True)
    "the proof stopped short: no split is faster by more than 12.5 ms under the interleaved \
order's own step on the model chunks (model.pipeline_uneven)"
    >>> _exact_line({"status": "feasible", "gap_s": 0.0125}, stopper="Ctrl-C")
    "Ctrl-C stopped the proof: no split is faster by more than 12.5 ms under the order's own \
step on stages of unequal time (model.pipeline_onef)"
    >>> _exact_line({"status": "feasible"}, stopper="Ctrl-C")
    "Ctrl-C stopped the search before a bound under the order's own step on stages of unequal \
time (model.pipeline_onef): no gap proven"
    """
    gap = ps.get("gap_s")
    own = (
        "the interleaved order's own step on the model chunks (model.pipeline_uneven)"
        if interleaved
        else "the order's own step on stages of unequal time (model.pipeline_onef)"
    )
    if gap is None:
        return f"{stopper} stopped the search before a bound under {own}: no gap proven"
    if ps["status"] == "optimal":
        within = "" if round(gap * 1e9) <= 2 else f", to {gap_text(gap)}"
        return f"the split is proven best under {own}, the step printed (bounds by the order's paths{within})"
    if stopper == "Ctrl-C":
        return (
            f"Ctrl-C stopped the proof: no split is faster by more than {gap_text(gap)} under {own}"
        )
    return f"the proof stopped short: no split is faster by more than {gap_text(gap)} under {own}"


def _not_searched(shapes: list[dict[str, Any]]) -> list[str]:
    """One line per pp and v the search did not search (a base layout's ``note``: an
    interleaved shape whose layers have no split into equal chunks), each said once.

    >>> row = {"schedule": "interleaved", "virtual_stages": 2, "pp": 2, "note": "not searched"}
    >>> _not_searched([row, row, {**row, "note": None}])
    ['  interleaved v=2, pp 2: not searched']
    """
    lines = (
        f"  {s['schedule']} v={s['virtual_stages']}, pp {s['pp']}: {s['note']}" for s in shapes
    )
    return list(dict.fromkeys(line for line, s in zip(lines, shapes, strict=True) if s["note"]))


def _proof(status: str, ctrl_c: bool, scope: str) -> str:
    """The per-stage answer's ``status`` in words (``ctrl_c``: Ctrl-C stopped the search;
    ``scope``: what an optimal answer is proven over).

    >>> _proof("feasible", True, "the shapes searched")
    'FEASIBLE (not proven: Ctrl-C stopped it)'
    """
    if status == "optimal":
        return f"OPTIMAL (proven over {scope})"
    if ctrl_c:
        return "FEASIBLE (not proven: Ctrl-C stopped it)"
    return "FEASIBLE (not proven: a time limit stopped it, or a gap is left)"


def _uniform_line(ctrl_c: bool, none_searched: bool = False) -> str:
    """Why the plan is the uniform one (``ctrl_c``: Ctrl-C stopped the search first;
    ``none_searched``: it stopped before any base layout was searched).

    >>> _uniform_line(False, True)
    'no base layout was searched per stage before the time limit: the plan is the uniform one'
    """
    if none_searched:
        stopper = "Ctrl-C" if ctrl_c else "the time limit"
        return (
            f"no base layout was searched per stage before {stopper}: the plan is the uniform one"
        )
    if ctrl_c:
        return "no per-stage plan faster than the uniform one was found before Ctrl-C: the plan is the uniform one"
    return "no per-stage plan is faster than the uniform one: the plan is the uniform one"


def _peak(d: dict[str, Any], stage: int) -> dict[str, str]:
    """The stage's peak per GPU in GB (10⁹ B) from the JSON's ``stages`` rows (evaluate's,
    ``stage_total_bytes``), as a table cell; nothing where the object has no such rows.

    >>> _peak({"stages": [{"stage": 0, "stage_total_bytes": 51_690_000_000}]}, 0)
    {'peak GB': '51.69'}
    >>> _peak({}, 0)
    {}
    """
    row = next((r for r in d.get("stages") or () if r["stage"] == stage), None)
    if row is None or row["stage_total_bytes"] is None:
        return {}
    return {"peak GB": gb(row["stage_total_bytes"]).removesuffix(" GB")}


def _searched(ps: dict[str, Any], stopper: str | None) -> str:
    """The headline's seconds of the per-stage searches, or, ``stopper`` given (the time limit
    or Ctrl-C), that it ended the search before any base layout was searched.

    >>> _searched({}, "the time limit")
    'the time limit ended the search before any base layout was searched (no stage tables, no CP-SAT)'
    """
    if stopper is not None:
        return (
            f"{stopper} ended the search before any base layout was searched (no stage tables, "
            "no CP-SAT)"
        )
    return (
        f"stage tables {ps['tables_seconds']:.2f} s, CP-SAT {ps['solve_seconds']:.2f} s over "
        f"{len(ps['shapes'])} base layout(s)"
    )


def _startup(d: dict[str, Any]) -> str:
    """The command's seconds of start-up that its time limit counted (``per_stage.startup_seconds``,
    the JSON object's with a limit), as the layout search's note names them; "" without."""
    before = d["per_stage"].get("startup_seconds")
    return f"; {before:.2f} s of start-up counted by the limit" if before else ""


def per_stage_text(d: dict[str, Any]) -> str:
    """The per-stage search's summary (``trainplan search --per-stage``) from its JSON object:
    proof status, per-stage plan beside the best uniform plan, gain, the stages' table (layers,
    recomputed layers, each stage's peak per GPU), and the launch flags."""
    ps, launch = d["per_stage"], d["launch"]
    ctrl_c = bool(d.get("interrupted"))
    proof = _proof(ps["status"], ctrl_c, ps["proof_scope"])
    lay = d["layout"]
    counts = ps["recompute_layers"]
    stopper = "Ctrl-C" if ctrl_c else "the time limit"
    none_searched = not ps["shapes"] and ps["status"] != "optimal"
    out = [
        f"Per-stage search ({ps['job']}): {proof}; uniform search {ps['uniform_seconds']:.2f} s, "
        f"{_searched(ps, stopper if none_searched else None)}",
        *_not_searched(ps["shapes"]),
        *(
            [f"Note: {ps['cut']}{_startup(d)}: the plans are the best of those shapes, not proven"]
            if ps.get("cut")
            else []
        ),
        "",
        f"best uniform:  {_layout_line(ps['uniform']['layout'])}: "
        f"{step_text(ps['uniform']['step_s'])} per step",
        f"per-stage:     {_layout_line(lay)}: {step_text(ps['step_s'])} per step "
        f"({ps['gain']:.3f}× the uniform)",
    ]
    v, pp = lay["virtual_stages"], lay["pp"]
    if one_chunk(lay["schedule"], pp) or interleaved_order(lay["schedule"], pp):
        inter = interleaved_order(lay["schedule"], pp)
        out.append(f"  {lay['schedule']}: {_exact_line(ps, inter, stopper)}")
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
            rows.append({**row, "others": lay["recompute"], **_peak(d, i)})
        out.append(table_text(rows))
    elif ps["gain"] == 1:
        out.append(_uniform_line(ctrl_c, none_searched))
    out += [""]
    if launch["megatron_env"]:  # validate_args asserts it (interface.launch_parallel.megatron_env)
        out.append("Megatron-LM environment: " + shlex.join(launch["megatron_env"]))
    out.append("Megatron-LM: " + shlex.join(launch["megatron"]))  # quoted for a shell
    out += [f"  note: {n}" for n in launch["megatron_notes"]]
    if launch["megatron_step_s"] is not None:
        out.append(
            f"  with one --recompute-num-layers for every stage: {step_text(launch['megatron_step_s'])}"
            " per step"
        )
    out += ["", "torchtitan:", *("  " + line for line in launch["torchtitan"])]
    out += [f"  note: {n}" for n in launch["torchtitan_notes"]]
    out += ["", "torchtitan HEAD (Python configuration):"]
    out += ["  " + line for line in launch["torchtitan_head"]]
    out += [f"  note: {n}" for n in launch["torchtitan_head_notes"]]
    return "\n".join(out)
