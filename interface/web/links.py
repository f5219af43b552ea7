"""The page's ways in: the named examples as page queries, and the names a hand-written link may
use for each page's parameters.

A page's parameters are its command's options without the dashes (``seq-len``). A link may also
name a parameter as the command's own parameter does (``zero_stage`` for ``--zero``,
``micro_batch_size`` for ``--micro-batch``, the names of ``scenarios/examples.toml``), or by its
one-letter option (``p`` and ``m`` for the pipeline's ``--stages`` and ``--microbatches``), or by
a hash link's name (:data:`ORIGINAL_NAMES`: ``pp`` for the stages, ``gpus`` and ``step``
for the MFU tab's chips and seconds per step): each page reads those as its own (:func:`aliases`).
A name that is none of these is refused by the page, naming it and the page's names
(:func:`names`). ``/api/examples`` answers every example with the
page that shows it and the query that opens it (:func:`example_query`), numbers written as the
examples write them (``70e9``).
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache
from typing import Any

from fastapi import APIRouter, Request, Response

from trainplan.interface.cli.names import option_names
from trainplan.interface.examples import example_name, example_params, examples
from trainplan.interface.scenario_file import CLUSTER_KEYS
from trainplan.interface.tabs import fmt_number
from trainplan.interface.web.api import API_ONLY, json_response, pairs
from trainplan.model.errors import InputError

__all__ = [
    "router",
    "PAGE_COMMANDS",
    "ORIGINAL_NAMES",
    "aliases",
    "names",
    "example_query",
    "examples_json",
]

router = APIRouter(prefix="/api", tags=["API: the CLI's --json objects"])

PAGE_COMMANDS = {
    "planner": "evaluate",
    "pipeline": "pipeline",
    "mfu": "mfu",
    "ckpt": "ckpt",
    "rlhf": "rlhf",
    "search": "search",
    "frontier": "frontier",
}
"""Each page and the command whose options are its parameters."""
_TAB_PAGE = {"planner": "planner", "pipeline": "pipeline", "mfu": "mfu", "ckpt": "ckpt",
             "rlhf": "rlhf"}  # fmt: skip
"""An example's ``tab`` (scenarios/examples.toml) and the page that shows it."""
ORIGINAL_NAMES = {
    "pipeline": {"pp": "stages"},
    "mfu": {"gpus": "chips", "step": "step-seconds"},
}
"""Hash-link names (``/#pipeline?pp=4``; SEED.md's links) that are none of the command's names →
the page's name: the pipeline tab's ``pp`` (the stages, as the Planner's ``pp``), the MFU tab's ``gpus`` (the
chips) and ``step`` (the measured step's seconds). The links' other names (``m``, ``schedule``,
``params``, ``tokens``, ``algorithm``, ``model``, ``gpus`` on the RLHF tab, ``dp tp pp cp ep``
on the Planner, ``n`` and ``k`` on checkpointing) are the commands' own names or one-letter
options already."""


@cache
def names(page: str) -> tuple[str, ...]:
    """``page``'s own parameter names, sorted: its command's options without dashes and the
    API's parameters no option gives (:data:`interface.web.api.API_ONLY`: the planner's
    uploaded ``config``, which its link carries so that a reload opens the same model)."""
    command = PAGE_COMMANDS[page]
    own = {o.long for o in option_names(command)} | set(API_ONLY.get(command, ()))
    return tuple(sorted(own))


@cache
def aliases(page: str) -> dict[str, str]:
    """Other names of ``page``'s parameters → the page's name (the option without dashes): the
    command's parameter name (``zero_stage`` → ``zero``), its one-letter options (``p`` →
    ``stages``) and the hash links' names (:data:`ORIGINAL_NAMES`, ``gpus`` → ``chips`` on
    the MFU tab). Names equal to the page's own are left out."""
    out: dict[str, str] = {}
    for o in option_names(PAGE_COMMANDS[page]):
        names = [o.param, o.param.replace("_", "-"), *o.short]
        out.update({alias: o.long for alias in names if alias != o.long})
    return out | ORIGINAL_NAMES.get(page, {})


def _text(value: Any) -> str:
    """An example's value as the page's field holds it: ``true``/``false``, whole numbers as
    integers, other numbers compactly (``70e9``, ``0.04``), text as it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return fmt_number(Fraction(value))
    return str(value)


@cache
def example_query(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(page, query pairs in the page's names) of example ``name``: the parameters ``trainplan
    example NAME`` runs with (:func:`interface.examples.example_params`).

    Raises
    ------
    ScenarioError
        An unknown example, with the closest names.
    InputError
        An example parameter that no option of its page takes (a broken examples file).
    """
    tab, params = example_params(name)
    page = _TAB_PAGE[tab]
    names = {o.param: o.long for o in option_names(PAGE_COMMANDS[page])}
    out = []
    for key, value in params.items():
        text = ",".join(map(_text, value)) if isinstance(value, list | tuple) else _text(value)
        if key in names:
            out.append((names[key], text))
        elif "set" in names and key in CLUSTER_KEYS:  # a scenario key no option gives: --set's
            out.append(("set", f"{key}={text}"))
        else:
            raise InputError(f"example {name}: {key!r} is no parameter of the {page} page")
    return page, tuple(out)


def examples_json() -> list[dict[str, Any]]:
    """Every example as ``trainplan example --list --json`` lists it (``name``, ``tab``,
    ``says``), with its ``source``, the ``page`` that shows it and the ``query`` pairs that open
    it there."""
    out = []
    for name, ex in examples().items():
        page, query = example_query(name)
        out.append(
            {
                "name": name,
                "tab": ex["tab"],
                "says": ex["says"],
                "source": ex.get("source", ""),
                "page": page,
                "query": [list(pair) for pair in query],
            }
        )
    return out


@router.get("/examples")
def examples_endpoint(request: Request) -> Response:
    """The named examples, `trainplan example --list --json`, each with its `source`, the `page`
    that shows it and the `query` (name, value pairs) that opens it there; and `aliases`: per
    page, the other names a link may give its parameters (name → the page's name); and `names`:
    per page, its own parameter names. With `example=NAME`: also `example`, the example's name
    that NAME is in any case or separator (:func:`interface.examples.example_name`; an unknown
    name refused as the command line refuses it), for a link's `example=`."""
    given = pairs(request)
    if [k for k, _ in given] not in ([], ["example"]):
        raise InputError("examples: takes no parameters but example (a name to read)")
    out = {
        "examples": examples_json(),
        "aliases": {page: aliases(page) for page in PAGE_COMMANDS},
        "names": {page: list(names(page)) for page in PAGE_COMMANDS},
    }
    if given:
        out["example"] = example_name(given[0][1])
    return json_response(out)
