"""The pages, one per tab, the static files they load and the API's documentation — all served
from the package, nothing from a network (the Swagger UI of ``/docs`` from the swagger-ui-bundle
package's own files).

A page is ``pages/layout.html`` around ``pages/<tab>.html`` (the search and frontier tabs share
``pages/search_inputs.html``), with ``static/app.js`` (the URL as
the page's state, the API calls, the error line, the accelerator table) and ``static/<tab>.js``.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from fastapi import APIRouter, HTTPException
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse, Response

__all__ = ["router", "PAGES", "STATIC", "swagger_folder"]

PAGES = {
    "planner": "Planner",
    "pipeline": "Pipeline bubble",
    "mfu": "MFU & HFU",
    "ckpt": "Checkpointing",
    "rlhf": "RLHF",
    "search": "Search",
    "frontier": "Frontier",
    "sweep": "Sweep",
}
"""Each tab's path and title, in the navigation's order."""
STATIC = files("trainplan.interface.web") / "static"
_PAGES = files("trainplan.interface.web") / "pages"

router = APIRouter(include_in_schema=False)


def swagger_folder() -> str:
    """The folder of Swagger UI's script and style sheet inside the swagger-ui-bundle package."""
    import swagger_ui_bundle

    return str(swagger_ui_bundle.swagger_ui_path)


@cache
def _page(name: str) -> str:
    here = ' class="here" aria-current="page"'
    nav = "".join(
        f'<a href="/{key}"{here if key == name else ""}>{title}</a>' for key, title in PAGES.items()
    )
    nav += '<a href="/docs">API</a>'
    html = (_PAGES / "layout.html").read_text()
    for key, value in (
        ("title", PAGES[name]),
        ("page", name),
        ("nav", nav),
        ("content", (_PAGES / f"{name}.html").read_text()),
        ("search_inputs", (_PAGES / "search_inputs.html").read_text()),
    ):
        html = html.replace("{{" + key + "}}", value)
    return html


@router.get("/")
def home() -> Response:
    """The planner is the first tab."""
    return RedirectResponse("/planner")


@router.get("/docs")
def docs() -> Response:
    """The API's OpenAPI description in Swagger UI, served from the package."""
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="trainplan API",
        swagger_js_url="/vendor/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url="/vendor/swagger-ui/swagger-ui.css",
        swagger_favicon_url="/vendor/swagger-ui/favicon-32x32.png",
    )


@router.get("/{name}")
def page(name: str) -> Response:
    """One tab's page; its state is its query string."""
    if name not in PAGES:
        raise HTTPException(404, f"no page {name!r}; the pages are {', '.join(PAGES)}")
    return HTMLResponse(_page(name))
