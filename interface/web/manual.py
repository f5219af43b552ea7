"""The documentation site at ``/manual/``, served offline.

The site is built with MkDocs (the ``[docs]`` extra) from the ``docs/`` folder and ``mkdocs.yml``
of the checkout trainplan runs from, on the first request for a page of it, and again when a page,
``mkdocs.yml`` or the package's code (which the reference pages are generated from) has changed
since. The build (a minute or two) runs in one background thread, one build at a time; meanwhile
``/manual/`` answers at once with a page that says so and reloads itself every 5 s. It is built
into a temporary folder and moved into ``build/manual`` whole, so a half-built site is never
served. A failed build's last line is the next visit's answer (503); the visit after it builds
again. Without MkDocs, or outside a checkout, ``/manual/`` says how to get it.
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

__all__ = ["router", "ROOT", "SITE", "built_site", "site_or_build"]

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: the folder holding ``mkdocs.yml`` beside the package's folders."""
SITE = ROOT / "build" / "manual"
_STAMP = ".trainplan-built"
_LOCK = threading.Lock()
"""Held to read or change the build's state below (never for the build itself)."""
_SOURCES = ("docs", "model", "topology", "optimizer", "interface", "scenarios", "trainplan")
_BUILDER: threading.Thread | None = None
"""The background build, while it runs (one at a time)."""
_FAILED: str | None = None
"""The last background build's one-line error, until a visit has shown it."""

router = APIRouter(include_in_schema=False)


def _newest_source() -> float:
    """The latest modification time of the site's sources: mkdocs.yml, the pages, the code."""
    newest = (ROOT / "mkdocs.yml").stat().st_mtime
    for name in _SOURCES:
        for path in (ROOT / name).rglob("*"):
            if path.suffix in (".md", ".py", ".toml", ".png") and "__pycache__" not in path.parts:
                newest = max(newest, path.stat().st_mtime)
    return newest


def _check() -> None:
    """Raise RuntimeError with one line when no build can run here: no checkout, no MkDocs."""
    if not (ROOT / "mkdocs.yml").is_file():
        raise RuntimeError(
            "the documentation is built from a checkout of trainplan (mkdocs.yml and docs/); "
            "this installation has none"
        )
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        raise RuntimeError("the documentation needs MkDocs: pip install -e '.[docs]'") from None


def _fresh() -> bool:
    """Whether the built site is there and newer than its sources."""
    stamp = SITE / _STAMP
    return stamp.is_file() and stamp.stat().st_mtime >= _newest_source()


def _build() -> Path:
    """Build the site (a minute or two) into a temporary folder, then move it to ``SITE`` whole.

    Raises
    ------
    RuntimeError
        ``mkdocs build failed:`` and the last line MkDocs wrote.
    """
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


def built_site() -> Path:
    """The built site's folder, building it first (here, waiting) when it is missing or stale;
    a build already running in the background is waited for, not repeated.

    Raises
    ------
    RuntimeError
        With one line saying why the site cannot be built (no checkout, no MkDocs, a failed build).
    """
    while (site := site_or_build()) is None:
        builder = _BUILDER
        if builder is not None:
            builder.join()
    return site


def _build_in_background() -> None:
    """The background thread: build, and keep a failure's one line for the next visit."""
    global _BUILDER, _FAILED
    try:
        _build()
    except (RuntimeError, OSError) as err:
        with _LOCK:
            _FAILED = str(err).splitlines()[0] if str(err) else type(err).__name__
    finally:
        with _LOCK:
            _BUILDER = None


def site_or_build() -> Path | None:
    """The built site's folder when it is there and fresh; else None, a build running in the
    background (started here unless one runs already).

    Raises
    ------
    RuntimeError
        No checkout, no MkDocs, or the last background build's failure (said once: the next call
        builds again).
    """
    global _BUILDER, _FAILED
    _check()
    with _LOCK:
        if _BUILDER is not None:
            return None
        if _FAILED is not None:
            failed, _FAILED = _FAILED, None
            raise RuntimeError(failed)
        if _fresh():
            return SITE
        _BUILDER = threading.Thread(target=_build_in_background, name="manual-build", daemon=True)
        _BUILDER.start()
        return None


def _unavailable(reason: str) -> Response:
    return HTMLResponse(
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Documentation · "
        "trainplan</title><link rel='stylesheet' href='/static/style.css'></head><body><main>"
        f"<h1>Documentation</h1><p>The documentation is not available here: {reason}.</p>"
        "<p><a href='/planner'>Back to the planner</a></p></main></body></html>",
        status_code=503,
    )


def _building() -> Response:
    """The answer while the site builds: it says so and reloads itself every 5 s (202)."""
    return HTMLResponse(
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta http-equiv='refresh' content='5'><title>Documentation · trainplan</title>"
        "<link rel='stylesheet' href='/static/style.css'></head><body><main>"
        "<h1>Documentation</h1><p id='building' aria-busy='true'>Building the documentation "
        "(a minute or two)… This page reloads itself every 5 s and shows it when it is ready.</p>"
        "<p><a href='/planner'>Back to the planner</a></p></main></body></html>",
        status_code=202,
    )


@router.get("/manual")
def manual_root() -> Response:
    return RedirectResponse("/manual/")


@router.get("/manual/{path:path}")
def manual(path: str) -> Response:
    """A file of the built site; a folder's ``index.html``. The entry page (or any page while no
    site is built) starts the build when the site is missing or stale and answers at once."""
    if path in ("", "index.html") or not SITE.is_dir():
        try:
            if site_or_build() is None:
                return _building()
        except RuntimeError as err:
            return _unavailable(str(err))
    root = SITE.resolve()
    target = (root / path).resolve()
    if target.is_dir():
        target = target / "index.html"
    if root not in target.parents or not target.is_file():
        return HTMLResponse("<!doctype html><title>Not found</title><p>No such page.</p>", 404)
    return FileResponse(target)
