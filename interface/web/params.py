"""A request's query as a command's options (:mod:`interface.cli.query`), the few inputs only the
web has, and the OpenAPI description of both.

The API takes every option of the command of the same name except those that name files on the
server (``--scenario``, ``--csv``, ``--png``…), shape terminal output (``--width``, ``--play``) or
choose JSON (``--json``); a catalogue model is a name, and a ``config.json`` comes as its text
(``config=``), never as a path the server would read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainplan.interface.cli.query import QueryParam, parse_query, query_params
from trainplan.interface.render.markdown import cell_text
from trainplan.model.errors import InputError
from trainplan.topology.accelerators import is_part_file

__all__ = ["parse", "openapi_parameters", "TERMINAL_ONLY", "API_COMMANDS", "api_markdown"]

TERMINAL_ONLY = {
    "width": "it sets the text timeline's columns; the page draws the chart",
    "play": "it animates the terminal; the page has its own play button",
    "delay": "it sets the terminal's and the GIF's frame time; the page's speed is its own",
    "file": "it names a file on the server (gpus --file PATH.toml); the web app reads none: "
    "/api/evaluate takes the part's keys as a JSON object in accelerator=",
}
"""Options the API refuses, with these reasons: the terminal's output, and ``gpus --file``, a
path the server would read (the options that write files are refused by their type:
:func:`interface.cli.query.parse_query`)."""


WEB_HELP = {
    "model": "Catalogue name (/api/models lists them). The web app reads no files on the server: "
    "a config.json path is refused; /api/evaluate takes the config.json's text as config=.",
    "gpu": "Catalogue name (/api/gpus lists them). The web app reads no files on the server: a "
    "PATH.toml is refused; /api/evaluate takes a part the table lacks as accelerator=, a JSON "
    "object with the keys of an accelerator file.",
}
"""Help of the query keys whose command-line help names what the API refuses (a file path)."""


def web_help(q: QueryParam) -> str:
    """The help of query key ``q`` as the API's user reads it (:data:`WEB_HELP`, else its
    option's)."""
    return WEB_HELP.get(q.name, q.help)


def _refuse_paths(pairs: list[tuple[str, str]]) -> None:
    for key, value in pairs:
        text = value.strip()
        if key == "model" and ("/" in text or "\\" in text or text.endswith(".json")):
            raise InputError(
                f"--model: {value!r} does not apply here: the web app reads no files on the "
                "server; send the config.json's text as config= (the planner's upload)"
            )
        if key == "gpu" and is_part_file(text):
            raise InputError(
                f"--gpu: {value!r} does not apply here: the web app reads no files on the "
                "server; send the part's keys as a JSON object in accelerator= (/api/evaluate)"
            )


def parse(
    name: str, pairs: Iterable[tuple[str, str]], web_only: Iterable[str] = ()
) -> tuple[dict[str, Any], dict[str, str]]:
    """(the command's parameters as its callback gets them, the web-only values by name) from the
    query ``pairs``; ``web_only`` names the parameters the web adds (``config``, ``step``…).

    Raises
    ------
    PlannerError
        What ``trainplan NAME`` refuses, with its line (an option of one value repeated with
        different values among them); an option that does not apply here; a web-only parameter
        repeated with different values.
    """
    extra = set(web_only)
    pairs = list(pairs)
    _refuse_paths(pairs)
    own: dict[str, str] = {}
    for key, value in pairs:
        if key in extra and own.setdefault(key, value) != value:
            raise InputError(
                f"{key}: given twice with different values; it takes one value, so give it once"
            )
    rest = [(k, v) for k, v in pairs if k not in extra]
    return parse_query(name, rest, TERMINAL_ONLY), own


def openapi_parameters(name: str, extra: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """OpenAPI query parameters of command ``name``'s options (their help text, choices and
    repetition), plus ``extra`` web-only parameters {name: description}."""
    out: list[dict[str, Any]] = []
    for q in query_params(name, TERMINAL_ONLY):
        schema: dict[str, Any] = {"type": "boolean"} if q.boolean else {"type": "string"}
        if q.choices:
            schema["enum"] = list(q.choices)
        if q.multiple:
            schema = {"type": "array", "items": schema}
        elif q.default not in (None, False, ()):
            schema["default"] = str(q.default)
        out.append(
            {
                "name": q.name,
                "in": "query",
                "required": q.required,
                "description": web_help(q) or f"the --{q.name} option of trainplan {name}",
                "schema": schema,
                **({"style": "form", "explode": True} if q.multiple else {}),
            }
        )
    for key, text in (extra or {}).items():
        out.append(
            {
                "name": key,
                "in": "query",
                "required": False,
                "description": text,
                "schema": {"type": "string"},
            }
        )
    return out


API_COMMANDS = ("evaluate", "search", "frontier", "pipeline", "mfu", "ckpt", "rlhf", "rlhf-plan")
"""The commands the JSON API answers as ``/api/NAME`` (docs/guides/web.md "The API")."""


def api_markdown() -> str:
    """The query keys of each ``/api/NAME`` as Markdown tables (``docs/reference/api.md``,
    generated when the site is built): each key, whether it repeats, its option's help."""
    out: list[str] = []
    for name in API_COMMANDS:
        out += [f"## /api/{name}", "", "| key | repeats | what it does |", "| --- | --- | --- |"]
        for q in query_params(name, TERMINAL_ONLY):
            kind = "true or false" if q.boolean else ("yes" if q.multiple else "")
            out.append(f"| `{q.name}` | {kind} | {cell_text(web_help(q))} |")
        out.append("")
    return "\n".join(out)
