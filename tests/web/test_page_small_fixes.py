"""A new user's findings on the page, in headless Chromium: a form's Enter, or leaving a field
already sent, sends no second identical request (the RLHF tab sent its ``/api/rlhf`` twice);
at 390 px the accelerator table's rows stay two lines high (the source column squeezed them to
ten); a link that leaves a select out keeps its choice. Marked slow and browser; skipped
without Chromium or the extras (see conftest)."""

from __future__ import annotations

import time

import pytest

from tests.web.conftest import need, need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()


def test_enter_sends_no_second_request(browser, server):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if "/api/rlhf" in r.url else None)
    page.goto(server + "/rlhf")
    page.wait_for_selector("body[data-ready=true]", state="attached")
    page.wait_for_selector("#resident")
    time.sleep(1)
    assert len(sent) == 1, sent
    page.press("#inputs input[name=epochs]", "Enter")  # nothing edited
    page.fill("#inputs input[name=prompts]", "512")
    page.wait_for_function("document.querySelector('#assumptions').textContent !== ''")
    time.sleep(1)
    page.locator(
        "#inputs input[name=prompts]"
    ).blur()  # left: "change" after the "input" already sent
    time.sleep(1)
    page.close()
    assert len(sent) == 2 and sent[1].endswith("prompts=512"), sent


def test_the_accelerator_table_at_390_px(browser, server):
    """Each row two lines high (48 px at the page's font; 324 px for the longest source
    squeezed before), the table scrolling sideways; a tap on a source shows all of it."""
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(server + "/mfu")
    page.wait_for_selector("#gpu-table tbody tr")
    heights = page.eval_on_selector_all(
        "#gpu-table tbody tr", "rows => rows.map(r => r.getBoundingClientRect().height)"
    )
    longest = page.eval_on_selector_all(
        "#gpu-table tbody tr",
        "rows => rows.map(r => r.lastElementChild.textContent.length)"
        ".reduce((b, n, i, a) => (n > a[b] ? i : b), 0)",
    )
    page.locator("#gpu-table .clamp").nth(longest).click()
    opened = page.eval_on_selector_all(
        "#gpu-table tbody tr", f"rows => rows[{longest}].getBoundingClientRect().height"
    )
    page.close()
    assert max(heights) <= 60, heights
    assert opened > 120, opened


def test_a_link_without_a_select_keeps_its_choice(browser, server):
    """``/rlhf?gpu=H200`` names no ``algorithm``: the select keeps its first choice (ppo) and
    sends it, where filling the form from the link left it selecting nothing ("algorithm:
    required by this command")."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if "/api/rlhf" in r.url else None)
    page.goto(server + "/rlhf?gpu=H200")
    page.wait_for_selector("#resident")
    chosen = page.eval_on_selector("#inputs select[name=algorithm]", "s => s.value")
    page.close()
    assert chosen == "ppo"
    assert sent and "algorithm=ppo" in sent[0] and "gpu=H200" in sent[0], sent
