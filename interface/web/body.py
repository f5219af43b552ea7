"""The POST form of the planner's endpoints (``POST /api/evaluate``, ``/api/search``,
``/api/frontier``, their ``…/stream``, ``/api/figures/memory``, ``/api/figures/frontier`` and
``/api/figures/frontier.csv``): the same parameters as the
GET query, in a JSON object, for requests too large for a URL (a Hugging Face ``config.json`` of
hundreds of kilobytes: a query string that long is refused by the HTTP server, HTTP 400, before
the app can say why).

The body is ``{"name": value, …}``, each name a query parameter of the GET form; a value is a
string, a number, true or false (as the query's text: ``"tp": 8`` is ``tp=8``), or a list of them
for a parameter that repeats (``"gpus": [2048, 4096]``). ``config`` and ``accelerator`` also take
the JSON object itself (``"config": {…}``), written back as its text. ``null`` is the query's
empty value (``"tp": null`` is ``tp=``: refused by the same rule as on GET). The parameters then
go through the GET form's parsing (:func:`interface.web.params.parse`), so every value is checked
by the same rule and refused with the same line (HTTP 422); an integer too long for Python's
``int()`` goes there as its text, to be refused by the number rule naming its parameter. A body
that is not such an object — not JSON, nested too deep for the reader, a key given twice (the
GET form refuses a parameter given twice), over :data:`MAX_BODY_BYTES` (refused from its
``Content-Length`` before it is read, or as soon as the bytes read pass it) — is refused in one
line naming ``body``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from fastapi import Request

from trainplan.model.errors import InputError
from trainplan.model.units import shown_text

__all__ = ["body_pairs", "decode", "pairs_of", "MAX_BODY_BYTES", "BODY_DOC"]

MAX_BODY_BYTES = 64 * 2**20
"""The largest body read, bytes (64 MiB: the largest published config.json is some kilobytes; a
model's weights index is not a config)."""

_OBJECTS = frozenset({"config", "accelerator"})
"""The parameters whose value may be the JSON object itself."""

BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"type": "object", "additionalProperties": True},
                "example": {"model": "llama3-70b", "gpus": 1024, "tp": [4, 8]},
            }
        },
        "description": "The GET form's query parameters as a JSON object: a string, number or "
        "boolean each, a list for one that repeats; config and accelerator may be the JSON "
        "object itself",
    }
}
"""The OpenAPI request body of every POST form."""


def _text(name: str, value: Any) -> str:
    """One value as the query's text.

    Raises
    ------
    InputError
        A value that is not a string, number or boolean (an object but for ``config`` and
        ``accelerator``).
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, _Written):
        return value.text
    if isinstance(value, int | float):
        return json.dumps(value)
    if name in _OBJECTS and isinstance(value, dict):
        return json.dumps(value)
    raise InputError(
        f"{name}: {json.dumps(value)[:60]} is not a string, number or boolean (a list of them "
        "for a parameter that repeats)"
    )


def pairs_of(body: Any) -> list[tuple[str, str]]:
    """The query pairs of a decoded JSON body (the module docstring), repeats in order.

    Raises
    ------
    InputError
        ``body`` not an object; a value not a string, number, boolean or list of them.

    >>> pairs_of({"model": "llama3-8b", "tp": [2, 4], "compare": True})
    [('model', 'llama3-8b'), ('tp', '2'), ('tp', '4'), ('compare', 'true')]
    >>> pairs_of([1])
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: body: a JSON list; send a JSON object {"name": value, …} of the GET form's parameters
    """
    if not isinstance(body, dict):
        kind = "list" if isinstance(body, list) else "string" if isinstance(body, str) else "value"
        raise InputError(
            f'body: a JSON {kind}; send a JSON object {{"name": value, …}} of the GET form\'s '
            "parameters"
        )
    out: list[tuple[str, str]] = []
    for name, value in body.items():
        values = value if isinstance(value, list) else [value]
        out += [(str(name), _text(str(name), v)) for v in values]
    return out


class _Digits(str):
    """An integer of the body too long for Python's ``int()`` (over
    ``sys.get_int_max_str_digits()`` digits), kept as its text."""


class _Written(float):
    """A JSON number with a fraction or an exponent, with its text as the body wrote it
    (``1e9``, ``0.1``, ``1e400``): read as that text, as the GET query's ``workers=1e9`` is, so
    a refusal echoes what was sent (``workers: 1e9 is above the limit…``, not ``1000000000.0``)
    and a number beyond a float is refused by the number rule naming its parameter (not as
    ``'Infinity'``); a ``config`` object holding it is written back as the number it is."""

    text: str

    def __new__(cls, text: str) -> _Written:
        number = super().__new__(cls, text)
        number.text = text
        return number


def _integer(text: str) -> int | str:
    """``json.loads``'s ``parse_int``: the integer, or its text (:class:`_Digits`) when too long
    for ``int()``, so that the number rule refuses it naming its parameter."""
    limit = sys.get_int_max_str_digits()
    return _Digits(text) if limit and len(text.lstrip("-")) > limit else int(text)


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: the object, each key once.

    Raises
    ------
    InputError
        A key given twice (JSON would keep the last silently; the GET form refuses it)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InputError(
                f"body: {shown_text(key)} given twice; give it once (a list for a parameter that "
                "repeats)"
            )
        out[key] = value
    return out


def decode(raw: bytes) -> Any:
    """The decoded JSON of a body (:func:`body_pairs`).

    Raises
    ------
    InputError
        Not JSON, nested too deep, a key given twice.

    >>> decode(b'{"tp": 2, "dp": null}')
    {'tp': 2, 'dp': None}
    >>> decode(b'{"tp": 2, "tp": 4}')
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: body: 'tp' given twice; give it once (a list for a parameter that repeats)
    """
    try:
        if not raw.strip():
            return {}
        return json.loads(raw, parse_int=_integer, parse_float=_Written, object_pairs_hook=_once)
    except RecursionError:
        raise InputError(
            "body: nested deeper than the JSON reader goes; send a flat JSON object of the GET "
            "form's parameters"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"body: not JSON ({err}); send a JSON object") from None


async def body_pairs(request: Request) -> list[tuple[str, str]]:
    """The query pairs of a POST request: its URL's query, then its JSON body's (:func:`pairs_of`).

    Raises
    ------
    InputError
        A body over :data:`MAX_BODY_BYTES` (by its ``Content-Length``, or once the bytes read
        pass it), not JSON, nested too deep, a key given twice, or not such an object.
    """
    length = request.headers.get("content-length", "")
    if length.isdigit() and len(length) < 20 and int(length) > MAX_BODY_BYTES:
        raise InputError(f"body: {int(length):,} bytes is over the {MAX_BODY_BYTES:,} read")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise InputError(f"body: over the {MAX_BODY_BYTES:,} bytes read")
        chunks.append(chunk)
    body = decode(b"".join(chunks))
    pairs = list(request.query_params.multi_items()) + pairs_of(body)
    request.state.pairs = pairs  # a refusal names what the body typed (interface.web.app)
    return pairs
