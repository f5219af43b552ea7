"""The page's side of tests/web/test_api_newuser50.py, in headless Chromium: a knob typed in
Other settings (``--set KEY=VALUE``, one a line) and refused is said beside that box, where the
user typed it, not beside the dedicated field of the same knob, which the user left empty.
Marked slow and browser; skipped without Chromium or the extras (see conftest)."""

from __future__ import annotations

import pytest

from tests.web.conftest import go, need, need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402


def test_a_set_key_is_refused_beside_other_settings(page):
    """``moe_capacity_factor=0`` typed in Other settings: the API's line (``moe_capacity_factor:
    0 must be positive``, trainplan evaluate --set's words) goes under that box, which is marked
    invalid; the MoE capacity-factor field stays clear. The same value typed in the dedicated
    field is said beside that field."""
    go(page, "/planner?model=llama3-70b&dp=8")
    expect(page.locator("#error")).to_have_text("")
    page.fill("textarea[name=set]", "moe_capacity_factor=0")
    expect(page.locator("#error-set")).to_have_text(
        "Error: moe_capacity_factor: 0 must be positive"
    )
    expect(page.locator("textarea[name=set]")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#error-moe-capacity-factor")).to_have_count(0)
    expect(page.locator("#error")).to_contain_text("Error at the set field")
    page.fill("textarea[name=set]", "")
    expect(page.locator("#error")).to_have_text("")
    page.fill("input[name=moe-capacity-factor]", "0")
    expect(page.locator("#error-moe-capacity-factor")).to_have_text(
        "Error: moe-capacity-factor: 0 must be positive"
    )
    expect(page.locator("#error-set")).to_have_count(0)
