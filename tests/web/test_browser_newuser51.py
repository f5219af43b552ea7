"""The page's side of tests/test_cli_newuser51.py's packed documents: the planner gives the
MFU of a counter taking each pack for one sequence beside the documents' MFU, as the CLI's Step
line does (``time.mfu_pack``), and only where the two differ. Marked slow and browser; skipped
without Chromium or the extras (see conftest)."""

from __future__ import annotations

import pytest

from tests.web.conftest import go, need, need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402

PACKED = "/planner?model=llama3-8b&dp=8&seq-len=8192&global-batch=64&mfu-convention=megatron"


def test_the_planner_gives_the_packs_mfu_beside_the_documents(page):
    """Llama 3 8B on 8 H100s in packs of 2,048-token documents under Megatron's convention:
    48.8 % over the documents' FLOPs, 53.9 % counting each pack's s² attention
    (tests/test_cli_newuser51.py derives the ratio, 26,985,726,197,366,784 /
    24,452,451,406,970,880); without packed documents the figure is not shown."""
    go(page, PACKED + "&document-length=2048")
    expect(page.locator("#mfu")).to_have_text("48.8%")
    expect(page.locator("#mfu-pack")).to_have_text("53.9%")
    go(page, PACKED)
    expect(page.locator("#mfu")).not_to_have_text("48.8%")
    expect(page.locator("#mfu-pack")).to_have_count(0)
