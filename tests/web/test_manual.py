"""The documentation at ``/manual/`` of ``trainplan serve``: linked from every page, built from
the checkout on first visit, served from the package's files with nothing from a network, and a
line saying how to get it where it cannot be built."""

from __future__ import annotations

import re
import warnings

import pytest

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web import manual  # noqa: E402
from trainplan.interface.web.app import create_app  # noqa: E402


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


def test_every_page_links_the_manual(client):
    for tab in ("planner", "search", "rlhf"):
        assert '<a href="/manual/">Documentation</a>' in client.get(f"/{tab}").text


def test_outside_a_checkout_the_manual_says_why(client, monkeypatch, tmp_path):
    monkeypatch.setattr(manual, "ROOT", tmp_path)
    monkeypatch.setattr(manual, "SITE", tmp_path / "build" / "manual")
    got = client.get("/manual/")
    assert got.status_code == 503 and "checkout of trainplan" in got.text


@pytest.mark.slow
def test_manual_is_built_and_served_offline(client, monkeypatch, tmp_path):
    need("mkdocs", "pip install -e '.[docs]'")
    monkeypatch.setattr(manual, "SITE", tmp_path / "manual")
    home = client.get("/manual/")
    assert home.status_code == 200, home.text
    assert "<title>trainplan</title>" in home.text
    guide = client.get("/manual/guides/search/")
    assert guide.status_code == 200 and "Find the best layout" in guide.text
    reference = client.get("/manual/reference/cli/")
    assert "trainplan evaluate" in reference.text and "--seq-len" in reference.text
    for page in (home.text, guide.text):
        external = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(https?:[^"]+)"', page)
        assert not external, external
    css = re.search(r'href="([^"]+\.css)"', home.text)
    assert css and client.get("/manual/" + css.group(1)).status_code == 200
    assert client.get("/manual/../pyproject.toml").status_code == 404
    assert client.get("/manual/no/such/page/").status_code == 404
