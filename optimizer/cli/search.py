"""``trainplan search``: the best layout of a model on N GPUs (CP-SAT over the cost model)."""

from __future__ import annotations

from typing import Any

import click

from model.errors import InfeasibleError
from model.layout import Recompute
from model.pipeline import Schedule
from optimizer.cli import cli
from optimizer.cli.common import COUNT, NUMBER, echo_json
from optimizer.cli.planner import _overlap, model_options


def _ints(values: tuple[int, ...]) -> tuple[int, ...] | None:
    return tuple(values) if values else None


@cli.command("search")
@model_options
@click.option("--gpus", "num_gpus", type=COUNT, required=True, help="Number of GPUs (dp·tp·pp·cp).")
@click.option("--gpu", help="Accelerator (trainplan gpus); default H100-SXM.")
@click.option("--seq-len", "seq_len", type=COUNT, help="Default: the catalogue's published s.")
@click.option(
    "--global-batch", "global_batch_size", type=COUNT, help="B sequences; default the catalogue's."
)
@click.option(
    "--micro-batch",
    "micro_batch",
    type=COUNT,
    multiple=True,
    help="Allowed micro-batch sizes (repeatable).",
)
@click.option("--max-micro-batch", "max_micro_batch", type=COUNT, default=8, show_default=True)
@click.option(
    "--tp", type=COUNT, multiple=True, help="Allowed tp degrees (repeatable); default all legal."
)
@click.option("--pp", type=COUNT, multiple=True, help="Allowed pp degrees (repeatable).")
@click.option("--cp", type=COUNT, multiple=True, help="Allowed cp degrees (repeatable); default 1.")
@click.option(
    "--ep", type=COUNT, multiple=True, help="Allowed ep degrees (repeatable); default all legal."
)
@click.option("--max-tp", "max_tp", type=COUNT, help="Upper bound on tp.")
@click.option(
    "--zero",
    "zero",
    type=click.IntRange(0, 3),
    multiple=True,
    help="Allowed ZeRO stages; default 0-3.",
)
@click.option("--recompute", type=click.Choice([r.value for r in Recompute]), multiple=True)
@click.option("--schedule", type=click.Choice([s.value for s in Schedule]), multiple=True)
@click.option("--flash/--no-flash", "flash_attention", default=None)
@click.option("--nvlink-domain", "nvlink_domain", type=COUNT)
@click.option("--nvlink-gbps", "nvlink_gbps", type=NUMBER)
@click.option("--scaleout-gbps", "scaleout_gbps", type=NUMBER)
@click.option("--kernel-efficiency", "kernel_efficiency", type=NUMBER)
@click.option("--overlap", "overlap", multiple=True, help="AXIS=FRACTION hidden behind compute.")
@click.option("--headroom", type=NUMBER, default=0, help="Fraction of GPU memory kept free (0-1).")
@click.option(
    "--time-limit",
    "time_limit",
    type=NUMBER,
    help="Solver seconds; returns the best found, not proven.",
)
@click.option("--workers", type=COUNT, default=2, show_default=True, help="CP-SAT workers.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def search_cmd(as_json: bool, **kw: Any) -> None:
    """The fastest layout that fits: dp, tp, pp (cp, ep), ZeRO stage, recompute, micro-batch, schedule.

    Example: trainplan search --model llama3-405b --gpus 16384 --gpu H100-SXM
    """
    from model.report_dict import estimate_to_dict
    from optimizer.inputs import build_case
    from optimizer.report import evaluate_text
    from optimizer.search import search
    from optimizer.space import SearchSpace, divisors

    params = {
        k: kw[k]
        for k in (
            "model",
            "params",
            "arch",
            "layers",
            "hidden",
            "heads",
            "kv_heads",
            "ffn_hidden",
            "vocab",
            "gpu",
            "seq_len",
            "global_batch_size",
            "flash_attention",
            "nvlink_domain",
            "nvlink_gbps",
            "scaleout_gbps",
            "kernel_efficiency",
        )
    }
    params["overlap"] = _overlap(kw["overlap"])
    case = build_case(params)
    tp = _ints(kw["tp"])
    if kw["max_tp"]:
        tp = tuple(t for t in (tp or divisors(kw["num_gpus"])) if t <= kw["max_tp"])
    space = SearchSpace(
        num_gpus=kw["num_gpus"],
        tp=tp,
        pp=_ints(kw["pp"]),
        cp=_ints(kw["cp"]) or (1,),
        ep=_ints(kw["ep"]),
        micro_batch_size=_ints(kw["micro_batch"]),
        max_micro_batch_size=kw["max_micro_batch"],
        zero_stages=tuple(kw["zero"]) or (0, 1, 2, 3),
        recomputes=tuple(Recompute(r) for r in kw["recompute"]) or tuple(Recompute),
        schedules=tuple(Schedule(s) for s in kw["schedule"]) or tuple(Schedule),
    )
    limit = float(kw["time_limit"]) if kw["time_limit"] else None
    try:
        result = search(case, space, limit, kw["workers"], float(kw["headroom"]))
    except InfeasibleError as err:
        if as_json:
            echo_json({"status": "infeasible", "explanation": err.explanation, "message": str(err)})
        else:
            click.echo(f"No layout: {err}", err=True)
            for line in err.explanation[1:]:
                click.echo(f"  {line}", err=True)
        raise SystemExit(1) from None
    assert result.estimate is not None
    out = estimate_to_dict(result.estimate)
    out.update(
        {
            "status": result.status,
            "solve_seconds": result.solve_seconds,
            "tables_seconds": result.tables_seconds,
            "shapes": result.num_shapes,
            "candidates": result.num_candidates,
            "defaults_used": case.defaults_used,
        }
    )
    if as_json:
        echo_json(out)
        return
    proof = (
        "proven optimal"
        if result.status == "optimal"
        else "best found within the time limit (not proven)"
    )
    click.echo(
        f"Best layout of {result.num_candidates:,} candidates ({result.num_shapes:,} shapes × ZeRO × recompute): "
        f"{proof}; tables {result.tables_seconds:.2f} s, CP-SAT {result.solve_seconds:.2f} s\n"
    )
    click.echo(evaluate_text(out, case.defaults_used))
