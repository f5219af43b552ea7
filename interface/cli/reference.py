"""Reference pages generated from the code: every command and option of the command line (from
click's command objects, as ``--help`` prints them) and every key of the ``--json`` objects (from
real runs of the builders, with each key's type, an example value and what it means).

The documentation site (``mkdocs.yml``, ``docs/hooks.py``) puts :func:`cli_markdown` into
``docs/reference/cli.md`` and :func:`json_markdown` into ``docs/reference/json.md`` when it is
built, so neither page can drift from the code; ``tests/test_docs.py`` holds every command and
option to the first and every key of the evaluate object to :data:`KEY_DOCS`.

    python -m trainplan.interface.cli.reference cli     # print the CLI reference (Markdown)
    python -m trainplan.interface.cli.reference json    # print the JSON reference (Markdown)
"""

from __future__ import annotations

import inspect
import json
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import click

from trainplan.interface.cli import cli, register_commands
from trainplan.interface.cli.json_key_docs import KEY_DOCS
from trainplan.interface.render.markdown import cell_text
from trainplan.interface.scenario import VALUE_KINDS
from trainplan.interface.scenario_keys import EVALUATE_KEYS, KEY_HELP, SEARCH_KEYS, table_of

__all__ = [
    "cli_markdown",
    "scenario_key_rows",
    "scenario_keys_text",
    "json_markdown",
    "option_names",
    "json_keys",
    "JSON_RUNS",
    "KEY_DOCS",
    "key_doc",
    "run_json",
]


def _commands() -> list[tuple[str, click.Command]]:

    register_commands()
    ctx = click.Context(cli, info_name="trainplan")
    out = []
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None, name
        out.append((name, command))
    return out


def option_names() -> dict[str, list[str]]:
    """Every command's options, each by all its spellings (``--flash/--no-flash`` as both)."""
    return {
        name: [
            opt
            for p in command.params
            for opt in (*p.opts, *p.secondary_opts)
            if opt.startswith("-")
        ]
        for name, command in _commands()
    }


def _help_paragraphs(command: click.Command) -> str:
    text = inspect.cleandoc(command.help or "").replace("\b\n", "")
    return "\n\n".join(cell_text(" ".join(p.split())) for p in text.split("\n\n") if p.strip())


def cli_markdown() -> str:
    """The command-line reference: per command its help, its usage line and a table of every
    option as ``--help`` shows it (spellings, value type, help, default)."""
    lines = [
        "Every command of `trainplan`, with every option, as `trainplan COMMAND --help` prints it "
        "(generated from the command line's own definitions when this site is built).",
        "",
    ]
    for name, command in _commands():
        ctx = click.Context(command, info_name=f"trainplan {name}", parent=click.Context(cli))
        usage = " ".join(command.collect_usage_pieces(ctx))
        lines += [f"## trainplan {name}", "", _help_paragraphs(command), ""]
        lines += ["```text", f"trainplan {name} {usage}", "```", ""]
        for title, params in _sections(command):
            lines += [f"**{title}**", ""] if title else []
            lines += ["| option | what it does |", "| --- | --- |"]
            for param in params:
                record = param.get_help_record(ctx)
                if record is None:
                    continue
                spelling, help_text = record
                if isinstance(param, click.Argument):
                    required = " (required)." if param.required else "."
                    help_text = "The command's argument" + required
                lines.append(f"| `{spelling}` | {cell_text(' '.join(help_text.split()))} |")
            lines.append("")
    return "\n".join([*lines, *scenario_keys_markdown()])


def _kind_text(kind: Any) -> str:
    """A scenario key's kind (:data:`interface.scenario.VALUE_KINDS`) in words."""
    if isinstance(kind, list):
        return f"{_kind_text(kind[0])}, or a list"
    if isinstance(kind, tuple):
        return " | ".join(str(x) for x in kind)
    return {"flag": "true | false", "whole": "count (0 allowed)"}.get(kind, kind)


def scenario_key_rows() -> list[dict[str, str]]:
    """Every ``--set`` key (every scenario-file key), sorted: its ``key``, its ``table``
    (``[cluster]``…, or ``top``), the ``commands`` that take it, its ``kind`` in words, its
    ``flag`` where one gives it too and its ``help`` — its flag's help (search's, else
    evaluate's), else :data:`interface.scenario_keys.KEY_HELP`."""
    helps: dict[str, str] = {}
    flags: dict[str, str] = {}
    for name, command in _commands():  # evaluate's, then search's (the scenario's own) over it
        if name in ("search", "evaluate"):
            for p in command.params:
                if isinstance(p, click.Option) and p.name and p.help and p.name != "set":
                    helps[p.name], flags[p.name] = p.help, p.opts[0]
    rows = []
    for key in sorted(SEARCH_KEYS):
        name = key if key in helps else _EVALUATE_NAMES.get(key, key)
        rows.append(
            {
                "key": key,
                "table": f"[{table_of(key)}]" if table_of(key) else "top",
                "commands": "all" if key in EVALUATE_KEYS else "search, frontier",
                "kind": _kind_text(VALUE_KINDS[key]),
                "flag": flags.get(name, ""),
                "help": " ".join((KEY_HELP.get(key) or helps.get(name, "")).split()),
            }
        )
    return rows


def scenario_keys_text(command: str, width: int = 100) -> str:
    """The keys ``trainplan COMMAND --set help`` lists (evaluate: the ``[cluster]`` table's;
    search and frontier: every key), each with its kind, its flag and its help, at the
    terminal: what the CLI reference's "Scenario keys" table says (:func:`scenario_key_rows`)."""
    rows = [r for r in scenario_key_rows() if command != "evaluate" or r["commands"] == "all"]
    out = [
        f"Scenario keys of trainplan {command}: --set KEY=VALUE (repeatable), read as the "
        "scenario file's line KEY = VALUE; a dotted key sets one entry of a table "
        "(--set overlap.dp=0.5).",
    ]
    for r in rows:
        flag = f"; also {r['flag']}" if r["flag"] else ""
        table = "" if command == "evaluate" else f" {r['table']}"
        out.append(f"  {r['key']}{table} ({r['kind']}{flag})")
        out += textwrap.wrap(r["help"], width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(out)


def scenario_keys_markdown() -> list[str]:
    """The ``--set`` keys as the CLI reference's table (:func:`scenario_key_rows`)."""
    lines = [
        "## Scenario keys (--set)",
        "",
        "Every key of a scenario file, each also given on the command line by `--set KEY=VALUE` "
        "(repeatable): search and frontier take them all, evaluate the `[cluster]` table's. "
        "`KEY=VALUE` is read as the file's line `KEY = VALUE` and checked as the file's key is, "
        "so `--set memory_reserve_gib=4` and a file's `memory_reserve_gib = 4` are one setting; "
        "a dotted key sets one entry of a table (`--set overlap.dp=0.5`). A key that a flag also "
        "gives is refused when both are given. The rarely set knobs have no flag: `--set` or the "
        "file gives them.",
        "",
        "| key | table | value | flag | what it does |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in scenario_key_rows():
        flag_text = f"`{r['flag']}`" if r["flag"] else ""
        where = f"`{r['table']}`" if r["table"] != "top" else "top"
        where += "" if r["commands"] == "all" else " (search, frontier)"
        lines.append(
            f"| `{r['key']}` | {where} | {cell_text(r['kind'])} | {flag_text} | "
            f"{cell_text(r['help'])} |"
        )
    return [*lines, ""]


_EVALUATE_NAMES = {"zero": "zero_stage", "micro_batch": "micro_batch_size", "gpus": "num_gpus"}
"""Scenario keys whose evaluate parameter has another name."""


def _sections(command: click.Command) -> list[tuple[str | None, list[click.Parameter]]]:
    """A command's parameters as ``--help`` groups them: (title, parameters) per option group
    (:func:`interface.cli.options.option_groups`) in order, the arguments first and the options
    of no group last ("Other options"); one untitled section for a command without groups."""
    groups = getattr(command, "option_groups", None) or []
    if not groups:
        return [(None, list(command.params))]
    arguments: list[click.Parameter] = [p for p in command.params if isinstance(p, click.Argument)]
    rest: list[click.Parameter] = [
        p
        for p in command.params
        if isinstance(p, click.Option) and getattr(p, "group", None) is None
    ]
    out: list[tuple[str | None, list[click.Parameter]]] = [("Arguments", arguments)] * bool(
        arguments
    )
    out += [(g.title, [*g.options]) for g in groups]
    return out + [("Other options", rest)] * bool(rest)


# ---------------------------------------------------------------------------------------------
# JSON

JSON_RUNS: dict[str, list[str]] = {
    "evaluate": [
        "evaluate", "--model", "llama3-70b", "--gpu", "H100-SXM", "--dp", "2", "--tp", "4",
        "--pp", "8", "--per-stage",
    ],
    "search": ["search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM"],
    "search --top": ["search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM", "--top", "2"],
    "search --per-stage": [
        "search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM", "--per-stage",
        "--per-stage-shapes", "2",
    ],
    "frontier": ["frontier", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM"],
    "pipeline": ["pipeline", "--stages", "4", "--microbatches", "8"],
    "mfu": ["mfu", "--params", "70e9", "--tokens", "4e6", "--step-seconds", "7", "--gpu", "H100-SXM", "--chips", "512"],
    "ckpt": ["ckpt", "--layers", "9", "--every", "3"],
    "rlhf": ["rlhf", "--algorithm", "grpo", "--policy-params", "70e9", "--reward", "rule"],
    "rlhf --model": [
        "rlhf", "--algorithm", "grpo", "--model", "qwen2.5-7b", "--reward", "rule", "--gpus", "64",
    ],
    "gpus": ["gpus"],
    "models": ["models"],
}  # fmt: skip
"""The runs whose ``--json`` objects the JSON reference lists: small, fast cases of each kind."""


def key_doc(path: str) -> str | None:
    """What an evaluate key means (:data:`KEY_DOCS`; each ``defaults_used`` entry is an input
    that took its default), or None when the key is not documented."""
    if path.startswith("defaults_used."):
        return f"The default {path.split('.', 1)[1]} took (not given)."
    return KEY_DOCS.get(path)


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def json_keys(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every key path of a JSON object with its first value: ``a.b``, ``a[].c`` for the objects
    of a list (each key once, as the first element that has it)."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            yield path, value
            yield from json_keys(value, path)
    elif isinstance(obj, list):
        seen: set[str] = set()
        for item in obj:
            if isinstance(item, dict):
                for path, value in json_keys(item, f"{prefix}[]"):
                    if path not in seen:
                        seen.add(path)
                        yield path, value


def run_json(args: list[str]) -> Any:
    """The ``--json`` object of one run of the command line (in this process)."""
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    if result.exit_code not in (0, 1):
        raise RuntimeError(f"trainplan {' '.join(args)} --json: {result.output}")
    return json.loads(result.stdout)


def _example(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return ""
    text = json.dumps(value, ensure_ascii=False)
    return cell_text(text if len(text) <= 40 else text[:39] + "…")


def json_markdown() -> str:
    """The JSON reference: for each kind of run, every key with its type, an example value from
    a real run (the command is shown) and, for the evaluate object, what it means."""
    lines = [
        "Every `--json` object is one JSON object: bytes as exact integers (floats only where a "
        "figure is fractional), times in seconds, rates and utilisations as 0–1 fractions. The "
        "keys below come from real runs of the commands shown, when this site is built; "
        "`a[].b` is key `b` of the objects in list `a`. Every evaluate object has the same keys: a "
        "setting that does not apply to the layout's framework, recompute or precision (fsdp2's "
        "`distributed_optimizer`, `recompute_modules` under recompute none) is null, never a "
        "value the run did not read.",
        "",
    ]
    evaluate_keys: set[str] = set()
    for title, args in JSON_RUNS.items():
        obj = run_json(args)
        keys = list(json_keys(obj))
        if title == "evaluate":
            evaluate_keys = {path for path, _ in keys}
        elif title.startswith(("search", "frontier")):
            keys = [(p, v) for p, v in keys if p.split(".")[0] not in evaluate_keys or p in ()]
        lines += [f"## {title}", "", f"`trainplan {' '.join(args)} --json`", ""]
        if title.startswith(("search", "frontier")):
            lines += ["Besides the keys of the evaluate object (its answer's plan):", ""]
        if title == "evaluate":
            lines += ["| key | type | example | meaning |", "| --- | --- | --- | --- |"]
        else:
            lines += ["| key | type | example |", "| --- | --- | --- |"]
        for path, value in keys:
            row = f"| `{path}` | {_type(value)} | {_example(value)} |"
            if title == "evaluate":
                row += f" {cell_text(key_doc(path) or '')} |"
            lines.append(row)
        lines.append("")
        if title != "evaluate":  # the keys of this run that the table of meanings holds
            said = [f"- `{p}`: {key_doc(p)}" for p, _ in keys if key_doc(p)]
            lines += [*said, ""] if said else []
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """``python -m trainplan.interface.cli.reference cli|json``: print a reference page."""
    which = (argv if argv is not None else sys.argv[1:]) or ["cli"]
    print(cli_markdown() if which[0] == "cli" else json_markdown())


if __name__ == "__main__":
    main()
