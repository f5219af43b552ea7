"""The documentation at ``/manual/`` of ``trainplan serve``: linked from every page, built from
the checkout on first visit in the background (the visit answers at once with a page that reloads
itself), served from the package's files with nothing from a network, and a line saying how to get
it where it cannot be built or why its build failed."""

from __future__ import annotations

import re
import sys
import threading
import time
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


@pytest.fixture
def site(monkeypatch, tmp_path):
    """The site's folder in tmp_path, and no build running or failed before the test."""
    monkeypatch.setattr(manual, "SITE", tmp_path / "manual")
    monkeypatch.setattr(manual, "_BUILDER", None)
    monkeypatch.setattr(manual, "_FAILED", None)
    return manual.SITE


def wait_for_the_build() -> None:
    builder = manual._BUILDER
    if builder is not None:
        builder.join(30)
        assert not builder.is_alive()


def test_every_page_links_the_manual(client):
    for tab in ("planner", "search", "rlhf"):
        assert '<a href="/manual/">Documentation</a>' in client.get(f"/{tab}").text


def test_outside_a_checkout_the_manual_says_why(client, monkeypatch, tmp_path):
    monkeypatch.setattr(manual, "ROOT", tmp_path)
    monkeypatch.setattr(manual, "SITE", tmp_path / "build" / "manual")
    got = client.get("/manual/")
    assert got.status_code == 503 and "checkout of trainplan" in got.text


def test_without_mkdocs_the_manual_says_how_to_get_it(client, monkeypatch, site):
    monkeypatch.setitem(sys.modules, "mkdocs", None)  # import mkdocs raises ImportError
    got = client.get("/manual/")
    assert got.status_code == 503, got.text
    assert (
        "not available here: the documentation needs MkDocs: pip install -e '.[docs]'." in got.text
    )
    assert manual._BUILDER is None  # no build started


def test_the_first_visit_answers_at_once_while_one_build_runs(client, monkeypatch, site):
    """The build (here held on an Event, as MkDocs' minute or two) runs in the background: the
    visits answer 202 with a page reloading itself every 5 s, and start no second build; once
    built, the site is served."""
    release, builds = threading.Event(), []

    def build():
        builds.append(manual.SITE)
        assert release.wait(30)
        site.mkdir()
        (site / "index.html").write_text("<!doctype html><title>trainplan</title><p>built</p>")
        (site / manual._STAMP).touch()
        return site

    monkeypatch.setattr(manual, "_check", lambda: None)  # as with MkDocs installed
    monkeypatch.setattr(manual, "_build", build)
    first = client.get("/manual/")
    assert first.status_code == 202, first.text
    assert "<meta http-equiv='refresh' content='5'>" in first.text
    assert "Building the documentation (a minute or two)…" in first.text
    for path in ("/manual/", "/manual/guides/search/"):  # no site yet: every page waits
        assert client.get(path).status_code == 202
    assert builds == [site]  # one build, not one a visit
    release.set()
    wait_for_the_build()
    home = client.get("/manual/")
    assert home.status_code == 200 and "<p>built</p>" in home.text
    assert builds == [site]


def test_a_failed_build_is_the_next_visits_503_and_the_one_after_builds_again(
    client, monkeypatch, site
):
    builds = []

    def build():
        builds.append(1)
        raise RuntimeError("mkdocs build failed: Error: Config value 'nav': no page 'x.md'")

    monkeypatch.setattr(manual, "_check", lambda: None)
    monkeypatch.setattr(manual, "_build", build)
    assert client.get("/manual/").status_code == 202
    wait_for_the_build()
    failed = client.get("/manual/")
    assert failed.status_code == 503
    assert (
        "not available here: mkdocs build failed: Error: Config value 'nav': no page 'x.md'."
        in failed.text
    )
    assert client.get("/manual/").status_code == 202  # said once; this visit builds again
    wait_for_the_build()
    assert len(builds) == 2


@pytest.mark.slow
def test_manual_is_built_and_served_offline(client, site):
    need("mkdocs", "pip install -e '.[docs]'")
    building = client.get("/manual/")
    assert building.status_code == 202 and "Building the documentation" in building.text
    deadline = time.time() + 600  # MkDocs takes a minute or two, more on loaded cores
    while (home := client.get("/manual/")).status_code == 202 and time.time() < deadline:
        time.sleep(2)
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
