"""The web app: the pages, the JSON API, the figures, and one rule for errors.

:func:`create_app` builds it (FastAPI, an ASGI framework on Starlette, served by uvicorn: it
describes the API as OpenAPI from the same option list the CLI parses with). Any
:class:`~model.errors.PlannerError` becomes HTTP 422 with ``{"error": line}``, ``line`` being what
``trainplan`` prints after ``Error:``, each flag written as its query key
(:func:`~interface.web.api.error_line`); a body the endpoint cannot read (FastAPI's
``RequestValidationError``) 422 in the same shape (:func:`validation_line`), and any HTTP error
under ``/api/`` (an unknown endpoint, a method the endpoint does not take) its status in the same
shape (:func:`api_http_line`); any other error is a plain 500 (the trace goes to the server's log,
never to the page).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from importlib.metadata import version
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.trustedhost import TrustedHostMiddleware
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from trainplan.interface.cli.names import no_default_texts
from trainplan.interface.web import api, figures, links, manual, pages, stream, sweep
from trainplan.interface.web.api import error_line, json_response
from trainplan.model.errors import PlannerError

__all__ = [
    "create_app",
    "serve",
    "LOCAL_HOSTS",
    "unknown_endpoint",
    "validation_line",
    "api_http_line",
]

LOCAL_HOSTS = ("127.0.0.1", "localhost")
"""Host headers answered: a page elsewhere cannot reach the app through a DNS name that points
here (DNS rebinding)."""

DESCRIPTION = """Each endpoint under `/api` is the `trainplan` command of the same name with `--json`:
its query parameters are the command's options without the dashes (`seq-len=8192`, the one
spelling: any other key is refused; repeat one that repeats, `tp=8&tp=16`; on/off options are
`true`/`false`), and its answer is the same object, key for key. Bad input is HTTP 422 with
`{"error": line}`, the line the CLI prints after `Error:`, each flag written as its query key.
Options that name files on the server (`--scenario`, `--csv`, `--png`…) are not taken: the planner
takes a config.json's text as `config` and a part the accelerator table lacks as `accelerator` (a
JSON object with an accelerator file's keys), and `/api/figures/…` and `/api/figures/frontier.csv`
return the pictures and the CSV."""


def create_app(hosts: tuple[str, ...] = LOCAL_HOSTS) -> FastAPI:
    """The app, answering requests addressed to ``hosts`` (the loopback names by default).

    Raises
    ------
    ImportError
        Without the ``[web]`` extra (fastapi, uvicorn, matplotlib, swagger-ui-bundle).
    """
    app = FastAPI(
        title="trainplan",
        version=version("trainplan"),
        description=DESCRIPTION,
        docs_url=None,
        redoc_url=None,
    )
    app.openapi_version = "3.0.3"  # what the bundled Swagger UI (4.x) reads
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            drop_unset_defaults(build())
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))

    @app.exception_handler(PlannerError)
    async def bad_input(request: Request, err: PlannerError) -> Response:
        pairs = getattr(request.state, "pairs", None) or request.query_params.multi_items()
        return json_response({"error": error_line(err, request.url.path, pairs)}, 422)

    @app.exception_handler(RequestValidationError)
    async def unreadable(request: Request, err: RequestValidationError) -> Response:
        return json_response({"error": validation_line(err.errors())}, 422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> Response:
        if not request.url.path.startswith("/api/"):
            return await http_exception_handler(request, err)
        answer = json_response({"error": api_http_line(app, request, err)}, err.status_code)
        answer.headers.update(err.headers or {})  # a 405's Allow
        if err.status_code == 405 and allowed_methods(app, request.url.path):
            answer.headers["Allow"] = allowed_methods(app, request.url.path) or ""
        return answer

    app.include_router(api.router)
    app.include_router(stream.router)
    app.include_router(links.router)
    app.include_router(figures.router)
    app.include_router(sweep.router)
    app.mount("/static", StaticFiles(directory=str(pages.STATIC)), name="static")
    app.mount("/vendor/swagger-ui", StaticFiles(directory=pages.swagger_folder()), name="swagger")
    app.include_router(manual.router)
    app.include_router(pages.router)
    return app


def unknown_endpoint(app: FastAPI, path: str) -> str:
    """The line answering ``path`` under ``/api/`` that no endpoint serves (``/api/estimate``):
    the path and the endpoints a GET reaches (those of the OpenAPI description without a path
    parameter)."""
    paths = app.openapi().get("paths", {})
    known = sorted(p for p, ops in paths.items() if "get" in ops and "{" not in p
                   and p.startswith("/api/"))  # fmt: skip
    shown = path if len(path) <= 80 else path[:79] + "…"
    return f"{shown}: no such endpoint; the API's are {', '.join(known)} (and /docs)"


def allowed_methods(app: FastAPI, path: str) -> str | None:
    """The methods the endpoint at ``path`` answers, as an ``Allow`` header lists them (``GET,
    POST`` for the planner's endpoints with a POST form: Starlette's own header names only the
    first route of the path); None for a path the OpenAPI description lacks."""
    ops = app.openapi().get("paths", {}).get(path)
    return ", ".join(sorted(m.upper() for m in ops)) if ops else None


def api_http_line(app: FastAPI, request: Request, err: StarletteHTTPException) -> str:
    """The line answering an HTTP error under ``/api/``: a path no endpoint serves
    (:func:`unknown_endpoint`), a method the endpoint does not take (405, naming those it takes:
    Starlette's ``Allow`` header), or the path and the error's own text."""
    path = request.url.path
    if err.status_code == 404:
        return unknown_endpoint(app, path)
    allowed = allowed_methods(app, path) or (err.headers or {}).get("Allow")
    if err.status_code == 405 and allowed:
        return f"{path}: {request.method} is not allowed; this endpoint answers {allowed}"
    return f"{path}: {err.detail}"


_PARTS = ("body", "query", "path", "header", "cookie")
"""Where FastAPI says a value it could not read came from (the first item of an error's ``loc``)."""


def validation_line(errors: Sequence[Mapping[str, Any]]) -> str:
    """One line for FastAPI's ``RequestValidationError`` (a JSON body that is not the endpoint's:
    ``POST /api/sweep`` without ``{"grid": …}``): each error as ``NAME: what`` (``NAME`` the
    field, as the page's form names it), joined by ``; ``; a body's field with the body it
    takes.

    >>> validation_line([{"type": "missing", "loc": ("body", "grid"), "msg": "Field required"}])
    'grid: required (none given); the body is a JSON object {"grid": …}'
    >>> validation_line([{"type": "string_type", "loc": ("body", "grid"), "input": 5,
    ...                   "msg": "Input should be a valid string"}])
    'grid: 5: input should be a valid string; the body is a JSON object {"grid": …}'
    """
    lines = []
    for e in errors:
        loc = [str(p) for p in e.get("loc", ())]
        body = bool(loc) and loc[0] == "body"
        kind, msg = str(e.get("type", "")), str(e.get("msg", ""))
        names = [p for p in loc if p not in _PARTS and not p.isdigit()]
        if kind == "json_invalid":
            error = dict(e.get("ctx") or {}).get("error", msg)
            lines.append(f"body: not JSON ({error}); send a JSON object")
            continue
        name = ".".join(names) or (loc[0] if loc else "request")
        what = "required (none given)" if kind == "missing" else msg[:1].lower() + msg[1:]
        if kind != "missing" and "input" in e:
            what = f"{e['input']!r}: {what}"
        line = f"{name}: {what}"
        if body and names:
            line += f'; the body is a JSON object {{"{names[0]}": …}}'
        lines.append(line)
    return "; ".join(lines) or "the request could not be read"


def drop_unset_defaults(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (an OpenAPI description) without any parameter default that is click's sentinel
    for "no default": Swagger UI would pre-fill ``Sentinel.UNSET`` into "Try it out" and send
    it. An option without a default has none in the description."""
    unset = no_default_texts()
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            for param in operation.get("parameters", []):
                for part in (param.get("schema", {}), param.get("schema", {}).get("items", {})):
                    if str(part.get("default")) in unset:
                        del part["default"]
    return schema


def serve(sock: socket.socket) -> None:
    """Serve :func:`create_app` with uvicorn on a listening socket until interrupted (Ctrl+C);
    uvicorn logs warnings and errors only (a failed request's trace goes there)."""
    server = uvicorn.Server(uvicorn.Config(create_app(), log_level="warning"))
    server.run(sockets=[sock])
