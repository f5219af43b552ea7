"""Build an :class:`~model.specs.Architecture` from plain dicts: a scenario file's
``[architecture]`` table (a Hugging Face ``config.json``: :mod:`model.hf_families`).

Standard library only and no I/O: callers read the file and pass its text to
:func:`parse_config_json` (or a parsed dict) with ``where`` (the file name), which every error
message names.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from enum import Enum
from typing import Any

from trainplan.model.errors import InputError, ScenarioError
from trainplan.model.specs import Architecture, MLASpec, MoESpec
from trainplan.model.units import closest_names, shown_text

__all__ = ["architecture_from_dict", "convert", "parse_config_json"]


# --------------------------------------------------------------------------------------------
# Strict dict -> dataclass (scenario files)


def _convert(value: Any, kind: Any, key: str, where: str) -> Any:
    """``value`` checked against the annotation ``kind`` (int, bool, a StrEnum, optional)."""
    args = typing.get_args(kind)
    if args and type(None) in args:  # X | None
        if value is None:
            return None
        (kind,) = [a for a in args if a is not type(None)]
    if kind is bool:
        if not isinstance(value, bool):
            raise ScenarioError(f"{where}: {key} = {value!r} must be true or false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ScenarioError(f"{where}: {key} = {value!r} must be a whole number")
        if isinstance(value, float):
            if not value.is_integer():
                raise ScenarioError(f"{where}: {key} = {value!r} must be a whole number")
            value = int(value)
        return value
    if typing.get_origin(kind) is tuple:  # tuple[X, ...]: a list of X
        if not isinstance(value, list | tuple):
            raise ScenarioError(f"{where}: {key} = {value!r} must be a list")
        return tuple(_convert(item, args[0], key, where) for item in value)
    if isinstance(kind, type) and issubclass(kind, Enum):
        allowed = [m.value for m in kind]
        if value not in allowed:
            raise ScenarioError(
                f"{where}: {key} = {value!r} is not one of {', '.join(map(repr, allowed))}"
            )
        return kind(value)
    if kind is str:
        if not isinstance(value, str):
            raise ScenarioError(f"{where}: {key} = {value!r} must be a string")
        return value
    raise ScenarioError(f"{where}: {key}: cannot read a value of type {kind!r}")  # pragma: no cover


def _build(cls: type, d: Any, where: str, nested: dict[str, type] | None = None) -> Any:
    """Instantiate the frozen dataclass ``cls`` from ``d``, rejecting unknown and missing keys."""
    if not isinstance(d, dict):
        raise ScenarioError(f"{where}: expected a table, got {d!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    nested = nested or {}
    for key in d:
        if key not in fields:
            hint = closest_names(key, list(fields))
            raise ScenarioError(f"{where}: unknown key {key!r}; {hint}")
    missing = [
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
        and name not in d
    ]
    if missing:
        raise ScenarioError(f"{where}: missing required key(s) {', '.join(missing)}")
    kwargs: dict[str, Any] = {}
    for key, value in d.items():
        if key in nested:
            kwargs[key] = _build(nested[key], value, f"{where} [{key}]")
        else:
            kwargs[key] = _convert(value, hints[key], key, where)
    try:
        return cls(**kwargs)
    except InputError as err:
        raise ScenarioError(f"{where}: {err}") from None


def architecture_from_dict(d: dict[str, Any], where: str) -> Architecture:
    """Read an ``[architecture]`` table (e.g. of ``scenarios/models/*.toml``) strictly.

    Keys are exactly the :class:`~model.specs.Architecture` field names; the nested tables
    ``moe`` and ``mla`` take the :class:`~model.specs.MoESpec` / :class:`~model.specs.MLASpec`
    field names. Enum fields (``mlp``, ``norm``, ``attention``, ``position_embedding``) take their
    string values. Whole numbers may be written as TOML integers or as whole floats (``4096.0``);
    any other float is rejected, as is a number where true/false is expected.

    Parameters
    ----------
    d : dict
        The table, as ``tomllib`` or ``json`` returns it.
    where : str
        Where it came from (a file name and table), named in every error.

    Returns
    -------
    Architecture

    Raises
    ------
    ScenarioError
        On an unknown key (with the closest field names), a missing required key, a value of the
        wrong type, or dimensions that :class:`Architecture` rejects.

    Examples
    --------
    >>> arch = architecture_from_dict({"num_layers": 2, "hidden_size": 8,
    ...     "num_attention_heads": 2, "ffn_hidden_size": 32, "vocab_size": 16,
    ...     "mlp": "swiglu"}, "example.toml [architecture]")
    >>> arch.mlp
    <Mlp.SWIGLU: 'swiglu'>
    >>> try:
    ...     architecture_from_dict({"num_layer": 2}, "example.toml")
    ... except ScenarioError as err:
    ...     print(err)
    example.toml: unknown key 'num_layer'; did you mean num_layers, mtp_layers, mla?
    """
    return _build(Architecture, d, where, nested={"moe": MoESpec, "mla": MLASpec})


# --------------------------------------------------------------------------------------------
# Hugging Face config.json: its text read strictly (the families: model.hf_families)


def parse_config_json(data: str | bytes, where: str) -> dict[str, Any]:
    """The object a ``config.json`` holds, from its text, or its bytes in UTF-8 (or UTF-16/32,
    which :func:`json.loads` tells apart, as Windows editors write them).

    Raises
    ------
    ScenarioError
        Naming ``where``: bytes that are not UTF-8/16/32 text, text that is not JSON, a key given
        twice in one object (a JSON reader keeps the last silently, Python's ``json`` among
        them, so which value was meant is unknown), nesting too deep to read (RFC 8259 §9
        lets a reader limit it; a Hugging Face config nests a few levels), or a top level that
        is not an object.

    >>> parse_config_json('{"hidden_size": 4096}', "config.json")
    {'hidden_size': 4096}
    >>> parse_config_json('{"hidden_size": 4096, "hidden_size": 8192}', "c.json")
    Traceback (most recent call last):
    ...
    trainplan.model.errors.ScenarioError: c.json: key 'hidden_size' is given twice (4096, then 8192); keep one
    """

    def one_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ScenarioError(
                    f"{where}: key {shown_text(key)} is given twice ({shown_text(out[key], 40)}, "
                    f"then {shown_text(value, 40)}); keep one"
                )
            out[key] = value
        return out

    try:
        config = json.loads(data, object_pairs_hook=one_each)
    except RecursionError:
        raise ScenarioError(
            f"{where}: objects or lists nest too deeply to read (a Hugging Face config nests a "
            "few levels)"
        ) from None
    except UnicodeDecodeError as err:
        raise ScenarioError(
            f"{where}: is not UTF-8 (or UTF-16/32) text: {err.reason} at byte {err.start:,}"
        ) from None
    except json.JSONDecodeError as err:
        raise ScenarioError(f"{where}: is not JSON: {err}") from None
    if not isinstance(config, dict):
        raise ScenarioError(f"{where}: must be a JSON object, not {type(config).__name__}")
    return config


convert = _convert
"""Check ``value`` against a type annotation (int, bool, a StrEnum, a tuple, optional), naming
``key`` and ``where`` in the error: the one conversion rule for scenario files and configs."""
