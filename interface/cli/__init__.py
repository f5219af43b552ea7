"""The ``trainplan`` command line: a click group whose commands parse, call the library, print.

Every command has ``--json``; any :class:`model.errors.PlannerError` becomes one line on stderr and
exit code 2, never a traceback (:class:`~interface.cli.common.GuardedGroup`). Commands live in
sibling modules and are registered here.
"""

from __future__ import annotations

import difflib
import importlib

import click

from trainplan.interface.cli.clock import begin_command, console_command
from trainplan.interface.cli.common import GuardedGroup, run_guarded

__all__ = ["main", "cli", "register_commands"]


COMMAND_MODULES: dict[str, str] = {
    "evaluate": "planner",
    "gpus": "planner",
    "models": "planner",
    "search": "search",
    "frontier": "frontier",
    "example": "examples",
    "pipeline": "tabs",
    "mfu": "tabs",
    "ckpt": "tabs",
    "rlhf": "rlhf",
    "rlhf-plan": "rlhf",
    "calibrate": "calibrate",
    "serve": "serve",
    "sweep": "sweep",
    "sweep-plot": "sweep",
}
"""Which sibling module defines each command: a command's module is imported when the command is
looked up (click's lazy-loading pattern, "Extending Click: Lazily Loading Subcommands"), so
``trainplan evaluate`` does not import the RLHF or search modules. ``--help`` imports them all."""


_PLANNER = "memory per GPU, traffic, bubble, step time and MFU of a layout"
TOPIC_COMMANDS = {
    "memory": ("evaluate", _PLANNER),
    "plan": ("evaluate", _PLANNER),
    "estimate": ("evaluate", _PLANNER),
    "optimize": ("search", "the best layout"),
    "bubble": ("pipeline", "pipeline bubble and timeline"),
    "checkpoint": ("ckpt", "activation checkpointing walked through"),
}
"""Words a new user types for a command by what it reports (``trainplan memory``), each with
the command meant, suggested where no command is close in spelling."""


class LazyGroup(GuardedGroup):
    """:class:`GuardedGroup` whose commands are imported from :data:`COMMAND_MODULES` on first
    lookup."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMAND_MODULES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            importlib.import_module(f"trainplan.interface.cli.{COMMAND_MODULES[cmd_name]}")
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """click's lookup, with "Did you mean" drawn from every command — loaded or not (click
        suggests among ``self.commands``, which holds only the loaded ones)."""
        name = click.utils.make_str(args[0]) if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            close = difflib.get_close_matches(name, self.list_commands(ctx))
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            if not close and name.lower() in TOPIC_COMMANDS:
                command, what = TOPIC_COMMANDS[name.lower()]
                hint = f" Did you mean {command!r} ({what})?"
            raise click.UsageError(f"No such command {name!r}.{hint}", ctx)
        return super().resolve_command(ctx, args)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="trainplan")
def cli() -> None:
    """trainplan: memory, traffic, bubble and MFU of a training layout, and the best layout."""
    begin_command()  # --time-limit counts from here (interface.cli.clock)


def register_commands() -> None:
    """Import every command module of :data:`COMMAND_MODULES` (each attaches its commands to
    :func:`cli`), for code that reads ``cli.commands`` directly instead of asking the group
    (:meth:`LazyGroup.get_command`). The same lazy loading as a lookup, for all commands at
    once; importing a module a second time does nothing."""
    for module in sorted(set(COMMAND_MODULES.values())):
        importlib.import_module(f"trainplan.interface.cli.{module}")


def main() -> None:
    """Console-script entry point (commands load on lookup, :class:`LazyGroup`); its first
    command's time limit counts from the process's start (:func:`interface.cli.clock.console_command`)."""
    console_command()
    run_guarded(cli)
