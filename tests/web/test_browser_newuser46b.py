"""The page's side of tests/test_cli_newuser46b.py, in headless Chromium: the Search tab's layout
line writes B, m and s as the page's numbers (``B 2,048``, as the command line and the page's
heading do), and the planner's global batch in tokens field plans that many tokens. Marked slow
and browser; skipped without Chromium or the extras (see conftest)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from tests.web.conftest import go, need, need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402


def test_the_search_layout_line_writes_its_numbers_as_the_page_does(page):
    """Llama 3 8B on 8 GPUs: the catalogue's batch of 2,048 sequences of 8,192 tokens was shown
    "B 2048 … s 8192"; now "B 2,048" and "s 8,192" (the page's one number formatter, TP.num)."""
    go(page, "/search?" + urlencode({"model": "llama3-8b", "gpus": "8"}))
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    line = page.locator(".answer p.mono").first
    expect(line).to_contain_text("B 2,048, m ")
    expect(line).to_contain_text(", s 8,192")


def test_the_planner_takes_the_batch_in_tokens(page):
    """8,388,608 tokens in the planner's global-batch, tokens field: 1,024 sequences of 8,192,
    m = 1,024 ÷ (b 1 × dp 16) = 64 micro-batches."""
    go(page, "/planner?" + urlencode({"model": "llama3-70b", "tp": 4, "pp": 4, "dp": 16}))
    expect(page.locator("#layout-line")).to_contain_text("B 2,048, m 128, s 8,192")
    page.fill("input[name=global-batch-tokens]", "8,388,608")
    expect(page.locator("#layout-line")).to_contain_text("B 1,024, m 64, s 8,192")
