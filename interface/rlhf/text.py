"""The faithful RLHF accounting and the placement search as terminal text: the roles table, every
term with its source, the pools with their peak memory per phase, and a timeline per pool.

Reads the plain dictionaries of :mod:`interface.rlhf.faithful` (the ``--json`` objects), so the
text shows exactly what the JSON holds.
"""

from __future__ import annotations

from typing import Any

from trainplan.interface.render.report import step_text, table_text
from trainplan.model.rlhf.engine import ENGINE_GRAPH_POOL_BYTES

__all__ = ["plan_lines", "timeline_lines", "terms_lines", "result_lines", "device_figures"]

_PHASES = ("rollout", "scoring", "training")
_MARK = {"rollout": "R", "scoring": "S", "training": "T"}


def _gb(x: float) -> str:
    return f"{x / 1e9:,.2f}"


def _s(x: float) -> str:
    return f"{x:,.1f}"


def _layout(r: dict[str, Any]) -> str:
    lay = r["layout"]
    if r["role"] == "rollout":
        return f"tp {lay['tp']} × dp {lay['dp']}, fraction {r['engine_memory_fraction']:g}"
    off = {"none": "", "optimizer": ", optimizer offload", "idle": ", offloaded when idle"}[
        r["offload"]
    ]
    return f"dp {lay['dp']} × tp {lay['tp']} × pp {lay['pp']}{off}"


def roles_lines(plan: dict[str, Any]) -> list[str]:
    """The roles: pool, GPUs, degrees, bytes per GPU (held and per phase), seconds per phase."""
    rows = [
        {
            "role": r["role"],
            "pool": r["pool"],
            "GPUs": r["gpus"],
            "layout": _layout(r),
            "held GB": _gb(r["held_bytes"])
            if not r["swap_bytes"]
            else f"{_gb(r['held_bytes']) if r['held_bytes'] else 0} (+{_gb(r['swap_bytes'])})",
            **{f"{p} GB": _gb(r["phase_bytes"][p]) for p in _PHASES},
            "host GB/GPU": _gb(r["host_bytes_per_gpu"]),
            **{f"{p} s": _s(r["seconds"][p]) for p in _PHASES},
        }
        for r in plan["roles"]
    ]
    return table_text(rows).splitlines()


def terms_lines(plan: dict[str, Any]) -> list[str]:
    """Every term with its phase, value and the key of its source; the sources listed once
    under the table, by key."""
    rows = []
    for t in plan["terms"]:
        unit = t["unit"]
        value = (
            f"{_gb(t['value'])} GB"
            if unit == "bytes"
            else f"{t['value']:,.2f} s"
            if unit == "s"
            else f"{t['value']:,}"
        )
        rows.append(
            {
                "role": t["role"],
                "term": t["term"],
                "phase": t["phase"],
                "value": value,
                "source": f"[{t['source']}]",
            }
        )
    notes = [f"[{key}] {text}" for key, text in plan["sources"].items()]
    return [*table_text(rows).splitlines(), "Sources:", *notes]


def pools_lines(plan: dict[str, Any]) -> list[str]:
    """Each pool: its GPUs, roles, processes per GPU, peak bytes per phase against the
    capacity."""
    cap = plan["capacity_bytes"]
    rows = [
        {
            "pool": p["pool"],
            "GPUs": f"{p['first_gpu']}–{p['first_gpu'] + p['gpus'] - 1}",
            "roles": ", ".join(p["roles"]),
            "processes": p["processes"],
            **{f"peak {ph} GB": _gb(p["peak_bytes"][ph]) for ph in _PHASES},
            "capacity GB": _gb(cap),
            "fits": "yes" if p["fits"] else "DOES NOT FIT",
        }
        for p in plan["pools"]
    ]
    return table_text(rows).splitlines() + _graph_lines(plan)


def _graph_lines(plan: dict[str, Any]) -> list[str]:
    """Under each pool where the engine sleeps beside training or scoring roles, what the peaks
    of its three phases leave beyond the engine's CUDA graph pool, which they count at an
    assumed 0.36 GiB (:data:`model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES`: a floor, not a rule)."""
    out = []
    for p in plan["pools"]:
        if "rollout" not in p["roles"] or len(p["roles"]) == 1 or not p["fits"]:
            continue
        left = plan["capacity_bytes"] - max(p["peak_bytes"][ph] for ph in _PHASES)
        out.append(
            f"pool {p['pool']}: the engine's CUDA graphs are counted at an assumed "
            f"{_gb(ENGINE_GRAPH_POOL_BYTES)} GB in every phase (a small model's pool; one large "
            f"MoE engine measured 1.50 GB per GPU at TP8, issue #47654): the rollout, scoring and "
            f"training peaks leave {_gb(left)} GB beyond them"
        )
    return out


def _segments(plan: dict[str, Any]) -> list[list[tuple[float, float, str]]]:
    """Per pool, (start, end, phase) of its work in one step, as the step rule schedules it."""
    pools, step = plan["pools"], plan["step_seconds"]
    phase_s = plan["step_phase_seconds"]
    out = []
    for p in pools:
        busy = p["busy_seconds"]
        segs = []
        if plan["off_policy"] == 0:
            t = 0.0
            for ph in _PHASES:
                if busy[ph]:
                    segs.append((t, t + busy[ph], ph))
                t += phase_s[ph]
        else:
            t = 0.0
            for ph in _PHASES:
                if ph == "training":
                    t = max(t, phase_s["scoring"]) if busy["scoring"] or busy["training"] else t
                if busy[ph]:
                    segs.append((t, t + busy[ph], ph))
                    t += busy[ph]
        out.append([(a, min(b, step), ph) for a, b, ph in segs])
    return out


def timeline_lines(plan: dict[str, Any], width: int = 72) -> list[str]:
    """One row per pool across one step: ``R`` rollout, ``S`` scoring, ``T`` training, ``.``
    idle; each column is step/width seconds.

    Examples
    --------
    >>> plan = {"off_policy": 0, "step_seconds": 10.0,
    ...         "step_phase_seconds": {"rollout": 6.0, "scoring": 1.0, "training": 3.0},
    ...         "pools": [{"pool": 0, "gpus": 8, "first_gpu": 0, "roles": ["rollout"],
    ...                    "busy_seconds": {"rollout": 6.0, "scoring": 0, "training": 0}},
    ...                   {"pool": 1, "gpus": 8, "first_gpu": 8, "roles": ["actor"],
    ...                    "busy_seconds": {"rollout": 0, "scoring": 1.0, "training": 3.0}}]}
    >>> print("\\n".join(timeline_lines(plan, 10)))
    pool 0 (GPUs 0–7)   |RRRRRR....| rollout
    pool 1 (GPUs 8–15)  |......STTT| actor
    1 column = 1 s; R rollout, S scoring, T training, . idle
    """
    step = plan["step_seconds"] or 1.0
    dt = step / width
    rows = []
    heads = [
        f"pool {p['pool']} (GPUs {p['first_gpu']}–{p['first_gpu'] + p['gpus'] - 1})"
        for p in plan["pools"]
    ]
    pad = max(len(h) for h in heads) + 2
    for head, p, segs in zip(heads, plan["pools"], _segments(plan), strict=True):
        cells = ["."] * width
        for a, b, ph in segs:
            lo, hi = int(round(a / dt)), max(int(round(a / dt)) + 1, int(round(b / dt)))
            for c in range(lo, min(hi, width)):
                cells[c] = _MARK[ph]
        rows.append(f"{head:<{pad}}|{''.join(cells)}| {', '.join(p['roles'])}")
    rows.append(f"1 column = {dt:.3g} s; R rollout, S scoring, T training, . idle")
    return rows


COLOCATED_SYNCHRONOUS = (
    "synchronous (one-step off-policy needs the engine on GPUs of its own: colocated, the next "
    "rollout cannot run beside training)"
)
"""How a colocated plan of an off-policy search runs: as a synchronous step (its step time is
the synchronous one; ``trainplan rlhf --off-policy 1`` without ``--rollout-gpus`` is refused by
the same rule), so its verdict line does not call it off-policy."""


def step_kind(plan: dict[str, Any]) -> tuple[str, str]:
    """A plan's step kind, (for its verdict line, for its step line): ``synchronous``, or
    ``one-step off-policy`` where the engine has GPUs of its own; a colocated plan of an
    off-policy search runs synchronously (:data:`COLOCATED_SYNCHRONOUS`).

    >>> step_kind({"off_policy": 1, "placement": "split"})
    ('one-step off-policy', 'one-step off-policy')
    >>> step_kind({"off_policy": 1, "placement": "colocated"})[1]
    'synchronous'
    """
    if not plan["off_policy"]:
        return "synchronous", "synchronous"
    if plan["placement"] == "colocated":
        return COLOCATED_SYNCHRONOUS, "synchronous"
    return "one-step off-policy", "one-step off-policy"


def plan_lines(plan: dict[str, Any], width: int = 72) -> list[str]:
    """A plan in full: roles, terms with sources, pools, the step, the timeline."""
    said, how = step_kind(plan)
    ph = plan["step_phase_seconds"]
    verdict = "fits" if plan["fits"] else "DOES NOT FIT"
    out = [f"placement: {plan['placement']}, {said} — {verdict}"]
    out += [f"  does not fit: {line}" for line in plan.get("does_not_fit", [])]
    out += [f"  to fit: {line}" for line in plan.get("to_fit", [])]
    out += [*roles_lines(plan), ""]
    out += ["Terms (per GPU of the role's pool; seconds per step), each with its source:"]
    out += [*terms_lines(plan), "", *pools_lines(plan), ""]
    out.append(
        f"step: rollout {_s(ph['rollout'])} s, scoring {_s(ph['scoring'])} s, training "
        f"{_s(ph['training'])} s → {step_text(plan['step_seconds'])} per step ({how}); "
        f"{plan['tokens_per_second']:,.0f} tokens/s"
    )
    out += ["", *timeline_lines(plan, width)]
    return out


def device_figures(res: dict[str, Any]) -> str:
    """The accelerator's figures the accounting divides by, named as ``trainplan gpus`` heads
    them: its dense BF16 peak per GPU (prefill, scoring and training FLOPs) and its HBM
    bandwidth (decode's roofline)."""
    hbm = res.get("hbm_bytes_per_s")
    return f"peak {res['peak_flops_per_s'] / 1e12:,.1f} TFLOP/s dense BF16 per GPU" + (
        f", HBM {hbm / 1e12:,.2f} TB/s" if hbm else ""
    )


def _startup(res: dict[str, Any]) -> str:
    """The command's seconds before its search began (``startup_seconds``: loading the
    model, the accelerator and the solver), which ``--time-limit`` counts too; said only where
    a limit was given (the web's jobs have none to say)."""
    before = res.get("startup_seconds")
    return "" if before is None else f", start-up {before:.2f} s (counted by the time limit)"


def _workers(res: dict[str, Any]) -> str:
    """verl's agent-loop workers where the request gave them (``agent_workers``; verl's default 8
    goes unsaid, as under OpenRLHF's profile, which has none)."""
    given = res.get("agent_workers") and "agent_workers" not in res.get("defaults_used", {})
    return f", {res['agent_workers']:,} agent-loop workers" if given else ""


def result_lines(res: dict[str, Any], width: int = 72) -> list[str]:
    """``rlhf-plan``'s answer: status and timing, the best plan, the alternatives, the reason."""
    best = res["best"]
    limit = res.get("time_limit_seconds")
    said = {
        "optimal": " (proven optimal within the model)",
        "feasible": f" ({res['unproven']})"
        if res.get("unproven")
        else f" (the best found within the time limit of {limit:g} s, not proven optimal)"
        if limit
        else "",
        "unknown": f" (the time limit of {limit:g} s ran out before any placement was found)"
        if limit
        else "",
    }
    out = [
        f"{res['algorithm'].upper()} {res['policy']} on {res['gpus']:,} × {res['gpu']} "
        f"({device_figures(res)}; {res['framework']} ZeRO-{res['zero_stage']}{_workers(res)}): "
        f"{res['options']:,} role options "
        f"({res['tried']:,} costed"
        + (f", {res['skipped']:,} bounded out" if res.get("skipped") else "")
        + f"); tables {res['tables_seconds']:.2f} s"
        + ("" if res.get("tables_complete", True) else " (cut short by the time limit)")
        + f", CP-SAT {res['solve_seconds']:.2f} s"
        + _startup(res)
        + f"; {res['status']}{said.get(res['status'], '')}",
        "",
    ]
    if best is None:
        return [*out, f"why: {res['reason']}"]
    out += [f"best: {step_text(best['step_seconds'])} per step", *plan_lines(best, width), ""]
    for key in ("colocated", "split"):
        alt = res[key]
        out.append(
            f"best {key}: "
            + (
                _none(res.get("alternatives", {}).get(key))
                if alt is None
                else f"{step_text(alt['step_seconds'])} per step"
            )
        )
    out.append(f"why: {res['reason']}")
    return out


def _none(status: str | None) -> str:
    """What an alternative that was not found means, by its solve's status."""
    from trainplan.optimizer.rlhf.search import ALTERNATIVES_WITHIN

    return {
        "beyond": f"none within {ALTERNATIVES_WITHIN}× the best colocated step (not searched "
        "further)",
        "unknown": "none found within the time limit",
    }.get(status or "", "none fits")
