"""Shared CLI helpers: number options, JSON printing, turning PlannerError into exit code 2."""

from __future__ import annotations

import sys
from fractions import Fraction
from typing import Any

import click

from trainplan.interface.flags import with_flags
from trainplan.model.errors import PlannerError
from trainplan.model.units import parse_count, parse_number, parse_positive

__all__ = [
    "run_guarded",
    "GuardedGroup",
    "NUMBER",
    "COUNT",
    "WHOLE",
    "POSITIVE",
    "OUTPUT",
    "output",
    "echo_json",
    "fail",
]


def fail(message: str, code: int = 2) -> None:
    """Print ``Error: message`` on stderr and exit with ``code``."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


class GuardedGroup(click.Group):
    """A click group whose commands turn any :class:`PlannerError` — raised by a command or by an
    option's conversion (``NUMBER``, ``COUNT``, ``OUTPUT``) — into one line on stderr and exit
    code 2 (SPEC.md "Inputs and errors"). The rule lives here once, so it holds in the console
    script and under click's ``CliRunner`` alike; no command catches PlannerError itself."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PlannerError as err:
            fail(with_flags(str(err)))


def run_guarded(group: click.Group) -> None:
    """Run the click group; a PlannerError or a usage error becomes one line and exit code 2."""
    try:
        code = group.main(standalone_mode=False)
    except PlannerError as err:
        fail(with_flags(str(err)))
    except click.exceptions.Abort:
        fail("aborted", 1)
    except click.ClickException as err:
        fail(err.format_message(), err.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


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


class _Output(click.ParamType):
    """A file the command writes, checked when the option is read (before any work)."""

    name = "path"

    def __init__(self, suffixes: tuple[str, ...] = ()) -> None:
        self.suffixes = suffixes

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from trainplan.interface.inputs import output_path

        return str(output_path(value, _flag(param), self.suffixes))


def output(*suffixes: str) -> click.ParamType:
    """The click type of an option that writes a file ending in one of ``suffixes`` (any, when
    none): empty paths, missing or unwritable folders are refused as the option is read, by
    :func:`interface.inputs.output_path`."""
    return _Output(tuple(suffixes))


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
