"""What the web tests need, and a clear skip without it: the ``[web]`` extra for the app, the
``[webtest]`` extra (httpx, Playwright) and Debian's Chromium for the browser. CI sets
``TRAINPLAN_WEB_TESTS=required`` (``.ci/run``), which turns every such skip into a failure, so the
browser tests cannot pass there by not running."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
"""Debian's Chromium (apt-get install -y chromium chromium-driver); Playwright drives it as it is,
nothing is downloaded."""
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REQUIRED = os.environ.get("TRAINPLAN_WEB_TESTS") == "required"


def need(module: str, why: str) -> None:
    """Skip (fail under CI's TRAINPLAN_WEB_TESTS=required) when ``module`` cannot be imported."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        message = f"{module} is not installed: {why}"
        if REQUIRED:
            pytest.fail(message + " (TRAINPLAN_WEB_TESTS=required)")
        pytest.skip(message, allow_module_level=True)


def need_chromium() -> None:
    if not Path(CHROMIUM).exists():
        message = (
            f"Chromium is not installed at {CHROMIUM}: apt-get install -y chromium chromium-driver"
        )
        if REQUIRED:
            pytest.fail(message + " (TRAINPLAN_WEB_TESTS=required)")
        pytest.skip(message, allow_module_level=True)


def start_server() -> tuple[subprocess.Popen[str], str]:
    """``trainplan serve --port 0`` in a subprocess; (process, the address it printed)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainplan", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if not found:
        proc.kill()
        raise AssertionError(f"trainplan serve printed {line!r}")
    return proc, found.group(0).rstrip("/")


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    """The address of a ``trainplan serve`` started for the session (stopped after it)."""
    need("fastapi", "pip install -e '.[web]'")
    proc, address = start_server()
    yield address
    proc.terminate()
    proc.wait(timeout=10)


TIMEOUT = 60_000
"""Milliseconds a browser test waits for what it expects (a frontier on a loaded 2-core machine)."""


def cli_json(*args: str) -> Any:
    """What ``trainplan ARGS --json`` prints, parsed (in process, through click's runner)."""
    from click.testing import CliRunner

    from trainplan.interface.cli import cli, register_commands

    register_commands()
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    return json.loads(result.output)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium driven by Playwright (the browser test modules need it)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[Any]:
    """A page that records script errors, console errors (but a 422's, which the page shows as
    the error line) and any request not to the server; each must stay empty."""
    context = browser.new_context(viewport={"width": 1360, "height": 900}, accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT)
    errors: list[str] = []
    outside: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on(
        "console",
        lambda m: errors.append(m.text) if m.type == "error" and "422" not in m.text else None,
    )
    pg.on(
        "request", lambda r: None if r.url.startswith((server, "data:")) else outside.append(r.url)
    )
    pg.base = server
    yield pg
    context.close()
    assert not errors, errors
    assert not outside, f"requests left 127.0.0.1: {outside}"


def go(page: Any, path: str) -> None:
    """Open ``path`` of the test server in ``page``; a tab's page is waited for until its script
    listens to the inputs (``body[data-ready]``, after any hash link or example took it to the
    tab that shows it)."""
    page.goto(page.base + path)
    if not path.startswith("/docs"):
        page.wait_for_selector("body[data-ready=true]", state="attached")


def wait_for_held(page: Any, held: list[Any], timeout_ms: int = 5_000) -> None:
    """Wait until a ``page.route`` handler has put a request in ``held``. The page shows it is
    waiting (busy, a cancel button) as it sends; Playwright calls the Python handler a moment
    later, so a test that asserted ``held`` at once failed now and then in CI."""
    for _ in range(timeout_ms // 25):
        if held:
            return
        page.wait_for_timeout(25)
    assert held, f"no request reached the route in {timeout_ms} ms"
