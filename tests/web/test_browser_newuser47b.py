"""The page's side of tests/test_cli_newuser47b.py, in headless Chromium: a Planner link with a
model's dimensions and no size plans that model by its dimensions, as ``trainplan evaluate`` does,
not the default catalogue model beside a refusal. Marked slow and browser; skipped without
Chromium or the extras (see conftest)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from tests.web.conftest import go, need, need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402


def test_a_planner_link_with_dimensions_plans_the_model_they_describe(page):
    """``/planner?arch=gpt&layers=80&hidden=8192&heads=64&tp=4`` showed llama3-70b and a refusal;
    ``trainplan evaluate --arch gpt --layers 80 --hidden 8192 --heads 64 --tp 4`` plans the GPT
    model those dimensions describe. Counted by hand (GPT-2/Megatron-LM's layer, V 51,200, s
    4,096 learned positions, tied embeddings; tests/test_cli_newuser47.py ``gpt_params``): a
    layer 12h² + 13h = 805,412,864, 80 of them 64,433,029,120, + V·h 419,430,400 + s·h
    33,554,432 + the final norm 16,384 = 64,886,030,336 parameters — not the size field's
    default 70B, which is not sent beside the dimensions."""
    h = 8192
    assert 80 * (12 * h * h + 13 * h) + 51200 * h + 4096 * h + 2 * h == 64_886_030_336
    go(
        page,
        "/planner?" + urlencode({"arch": "gpt", "layers": 80, "hidden": h, "heads": 64, "tp": 4}),
    )
    expect(page.locator("#headline")).to_contain_text("64,886,030,336 parameters")
    expect(page.locator("#headline")).to_contain_text("on 4 × H100-SXM")
    expect(page.locator("input[name=_source][value=size]")).to_be_checked()
    expect(page.locator("#error")).to_have_text("")


def test_an_example_link_reads_the_name_in_any_case(page):
    """``/planner?example=FSDP-70B-64`` said the name was no example; it opens fsdp-70b-64 (70B
    over dp 64 with ZeRO-3), as ``trainplan example FSDP-70B-64`` runs it; an unknown name is
    refused with the command line's words (and the close names)."""
    go(page, "/planner?example=FSDP-70B-64")
    expect(page.locator("#layout-line")).to_contain_text("dp 64 × tp 1 × pp 1")
    expect(page.locator("#error")).to_have_text("")
    go(page, "/planner?example=FSDP-70C")
    expect(page.locator("#error")).to_contain_text(
        "example: 'FSDP-70C' is not an example; did you mean fsdp-70b-64"
    )
