"""The sweep tab in a real browser: the example grid started from the page, its progress shown,
then its summary, the best table, the downloads and the figure — the same rows the CLI writes.
Marked slow and browser; skipped without Chromium or the extras (see conftest)."""

from __future__ import annotations

import pytest

from tests.web.conftest import need, need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402

from tests.web.conftest import TIMEOUT, go  # noqa: E402  (browser, page: conftest's fixtures)

expect.set_options(timeout=TIMEOUT)  # a sweep on a shared machine takes more than 5 s

GRID = """model = "megatron-1.7b"
tokens = 1e11
gpu_hour_price = 2
[space]
pp = [1]
zero = [1]
schedule = ["1f1b"]
[sweep]
gpus = [8, 16]
[what_if]
hbm_capacity = [1, 0.05]
"""


def test_a_sweep_from_the_page(page, tmp_path):  # noqa: F811  (the fixture)
    import pandas as pd

    go(page, "/sweep")
    expect(page.locator("#grid")).to_contain_text("[sweep]")  # the example grid
    page.fill("#grid", GRID)
    page.click("#run")
    expect(page.locator("#sweep-done")).to_have_text("4 points")
    assert "id=" in page.url  # the URL follows the sweep: a reload shows it again
    expect(page.locator("#status")).to_contain_text("optimal")
    expect(page.locator("#why-list")).to_contain_text(
        "infeasible, memory"
    )  # ×0.05: 4 GiB less the 3 GiB reserve
    expect(page.locator("#best-table tbody tr")).to_have_count(1)
    expect(page.locator("#chart svg")).to_be_visible()
    with page.expect_download() as download:
        page.click("#csv")
    path = tmp_path / "sweep.csv"
    download.value.save_as(path)
    rows = pd.read_csv(path)
    assert rows["point"].tolist() == [0, 1, 2, 3]
    best = rows[rows["status"] == "optimal"].sort_values("step_s").iloc[0]
    expect(page.locator("#best-table tbody tr").first).to_contain_text(f"{best['gpus']}")
    page.reload()
    expect(page.locator("#sweep-done")).to_have_text("4 points")


def test_a_grid_without_tokens_draws_the_step_time(page):  # noqa: F811  (the fixture)
    """A grid without ``tokens`` has no time to train: the page draws what ``trainplan
    sweep-plot`` draws then, the step time, and offers only the metrics the results have (step
    time and MFU); it asked for ``metric=time-to-train`` (HTTP 422) and showed an empty figure."""
    go(page, "/sweep")
    page.fill("#grid", 'model = "megatron-1.7b"\n[space]\npp = [1]\n[sweep]\ngpus = [8, 16]\n')
    failed = []
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    page.click("#run")
    expect(page.locator("#sweep-done")).to_have_text("2 points")
    expect(page.locator("#chart svg")).to_be_visible()
    expect(page.locator("#chart svg")).to_contain_text("step time (s)")
    expect(page.locator("#metric")).to_have_value("step-time")
    offered = page.locator("#metric option:not([hidden])")
    expect(offered).to_have_text(["step time", "MFU"])
    assert page.locator("#chart").get_attribute("data-src").endswith("metric=step-time")
    page.select_option("#metric", "mfu")
    expect(page.locator("#chart svg")).to_contain_text("MFU (%)")
    assert failed == []


def test_cancel_says_cancelling_then_what_it_kept(page):  # noqa: F811  (the fixture)
    """Cancel on a running sweep: the line says it is cancelling (the batches running end first)
    and the button cannot be pressed twice; then the sweep ends cancelled, short of its 80
    points, with the rows it ran to download."""
    what_if = ", ".join(f"{1 + k / 10:g}" for k in range(20))  # 20 × 4 GPU counts
    grid = GRID.replace("gpus = [8, 16]", "gpus = [8, 16, 32, 64]").replace(
        "hbm_capacity = [1, 0.05]", f"peak_flops = [{what_if}]"
    )
    go(page, "/sweep")
    page.fill("#grid", grid)
    page.click("#run")
    cancel = page.locator("#cancel")
    expect(cancel).to_be_visible()
    cancel.click()
    expect(page.locator("#status")).to_have_text("cancelling… (after the batches running now)")
    expect(cancel).to_be_disabled()
    status = page.locator("#status")
    expect(status).to_contain_text("cancelled after")
    done = int(status.inner_text().split("cancelled after ")[1].split()[0].replace(",", ""))
    assert done < 80
    expect(page.locator("#csv")).to_be_visible()
    expect(cancel).to_be_hidden()
