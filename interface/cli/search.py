"""``trainplan search`` and ``trainplan frontier``: layouts found by CP-SAT over the cost model."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from trainplan.interface.cli import cli
from trainplan.interface.cli.choices import (
    FRAMEWORK_WORDS,
    OBJECTIVE_WORDS,
    OPTIMIZER_WORDS,
    SCHEDULE_WORDS,
    NamedChoice,
)
from trainplan.interface.cli.clock import command_started
from trainplan.interface.cli.common import (
    COUNT,
    INTERRUPTED,
    NUMBER,
    POSITIVE,
    echo_json,
    list_option,
)
from trainplan.interface.cli.evaluate_line import answer_defaults, answer_params, evaluate_line
from trainplan.interface.cli.interrupt import interruptible, stop_between_tables
from trainplan.interface.cli.options import (
    CALIBRATION,
    MODEL,
    RECIPE,
    Decorator,
    option_groups,
    set_option,
)
from trainplan.interface.cli.planner import CP_KIND_CHOICES
from trainplan.interface.commands import infeasible_json, per_stage_json, search_json
from trainplan.interface.flags import with_flags
from trainplan.interface.render.report import dollars, evaluate_text
from trainplan.interface.requests import SearchRequest, search_request
from trainplan.model.errors import InfeasibleError, InputError
from trainplan.model.layout import Recompute
from trainplan.model.optimizers import OptimizerKind
from trainplan.model.pipeline import Schedule
from trainplan.optimizer.search import SOLVE_FLOOR_S
from trainplan.optimizer.tables import TableProgress

SCENARIO: Decorator = click.option(
    "--scenario",
    type=click.Path(exists=True, dir_okay=False),
    help="Scenario TOML file: every option below as a key (docs: Find the best layout); the "
    "options given win.",
)
"""A scenario file of the search's values."""

CLUSTER: list[Decorator] = [
    list_option(
        "--gpus",
        "gpus",
        help="GPU count (16384 or 16,384), or a range (1024..16384: the powers of two and "
        "1.5× powers of two in it); repeat for several (--gpus 2048 --gpus 4096).",
    ),
    list_option(
        "--gpu",
        "gpu",
        help="Accelerator: a name or a PATH.toml describing one; repeat, or separate with "
        "commas, to choose among several (--gpu H100-SXM --gpu B200).",
    ),
]
"""The GPU counts and accelerators searched."""

BATCH: list[Decorator] = [
    click.option("--seq-len", "seq_len", type=COUNT, help="Default: the catalogue's published s."),
    list_option(
        "--global-batch",
        "global_batch",
        help="B sequences: a count or a range (1024..4096); repeat for several.",
    ),
    list_option(
        "--global-batch-tokens",
        "global_batch_tokens",
        help="B in tokens (16e6, or a range 8e6..16e6); repeat for several.",
    ),
]
"""Sequence length and global batch."""

OBJECTIVE: list[Decorator] = [
    click.option(
        "--objective",
        type=NamedChoice(
            ["step-time", "tokens-per-gpu", "time-to-train", "cost", "params"], OBJECTIVE_WORDS
        ),
        help="What to minimise (default step-time; time-to-train and cost need --tokens); "
        "params (search only): the largest family member that fits.",
    ),
    click.option("--tokens", help="Token budget for time-to-train and cost (e.g. 15e12)."),
    click.option(
        "--gpu-hour-price", "gpu_hour_price", help="$ per GPU-hour: one number or GPU=price,…"
    ),
]
"""What is minimised, and the figures it needs."""

SPACE: list[Decorator] = [
    list_option(
        "--framework",
        type=NamedChoice(["megatron", "deepspeed", "fsdp2", "textbook"], FRAMEWORK_WORDS),
        help="Framework profile(s) whose mechanisms the search chooses among (repeatable; "
        "default megatron; its ZeRO-3 is Megatron-FSDP). textbook is the ZeRO paper's steady "
        "state.",
    ),
    list_option("--tp", type=COUNT, help="Allowed tp degrees (repeatable)."),
    list_option("--pp", type=COUNT, help="Allowed pp degrees (repeatable)."),
    list_option("--cp", type=COUNT, help="Allowed cp degrees (repeatable; default 1)."),
    list_option("--ep", type=COUNT, help="Allowed ep degrees (repeatable)."),
    list_option("--zero", type=click.IntRange(0, 3), help="Allowed ZeRO stages (repeatable)."),
    list_option(
        "--recompute",
        type=click.Choice([r.value for r in Recompute], case_sensitive=False),
        help="Recompute modes allowed (repeatable; default all).",
    ),
    list_option(
        "--schedule",
        type=NamedChoice([s.value for s in Schedule], SCHEDULE_WORDS),
        help="Pipeline schedules allowed (repeatable; default all the framework runs).",
    ),
    list_option(
        "--virtual-stages",
        "virtual_stages",
        type=COUNT,
        help="Virtual stages tried with interleaving (default: each v dividing the layers a "
        "pipeline stage holds, as Megatron-Core builds them, and 2, 3, 4, 8).",
    ),
    list_option(
        "--micro-batch",
        "micro_batch",
        type=COUNT,
        help="Allowed micro-batch sizes (repeatable).",
    ),
    click.option("--max-tp", "max_tp", type=COUNT, help="Upper bound on tp."),
    click.option(
        "--max-micro-batch",
        "max_micro_batch",
        type=COUNT,
        help="Largest micro-batch (default 8).",
    ),
    list_option(
        "--cp-kind",
        "cp_kind",
        type=click.Choice(CP_KIND_CHOICES, case_sensitive=False),
        help="CP flavours to choose among on shapes with cp > 1 (repeatable; default ring, "
        "all-gather, ulysses, pytorch-allgather and pytorch-alltoall, each under the frameworks "
        "that run it; ulysses-kv-repeat and a2a+p2p only when given).",
    ),
    list_option(
        "--optimizer",
        "optimizer",
        type=NamedChoice([k.value for k in OptimizerKind], OPTIMIZER_WORDS),
        help="Optimizers to choose among (repeatable; default adam only: another is chosen "
        "only when given), each under the frameworks that run it.",
    ),
    list_option(
        "--cp-a2a",
        "cp_a2a",
        type=COUNT,
        help="Inner all-to-all degrees tried with --cp-kind a2a+p2p (default every legal one).",
    ),
    list_option(
        "--rank-order",
        "rank_order",
        help="Rank order(s) to choose among, e.g. tp-cp-ep-dp-pp (repeatable; default that one).",
    ),
]
"""The layouts searched: frameworks, degrees, ZeRO stages, recomputation, schedules, micro-batches."""

CONSTRAINTS: list[Decorator] = [
    click.option(
        "--headroom", type=NUMBER, help="Fraction of GPU memory kept free (0-1, or a percent: 10%)."
    ),
    click.option(
        "--min-mfu", "min_mfu", type=NUMBER, help="Only layouts at or above this MFU (0.4 or 40%)."
    ),
    click.option(
        "--tp-in-nvlink",
        "tp_in_nvlink",
        is_flag=True,
        default=None,
        help="Keep tp·cp within one NVLink domain.",
    ),
    click.option(
        "--allocator-retries-ok",
        "allocator_retries_ok",
        is_flag=True,
        default=None,
        help="Accept layouts whose allocated peak fits but whose reserved bytes with the "
        "communicators do not (the caching allocator frees and retries at least once a step; "
        "that time is not charged).",
    ),
]
"""What every answer must satisfy."""

SOLVER: list[Decorator] = [
    click.option(
        "--time-limit",
        "time_limit",
        type=POSITIVE,
        help="Seconds for the whole command, counted from its start (loading the model, the "
        "accelerator and the solver included, as a clock on the wall measures it), table "
        "building included: the cost tables are filled a block of shapes at a time (blocks "
        "growing from 64 to 512 shapes) and the limit is checked between blocks once some "
        "layout meets the constraints (a block the last one's pace says would end past the "
        "limit is not started; the shapes not reached are left out), and CP-SAT gets what "
        f"remains (at least {SOLVE_FLOOR_S:g} s); the best found, status feasible (not proven) "
        "when it runs out (default: no limit).",
    ),
    click.option(
        "--workers",
        type=COUNT,
        help="CP-SAT workers (threads); default 2, and 1 with --per-stage, whose one-thread "
        "search prints the same split on every run where two splits tie.",
    ),
    click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
]
"""The solver's time and workers, and the output."""


def search_options(name: str, command: tuple[str, Sequence[Decorator]]) -> Decorator:
    """Every option of search or frontier (``name``) in its group: ``command`` is the command's
    own group (title, options), shown after the constraints."""
    return option_groups(
        ("Scenario", [SCENARIO, set_option(name)]),
        ("Model", MODEL),
        ("Cluster", [*CLUSTER, CALIBRATION]),
        ("Sequence and batch", BATCH),
        ("Objective", OBJECTIVE),
        ("Search space", SPACE),
        ("Constraints", CONSTRAINTS),
        ("Training recipe", RECIPE),
        command,
        ("Solver and output", SOLVER),
    )


def _solutions(as_json: bool) -> Callable[[int, str], None] | None:
    """CP-SAT's solutions as they come, on a terminal's stderr (with --json too: the JSON is on
    stdout, and a long search shows it is alive — and where Ctrl-C would stop it)."""
    if not sys.stderr.isatty():
        return None

    def report(count: int, best_text: str) -> None:
        click.echo(f"\r  solutions found: {count}, best so far: {best_text}", err=True, nl=False)

    return report


def table_progress(as_json: bool) -> TableProgress | None:
    """The cost tables' progress on a terminal's stderr (as :func:`_solutions`); a time limit's
    cut in its own words (:meth:`optimizer.tables.CostTables.cut`), on a line of its own."""
    if not sys.stderr.isatty():
        return None

    def report(done: int, total: int, cut: str | None = None, /) -> None:
        if cut is not None:
            click.echo(f"\r  {cut}", err=True)
            return
        click.echo(f"\r  cost tables: {done:,} of {total:,} shapes", err=True, nl=False)

    return report


def infeasible(err: InfeasibleError, as_json: bool) -> None:
    if as_json:
        echo_json(infeasible_json(err))
    else:
        click.echo(
            "No layout satisfies the constraints:"
            if err.status == "infeasible"
            else f"No layout found before the solver stopped ({err}):",
            err=True,
        )
        for line in err.explanation:  # names in backticks as flags, as --json's
            click.echo(f"  - {with_flags(line)}", err=True)
    raise SystemExit(1)


SEARCH_OPTIONS: list[Decorator] = [
    click.option(
        "--top",
        type=COUNT,
        default=1,
        show_default=True,
        help="Return the K best distinct layouts.",
    ),
    click.option(
        "--maximize",
        type=click.Choice(["params"], case_sensitive=False),
        help="The largest model of --model's family that fits: its depth varied in steps of "
        "an eighth of its layers (llama3-70b: 10, 20, …), up to --max-layers.",
    ),
    click.option(
        "--max-layers",
        "max_layers",
        type=COUNT,
        help="Deepest family member tried with --maximize params.",
    ),
    click.option(
        "--per-stage",
        "per_stage",
        is_flag=True,
        default=None,
        help="Also choose each pipeline stage's layers and how many of them are fully recomputed "
        "(CP-SAT per stage, over the fastest uniform shapes); prints the gain over the best uniform "
        "layout and the Megatron-LM / torchtitan flags.",
    ),
    click.option(
        "--per-stage-shapes",
        "per_stage_shapes",
        type=COUNT,
        default=None,
        help="With --per-stage: search only this many shapes per stage (the fastest uniform ones, "
        "then the fastest with fit ignored); default every shape, so the answer is proven over all.",
    ),
]


@cli.command("search")
@search_options("search", ("Search", SEARCH_OPTIONS))
def search_cmd(
    as_json: bool,
    top: int,
    maximize: str | None,
    per_stage: bool | None,
    per_stage_shapes: int | None,
    **kw: Any,
) -> None:
    """The best layout: dp, tp, pp, cp, ep, ZeRO stage, recompute, micro-batch, schedule (and GPU count
    and accelerator when several are given), proven optimal by CP-SAT.

    Example: trainplan search --model llama3-405b --gpus 16384 --gpu H100-SXM
    """
    options = {**kw, "per_stage": per_stage, "per_stage_shapes": per_stage_shapes}
    options["started"] = command_started()  # --time-limit counts the command's wall clock
    request = search_request(options, "params" if maximize else None)
    if request.per_stage:
        if top != 1 or maximize:
            raise InputError("per_stage: takes neither --top nor --maximize (one plan, step time)")
        _per_stage(request, as_json)
        return
    solutions = _solutions(as_json)
    tables = stop_between_tables(table_progress(as_json))
    try:
        run, stopped = interruptible(lambda: search_json(request, top, maximize, tables, solutions))
    except InfeasibleError as err:
        infeasible(err, as_json)
        return
    if solutions:
        click.echo("", err=True)
    out = run.json
    out["interrupted"] = stopped
    if run.objective != "params":  # a family member of another depth is no catalogue model
        _with_evaluate_lines(request, [out] if top == 1 else out["answers"])
    if as_json:
        echo_json(out)
        exit_if(stopped)
        return
    answers = [out] if top == 1 else out["answers"]
    click.echo(
        f"Searched {out['candidates']:,} candidates ({out['shapes']:,} shapes × ZeRO × recompute, "
        f"{out['jobs']} job(s)), objective {run.objective}: {_proof(out)}; tables "
        f"{out['tables_seconds']:.2f} s, CP-SAT {out['solve_seconds']:.2f} s"
    )
    search_notes(out)
    for i, d in enumerate(answers, 1):
        click.echo(f"\n#{i}: {d['job']}" if top > 1 else "")
        click.echo(f"objective ({run.objective}): {d['objective_text']}")
        if d.get("evaluate_command"):
            click.echo(f"evaluate it: {d['evaluate_command']}")
        if "price_per_hour" in d:
            per_step = d.get("price_per_step")
            click.echo(
                f"price: {dollars(d['price_per_hour'], '/hour')}"
                + ("" if per_step is None else f", {dollars(per_step)} per step")
            )
        click.echo("")
        used = answer_defaults(request, d) if d.get("evaluate_command") else None
        click.echo(evaluate_text(d, used))  # the defaults its evaluate line names
    exit_if(stopped)


def _with_evaluate_lines(request: SearchRequest, answers: list[dict[str, Any]]) -> None:
    """Add to each answer ``evaluate_command``: the ``trainplan evaluate`` line that gives it
    (:func:`interface.cli.evaluate_line.answer_params`)."""
    for d in answers:
        d["evaluate_command"] = evaluate_line(answer_params(request, d))


def search_notes(out: dict[str, Any]) -> None:
    """The notes under a search's first line: what its time limit and the params objective
    leave unproven, then :func:`settings_note`'s."""
    for note in (out.get("time_limit_note"), out.get("params_note")):
        if note:
            click.echo(f"Note: {note}")
    settings_note(out)


def settings_note(out: dict[str, Any]) -> None:
    """The note saying what the user's choice settings cost, when they cost more than the
    threshold (:mod:`interface.setting_cost`; JSON ``settings_cost``), and the one saying a
    textbook answer is a convention (:mod:`interface.textbook_note`; JSON ``textbook_note``)."""
    cost = out.get("settings_cost")
    if cost and cost["note"]:
        click.echo(f"Note: {cost['note']}")
    textbook = out.get("textbook_note")
    if textbook:
        click.echo(f"Note: {textbook['note']}")


def _proof(out: dict[str, Any]) -> str:
    """What the status says of the answer, in words."""
    if out.get("interrupted"):
        return "interrupted (Ctrl-C): the best found before it, not proven"
    if out["status"] == "optimal":
        return "proven optimal"
    return "best found within the time limit (not proven)"


def exit_if(interrupted: bool) -> None:
    """End an interrupted command with exit code 130 once its answer so far is printed."""
    if interrupted:
        click.get_current_context().exit(INTERRUPTED)


def _per_stage(request: SearchRequest, as_json: bool) -> None:
    from trainplan.interface.render.per_stage_report import per_stage_text

    try:
        run, stopped = interruptible(lambda: per_stage_json(request))
    except InfeasibleError as err:
        infeasible(err, as_json)
        return
    run.json["interrupted"] = stopped
    run.json["evaluate_command"] = evaluate_line(answer_params(request, run.json))
    if as_json:
        echo_json(run.json)
        exit_if(stopped)
        return
    if stopped:
        click.echo("Interrupted (Ctrl-C): the best plan found before it, not proven\n")
    click.echo(per_stage_text(run.json))
    if run.json.get("evaluate_command"):
        click.echo(f"evaluate it: {run.json['evaluate_command']}")
    click.echo("")
    click.echo(evaluate_text(run.json, answer_defaults(request, run.json)))
    exit_if(stopped)
