"""The Search tab's progress line after a time limit cut the cost tables: it kept "cost tables:
512 of 4,912 shapes" until CP-SAT's first solution, as though the tables were still being
built. The job now sends the cut's words (:meth:`optimizer.tables.CostTables.cut`, the CLI's
note) once the building stops, and the line says them and that CP-SAT solves. Every text the
line shows is recorded from the page's start (a MutationObserver wired by an init script), so
no step is missed however fast the search runs."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from tests.web.conftest import TIMEOUT, go, need, need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402

expect.set_options(timeout=TIMEOUT)

RECORD = """
window.progressTexts = [];
new MutationObserver((records) => {
  for (const r of records) {
    if (r.target.id !== "progress-text") continue;
    for (const n of r.addedNodes) window.progressTexts.push(n.textContent);
  }
}).observe(document, { subtree: true, childList: true });
"""
"""Each text node set into the progress line (``text.textContent = …`` adds a new one), in
order, from before the page's own script runs."""

CUT = (
    "the time limit cut the cost tables at 64 of 4,912 shapes, the first in tie-break order "
    "(fewest model-parallel GPUs first)"
)
"""DeepSeek-V3 on 2,048 H100s cut at its first block, 64 shapes under a limit
(tests/test_cli_time_limit_blocks.py: the CLI's note for the same search)."""


def test_the_progress_line_says_the_cut_and_moves_on_to_the_solve(page):
    """A time limit of 2 ms (a query no other test runs, so the server's cache does not answer
    it): the line said "cost tables: 64 of 4,912 shapes", then the cut in the CLI's words with
    "CP-SAT solving…", never the table count again before the answer; the note under the status
    starts with the same words."""
    page.add_init_script(RECORD)
    job = {"model": "deepseek-v3", "gpus": "2048", "gpu": "H100-SXM", "time-limit": "0.002"}
    go(page, "/search?" + urlencode(job))
    expect(page.locator("#status")).to_have_text(
        "best found within the time limit — not proven optimal", timeout=4 * TIMEOUT
    )
    texts = page.evaluate("window.progressTexts")
    said = f"{CUT}; CP-SAT solving…"
    assert said in texts, texts
    at = texts.index(said)
    assert texts[at - 1] == "cost tables: 64 of 4,912 shapes", texts
    assert not any(t.startswith("cost tables: 64 of 4,912") for t in texts[at:]), texts
    assert texts[-1].startswith("done in "), texts
    expect(page.locator("#time-limit-note")).to_contain_text(f"note: {CUT}; ")
