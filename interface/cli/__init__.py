"""The ``trainplan`` command line: a click group whose commands parse, call the library, print.

Every command has ``--json``; any :class:`model.errors.PlannerError` becomes one line on stderr and
exit code 2, never a traceback (:class:`~interface.cli.common.GuardedGroup`). Commands live in
sibling modules and are registered here.
"""

from __future__ import annotations

import click

from trainplan.interface.cli.common import GuardedGroup, run_guarded

__all__ = ["main", "cli"]


@click.group(
    cls=GuardedGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="trainplan")
def cli() -> None:
    """trainplan: memory, traffic, bubble and MFU of a training layout, and the best layout."""


def _register() -> None:
    from trainplan.interface.cli import (  # noqa: F401  (commands attach to `cli`)
        calibrate,
        examples,
        planner,
        rlhf,
        search,
        serve,
        tabs,
    )


def main() -> None:
    """Console-script entry point."""
    _register()
    run_guarded(cli)
