"""The model catalogue: ``scenarios/models/*.toml`` read into :class:`CatalogueEntry` values.

Each file holds a model's architecture with its published source, the published training setup
(used as defaults), optionally the published parallel layout, and published facts for display
and tests. File format (keys checked strictly; unknown keys are errors)::

    name = "llama3-405b"                 # = the file stem
    source = "paper, table; released config.json"
    [architecture]                       # Architecture field names; [architecture.moe], .mla
    [training]                           # seq_len, global_batch_size, source
    [layout]                             # optional: dp tp pp cp ep zero_stage recompute
                                         #   micro_batch_size schedule virtual_stages gpu
                                         #   num_gpus, source
    [published]                          # free-form facts (params_total = 405e9, ...)
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainplan import scenarios
from trainplan.model.errors import ScenarioError
from trainplan.model.hf_config import architecture_from_dict
from trainplan.model.layout import SEARCHED_FIELDS
from trainplan.model.model_spec import ModelSpec
from trainplan.model.units import closest_names, shown_text

__all__ = [
    "CatalogueEntry",
    "get_model",
    "config_path",
    "model_names",
    "entry_from_dict",
    "check_keys",
    "catalogue_name",
    "known_spelling",
    "spelling_key",
    "LAYOUT_KEYS",
]

_TOP_KEYS = ("name", "source", "architecture", "training", "layout", "published")
_TRAINING_KEYS = ("seq_len", "global_batch_size", "source")
LAYOUT_KEYS = (*SEARCHED_FIELDS, "gpu", "num_gpus")
"""Keys a ``[layout]`` table may hold (besides ``source``)."""
_LAYOUT_TEXT = ("recompute", "schedule", "gpu")


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogueEntry:
    """One catalogue model with its published training setup and layout."""

    model: ModelSpec
    """The model (``model.extra`` holds the ``published`` facts)."""
    training: dict[str, int] = field(default_factory=dict)
    """Defaults ``seq_len`` (s, tokens) and ``global_batch_size`` (B, sequences); empty for a
    Hugging Face config."""
    layout: dict[str, int | str] = field(default_factory=dict)
    """The published layout (degrees, ``zero_stage``, ``recompute``, ``gpu``, ``num_gpus``…);
    empty when none is published."""
    published: dict[str, Any] = field(default_factory=dict)
    """Published facts for display and tests; never used in formulas."""
    training_source: str = ""
    """Where the training defaults come from."""
    layout_source: str = ""
    """Where the published layout comes from."""


def model_names() -> list[str]:
    """Sorted catalogue names (the stems of ``scenarios/models/*.toml``).

    Examples
    --------
    >>> "deepseek-v3" in model_names()
    True
    """
    return scenarios.names("models")


def check_keys(table: Any, allowed: tuple[str, ...], where: str) -> dict[str, Any]:
    """``table`` itself when it is a table whose keys are all ``allowed``.

    Raises
    ------
    ScenarioError
        Not a table, or an unknown key (named with ``where`` and the closest allowed keys).
    """
    if not isinstance(table, dict):
        raise ScenarioError(f"{where}: expected a table, got {table!r}")
    for key in table:
        if key not in allowed:
            raise ScenarioError(
                f"{where}: unknown key {key!r}; {closest_names(key, list(allowed))}"
            )
    return table


def _whole(table: dict[str, Any], key: str, where: str) -> int:
    value = table.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ScenarioError(f"{where}: {key} = {value!r} must be a whole number >= 1")
    return value


def _source(table: dict[str, Any], where: str) -> str:
    value = table.get("source")
    if not isinstance(value, str) or not value.strip():
        raise ScenarioError(f"{where}: a non-empty 'source' is required")
    return value


def _layout(table: dict[str, Any], where: str) -> dict[str, int | str]:
    layout: dict[str, int | str] = {}
    for key, value in table.items():
        if key == "source":
            continue
        if key in _LAYOUT_TEXT:
            if not isinstance(value, str):
                raise ScenarioError(f"{where}: {key} = {value!r} must be a string")
            layout[key] = value
        elif key == "zero_stage":
            if isinstance(value, bool) or value not in (0, 1, 2, 3):
                raise ScenarioError(f"{where}: zero_stage = {value!r} must be 0, 1, 2 or 3")
            layout[key] = value
        else:
            layout[key] = _whole(table, key, where)
    return layout


def entry_from_dict(d: dict[str, Any], where: str) -> CatalogueEntry:
    """Build a :class:`CatalogueEntry` from a parsed catalogue file.

    Raises
    ------
    ScenarioError
        On an unknown or missing key, a missing ``source``, or bad dimensions; the message
        names ``where`` and the table.
    """
    check_keys(d, _TOP_KEYS, where)
    for key in ("name", "architecture", "training"):
        if key not in d:
            raise ScenarioError(f"{where}: missing required table or key {key!r}")
    arch = architecture_from_dict(d["architecture"], f"{where} [architecture]")
    training = check_keys(d["training"], _TRAINING_KEYS, f"{where} [training]")
    layout = check_keys(d.get("layout", {}), (*LAYOUT_KEYS, "source"), f"{where} [layout]")
    published = d.get("published", {})
    if not isinstance(published, dict):
        raise ScenarioError(f"{where}: [published] must be a table")
    model = ModelSpec(name=d["name"], source=_source(d, where), arch=arch, extra=dict(published))
    return CatalogueEntry(
        model=model,
        training={
            key: _whole(training, key, f"{where} [training]")
            for key in ("seq_len", "global_batch_size")
        },
        layout=_layout(layout, f"{where} [layout]"),
        published=dict(published),
        training_source=_source(training, f"{where} [training]"),
        layout_source=_source(layout, f"{where} [layout]") if layout else "",
    )


def check_model_name(name: str) -> None:
    """Refuse, reading no file, a model name :func:`get_model` would refuse as unknown: a
    catalogue name passes (in any case, as :func:`get_model` reads it), and so does a path as
    :func:`get_model` takes one (written as a path, or an entry here), left to be read when the
    model is built.

    Raises
    ------
    ScenarioError
        ``unknown model 'llama3-8bb'; did you mean llama3-8b, llama3-70b, llama3-405b?``
    """
    name = str(name)
    if _catalogue_spelling(name) in model_names() or _looks_like_path(name) or _exists(name):
        return
    scenarios.load("models", name)  # unknown: names the closest models


def _looks_like_path(name: str) -> bool:
    """A model named the way a path is written: with a folder separator, ``.``, ``~`` or the
    ``.json`` ending (``./llama3-8b``, ``~/models/x``, ``config.json``)."""
    return "/" in name or "\\" in name or name.startswith((".", "~")) or name.endswith(".json")


def _exists(name: str) -> bool:
    """Whether ``name`` is a file system entry here (a name too long for one is not)."""
    try:
        return os.path.lexists(Path(name).expanduser())
    except (OSError, ValueError):
        return False


def config_path(name: str) -> Path:
    """The ``config.json`` a model path names: the file itself, or ``config.json`` in the folder.

    Raises
    ------
    ScenarioError
        Saying what is wrong with the path: missing, a folder where the file should be, a device
        or pipe (also through a symbolic link, whose target is named), a broken link, a name the
        file system refuses.
    """
    shown = shown_text(name)
    path = Path(name).expanduser()
    try:
        if path.is_dir():
            if not os.path.lexists(path / "config.json"):
                raise ScenarioError(
                    f"model: {shown}{_link(path)} is a folder without a config.json in it"
                )
            path = path / "config.json"
        if not os.path.lexists(path):
            raise ScenarioError(
                f"model: {shown} looks like a path, but nothing is there{_hub_hint(name)}"
            )
        link = _link(path)
        if not path.exists():
            raise ScenarioError(f"model: {shown_text(str(path))}{link} points to nothing")
        mode = path.stat().st_mode
    except OSError as err:
        raise ScenarioError(
            f"model: {shown} cannot be read as a path: {err.strerror or err}"
        ) from None
    if stat.S_ISDIR(mode):
        raise ScenarioError(
            f"model: {shown_text(str(path))}{link} is a folder, not a config.json file"
        )
    if not stat.S_ISREG(mode):
        kind = next((what for test, what in _SPECIAL if test(mode)), "not a regular file")
        raise ScenarioError(
            f"model: {shown_text(str(path))}{link} is {kind}, not a file; give a Hugging Face "
            "config.json"
        )
    return path


def _hub_hint(name: str) -> str:
    """For a Hugging Face Hub id (``meta-llama/Meta-Llama-3-70B``: one ``/``, no leading ``.``,
    ``/`` or ``~``), the catalogue names closest to its last part, as an unknown plain name gets
    (:func:`trainplan.scenarios.load`); else nothing.

    >>> _hub_hint("meta-llama/Meta-Llama-3-70B")
    '; catalogue names: trainplan models (did you mean llama3-70b, llama2-70b, llama3-405b?)'
    """
    if name.count("/") != 1 or name.startswith((".", "/", "~")) or name.endswith(".json"):
        return ""
    close = closest_names(name.split("/")[1][:200], list(model_names()))
    return "; catalogue names: trainplan models" + (f" ({close})" if "did you" in close else "")


def _link(path: Path) -> str:
    """`` (a symbolic link to 'target')`` when ``path`` is one, else empty."""
    return f" (a symbolic link to {shown_text(os.readlink(path))})" if path.is_symlink() else ""


_SPECIAL = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def get_model(name: str) -> CatalogueEntry:
    """The catalogue model ``name``, or a Hugging Face ``config.json`` given by its path.

    Parameters
    ----------
    name : str
        A catalogue name (``llama3-405b``, in any case: ``Llama3-405B``), a path to a
        ``config.json``, or a folder holding one. A catalogue name is the catalogue's model even
        when a file or folder of that name is in the working folder (a note says so, and that
        ``./name`` reads it); a path is written with a ``/``, ``.``, ``~`` or ``.json``
        (:func:`config_path`), or is any other name that exists here. A path gives a model with
        empty training defaults and layout.

    Returns
    -------
    CatalogueEntry

    Raises
    ------
    ScenarioError
        For an unknown name (with the closest known names), a path that holds no readable
        config (saying why), or a malformed file.

    Examples
    --------
    >>> entry = get_model("llama3-405b")
    >>> entry.model.arch.num_layers, entry.training["seq_len"], entry.layout["pp"]
    (126, 8192, 16)
    """
    name = str(name)
    if not _looks_like_path(name) and not _exists(name):
        name = _catalogue_spelling(name)
    if not _looks_like_path(name) and name in model_names():
        entry = _catalogue_entry(name)
        if not _exists(name):
            return entry
        kind = "folder" if Path(name).is_dir() else "file"
        note = (
            f"model: {name!r} is the catalogue's model (its published dimensions and training "
            f"setup); the {kind} {name!r} here was not read: give ./{name} to use it instead"
        )
        return replace(entry, model=replace(entry.model, notes=(*entry.model.notes, note)))
    if _looks_like_path(name) or _exists(name):
        return CatalogueEntry(model=ModelSpec.from_hf_config(config_path(name)))
    return _catalogue_entry(name)  # unknown: scenarios.load names the closest models


def catalogue_name(name: str) -> str:
    """The catalogue's name of a model ``name`` typed in another case or with other separators
    (``Llama3-8B`` → ``llama3-8b``); ``name`` as it is when no catalogue name (a path, a
    misspelling left to :func:`get_model` to refuse) or more than one is it so read
    (:func:`_catalogue_spelling`)."""
    return _catalogue_spelling(name)


def _catalogue_spelling(name: str) -> str:
    """The catalogue's name of ``name`` typed in another case or with other separators
    (``Llama3-70B``, ``llama3_70b``, ``llama-3-70b`` → ``llama3-70b``), as an accelerator's name is
    read (``h100_sxm``, :func:`topology.accelerators.name_key`, whose dots are kept here: they
    are a size's, ``megatron-1.7b``); ``name`` itself when no catalogue name, or more than one,
    is it so read.

    Examples
    --------
    >>> _catalogue_spelling("DeepSeek-V3"), _catalogue_spelling("llama_3 70B")
    ('deepseek-v3', 'llama3-70b')
    >>> _catalogue_spelling("lama3-8b")
    'lama3-8b'
    """
    return known_spelling(name, model_names())


def known_spelling(name: str, names: Iterable[str]) -> str:
    """The one of ``names`` that ``name`` is, typed in another case or with other separators
    (spaces, hyphens, underscores): the rule a model's name is read by (:func:`catalogue_name`),
    and a worked example's (:func:`interface.examples.get_example`); ``name`` itself when none
    of ``names``, or more than one, is it so read.

    >>> known_spelling("FSDP_70B 64", ["fsdp-70b-64", "one-gpu-70b"])
    'fsdp-70b-64'
    >>> known_spelling("fsdp70b", ["fsdp-70b-64"])
    'fsdp70b'
    """
    key = spelling_key(name)
    known = [n for n in names if spelling_key(n) == key]
    return known[0] if len(known) == 1 else name


def spelling_key(name: str) -> str:
    """``name`` in lower case without spaces, hyphens or underscores: two names are one name
    when their keys are equal (:func:`known_spelling`); a filter matches a name whose key holds
    its key (:func:`interface.commands.named_like`)."""
    return re.sub(r"[\s\-_]+", "", name).lower()


@lru_cache(maxsize=64)
def _catalogue_entry(name: str) -> CatalogueEntry:
    d = scenarios.load("models", name)
    where = f"scenarios/models/{name}.toml"
    entry = entry_from_dict(d, where)
    if entry.model.name != name:
        raise ScenarioError(f"{where}: name = {entry.model.name!r} must equal the file stem")
    return entry
