"""What a new user met on the pages of a clean clone, in a real browser (Playwright driving
Debian's Chromium against ``trainplan serve``). Marked slow and browser; skipped without Chromium
or the extras (see conftest).

* Search tab: a field's error ("gpus: '0' must be at least 1") went away neither when the field
  was corrected nor when a new search started (and was then cancelled): it stayed on screen
  beside a running, or a cancelled, search of other inputs;
* Search tab: the answer's notes were not shown (a requested value no layout uses is said there).
"""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from tests.web.conftest import need, need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402

from tests.web.conftest import TIMEOUT, go  # noqa: E402  (browser, page: conftest's fixtures)

expect.set_options(timeout=TIMEOUT)
GPUS_0 = "Error: gpus: '0' must be at least 1"


def _refuse_gpus_0(page) -> None:
    page.fill("input[name=gpus]", "0")
    page.click("#run")
    expect(page.locator(".field-error")).to_have_text([GPUS_0])
    expect(page.locator("input[name=gpus]")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#error")).to_be_visible()


def test_search_field_error_clears_on_edit_and_when_a_search_starts(page):
    go(page, "/search?" + urlencode({"model": "llama3-8b", "gpus": "8"}))
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    _refuse_gpus_0(page)
    # the refused field corrected: its error goes at once, before any search
    page.fill("input[name=gpus]", "16")
    expect(page.locator(".field-error")).to_have_count(0)
    expect(page.locator("#error")).to_be_hidden()
    expect(page.locator("input[name=gpus]")).not_to_have_attribute("aria-invalid", "true")
    # refused again; the inputs changed without an edit event (a script, a restored form), then a
    # long search started: the old refusal goes when it starts, and stays gone once cancelled
    _refuse_gpus_0(page)
    page.evaluate("document.querySelector('input[name=gpus]').value = '1024..16384'")
    page.select_option("select[name=model]", "deepseek-v3")
    page.click("#run")
    expect(page.locator("#cancel")).to_be_visible()
    expect(page.locator(".field-error")).to_have_count(0)
    expect(page.locator("#error")).to_be_hidden()
    page.click("#cancel")
    expect(page.locator("#status")).to_have_text("cancelled")
    expect(page.locator(".field-error")).to_have_count(0)
    expect(page.locator("#error")).to_be_hidden()


def test_search_answer_says_a_requested_value_no_layout_uses(page):
    """``tp 3;8`` on 96 GPUs: the answer is tp 8 and its notes say why tp 3 is unused (the
    heads rule, in the page's words: ``tp:`` where the command line writes ``--tp:``)."""
    go(page, "/search?" + urlencode({"model": "llama3-70b", "gpus": "96", "tp": "3;8"}))
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    expect(page.locator(".answer .mono").first).to_contain_text("tp 8")
    expect(page.locator(".answer-notes")).to_contain_text(
        "note: requested values no layout uses: tp 3 (tp: 3 does not divide "
        "num_attention_heads = 64)"
    )


LONG = 'model = "megatron-1.7b"\n[space]\npp = [1]\n[sweep]\ngpus = [8, 16]\n[what_if]\n' + (
    "hbm_capacity = [" + ", ".join(f"{1 + k / 100:g}" for k in range(32)) + "]\n"
)  # 64 points: long enough to be running when the page asks for another
SHORT = (  # the page's example grid's prices, trimmed to one part: the other price is a note
    'model = "megatron-1.7b"\ngpu_hour_price = { H100-SXM = 2.5, H200 = 3.2 }\n[space]\npp = [1]\n'
    "[sweep]\ngpus = [8, 16]\n"
)


def test_sweep_refused_while_another_runs_links_it_and_cancels_it(page):
    """One sweep at a time: Start while another runs is refused with the running sweep's link
    (/sweep?id=…) and a Cancel button beside the line (it said only "wait for it or cancel it",
    neither of which the page offered); Cancel stops it and follows it here, then Start runs."""
    running = page.request.post(page.base + "/api/sweep", data={"grid": LONG})
    assert running.ok
    other = running.json()["id"]
    go(page, "/sweep")
    page.fill("#grid", SHORT)
    page.click("#run")
    expect(page.locator("#error")).to_contain_text(
        f"sweep: {other} is running (follow it at /sweep?id={other}); wait for it or cancel it"
    )
    expect(page.locator("#running-sweep")).to_have_attribute("href", f"/sweep?id={other}")
    page.click("#cancel-running")
    expect(page.locator("#status")).to_contain_text("cancelled after", timeout=4 * TIMEOUT)
    expect(page.locator("#error")).to_be_hidden()
    page.click("#run")
    expect(page.locator("#sweep-done")).to_have_text("2 points", timeout=4 * TIMEOUT)
    expect(page.locator(".sweep-note")).to_have_text(
        "note: gpu_hour_price: H200 is priced and no point runs on it (this grid: H100-SXM); its "
        "price is unused"
    )
