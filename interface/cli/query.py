"""The commands' options as the web API's query parameters: one grammar, so the API reads every
input exactly as the command line does and refuses a bad one with the same line.

A query parameter is an option's long name without the dashes (``seq-len=8192``), the one
spelling (``seq_len`` is refused, naming ``seq-len``); an option that repeats on the command
line repeats in the query (``tp=8&tp=16``, or ``tp=8;16``), and one that takes a single value is
refused when repeated with different values (``dp=8&dp=16``,
:class:`~interface.cli.common.GuardedCommand`); an on/off option is ``true`` or ``false``
(``flash=false`` is ``--no-flash``). A value is read as typed: ``gpus=16,384`` is one number (a
comma only groups thousands, :func:`model.units.parse_number`), so a page may send a field's text
unchanged. The query becomes the argument list the command line would get, and click parses it
with the command's own option types (:data:`interface.cli.common.COUNT`…), so a value is refused
with the very line ``trainplan`` prints after ``Error:``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import click

from trainplan.interface.cli import cli, register_commands
from trainplan.interface.cli.common import WEB_QUERY, ListOf, OutputFile, click_line
from trainplan.interface.flags import MOVED_FLAGS, PARAMETER_FLAGS, derived_count, flag_for
from trainplan.interface.framework_flags import framework_hint
from trainplan.interface.scenario import VALUE_KINDS, check_scenario
from trainplan.interface.scenario_file import switch_word
from trainplan.interface.scenario_keys import KEY_HELP, closest_key, read_line, table_of
from trainplan.model.errors import InputError, PlannerError

__all__ = ["QueryParam", "query_params", "parse_query", "moved_params"]


@dataclass(frozen=True, slots=True)
class QueryParam:
    """One option of a command as a query parameter (for the API's OpenAPI description)."""

    name: str
    """The query name: the option's long name without dashes (``seq-len``)."""
    help: str
    multiple: bool
    """Repeatable (``tp=8&tp=16``)."""
    boolean: bool
    """true or false."""
    choices: tuple[str, ...]
    """Allowed values, when the option has a fixed set."""
    default: Any
    required: bool


def _command(name: str) -> click.Command:
    register_commands()
    return cli.commands[name]


def _options(command: click.Command) -> list[click.Option]:
    return [
        p
        for p in command.params
        if isinstance(p, click.Option) and not p.is_eager and p.opts[0].startswith("--")
    ]


def _writes_file(option: click.Option) -> bool:
    return isinstance(option.type, OutputFile | click.Path)


def _takes_set(command: click.Command) -> bool:
    return any(p.name == "set" for p in command.params)


def moved_params(name: str) -> dict[str, str]:
    """The moved flags' query names of command ``name`` {query name: scenario key} (the web API
    keeps them as parameters; each is given to the command as ``--set``): the primary spelling
    of each, none for a command without ``--set``."""
    if not _takes_set(_command(name)):
        return {}
    return {
        flag[2:]: key
        for flag, (key, switch) in MOVED_FLAGS.items()
        if switch is not False  # --no-master-weights is master-weights=false
    }


def _moved_query_params(name: str) -> list[QueryParam]:

    out = []
    for query, key in moved_params(name).items():
        kind = VALUE_KINDS[key]
        out.append(
            QueryParam(
                name=query,
                help=f"{KEY_HELP[key]} (the scenario key {key}; --set on the command line)",
                multiple=key == "overlap",
                boolean=kind == "flag",
                choices=tuple(str(c) for c in kind) if isinstance(kind, tuple) else (),
                default=None,
                required=False,
            )
        )
    return out


def query_params(name: str, leave_out: Iterable[str] = ()) -> list[QueryParam]:
    """The query parameters of command ``name``: every option but ``--json`` (the API always
    answers JSON), the options that read or write files, and ``leave_out`` (query names); and
    the flags moved to ``--set`` (:func:`moved_params`)."""
    out = []
    skip = {"json", *leave_out}
    for option in _options(_command(name)):
        key = option.opts[0][2:]
        if key in skip or _writes_file(option):
            continue
        kind = option.type.inner if isinstance(option.type, ListOf) else option.type
        choices = kind.choices if isinstance(kind, click.Choice) else ()
        out.append(
            QueryParam(
                name=key,
                help=option.help or "",
                multiple=option.multiple,
                boolean=option.is_flag and option.is_bool_flag,
                choices=tuple(str(c) for c in choices),
                default=None if callable(option.default) else option.default,
                required=option.required,
            )
        )
    return out + _moved_query_params(name)


def _switch(option: click.Option, key: str, value: str) -> list[str]:
    """An on/off option's command-line form for ``true``/``false``."""
    on = switch_word(value)
    if on is None:
        raise InputError(f"{option.opts[0]}: {value!r} must be true or false")
    if on:
        return [option.opts[0]]
    return [option.secondary_opts[0]] if option.secondary_opts else []


def _setting(query: str, key: str, value: str) -> str:
    """A moved flag's query value as ``--set``'s KEY=VALUE: an on/off one as true or false, an
    overlap's AXIS=FRACTION as the table entry ``overlap.AXIS=FRACTION``; checked here by the
    scenario file's rule (:func:`interface.scenario.check_scenario`), so a bad value is refused
    with the query parameter's name (``moe-node-limit: 0 must be at least 1``), as every other
    parameter of the API is, rather than the command line's ``--set``.

    Raises
    ------
    InputError
        The value its key's rule refuses, one line naming the query parameter.
    """
    if VALUE_KINDS[key] == "flag":
        on = switch_word(value)
        if on is None:
            raise InputError(f"{query}: {value!r} must be true or false")
        return f"{key}={'true' if on else 'false'}"
    if key == "overlap" and "=" not in value:
        raise InputError(f"{query}: {value!r} must be AXIS=FRACTION, e.g. dp=0.5")
    setting = f"overlap.{value}" if key == "overlap" else f"{key}={value}"
    values = read_line(setting) if key == "overlap" else {key: read_line(setting)[key]}
    table = table_of(key)
    try:
        check_scenario({table: values} if table else values, "")
    except PlannerError as err:
        line = str(err)
        raise InputError(query + line[len(key) :] if line.startswith(key) else line) from None
    return setting


def _once(query: str, value: str, seen: dict[str, str]) -> None:
    """Refuse a moved flag's query parameter given twice with different values (overlap, a
    table, takes one entry per item)."""
    if seen.setdefault(query, value) != value:
        raise InputError(
            f"{query}: given twice with different values ({seen[query]!r}, then {value!r}); it "
            "takes one value, so give it once"
        )


def _unknown(
    name: str,
    key: str,
    by_key: dict[str, click.Option],
    moved: dict[str, str],
    why: dict,
    value: str = "",
) -> str:
    """The line refusing query key ``key``, no parameter of command ``name``: its dashed
    spelling when that is one (``cp_kind``: write ``cp-kind``), or the command's spelling of the
    same parameter (:data:`interface.flags.PARAMETER_FLAGS`: ``policy``, write ``model``) or a
    training framework's (:func:`interface.framework_flags.framework_hint`:
    ``tensor-model-parallel-size``, write ``tp``, with ``value``), else
    the closest parameter (:func:`interface.scenario_keys.closest_key`, as ``--set`` suggests
    one) and the parameters there are."""
    dashed = key.replace("_", "-")
    if dashed != key and (dashed in by_key or dashed in moved):
        return (
            f"{key!r}: no such parameter of {name}; write it {dashed} (a key, in a query or a JSON body, is the "
            "command's option without its leading --)"
        )
    framework = framework_hint(f"--{key}", value, by_key, name, web=True)
    if framework is not None:  # Megatron-LM's or torchtitan's spelling
        return framework
    if f"--{key}" in PARAMETER_FLAGS["num_microbatches"] and "global-batch" in by_key:
        return derived_count(key, name, by_key)
    option = _field_option(key, by_key)
    if option is not None:
        return (
            f"{key!r}: no such parameter of {name}; write it {option} (a key, in a query or a JSON body, is the "
            "command's option without its leading --, not the JSON answer's field name)"
        )
    spelt = next((fs for fs in PARAMETER_FLAGS.values() if f"--{key}" in fs), ())
    other = next((f[2:] for f in spelt if f[2:] in by_key and f[2:] != key), None)
    if other is not None:  # another spelling of the parameter (rlhf's policy is its model)
        return f"{key!r}: no such parameter of {name}; write it {other}"
    known = sorted(k for k, o in by_key.items() if k != "json" and k not in why
                   and not _writes_file(o))  # fmt: skip
    if not known and not moved:  # /api/models: nothing to name
        return f"{key}: no such parameter of {name}; it takes none"
    near = closest_key(key, known + sorted(moved))  # the command line's "did you mean"
    hint = f" (did you mean {near}?)" if near else ""
    return f"{key}: no such parameter of {name}{hint}; its parameters are " + ", ".join(
        known + sorted(moved)
    )


def _field_option(key: str, by_key: dict[str, click.Option]) -> str | None:
    """The query key of the option that sets field ``key`` (the name the JSON answer and the
    Python API give it, ``global_batch_size``, ``zero_stage``, ``micro_batch_size``): the option
    whose callback parameter it is, else its flag (:func:`interface.flags.flag_for`) where the
    command has that option; None when it is no field of one."""
    field = key.replace("-", "_")
    found = next((k for k, o in by_key.items() if o.name == field and k != key), None)
    if found is not None:
        return found
    flag = flag_for(field, options={"--" + k for k in by_key})[2:]
    return flag if flag != key and flag in by_key else None


def parse_query(
    name: str, items: Iterable[tuple[str, str]], leave_out: dict[str, str] | None = None
) -> dict[str, Any]:
    """Parse query ``items`` as command ``name``'s options would be; returns the parameters its
    callback receives (click's names, defaults filled in, values converted by the options' types).

    ``leave_out`` maps query names that do not apply to the reason, for a one-line refusal.

    Raises
    ------
    PlannerError
        What the command line refuses, with its message: a value an option's type refuses, an
        unknown parameter (its name and the command's parameters, never click's "No such
        option" with a guess among options the API refuses), a choice not offered; and an option
        that does not apply in the API (``--json``, files, ``leave_out``).
    """
    command = _command(name)
    by_key = {option.opts[0][2:]: option for option in _options(command)}
    moved = moved_params(name)
    why = dict(leave_out or {})
    argv: list[str] = []
    seen: dict[str, str] = {}
    for raw_key, value in items:
        key = raw_key.strip()
        found = by_key.get(key)
        if found is None and key in moved:
            if moved[key] != "overlap":
                _once(key, value, seen)
            argv += ["--set", _setting(key, moved[key], value)]
            continue
        if found is None:
            raise InputError(_unknown(name, key, by_key, moved, why, value))
        option = found
        if key == "json" or _writes_file(option) or key in why:
            reason = why.get(key) or (
                "the API always answers JSON"
                if key == "json"
                else "it names a file on the server; the API answers with the data instead"
            )
            # the query key the user sent, as the web's lines name a field (not its flag)
            raise InputError(f"{key}: {value!r} does not apply here: {reason}")
        if option.is_flag and option.is_bool_flag:
            argv += _switch(option, key, value)
        else:
            argv += [f"--{key}", value]
    parent = click.Context(cli, info_name="trainplan")
    parent.meta[WEB_QUERY] = True  # a callback's refusal names the API's paths (rlhf-plan's dpo)
    try:
        ctx = command.make_context(name, argv, parent=parent)
    except click.ClickException as err:
        raise InputError(click_line(err)) from None
    return dict(ctx.params)
