"""The web app: the pages, the JSON API, the figures, and one rule for errors.

:func:`create_app` builds it (FastAPI, an ASGI framework on Starlette, served by uvicorn: it
describes the API as OpenAPI from the same option list the CLI parses with). Any
:class:`~model.errors.PlannerError` becomes HTTP 422 with ``{"error": line}``, ``line`` being what
``trainplan`` prints after ``Error:``, each flag written as its query key
(:func:`~interface.web.api.error_line`); any other error is a plain 500 (the trace goes to the
server's log, never to the page).
"""

from __future__ import annotations

import socket
from importlib.metadata import version
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.middleware.trustedhost import TrustedHostMiddleware
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from trainplan.interface.cli.names import no_default_texts
from trainplan.interface.web import api, figures, links, manual, pages, stream, sweep
from trainplan.interface.web.api import error_line, json_response
from trainplan.model.errors import PlannerError

__all__ = ["create_app", "serve", "LOCAL_HOSTS", "unknown_endpoint"]

LOCAL_HOSTS = ("127.0.0.1", "localhost")
"""Host headers answered: a page elsewhere cannot reach the app through a DNS name that points
here (DNS rebinding)."""

DESCRIPTION = """Each endpoint under `/api` is the `trainplan` command of the same name with `--json`:
its query parameters are the command's options without the dashes (`seq-len=8192`, the one
spelling: any other key is refused; repeat one that repeats, `tp=8&tp=16`; on/off options are
`true`/`false`), and its answer is the same object, key for key. Bad input is HTTP 422 with
`{"error": line}`, the line the CLI prints after `Error:`, each flag written as its query key.
Options that name files on the server (`--scenario`, `--csv`, `--png`…) are not taken: the planner
takes a config.json's text as `config`, and `/api/figures/…` and `/api/figures/frontier.csv` return
the pictures and the CSV."""


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
        return json_response({"error": error_line(err)}, 422)

    @app.exception_handler(StarletteHTTPException)
    async def not_found(request: Request, err: StarletteHTTPException) -> Response:
        path = request.url.path
        if err.status_code != 404 or not path.startswith("/api/"):
            return await http_exception_handler(request, err)
        return json_response({"error": unknown_endpoint(app, path)}, 404)

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
