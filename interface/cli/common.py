"""Shared CLI helpers: number options, JSON printing, turning PlannerError into exit code 2."""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Collection
from fractions import Fraction
from typing import Any

import click
import cloup

from trainplan.interface.cli.flag_hints import misspelt_here, spelled_here, taken_elsewhere
from trainplan.interface.flags import (
    MOVED_FLAGS,
    as_typed,
    flag_for,
    moved_hint,
    refusal,
)
from trainplan.interface.outputs import output_path
from trainplan.model.errors import InputError, PlannerError
from trainplan.model.units import (
    list_items,
    parse_count,
    parse_number,
    parse_positive,
    shown_text,
)

__all__ = [
    "run_guarded",
    "GuardedGroup",
    "GuardedCommand",
    "list_option",
    "ListOf",
    "OutputFile",
    "NUMBER",
    "COUNT",
    "WHOLE",
    "POSITIVE",
    "OUTPUT",
    "output",
    "echo_json",
    "fail",
    "click_line",
    "command_options",
    "typed_options",
    "RAW_ARGS",
    "WEB_QUERY",
]


def fail(message: str, code: int = 2) -> None:
    """Print ``Error: message`` on stderr and exit with ``code``."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


class GuardedCommand(cloup.Command):
    """A click command (cloup's, whose ``--help`` lists options by group:
    :func:`interface.cli.options.option_groups`) that refuses an option of one value given twice with different values
    (``--gpu H100-SXM --gpu B200`` on evaluate, ``dp=8&dp=16`` in the web API, which parses the
    query as this command's arguments), and an on/off option given both ways (``--flash
    --no-flash``), instead of keeping the last silently. Options that take several values are
    declared ``multiple`` (:func:`list_option`) and keep them all."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """click's parsing, after refusing a flag moved to ``--set`` with its replacement
        (:func:`interface.flags.moved_hint`), or another command's spelling of one of this
        command's parameters with this command's (:func:`interface.cli.flag_hints.spelled_here`) or another command's flag
        (:func:`interface.cli.flag_hints.taken_elsewhere`), where click would say
        "No such option" (``pipeline --pp 8``: "Did you mean '--help', '--png'?")."""
        misspelt_here(ctx.info_name or "", self.params, args)
        spelled_here(ctx.info_name or "", self.params, args)
        taken_elsewhere(ctx, self.params, args)
        if any("--set" in getattr(p, "opts", ()) for p in self.params):
            for i, arg in enumerate(args):
                if arg == "--":
                    break
                flag, eq, value = arg.partition("=")
                if flag in MOVED_FLAGS:
                    if not eq and MOVED_FLAGS[flag][1] is None and i + 1 < len(args):
                        value = args[i + 1]
                    raise InputError(moved_hint(flag, value or None))
        ctx.meta[RAW_ARGS] = list(args)  # meta is shared with the group's context
        return super().parse_args(ctx, args)

    def make_parser(self, ctx: click.Context) -> Any:
        parser = super().make_parser(ctx)
        single = [
            p
            for p in self.get_params(ctx)
            if isinstance(p, click.Option) and not (p.multiple or p.count)
        ]
        for p in single:  # collect every occurrence; one value is kept after the check below
            if not p.is_flag:
                parser.add_option(obj=p, opts=p.opts, dest=p.name, action="append", nargs=p.nargs)
            elif p.is_bool_flag and p.secondary_opts:
                parser.add_option(
                    obj=p, opts=p.opts, dest=p.name, action="append_const", const=True
                )
                parser.add_option(
                    obj=p, opts=p.secondary_opts, dest=p.name, action="append_const", const=False
                )
        parse = parser.parse_args

        def parse_args(args: list[str]) -> Any:
            opts, rest, order = parse(args)
            for p in single:
                values = opts.get(p.name) if p.name else None
                if not isinstance(values, list):
                    continue
                if len({repr(v) for v in values}) > 1:
                    raise InputError(_given_twice(p, values))
                opts[p.name] = values[-1]  # type: ignore[index]
            return opts, rest, order

        setattr(parser, "parse_args", parse_args)  # noqa: B010  (an instance's method replaced)
        return parser


def _given_twice(option: click.Option, values: list[Any]) -> str:
    if option.is_flag:
        both = f"{option.opts[0]} and {option.secondary_opts[0]}"
        return f"{option.opts[0]}: {both} are both given; give one"
    shown = ", ".join(
        v if isinstance(v, str) and len(v) <= 40 else shown_text(v, 40) for v in values
    )
    times = "twice" if len(values) == 2 else f"{len(values)} times"
    return f"{option.opts[0]}: given {times} ({shown}); it takes one value, so give it once"


class GuardedGroup(click.Group):
    """A click group whose commands turn any :class:`PlannerError` — raised by a command or by an
    option's conversion (``NUMBER``, ``COUNT``, ``OUTPUT``) — into one line on stderr and exit
    code 2 (docs/concepts/conventions.md "Inputs and errors"). The rule lives here once, so it holds in the console
    script and under click's ``CliRunner`` alike; no command catches PlannerError itself."""

    command_class = GuardedCommand

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """click's parsing, except that no arguments at all print the help on stdout and exit 0,
        as ``--help`` does: click 8.2+ raises its no-arguments help as a usage error (exit 2,
        on stderr), which the one-line handler would print as ``Error: Usage: …``."""
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(0)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # before click's own handler, which exits 1
            _drop_stdout()
            _broken_pipe()
        except PlannerError as err:
            # the flags of the command run, where it is known (``--stages`` on ``pipeline``,
            # ``--pp`` on ``evaluate``: one parameter, two spellings), else every command's
            name = ctx.invoked_subcommand
            command = self.get_command(ctx, name) if name else None
            args = ctx.meta.get(RAW_ARGS, ())
            options = typed_options(command or self, args)
            fail(as_typed(refusal(str(err), options), args))  # a percent as typed


RAW_ARGS = "trainplan.raw_args"
WEB_QUERY = "trainplan.web_query"
"""The context's ``meta`` key set while the web API reads a query as a command's options
(:func:`interface.cli.query.parse_query`): a callback whose refusal names another command says
it as the API's path and keys, not a command line."""
"""``click.Context.meta`` key of the arguments the command was given (shared up the chain)."""


def typed_options(group: click.Command, args: Collection[str]) -> frozenset[str]:
    """The flags a refusal's head may be written as: :func:`command_options`, less those of keys
    the user gave only as ``--set KEY=…``, plus ``--set KEY`` for each such key
    (``--set offload_optimizer=2`` is refused as ``--set offload_optimizer:``, as typed, not as
    its flag ``--offload-optimizer:``; :func:`interface.flags.refusal`).

    Examples
    --------
    >>> opts = frozenset({"--offload-optimizer", "--set", "--tp"})
    >>> sorted(_without_set_keys(opts, ["--set", "offload_optimizer=2", "--tp", "2"]))
    ['--set', '--set offload_optimizer', '--tp']
    >>> sorted(_without_set_keys(opts, ["--set=offload_optimizer=2", "--offload-optimizer", "1"]))
    ['--offload-optimizer', '--set', '--set offload_optimizer', '--tp']

    A table's entry (``--set overlap.dp=0.5``) gives its table too (``--set overlap:``).
    """
    return _without_set_keys(command_options(group), list(args))


def _without_set_keys(options: frozenset[str], args: list[str]) -> frozenset[str]:
    keys: set[str] = set()
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--set" and i + 1 < len(args):
            keys.add(args[i + 1].partition("=")[0])
        elif arg.startswith("--set="):
            keys.add(arg[len("--set=") :].partition("=")[0])
    keys |= {k.partition(".")[0] for k in keys if "." in k}
    typed = {a.partition("=")[0] for a in args if a.startswith("--")}
    dropped = {flag_for(k) for k in keys} - typed
    return (options - dropped) | {f"--set {k}" for k in keys}


def command_options(group: click.Command) -> frozenset[str]:
    """Every option name of ``group``'s commands (``--gpus``, ``--no-flash``), the flags a
    refusal's head is written as (:func:`interface.flags.refusal`)."""
    names = {o for p in group.params for o in (*p.opts, *p.secondary_opts)}
    for cmd in getattr(group, "commands", {}).values():
        names |= command_options(cmd)
    return frozenset(names)


def click_line(err: click.ClickException) -> str:
    """click's refusal in the one convention: a bad value as ``--zero: 5 is not in the range
    0<=x<=3.`` (click writes ``Invalid value for '--zero': …``); any other as click says it."""
    if isinstance(err, click.BadParameter) and err.param is not None and err.param.opts:
        if isinstance(err, click.MissingParameter):  # its message is empty: click builds one
            return f"{err.param.opts[0]}: required by this command (none given)"
        return f"{err.param.opts[0]}: {err.message}"
    return err.format_message()


INTERRUPTED = 128 + signal.SIGINT
"""Exit code of a command stopped by Ctrl-C (SIGINT): 130, the shells' convention."""


def run_guarded(group: click.Group) -> None:
    """Run the click group as the console script: a PlannerError or a usage error becomes one
    line and exit code 2, and so does a file the system refuses (an OSError naming it, where no
    check before caught it); Ctrl-C one line and exit 130 (:data:`INTERRUPTED`); output that
    cannot be written (``> /dev/full``) one line on stderr and exit code 1; a reader that went
    away (``| head``) ends it as it ends ``cat``: no message, killed by SIGPIPE (:func:`_broken_pipe`)."""
    try:
        code = group.main(standalone_mode=False)
        sys.stdout.flush()  # here, not at exit: a closed pipe then ends as `cat` does
    except PlannerError as err:
        fail(refusal(str(err), command_options(group)))
    except click.exceptions.Abort as err:
        ctrl_c = isinstance(err.__context__, KeyboardInterrupt)
        fail("interrupted" if ctrl_c else "aborted", INTERRUPTED if ctrl_c else 1)
    except click.ClickException as err:
        fail(click_line(err), err.exit_code)
    except OSError as err:
        if err.filename is not None:  # a file the command was given or writes: named, exit 2
            fail(f"{shown_text(str(err.filename))}: {err.strerror or err}")
        if err.errno not in _WRITE_ERRORS:
            raise
        _drop_stdout()
        if err.errno == errno.EPIPE:
            _broken_pipe()
        click.echo(f"Error: the output could not be written: {err.strerror or err}", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


_WRITE_ERRORS = {errno.ENOSPC, errno.EPIPE, errno.EIO, errno.EDQUOT, errno.EFBIG}
"""What writing to an open stream without a file name (the output) can fail with: a full disk
or quota, a closed pipe, a device error. Files the commands write by name are checked before
the work (:func:`interface.outputs.output_path`) and their write errors named
(:func:`interface.outputs.writing`)."""


def _broken_pipe() -> None:
    """End as a Unix filter ends when its reader has gone (``trainplan … | head``): by SIGPIPE's
    default action, so the shell sees status 128 + 13 = 141 as it does of ``cat`` (POSIX
    ``write()``: EPIPE after SIGPIPE; Python ignores SIGPIPE at start-up, hence the error here).
    Where there is no SIGPIPE (Windows), exit 1 without a message."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGPIPE)
    sys.exit(1)


def _drop_stdout() -> None:
    """Point standard output at the null device, so the interpreter's last flush of what could
    not be written raises nothing more at exit."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


class _Number(click.ParamType):
    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (int, float, Fraction)):
            return Fraction(value)
        return parse_number(value, _flag(param))


class _Count(click.ParamType):
    name = "count"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return parse_count(value, _flag(param))


class _Whole(click.ParamType):
    name = "count"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return parse_count(value, _flag(param), minimum=0)


class _Positive(click.ParamType):
    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return parse_positive(value, _flag(param))


class ListOf(click.ParamType):
    """The click type of one value of a list option (:func:`list_option`): its items (separated
    by ``;``, :func:`model.units.list_items`; names of a fixed set by ``,`` too), each converted
    by :attr:`inner`; a tuple. :func:`list_option` flattens the option's values.

    Raises
    ------
    click.BadParameter
        An item :attr:`inner` refuses (click prints its one line, exit code 2).
    InputError
        An empty list or an empty item (``"64;"``, :func:`model.units.list_items`).
    """

    def __init__(self, inner: click.ParamType) -> None:
        self.inner = inner
        """The click type of each item (:data:`COUNT`, a ``click.Choice``…)."""
        self.name = inner.name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        if isinstance(self.inner, click.Choice) and isinstance(value, str):
            if value.strip() and not all(p.strip() for p in value.replace(";", ",").split(",")):
                raise InputError(f"{_flag(param)}: {shown_text(value)} has an empty item")
            value = value.replace(",", ";")  # names hold no comma: megatron,fsdp2 is two
        items = list_items(value, _flag(param))
        return tuple(self.inner.convert(item, param, ctx) for item in items)

    def get_metavar(self, *args: Any, **kwargs: Any) -> str | None:
        return self.inner.get_metavar(*args, **kwargs)


def _each_once(ctx: click.Context, param: click.Parameter, value: Any) -> tuple[Any, ...]:
    """A list option's values flattened, in order, each once (``--gpu H100-SXM --gpu
    H100-SXM`` searches one accelerator, not the same one twice)."""
    return tuple(dict.fromkeys(item for group in value or () for item in group))


def list_option(*decls: str, type: click.ParamType | None = None, **kw: Any) -> Any:  # noqa: A002
    """A click option that takes several values: repeated (``--tp 4 --tp 8``) or with ``;``
    between them (``--tp "4;8"``), the grammar of every list (:data:`model.units.LIST_HINT`);
    each value read by ``type`` (text when None), duplicates dropped."""
    inner = click.STRING if type is None else type
    return click.option(*decls, type=ListOf(inner), multiple=True, callback=_each_once, **kw)


class OutputFile(click.ParamType):
    """The click type of an option naming a file the command writes (:func:`output`), checked
    when the option is read, before any work, by :func:`interface.outputs.output_path`; the
    path as text.

    Raises
    ------
    InputError
        An empty path, a suffix not in :attr:`suffixes`, or a folder that is missing or may not
        be written (naming the option).
    """

    name = "path"

    def __init__(self, suffixes: tuple[str, ...] = ()) -> None:
        self.suffixes = suffixes
        """The file endings allowed (``(".csv",)``); any ending when empty."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:

        return str(output_path(value, _flag(param), self.suffixes))


def output(*suffixes: str) -> click.ParamType:
    """The click type of an option that writes a file ending in one of ``suffixes`` (any, when
    none): empty paths, missing or unwritable folders are refused as the option is read, by
    :func:`interface.outputs.output_path`."""
    return OutputFile(tuple(suffixes))


def _flag(param: click.Parameter | None) -> str:
    if param is None:
        return "value"
    opts = getattr(param, "opts", None) or [param.name or "value"]
    return str(opts[0])


NUMBER = _Number()
"""A number written 4e6, 4,000,000, 4e 6, 4e+6, 70B or 1.5T (exact Fraction)."""
COUNT = _Count()
"""A whole number >= 1, within its size limit (model.units.LIMITS), written the same ways."""
WHOLE = _Whole()
"""A whole number >= 0 (0 allowed: ``--mtp-layers 0`` drops a model's MTP modules), within its
limit."""
POSITIVE = _Positive()
"""A number above zero (a duration, a rate), within its limit if it has one."""
OUTPUT = output()
"""A file path the command writes, of any ending (see :func:`output`)."""


def echo_json(data: Any) -> None:
    """Print ``data`` as one JSON object (:func:`interface.commands.to_json`: Fractions become int
    when whole, else float)."""
    from trainplan.interface.commands import to_json

    click.echo(to_json(data))
