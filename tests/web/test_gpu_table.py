"""The accelerator table at the bottom of each tab that chooses an accelerator
(:data:`interface.web.pages.GPU_PAGES`; the pipeline, checkpointing and about tabs have no GPU
and no table), in a real browser: each lists every accelerator of ``/api/gpus``, one row each,
as ``trainplan gpus`` does. The Sweep tab's table was empty: its
script never started the page (``TP.start``), which fills the table. Marked slow and browser;
skipped without Chromium or the extras (see conftest)."""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.web.conftest import need, need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402

from tests.web.conftest import TIMEOUT, go  # noqa: E402  (browser, page: conftest's fixtures)
from trainplan.interface.web.pages import GPU_PAGES  # noqa: E402

expect.set_options(timeout=TIMEOUT)


@pytest.mark.parametrize("tab", sorted(GPU_PAGES))
def test_every_tabs_accelerator_table_lists_every_accelerator(page, tab):
    with urllib.request.urlopen(f"{page.base}/api/gpus") as answer:
        names = [g["name"] for g in json.load(answer)]
    assert len(names) >= 20 and "H100-SXM" in names  # the catalogue, as trainplan gpus lists it
    go(page, f"/{tab}")
    rows = page.locator("#gpu-table tbody tr")
    expect(rows).to_have_count(len(names))
    assert rows.locator("td:first-child").all_inner_texts() == names
