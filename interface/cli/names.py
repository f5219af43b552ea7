"""What the web app needs to know of the commands' options that only click can tell: the other
names a hand-written link may give an option, and click's marker for "no default".

The page (:mod:`interface.web.links`) reads a link's ``zero_stage`` as ``--zero`` and ``p`` as
``--stages``; the API's description (:mod:`interface.web.app`) must not offer click's
``Sentinel.UNSET`` (click ≥ 8.2 keeps it as the default of an option without one) as a value.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import click
import click.core

from trainplan.interface.cli import cli, register_commands
from trainplan.interface.cli.query import moved_params

__all__ = ["OptionNames", "option_names", "no_default_texts"]


@dataclass(frozen=True, slots=True)
class OptionNames:
    """One option's names."""

    long: str
    """The long name without dashes: the query parameter (``micro-batch``)."""
    param: str
    """The command's parameter name (``micro_batch_size``), as scenario files and the examples
    name it."""
    short: tuple[str, ...]
    """One-letter names without the dash (``p`` for ``--stages``)."""


def option_names(command: str) -> list[OptionNames]:
    """The names of every option of ``command`` that has a long name (``--json`` left out), and
    of the flags moved to ``--set`` (their query names, :func:`interface.cli.query.moved_params`).

    Raises
    ------
    KeyError
        No such command.
    """
    register_commands()
    out = []
    for p in cli.commands[command].params:
        longs = [o for o in getattr(p, "opts", ()) if o.startswith("--")]
        if not isinstance(p, click.Option) or not longs or p.name in (None, "as_json"):
            continue
        short = tuple(o[1:] for o in p.opts if len(o) == 2 and o[0] == "-")
        out.append(OptionNames(longs[0][2:], p.name, short))

    return out + [OptionNames(query, key, ()) for query, key in moved_params(command).items()]


def no_default_texts() -> frozenset[str]:
    """The text of click's "no value" sentinels (``Sentinel.UNSET``; none before click 8.2)."""
    unset = getattr(click.core, "UNSET", None)
    if not isinstance(unset, enum.Enum):
        return frozenset()
    return frozenset(str(member) for member in type(unset))
