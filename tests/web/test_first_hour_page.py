"""The page's first-hour fixes in a real browser (headless Debian Chromium, Playwright, against
``trainplan serve``): a planner link that carries an uploaded config.json reopens that model,
and a search the server answered before says its time is this request's."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from tests.web.conftest import TIMEOUT, cli_json, go, need, need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402

expect.set_options(timeout=TIMEOUT)

CONFIG = Path(__file__).resolve().parents[1] / "data" / "hf" / "llama3-8b" / "config.json"


def test_a_planner_link_with_a_config_reopens_that_model(page):
    """Upload, then reload the address: the link's ``config`` is the page's own parameter (the
    API's, :data:`interface.web.api.API_ONLY`), so the page evaluates the uploaded Llama 3 8B
    again — not the default llama3-70b after "link: 'config' is no parameter of this tab"."""
    total = cli_json("evaluate", "--model", str(CONFIG))["memory"]["total_bytes"]
    go(page, "/planner?model=llama3-70b")
    page.check("input[name=_source][value=config]")
    page.set_input_files("#config-file", str(CONFIG))
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", str(total))
    link = page.url
    assert dict(parse_qsl(urlsplit(link).query))["config"].startswith("{")
    page.goto(link)  # a reload, or the link shared
    page.wait_for_selector("body[data-ready=true]", state="attached")
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", str(total))
    expect(page.get_by_text("is no parameter of this tab")).to_have_count(0)
    assert page.locator("input[name=_source][value=config]").is_checked()
    assert "config=" in page.url and "model=" not in page.url


def test_a_saved_search_answer_says_whose_times_it_shows(page):
    """The second run of the same search is the server's cached answer: "done in 0.0 s" was
    this request's time beside the answer's "tables 0.73 s" of the first run; the page says the
    answer's times are the run that computed it, and a fresh search says only its own time.
    The search is one no other test of the session asks (a 24-GPU llama3-8b at 3,072 tokens):
    the server and its saved answers are shared by the session's browser tests."""
    go(page, "/search?" + urlencode({"model": "llama3-8b", "gpus": "24", "seq-len": "3072"}))
    text = page.locator("#progress-text")
    expect(text).to_contain_text("done in")
    assert "saved answer" not in text.inner_text()  # computed by this request
    page.click("#run")
    expect(text).to_contain_text(
        ": the server's saved answer to this same search (the times below are of the run that "
        "computed it)"
    )
    expect(page.locator("#answers")).to_contain_text("tables ")
