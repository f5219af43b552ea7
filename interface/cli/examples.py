"""``trainplan example NAME``: run one of the 20 worked examples (``scenarios/examples.toml``)."""

from __future__ import annotations

import shlex
from collections.abc import Collection
from typing import Any

import click
from click.core import ParameterSource

from trainplan.interface.cli import cli
from trainplan.interface.cli.common import echo_json
from trainplan.interface.cli.options import option_groups
from trainplan.interface.cli.planner import evaluate_options, run_evaluate
from trainplan.model.errors import InputError, PlannerError


def _sets(items: tuple[str, ...]) -> dict[str, Any]:
    """The ``--set`` items: a scenario file's ``[cluster]`` key read and checked as the file's
    (:func:`interface.scenario_keys.read_sets`), any other parameter of the example as text."""
    from trainplan.interface.scenario_keys import EVALUATE_KEYS, read_sets

    out: dict[str, Any] = {}
    scenario = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--set: {item!r} must be KEY=VALUE, e.g. microbatches=16")
        name = key.strip().replace("-", "_")
        if name.partition(".")[0] in EVALUATE_KEYS:
            scenario.append(f"{name}={value}")
        else:
            out[name] = value.strip()
    return {**out, **read_sets(scenario, EVALUATE_KEYS, "example")}


def _note(example: dict[str, Any], overrides: dict[str, Any]) -> str:
    """The example's ``note`` line (where its figures and its source part, and why), for the
    example as published: none once an option changes it."""
    return f"\nNote: {example['note']}" if example.get("note") and not overrides else ""


def _headline(
    name: str, says: str, source: str, changed: list[str], replaced: dict[str, Any] | None = None
) -> str:
    """The example's first line: what it shows and its source; once options change it, the
    options as the user typed them (``changed``: :func:`_typed_words`; the figures below are
    theirs), the example's own values they replaced (``replaced``:
    :func:`interface.examples.replaced`, as ``--set`` writes them) and what it shows as
    published after.

    >>> print(_headline("1f1b-4x8", "bubble 3/11 = 27%", "Narayanan 2021", ["--set microbatches=16"]))
    Example 1f1b-4x8 with --set microbatches=16 (the figures below are for these; as published: \
bubble 3/11 = 27%)  [Narayanan 2021]
    >>> print(_headline("ppo-70b", "PPO", "", ["--model llama3-8b"], {"policy_params": 70e9}))
    Example ppo-70b with --model llama3-8b (in place of the example's policy_params=70e9; the \
figures below are for these; as published: PPO)
    """
    tail = f"  [{source}]" if source else ""
    if not changed:
        return f"Example {name}: {says}{tail}"
    gone = ", ".join(f"{k}={_number(v)}" for k, v in (replaced or {}).items())
    gone = f"in place of the example's {gone}; " if gone else ""
    return (
        f"Example {name} with {', '.join(changed)} ({gone}the figures below are for these; as "
        f"published: {says}){tail}"
    )


def _typed_words(ctx: click.Context, names: Collection[str]) -> list[str]:
    """The options of the command line that set one of ``names`` (the parameters the example's
    overrides come from, ``sets`` for ``--set``), as click parsed them: each option whose value
    came from the command line (:meth:`click.Context.get_parameter_source`), spelled with its own
    first long name and the value it took (:func:`_spelled`) — ``--gpus 8,192`` (not the
    parameter's name, ``num_gpus``), ``--set microbatches=16``, ``--no-flash`` — in the order
    click met them. An option typed twice shows once, with the value that counts; ``--tp=8``,
    a short option and ``--`` are click's to read.

    >>> cmd = click.Command("x", params=[click.Option(["-g", "--gpus", "num_gpus"], type=int),
    ...     click.Option(["--json", "as_json"], is_flag=True),
    ...     click.Option(["--set", "sets"], multiple=True)])
    >>> ctx = cmd.make_context("x", ["-g", "8", "--json", "--set=x=1", "--gpus=8192", "--set", "y=2"])
    >>> _typed_words(ctx, {"num_gpus", "sets"})
    ['--gpus 8,192', '--set x=1', '--set y=2']
    """
    words: list[str] = []
    by_name = {p.name: p for p in ctx.command.params if isinstance(p, click.Option)}
    for name, value in ctx.params.items():  # click's processing order: the order typed
        param = by_name.get(name)
        if param is None or name not in names:
            continue
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            words += _spelled(param, value)
    return words


def _spelled(param: click.Option, value: Any) -> list[str]:
    """``param`` with ``value`` (click's converted value) as the command line writes it: its
    first long name (``--gpus``; a switch's ``--no-…`` when off), the value after it (a count
    or number as refusals echo one, :func:`model.units.shown_number`); a repeatable option once
    per value.

    >>> flash = click.Option(["--flash/--no-flash"], default=None)
    >>> _spelled(flash, False), _spelled(click.Option(["--tp", "tp"], type=int), 8)
    (['--no-flash'], ['--tp 8'])
    """
    from trainplan.model.units import shown_number

    def long(opts: list[str]) -> str:
        return next((o for o in opts if o.startswith("--")), opts[0])

    if param.is_flag:
        off = param.is_bool_flag and param.secondary_opts and value is False
        return [long(param.secondary_opts if off else param.opts)]
    values = value if param.multiple else (value,)
    return [
        f"{long(param.opts)} {shlex.quote(v) if isinstance(v, str) else shown_number(v)}"
        for v in values
    ]


def _flags_apply(name: str, tab: str, given: list[str]) -> None:
    """Refuse a flag of evaluate's (``given``: the parameters the command line's flags set) that
    is no parameter of example ``name``'s ``tab`` (pipeline, mfu, ckpt, rlhf), naming the flag,
    the parameters the example takes by ``--set`` and the tab's own command — where it would
    otherwise be refused by its parameter's name (``num_gpus``, not ``--gpus``).

    Raises
    ------
    InputError
        ``--gpus: does not apply to example 1f1b-4x8 (the pipeline tab); …``.
    """
    from trainplan.interface.tab_requests import TAB_REQUESTS, parameters

    takes = [k for k in parameters(TAB_REQUESTS[tab]) if k != "model_spec"]
    stray = [k for k in given if k not in takes]
    if not stray:
        return
    options = click.get_current_context().command.params
    flag = next(p.opts[0] for p in options if p.name == stray[0])
    raise InputError(
        f"{flag}: does not apply to example {name} (the {tab} tab); set its parameters with "
        f"--set KEY=VALUE ({', '.join(sorted(takes))}), or run trainplan {tab} (trainplan {tab} "
        "--help)"
    )


def _nothing_dropped(name: str | None, list_: bool, words: list[str]) -> None:
    """Refuse what the list would drop: a ``NAME`` given with ``--list``, or an example's option
    (``words``: those typed, :func:`_typed_words`) without a ``NAME`` to change.

    Raises
    ------
    InputError
        ``--list: lists every example, so it takes no NAME ('ppo-70b'); …`` or ``NAME: required
        with --gpus 8 (the example it changes); …``.
    """
    if list_ and name:
        raise InputError(
            f"--list: lists every example, so it takes no NAME ({name!r}); run that one with "
            f"trainplan example {name}"
        )
    if words and list_:
        raise InputError(
            f"{words[0].partition(' ')[0].partition('=')[0]}: does not apply to --list (it lists "
            f"the examples); give an example's NAME instead: trainplan example NAME {words[0]}"
        )
    if words:
        raise InputError(
            f"NAME: required with {words[0]} (the example it changes): trainplan example NAME "
            f"{words[0]}; trainplan example --list lists them"
        )


def _list(as_json: bool) -> None:
    """Print the examples: name, tab and what each shows (``as_json``: as JSON rows)."""
    from trainplan.interface.examples import examples

    rows = [{"name": n, "tab": e["tab"], "says": e["says"]} for n, e in examples().items()]
    if as_json:
        echo_json(rows)
        return
    for r in rows:
        click.echo(f"{r['name']:<24} {r['tab']:<9} {r['says']}")


def _tab_keys(
    ctx: click.Context, name: str, tab: str, flags: list[str], overrides: dict[str, Any]
) -> None:
    """Rename in place the ``flags`` (the parameters the command line's flags set) and their
    ``overrides`` as example ``name``'s ``tab`` names them: ``--gpus`` as the tab's GPU count
    (:func:`_gpu_count_key`), a flag the tab's command spells alike as its parameter
    (:func:`_same_flag`: ``--zero``)."""
    if "num_gpus" in flags and tab in ("mfu", "rlhf"):
        flags[flags.index("num_gpus")] = gpus = _gpu_count_key(name, tab, overrides)
        overrides[gpus] = overrides.pop("num_gpus")
    for i, key in enumerate(flags):
        same = _same_flag(ctx.command, cli.get_command(ctx, tab), key)
        if same is not None and key != "num_gpus" and key in overrides:
            flags[i] = same
            overrides[same] = overrides.pop(key)


def _same_flag(here: click.Command, tab: click.Command | None, key: str) -> str | None:
    """The parameter of the ``tab``'s command that takes the flag that gives ``key`` on the
    example command (``here``), where it names it otherwise: evaluate's ``--zero`` is
    ``zero_stage``, the RLHF command's ``zero``; else None.

    >>> from trainplan.interface.cli import cli
    >>> ctx = click.Context(cli)
    >>> _same_flag(cli.get_command(ctx, "example"), cli.get_command(ctx, "rlhf"), "zero_stage")
    'zero'
    """
    flag = next((p.opts[0] for p in here.params if p.name == key), None)
    params = tab.params if tab is not None else []
    other = next((p.name for p in params if flag in getattr(p, "opts", ())), None)
    return other if other != key else None


def _gpu_count_key(name: str, tab: str, overrides: dict[str, Any]) -> str:
    """The parameter that ``--gpus`` gives on example ``name`` of the ``mfu`` or ``rlhf`` tab: the
    tab's count of GPUs, ``chips`` (MFU's denominator, PaLM Appendix B; the RLHF textbook
    accounting's), or ``gpus`` where the RLHF example has a model (the faithful accounting's
    cluster: :func:`interface.rlhf.tab.rlhf_report`).

    Examples
    --------
    >>> _gpu_count_key("mfu-70b-512", "mfu", {}), _gpu_count_key("ppo-70b", "rlhf", {})
    ('chips', 'chips')
    >>> _gpu_count_key("ppo-70b", "rlhf", {"model": "qwen2.5-7b"})
    'gpus'
    """
    from trainplan.interface.examples import example_params

    _, merged = example_params(name, {k: v for k, v in overrides.items() if k != "num_gpus"})
    return "gpus" if tab == "rlhf" and merged.get("model") is not None else "chips"


MEASURED_KEYS = ("step_seconds", "tokens_per_second", "achieved_pflops", "achieved_tflops_per_gpu")
"""The measurements an MFU example gives (``trainplan mfu``'s): a step's seconds, a throughput or
a reported FLOP rate, each one run's on its own chip count (PaLM Appendix B: MFU = model FLOPs
per second ÷ (peak × chips), the rate the run's own)."""


def _mfu_chips_apply(name: str, typed: str, overrides: dict[str, Any]) -> None:
    """Refuse a new chip count (``typed``: the option that gave it, ``--gpus`` or ``--set
    chips``) on MFU example ``name`` without a new measurement (:data:`MEASURED_KEYS`): the
    example's step time or rate is one published run's on its own chips, and the same step over
    other chips is no run's MFU (``example mfu-70b-512 --gpus 1024`` printed 23.7%, the 512-GPU
    step over 1,024 chips). The line names what to do: ``trainplan mfu`` with the example's own
    values, to edit (:func:`interface.cli.evaluate_line.command_line`).

    Raises
    ------
    InputError
        ``--gpus: example mfu-70b-512's MFU is one measured run's (--step-seconds 7 on 512
        chips); … Give your run's --chips and --step-seconds: trainplan mfu …``.
    """
    from trainplan.interface.cli.evaluate_line import command_line
    from trainplan.interface.examples import example_params

    if any(k in overrides for k in MEASURED_KEYS):
        return
    _, published = example_params(name)
    measured = [k for k in MEASURED_KEYS if published.get(k) is not None]
    command = cli.get_command(click.get_current_context(), "mfu")
    assert command is not None
    flags = {p.name: p.opts[0] for p in command.params}
    line = command_line("mfu", command, {k: _number(v) for k, v in published.items()})
    given = " ".join(f"{flags[k]} {_number(published[k])}" for k in measured)
    edit = " and ".join(flags[k] for k in ["chips", *measured])
    raise InputError(
        f"{typed}: example {name}'s MFU is one measured run's ({given} on "
        f"{published['chips']:,} chips); another chip count runs a step of its own, not that "
        f"one. Give your run's {edit}: {line}"
    )


def _number(value: Any) -> Any:
    """A number of an example as the command line takes it, compact where that is exact
    (:func:`interface.tab_values.fmt_number`: ``70e9``), else as it is.

    >>> _number(70e9), _number(6291456), _number(102.37), _number("A100-80GB")
    ('70e9', 6291456, '102.37', 'A100-80GB')
    """
    from trainplan.interface.tab_values import fmt_number
    from trainplan.model.units import parse_number

    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    shown = fmt_number(value)
    return shown if float(parse_number(shown)) == float(value) else value


def _run_planner(
    name: str, overrides: dict[str, Any], changed: list[str], as_json: bool, per_stage: bool
) -> None:
    """Run planner example ``name`` with ``overrides``: its JSON, or its headline, profile and
    note then evaluate's report (:func:`interface.cli.planner.run_evaluate`); ``changed``: the
    options as typed (:func:`_typed_words`), the headline's."""
    from trainplan.interface.examples import example_params, examples, replaced, run_example

    _, merged = example_params(name, overrides)
    if as_json:
        out = run_example(name, overrides)
        echo_json(out)
    else:
        ex = examples()[name]
        gloss = ex.get("profile") or (
            "steady-state accounting: the ZeRO paper's 16 B/param, one DP exchange per "
            "step, Korthikanti's per-layer activations, the vendor's capacity (--framework "
            "megatron|deepspeed|fsdp2 for a real framework's peak memory and traffic)"
        )
        header = (
            _headline(name, ex["says"], ex.get("source", ""), changed, replaced(name, overrides))
            + f"\nProfile: {merged['framework']}"
            + (f" — {gloss}" if merged["framework"] == "textbook" else "")
            + _note(ex, overrides)
            + "\n"
        )
        run_evaluate(merged, False, per_stage, header)  # the header once it evaluates


@cli.command("example")
@click.argument("name", required=False)
@option_groups(
    (
        "Example",
        [
            click.option("--list", "list_", is_flag=True, help="List the examples."),
            click.option(
                "--set",
                "sets",
                multiple=True,
                help="KEY=VALUE overriding any of the example's parameters; a scenario file's "
                "[cluster] key is read as the file reads it (--set moe_node_limit=4).",
            ),
        ],
    )
)
@evaluate_options
def example_cmd(
    name: str | None,
    list_: bool,
    sets: tuple[str, ...],
    as_json: bool,
    per_stage: bool,
    **params: Any,
) -> None:
    """Run a worked example by name: a layout, pipeline, MFU, checkpointing or RLHF case, its source
    and the figures it reproduces (trainplan example --list)."""
    from trainplan.interface.examples import example_name, own_refusal

    ctx = click.get_current_context()
    typed = {k for k, v in params.items() if v is not None and v != ()}
    typed |= {"sets"} if sets else set()
    changed = _typed_words(ctx, typed)
    if list_ or not name:
        words = _typed_words(ctx, {*typed, "per_stage"})
        _nothing_dropped(name, list_, words)
        _list(as_json)
        return
    name = example_name(name, "NAME")  # any case; an unknown name refused as the argument typed
    overrides = {k: v for k, v in params.items() if v is not None and v != ()}
    from trainplan.interface.scenario_keys import merge

    given = _sets(sets)
    merge(overrides, given)
    overrides.update(given)
    try:
        _run(ctx, name, params, given, overrides, changed, as_json, per_stage)
    except PlannerError as err:  # a value of the example's own, not a flag typed
        if len(err.args) == 1 and isinstance(err.args[0], str):
            err.args = (own_refusal(name, overrides, err.args[0]),)
        raise


def _run(
    ctx: click.Context,
    name: str,
    params: dict[str, Any],
    given: dict[str, Any],
    overrides: dict[str, Any],
    changed: list[str],
    as_json: bool,
    per_stage: bool,
) -> None:
    """Run example ``name`` on its tab with ``overrides`` (``params``: the command's options,
    ``given``: its ``--set`` keys; ``changed``: the options as typed)."""
    from trainplan.interface.examples import example_params, examples, run_example

    tab, _ = example_params(name)
    if tab == "planner":
        _run_planner(name, overrides, changed, as_json, per_stage)
        return
    flags = [k for k, v in params.items() if v is not None and v != ()]
    flags += ["per_stage"] if per_stage else []  # the planner's: refused on another tab
    if tab == "mfu" and ("num_gpus" in flags or "chips" in given):
        _mfu_chips_apply(name, "--gpus" if "num_gpus" in flags else "--set chips", overrides)
    _tab_keys(ctx, name, tab, flags, overrides)
    _flags_apply(name, tab, flags)
    out = run_example(name, overrides)
    if as_json:
        echo_json(out)
        return
    headline = _headline(name, out["says"], out.get("source", ""), changed, out.get("replaced"))
    click.echo(f"{headline}{_note(examples()[name], overrides)}\n")
    _, merged = example_params(name, overrides)
    command = cli.get_command(ctx, tab)  # loaded on lookup (interface.cli.LazyGroup)
    assert command is not None, tab
    ctx.invoke(command, **merged)
