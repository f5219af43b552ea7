"""Hints for a flag a command does not take: another command's spelling of one of its
parameters (:func:`spelled_here`) or another command's flag (:func:`taken_elsewhere`), refused in
one line naming what to write, where click would say only "No such option" or guess at a near
spelling, and one of this command's flags typed with one dash or in capitals
(:func:`misspelt_here`); :class:`interface.cli.common.GuardedCommand` calls them before click
parses."""

from __future__ import annotations

from collections.abc import Collection, Iterator

import click

from trainplan.interface.flags import PARAMETER_FLAGS, derived_count
from trainplan.interface.framework_flags import framework_hint
from trainplan.model.errors import InputError

__all__ = ["misspelt_here", "spelled_here", "taken_elsewhere"]


def spelled_here(command: str, params: list[click.Parameter], args: list[str]) -> None:
    """Refuse a flag this command does not take that another command spells one of its
    parameters with (:data:`interface.flags.PARAMETER_FLAGS`: evaluate's ``--pp``, pipeline's
    ``--stages``), naming this command's spelling (a micro-batch count on a command that derives
    it from the batch, the rule it derives it by) — as the web API names a query key's
    (``'pp': no such parameter of pipeline; write it stages``); a training framework's spelling
    (:func:`interface.framework_flags.framework_hint`: ``--tensor-model-parallel-size``, write
    ``--tp``) likewise. Not on ``example``, which takes
    the other tabs' parameters through ``--set`` (:func:`taken_elsewhere` names that spelling).

    Raises
    ------
    InputError
        ``--pp: no such option of trainplan pipeline; write it --stages (-p): --stages 8``.
    """
    here = {o: p for p in params for o in getattr(p, "opts", ())}
    if command == "example" and "--set" in here:  # its tabs' parameters: --set, taken_elsewhere's
        return
    for flag, value in _unknown(args, here):
        framework = framework_hint(flag, value, here, command)
        if framework is not None:  # Megatron-LM's or torchtitan's spelling
            raise InputError(framework)
        spelt = next((fs for fs in PARAMETER_FLAGS.values() if flag in fs), ())
        other = next((f for f in spelt if f in here), None)
        if (
            flag in PARAMETER_FLAGS["num_microbatches"]
            and other is None
            and "--global-batch" in here
        ):
            raise InputError(derived_count(flag, command))
        if other is None:
            continue
        short = [o for o in here[other].opts if not o.startswith("--")]
        also = f" ({', '.join(short)})" if short else ""
        example = f": {other} {value}" if value and not value.startswith("-") else ""
        raise InputError(
            f"{flag}: no such option of trainplan {command}; write it {other}{also}{example}"
        )


def misspelt_here(command: str, params: list[click.Parameter], args: list[str]) -> None:
    """Refuse one of this command's long flags typed with one dash (``-tp 4``, which click reads
    as ``-t`` and says "No such option: -t") or in other case (``--TP 4``), naming the flag as
    written and the spelling to write.

    Raises
    ------
    InputError
        ``-tp: no such option of trainplan evaluate; write it --tp: --tp 4``.
    """
    here = {o for p in params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
    longs = {o.lower(): o for o in here if o.startswith("--")}
    for i, arg in enumerate(args):
        if arg == "--":
            return
        flag, eq, value = arg.partition("=")
        if flag in here or not flag.startswith("-") or not flag[1:].lstrip("-")[:1].isalpha():
            continue  # a flag of this command, a value, a negative number
        meant = longs.get("--" + flag.lstrip("-").lower())
        if meant is None or len(flag) == 2:  # -p: a short option, click's own refusal
            continue
        value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
        example = f": {meant} {value}" if value and not value.startswith("-") else ""
        raise InputError(
            f"{flag}: no such option of trainplan {command}; write it {meant}{example}"
        )


def taken_elsewhere(ctx: click.Context, params: list[click.Parameter], args: list[str]) -> None:
    """Refuse a flag this command does not take that other commands of the group take, naming
    them (click would say only "No such option", or suggest this command's nearest spellings:
    ``evaluate --prompts`` "Did you mean --params?"): ``rlhf-plan --policy-params 7e9``, the
    textbook accounting's size, ``trainplan rlhf``'s. On ``example``, which takes the other
    tabs' parameters through ``--set``, the ``--set`` spelling.

    Raises
    ------
    InputError
        ``--policy-params: no such option of trainplan rlhf-plan; it is an option of trainplan
        rlhf (trainplan rlhf-plan --help lists this command's)``.
    """
    root = ctx.find_root()
    group = root.command if isinstance(root.command, click.Group) else None
    if group is None or ctx is root:
        return
    command = ctx.info_name or ""
    here = {o for p in params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
    for flag, value in _unknown(args, here):
        takers = {
            name: p
            for name in group.list_commands(root)
            if name not in (command, "example") and (cmd := group.get_command(root, name))
            for p in cmd.params
            if flag in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))
        }
        if not takers:
            continue
        if command == "example" and "--set" in here:
            key = next(iter(takers.values())).name
            shown = value if value and not value.startswith("-") else "VALUE"
            raise InputError(
                f"{flag}: no such option of trainplan example; give the example's {key} as "
                f"--set {key}={shown}"
            )
        names = list(takers)
        which = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        raise InputError(
            f"{flag}: no such option of trainplan {command}; it is an option of trainplan "
            f"{which} (trainplan {command} --help lists this command's)"
        )


def _unknown(args: list[str], here: Collection[str]) -> Iterator[tuple[str, str]]:
    """Each ``--flag`` among ``args`` (up to ``--``) that is not one of ``here``, with the value
    written after it (``--pp=8`` or ``--pp 8``: "8"; the next word whatever it is, "" at the
    end): the words a hint repeats."""
    for i, arg in enumerate(args):
        if arg == "--":
            return
        flag, eq, value = arg.partition("=")
        if flag.startswith("--") and flag not in here:
            yield flag, value if eq else (args[i + 1] if i + 1 < len(args) else "")
