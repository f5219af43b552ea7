"""The documentation site at ``/manual/``, served offline.

The site is built with MkDocs (the ``[docs]`` extra) from the ``docs/`` folder and ``mkdocs.yml``
of the checkout trainplan runs from, on the first request for a page of it, and again when a page,
``mkdocs.yml`` or the package's code (which the reference pages are generated from) has changed
since. It is built into a temporary folder and moved into ``build/manual`` whole, so a half-built
site is never served. Without MkDocs, or outside a checkout, ``/manual/`` says how to get it.
Material's theme loads no web font and no script from a network (``font: false``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

__all__ = ["router", "ROOT", "SITE", "built_site"]

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: the folder holding ``mkdocs.yml`` beside the package's folders."""
SITE = ROOT / "build" / "manual"
_STAMP = ".trainplan-built"
_LOCK = threading.Lock()
_SOURCES = ("docs", "model", "topology", "optimizer", "interface", "scenarios", "trainplan")

router = APIRouter(include_in_schema=False)


def _newest_source() -> float:
    """The latest modification time of the site's sources: mkdocs.yml, the pages, the code."""
    newest = (ROOT / "mkdocs.yml").stat().st_mtime
    for name in _SOURCES:
        for path in (ROOT / name).rglob("*"):
            if path.suffix in (".md", ".py", ".toml", ".png") and "__pycache__" not in path.parts:
                newest = max(newest, path.stat().st_mtime)
    return newest


def built_site() -> Path:
    """The built site's folder, building it first when it is missing or older than its sources.

    Raises
    ------
    RuntimeError
        With one line saying why the site cannot be built (no checkout, no MkDocs, a failed build).
    """
    if not (ROOT / "mkdocs.yml").is_file():
        raise RuntimeError(
            "the documentation is built from a checkout of trainplan (mkdocs.yml and docs/); "
            "this installation has none"
        )
    with _LOCK:
        stamp = SITE / _STAMP
        if stamp.is_file() and stamp.stat().st_mtime >= _newest_source():
            return SITE
        try:
            import mkdocs  # noqa: F401
        except ImportError:
            raise RuntimeError("the documentation needs MkDocs: pip install -e '.[docs]'") from None
        SITE.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="manual-", dir=SITE.parent))
        done = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--quiet", "--no-strict", "-f",
             str(ROOT / "mkdocs.yml"), "-d", str(tmp)],
            cwd=ROOT, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"mkdocs build failed: {last}")
        (tmp / _STAMP).touch()
        if SITE.exists():
            shutil.rmtree(SITE)
        tmp.rename(SITE)
        return SITE


def _unavailable(reason: str) -> Response:
    return HTMLResponse(
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Documentation · "
        "trainplan</title><link rel='stylesheet' href='/static/style.css'></head><body><main>"
        f"<h1>Documentation</h1><p>The documentation is not available here: {reason}.</p>"
        "<p><a href='/planner'>Back to the planner</a></p></main></body></html>",
        status_code=503,
    )


@router.get("/manual")
def manual_root() -> Response:
    return RedirectResponse("/manual/")


@router.get("/manual/{path:path}")
def manual(path: str) -> Response:
    """A file of the built site; a folder's ``index.html``. The entry page builds the site when
    it is missing or stale."""
    if path in ("", "index.html") or not SITE.is_dir():
        try:
            built_site()
        except RuntimeError as err:
            return _unavailable(str(err))
    root = SITE.resolve()
    target = (root / path).resolve()
    if target.is_dir():
        target = target / "index.html"
    if root not in target.parents or not target.is_file():
        return HTMLResponse("<!doctype html><title>Not found</title><p>No such page.</p>", 404)
    return FileResponse(target)
