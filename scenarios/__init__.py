"""Scenario data files (models, examples, clusters), read through :mod:`importlib.resources`.

Data access only: this package returns the parsed TOML as dicts; building specs from them is the
caller's job (``scenarios.catalogue``). Files live at ``scenarios/<kind>/<name>.toml`` and are
package data, so they are found in an installed wheel as well as in a checkout.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from trainplan.model.errors import ScenarioError
from trainplan.model.units import closest_names, shown_text

__all__ = ["names", "load", "data"]


def _folder(kind: str) -> Traversable:
    folder = resources.files(__name__).joinpath(kind)
    if not kind or "/" in kind or "\\" in kind or kind.startswith(".") or not folder.is_dir():
        raise ScenarioError(f"unknown scenario kind {kind!r}")
    return folder


def names(kind: str = "models") -> list[str]:
    """Sorted names (file stems) of the ``scenarios/<kind>/*.toml`` files.

    Raises
    ------
    ScenarioError
        When ``kind`` is not a folder of this package.

    Examples
    --------
    >>> "llama3-8b" in names("models")
    True
    """
    return sorted(
        entry.name.removesuffix(".toml")
        for entry in _folder(kind).iterdir()
        if entry.is_file() and entry.name.endswith(".toml")
    )


def load(kind: str, name: str) -> dict[str, Any]:
    """The parsed ``scenarios/<kind>/<name>.toml``.

    Raises
    ------
    ScenarioError
        For an unknown name (with the closest known names) or a file that is not valid TOML.

    Examples
    --------
    >>> load("models", "llama3-8b")["architecture"]["num_layers"]
    32
    >>> try:
    ...     load("models", "llama3-8")
    ... except ScenarioError as err:
    ...     print(str(err).split(";")[0])
    unknown model 'llama3-8'
    """
    known = names(kind)
    if name not in known:
        singular = kind.removesuffix("s")
        raise ScenarioError(
            f"unknown {singular} {shown_text(name)}; {closest_names(name[:200], known)}"
        )
    entry = _folder(kind).joinpath(f"{name}.toml")
    try:
        return tomllib.loads(entry.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(f"scenarios/{kind}/{name}.toml: invalid TOML: {err}") from None


DATA_FILES = ("examples", "published", "rlhf_measured")
"""The package's top-level data files: ``examples.toml`` (the 20 worked examples, their
sources and the figures each must show) and ``published.toml`` (papers' tables: Megatron-LM 2021 Table 1,
Korthikanti et al. 2022 Tables 3 and 5, Llama 3 Table 4, the ZeRO paper's Table 1, …; each table
names its source in the file) and ``rlhf_measured.toml`` (published RLHF step times with the
configuration each ran, issue 12)."""


def data(name: str) -> dict[str, Any]:
    """The parsed ``scenarios/<name>.toml``, one of :data:`DATA_FILES`; read through
    :mod:`importlib.resources`, so an installed wheel finds it as a checkout does.

    Raises
    ------
    ScenarioError
        For a name not in :data:`DATA_FILES`.

    Examples
    --------
    >>> data("published")["megatron_table1"][0]["columns"][:3]
    ['params_b', 'heads', 'hidden']
    >>> len(data("examples")["example"])
    20
    """
    if name not in DATA_FILES:
        raise ScenarioError(f"unknown data file {name!r}; {closest_names(name, list(DATA_FILES))}")
    text = resources.files(__name__).joinpath(f"{name}.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)
