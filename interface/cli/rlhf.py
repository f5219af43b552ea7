"""``trainplan rlhf`` (the RLHF tab: the textbook accounting, and with ``--model`` the faithful one)
and ``trainplan rlhf-plan`` (the placement and parallelism search).

Options are read as text into the tab's request (:class:`interface.tab_requests.RLHFRequest`,
:class:`~interface.tab_requests.RLHFPlanRequest`) and parsed by :mod:`interface.rlhf.tab` and
:mod:`interface.rlhf.faithful`, so any bad value is one ``Error: …`` line and exit code 2; the
help names a number option's kind as evaluate's typed options do (``COUNT``, ``NUMBER``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from trainplan.interface import tabs
from trainplan.interface.cli import cli
from trainplan.interface.cli.clock import command_started
from trainplan.interface.cli.common import COUNT, INTERRUPTED, POSITIVE, WEB_QUERY, echo_json
from trainplan.interface.cli.interrupt import Interrupted, interruptible
from trainplan.interface.commands import rlhf_json
from trainplan.interface.flags import with_flags
from trainplan.interface.requests import seconds_left, startup_seconds
from trainplan.model.errors import InfeasibleError, InputError
from trainplan.model.rlhf.spec import placed_algorithm

__all__ = ["rlhf_cmd", "rlhf_plan_cmd"]

JSON = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
D = tabs.RLHF_DEFAULTS


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _workload(plan: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The workload options both commands share (``plan``: ``rlhf-plan``'s, which places PPO and
    GRPO only: DPO has no rollout to place)."""
    algorithms = (
        "ppo or grpo (DPO has no rollout to place: trainplan rlhf --algorithm dpo --policy-params N)."
        if plan
        else "ppo, grpo (or dpo: textbook accounting only, with --policy-params, without --model)."
    )
    return lambda f: _with_options(f, algorithms, _placed if plan else None)


DPO_INSTEAD = (
    "its textbook accounting is trainplan rlhf --algorithm dpo --policy-params SIZE (e.g. 70B)"
)
"""Where DPO's accounting is, for a command that has no ``--policy-params`` (``rlhf-plan``)."""
DPO_INSTEAD_WEB = (
    "its textbook accounting is /api/rlhf?algorithm=dpo&policy-params=SIZE (the RLHF tab)"
)
"""The same, for the web API's ``/api/rlhf-plan``."""


def _placed(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``rlhf-plan``'s ``--algorithm`` checked as it is read (:func:`model.rlhf.spec.
    placed_algorithm`), so ``--algorithm dpo`` is refused as such before the options DPO does
    not take are asked for (``--model``, ``--gpus``), naming the command (or the API's path)
    that accounts for DPO."""
    if value is not None:
        placed_algorithm(value, DPO_INSTEAD_WEB if ctx.meta.get(WEB_QUERY) else DPO_INSTEAD)
    return value


_EPOCHS = click.option(
    "--epochs", metavar="COUNT", default=str(D["epochs"]), show_default=True,
    help="Passes over the step's sequences per update: PPO's epochs, GRPO's iterations μ "
    "(scales the training FLOPs).",
)  # fmt: skip


_ENGINE = (
    click.option("--bandwidth-efficiency", metavar="NUMBER",
                 help="Fraction of HBM bandwidth decode reaches (0.8 or 80%) [default: STREAM triad's]."),
    click.option("--agent-workers", metavar="COUNT",
                 help="verl's agent-loop workers (actor_rollout_ref.rollout.agent.num_workers): the step's "
                 "samples split into that many equal chunks; megatron and fsdp2 only [default: 8]."),
)  # fmt: skip
"""The engine's options beside the workload's (:func:`_with_options`)."""


def _with_options(f: Callable[..., Any], algorithms: str, check: Any) -> Callable[..., Any]:
    """``f`` with the workload options (``--algorithm``'s help and callback or None)."""
    opts = [
        click.option("--algorithm", required=True, help=algorithms, callback=check),
        click.option("--reward", help="model or rule (no network); PPO and GRPO only [default: model]."),
        click.option(
            "--prompts", metavar="COUNT", default=str(D["prompts"]), show_default=True, help="Prompts per step."
        ),
        click.option(
            "--samples-per-prompt", metavar="COUNT",
            help=f"Rollouts per prompt, GRPO's group size [default: {D['samples_per_prompt']}]; DPO has 2.",
        ),
        click.option(
            "--prompt-tokens", metavar="COUNT",
            default=str(D["prompt_tokens"]),
            show_default=True,
            help="Tokens per prompt.",
        ),
        click.option(
            "--completion-tokens", metavar="COUNT",
            default=str(D["completion_tokens"]),
            show_default=True,
            help="Tokens per completion (the mean).",
        ),
        _EPOCHS,
        click.option(
            "--max-completion-tokens", metavar="COUNT",
            help="The longest rollout's completion (the engine waits for it) [default: the mean].",
        ),
        click.option(
            "--gpu", help=f"Accelerator: a name or a PATH.toml describing one [default: {D['gpu']}]."
        ),
        click.option(
            "--rollout-batch", metavar="COUNT",
            help="Sequences an engine decodes at once at most (vLLM max_num_seqs) "
            f"[default: {D['rollout_batch']}].",
        ),
        click.option("--critic-model", help="The critic's and reward model's network [default: the policy's]."),
        click.option("--framework", help="megatron, deepspeed or fsdp2 (faithful) [default: megatron]."),
        click.option("--zero", metavar="COUNT", help="ZeRO stage of the framework [default: the framework's]."),
        click.option("--train-batch", metavar="COUNT", help="Sequences per optimizer update [default: all of the step's]."),
        click.option("--micro-batch-tokens", metavar="COUNT",
                     help="Tokens per micro-batch (verl ppo_max_token_len_per_gpu); under balanced "
                     "packing at least one sequence, prompt + longest completion [default: 16384]."),
        click.option("--packing", help="Micro-batches: balanced (verl) or first-fit (OpenRLHF, NeMo-RL) [default: framework's]."),
        click.option("--logits", help="full, chunked or fused: log-softmax/entropy over the logits [default: full]."),
        click.option("--old-log-prob", help="recompute (the actor's scoring forward, verl, OpenRLHF) or engine "
                     "(the engine's log-probs; PPO and GRPO) [default: recompute]."),
        click.option("--engine-memory-fraction", metavar="NUMBER",
                     help="vLLM gpu_memory_utilization / SGLang mem_fraction_static, in (0, 1) (0.9 or 90%)."),
        click.option("--off-policy", metavar="COUNT", help="0 synchronous, 1 one-step off-policy [default: 0]."),
        click.option("--recompute", help="Activation recomputation of the update [default: full]."),
        click.option("--host-memory-gb", metavar="NUMBER", help="Host memory per node, GB (2TB = 2,000 GB: TB and GB "
                     "are decimal, TiB and GiB binary) [default: 2000, DGX H100]."),
        *_ENGINE,
    ]  # fmt: skip
    for opt in reversed(opts):
        f = opt(f)
    return f


# ------------------------------------------------------------------------------------ rlhf
@cli.command("rlhf")
@_workload(plan=False)
@click.option(
    "--policy-params",
    metavar="NUMBER",
    help="Policy parameters N_p (70e9, 70B): the textbook accounting (without --model).",
)
@click.option(
    "--reward-params", metavar="NUMBER", help="Reward model / critic parameters N_r [default: N_p]."
)
@click.option(
    "--decode-mfu",
    metavar="NUMBER",
    help=f"Textbook accounting: MFU of rollout generation (0–1, or a percent: 4%) [default: {D['decode_mfu']}].",
)
@click.option(
    "--train-mfu",
    metavar="NUMBER",
    default=str(D["train_mfu"]),
    show_default=True,
    help="Textbook accounting: MFU of scoring and training (0–1, or a percent: 40%).",
)
@click.option(
    "--peak-tflops",
    metavar="NUMBER",
    help="Peak per chip, TFLOP/s (989 or 0.989PFLOPS), instead of --gpu (textbook accounting).",
)
@click.option("--chips", metavar="COUNT", help="Textbook accounting: chips [default: 1].")
@click.option(
    "--rollout-engine",
    is_flag=True,
    help="Textbook accounting: add the engine's weight copy and KV cache (needs --layers "
    "--kv-heads --head-dim).",
)
@click.option(
    "--layers", metavar="COUNT", help="Textbook accounting: the policy's layers (KV cache)."
)
@click.option(
    "--kv-heads", metavar="COUNT", help="Textbook accounting: the policy's KV heads (KV cache)."
)
@click.option(
    "--head-dim",
    metavar="COUNT",
    help="Textbook accounting: the policy's head dimension (KV cache).",
)
@click.option(
    "--logits-buffer", is_flag=True, help="Textbook accounting: add the FP32 logits buffer."
)
@click.option(
    "--vocab-size", metavar="COUNT", help="Textbook accounting: vocabulary for --logits-buffer."
)
@click.option(
    "--logits-tokens", metavar="COUNT", help="Tokens per logits buffer [default: one sequence]."
)
@click.option("--model", help="Faithful accounting: the policy (catalogue name or config.json).")
@click.option("--gpus", metavar="COUNT", help="Faithful: GPUs of the cluster [default: 8].")
@click.option(
    "--rollout-gpus",
    metavar="COUNT",
    help="Faithful: the engine on this many GPUs of its own [default: colocated].",
)
@click.option(
    "--train-tp",
    metavar="COUNT",
    help="Faithful: tp of the training and scoring roles [default: 1].",
)
@click.option(
    "--train-pp",
    metavar="COUNT",
    help="Faithful: pp of the training and scoring roles [default: 1].",
)
@click.option(
    "--rollout-tp",
    metavar="COUNT",
    help="Faithful: the engine's tp [default: verl's 2; 1 on an odd GPU count].",
)
@click.option(
    "--offload",
    help="Faithful: none, optimizer (CPU Adam), idle (state to host outside the role's phases), "
    "or role=mode,… [default: none].",
)
@click.option(
    "--shared-engine-weights",
    is_flag=True,
    help="Faithful: colocated, the engine reuses the actor's BF16 weights (HybridFlow).",
)
@click.option(
    "--width", type=COUNT, default=72, show_default=True,
    help="Columns of the timeline the faithful accounting (--model) draws.",
)  # fmt: skip
@JSON
def rlhf_cmd(as_json: bool, width: int, **kw: Any) -> None:
    """Memory, FLOPs and time of one PPO, GRPO or DPO step: the textbook accounting (16 B per
    trainable parameter, 2 B per frozen one; 2N FLOPs per token to infer, 6N to train), or with
    --model every term as people run it (rollout engine, KV cache, logits buffers, placement)."""
    r = rlhf_json(kw)
    given = click.get_current_context().get_parameter_source("width")
    if "faithful" not in r and given is click.core.ParameterSource.COMMANDLINE:
        raise InputError(
            f"width: {width} draws the timeline of the faithful accounting (with --model); the "
            "textbook accounting (--policy-params) has none: leave --width out"
        )
    if as_json:
        echo_json(r)
        return
    _textbook_text(r)
    if "faithful" in r:
        from trainplan.interface.rlhf.text import device_figures, plan_lines

        f = r["faithful"]
        click.echo(
            f"\nFaithful accounting ({f['framework']} ZeRO-{f['zero_stage']}, {f['recompute']} "
            f"recompute, logits {f['logits']}): {f['policy']} on {f['gpus']} × {f['gpu']} "
            f"({device_figures(f)}), "
            f"{f['sequences']:,} rollouts of {f['tokens_per_sequence']:,} tokens"
        )
        fl = f["phase_flops_total"]
        click.echo(
            f"FLOPs per step: rollout {fl['rollout']:.3e} (2N per token, prefill and decode), "
            f"scoring {fl['scoring']:.3e} (2N per token: "
            f"{', '.join(f['flops_by_role']['scoring'])}), training {fl['training']:.3e} "
            f"(6N per token × {f['epochs']} epoch(s))"
        )
        for line in plan_lines(f, width):
            click.echo(line)


def _textbook_text(r: dict[str, Any]) -> None:
    head = "" if r["accounting"] == "textbook" else "Textbook accounting (16 / 2 B per parameter): "
    reward = f"reward: {r['reward']}" if r["reward"] else "no reward: preference pairs"
    # the peak the times divide by, in the header as the RLHF page and trainplan mfu give it
    click.echo(
        f"{head}{r['algorithm'].upper()} ({reward}): {r['networks']} networks; times at peak "
        f"{r['peak_flops_per_s'] / 1e12:,.1f} TFLOP/s per chip × {r['chips']:,} chip(s)"
    )
    seqs, each = r["sequences_per_step"], r["tokens_per_sequence"]
    click.echo(
        f"{seqs:,} sequences a step of {each:,} tokens each (prompt + completion): "
        f"{seqs * each:,} tokens, what the FLOPs below count"
    )
    # parameter counts whole, as evaluate and search write them (7,615,616,512 parameters)
    wide = max(len(f"{x['params']:,}") for x in r["network_table"])
    for x in r["network_table"]:
        state = "trainable" if x["trainable"] else "frozen"
        click.echo(
            f"  {x['role']:<10} {x['params']:>{wide},} parameters  {state:<9} "
            f"{x['bytes_per_param']:>2} B/param  {x['bytes'] / 1e12:8.3f} TB"
        )
    moe = {x["role"]: x for x in r["network_table"] if x["active_params"] != x["params"]}
    if moe:  # a mixture of experts: FLOPs per token on the experts a token uses, bytes on all
        each = ", ".join(f"{k} {x['active_params']:,} of {x['params']:,}" for k, x in moe.items())
        click.echo(f"  FLOPs count the active parameters (mixture of experts): {each}")
    for k, v in r["extra_bytes"].items():
        at_once = f" ({r['rollout_batch']} seqs at once)" if k == "kv_cache_bytes" else ""
        click.echo(f"  {k + at_once:<31} {v / 1e12:8.3f} TB")
    vs_ppo = "" if r["algorithm"] == "ppo" else f"; {_pct(r['fewer_than_ppo'])} fewer than PPO"
    click.echo(
        f"resident {r['resident_bytes'] / 1e12:.3f} TB; {r['bytes_per_policy_param']:g} "
        f"bytes per policy parameter{vs_ppo}"
    )
    rollout_mfu = "" if r["algorithm"] == "dpo" else f"rollout MFU {r['decode_mfu']:g}, "
    click.echo(
        f"peak: {r['peak_source']}; {rollout_mfu}scoring and training MFU {r['train_mfu']:g}"
    )
    click.echo("phase        FLOPs       FLOPs share  time           time share")
    for ph in ("rollout", "scoring", "training"):
        click.echo(
            f"  {ph:<9} {r['phase_flops'][ph]:10.3e}  {_pct(r['phase_flops_share'][ph]):>10}"
            f"  {_secs(r['phase_seconds'][ph]):>12}  {_pct(r['phase_time_share'][ph]):>10}"
        )


def _secs(x: float) -> str:
    return f"{x:,.1f} s"


# ------------------------------------------------------------------------------------ rlhf-plan
@cli.command("rlhf-plan")
@_workload(plan=True)
@click.option("--model", required=True, help="The policy (catalogue name or config.json).")
@click.option("--gpus", metavar="COUNT", required=True, help="GPUs of the cluster.")
@click.option(
    "--offload/--no-offload", default=True, show_default=True, help="Let trainable roles offload."
)
@click.option(
    "--time-limit",
    type=POSITIVE,
    help="Seconds for the whole command, counted from its start (loading the model and the "
    "accelerator included, as a clock on the wall measures it), table building included; out "
    "of time: the best found (status feasible), or none (status unknown, exit 1) — never "
    "'infeasible'.",
)
@click.option("--workers", type=COUNT, default=2, show_default=True, help="CP-SAT threads.")
@click.option("--width", type=COUNT, default=72, show_default=True, help="Columns of the timeline.")
@JSON
def rlhf_plan_cmd(
    as_json: bool,
    width: int,
    offload: bool,
    time_limit: Any,
    workers: int,
    **kw: Any,
) -> None:
    """The fastest placement of a PPO or GRPO step: each role's GPU pool (colocated or split),
    its dp/tp/pp (training) or tp/dp (rollout), offload and the engine's memory fraction —
    CP-SAT over the cost model's tables, proven optimal within the model."""
    from trainplan.interface.rlhf.plan import (
        infeasible_json,
        plan_json,
        plan_problem,
        plan_request,
    )
    from trainplan.interface.rlhf.text import result_lines
    from trainplan.optimizer.rlhf.search import search_placement

    search = {"offload": offload, "time_limit": time_limit, "workers": workers}
    request = plan_request(
        {**kw, **search, "started": command_started()}
    )  # the command's wall clock
    inp, problem = plan_problem(request)
    limit = request.time_limit
    left = seconds_left(limit, request.started)
    before = startup_seconds(request.started)  # counted by the limit: said beside it
    try:
        with _progress(as_json) as progress:
            result, stopped = interruptible(
                lambda: search_placement(problem, left, request.workers, _stoppable(progress))
            )
    except InfeasibleError as err:
        if as_json:
            echo_json(infeasible_json(err))
        else:
            click.echo("No placement fits:", err=True)
            for line in err.explanation:  # names in backticks as flags, as --json's
                click.echo(f"  - {with_flags(line)}", err=True)
        raise SystemExit(1) from None
    res = plan_json(inp, result, stopped)
    res["time_limit_seconds"] = limit  # the limit given (the search had what start-up left)
    if limit is not None:
        res["startup_seconds"] = before
    if as_json:
        echo_json(res)
    else:
        if stopped:
            click.echo("interrupted (Ctrl-C): the best placement found before it, not proven")
        for line in result_lines(res, width):
            click.echo(line)
    if stopped:
        click.get_current_context().exit(INTERRUPTED)
    if result.best is None:
        if not as_json:
            click.echo(_none_in_time(limit, before), err=True)
        raise SystemExit(1)


def _none_in_time(limit: float | None, before: float) -> str:
    """The line of a placement search whose ``--time-limit`` (``limit`` s) ran out before any
    placement was found, naming the ``before`` s of start-up the limit counted."""
    return (
        f"No placement found within the time limit of {limit:g} s (not proven infeasible): give "
        "a longer --time-limit (start-up, loading the model, the accelerator and the solver, "
        f"took {before:.2f} s of it)"
    )


def _stoppable(
    report: Callable[[str, int, int], None] | None,
) -> Callable[[str, int, int], None]:
    """A progress callback that ends the table building once Ctrl-C interrupted the search
    (:func:`interface.cli.interrupt.interruptible`), then calls ``report`` (None: none)."""
    from trainplan.optimizer.solver import interrupted

    def on_progress(stage: str, done: int, total: int) -> None:
        if stage == "tables" and interrupted():
            raise Interrupted(
                f"interrupted while building the cost tables ({done:,} of {total:,} "
                "pool×role), before any placement was found"
            )
        if report is not None:
            report(stage, done, total)

    return on_progress


@contextmanager
def _progress(as_json: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """A tqdm bar on stderr while the tables are built and CP-SAT solves — on a terminal only,
    never with --json."""
    if as_json or not sys.stderr.isatty():
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(total=0, desc="cost tables", unit=" pool×role", leave=False, file=sys.stderr)

    def report(stage: str, done: int, total: int) -> None:
        if stage == "solve":
            name = ("best", "best colocated", "best split", "done")[done]
            bar.set_description(f"CP-SAT: {name}")
            return
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        yield report
    finally:
        bar.close()
