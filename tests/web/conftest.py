"""What the web tests need, and a clear skip without it: the ``[web]`` extra for the app, the
``[webtest]`` extra (httpx, Playwright) and Debian's Chromium for the browser. CI sets
``TRAINPLAN_WEB_TESTS=required`` (``.ci/run``), which turns every such skip into a failure, so the
browser tests cannot pass there by not running."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

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
