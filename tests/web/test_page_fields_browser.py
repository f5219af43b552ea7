"""The page's new fields in headless Chromium: the Planner's Slurm segment field filled moves
ep 32 off NVLink as the CLI's ``--set segment_gpus`` does, its refusal beside the field, the
Other settings field's lines sent as ``set`` each; the per-stage answer's proven gap; the forms
at 1,280 and 390 px. The API's half: ``test_page_fields.py``. Marked slow and browser; skipped
without Chromium or the extras (see conftest)."""

from __future__ import annotations

import pytest

from tests.web.conftest import TIMEOUT, cli_json, go, need, need_chromium
from tests.web.test_page_fields import SEGMENT_JOB, query

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402

from trainplan.optimizer.per_stage import EQUAL_CHUNKS_SCOPE  # noqa: E402

expect.set_options(timeout=TIMEOUT)


def test_the_planner_segment_field_in_the_browser(page):
    """Filled, the segment field moves ep 32 to the scale-out fabric: the CLI's 4.429 s in the
    traffic table and its step time; a segment that does not divide the job is refused beside
    the field with the API's line; the Other settings field's lines go as ``set`` each."""
    want = cli_json("evaluate", *SEGMENT_JOB, "--set", "segment_gpus=16")
    go(page, f"/planner?{query(SEGMENT_JOB)}")
    expect(page.locator("#traffic tbody tr").nth(4)).to_contain_text("NVLink (fits in a domain)")
    page.fill("input[name=segment-gpus]", "16")
    ep_row = page.locator("#traffic tbody tr").nth(4)
    expect(ep_row).to_contain_text("scale-out")
    expect(ep_row.locator("td").nth(6)).to_have_text("4.429 s")
    expect(page.locator("#step-time")).to_have_text(f"{want['time']['step_s']:,.3f}\u00a0s")
    assert "segment-gpus=16" in page.url
    page.fill("input[name=segment-gpus]", "24")
    expect(page.locator("#error-segment-gpus")).to_have_text(
        "Error: segment-gpus: 24 must divide the job's 64 GPUs (Slurm's --segment splits a "
        "job's nodes into whole segments)"
    )
    page.fill("input[name=segment-gpus]", "")
    page.fill("textarea[name=set]", "segment_gpus=16\nmoe_node_limit=0")
    expect(page.locator("#error-set")).to_have_text(
        "Error: set: moe_node_limit: 0 must be at least 1"
    )
    page.fill("textarea[name=set]", "segment_gpus=16\n\nmemory_reserve_gib=4")
    expect(page.locator("#error")).to_be_hidden()
    expect(ep_row).to_contain_text("scale-out")
    assert "set=segment_gpus%3D16&set=memory_reserve_gib%3D4" in page.url
    page.reload()  # the link holds both lines, one a line again
    page.wait_for_selector("body[data-ready=true]", state="attached")
    expect(page.locator("textarea[name=set]")).to_have_value(
        "segment_gpus=16\nmemory_reserve_gib=4"
    )


def test_the_per_stage_gap_in_the_browser(page):
    """The per-stage answer shows its proven gap as the CLI prints one (ns below a µs, µs below a
    ms, then seconds: interface/render/per_stage_report.py ``gap_text``); the shapes field
    applies only with per stage ticked. At 6K (at 8K Transformer Engine's placeholder weight
    gradients leave Llama 3 70B on 16 H100s the uniform plan: model/terms/dummy_wgrads.py)."""
    go(page, "/search?model=llama3-70b&gpus=16&seq-len=6144")
    expect(page.locator("input[name=per-stage-shapes]")).to_be_disabled()
    page.check("input[name=per-stage]")
    expect(page.locator("input[name=per-stage-shapes]")).to_be_enabled()
    page.fill("input[name=per-stage-shapes]", "1")
    page.click("#run")
    expect(page.locator("#status")).to_have_text(f"OPTIMAL (proven over {EQUAL_CHUNKS_SCOPE})")
    expect(page.locator("#per-stage-gap")).to_have_text("2 ns")
    assert "per-stage-shapes=1" in page.url
    shown = page.evaluate("[3e-9, 2.5e-5, 0.0125, null].map(TP.gapText)")
    assert shown == ["3 ns", "25.0 µs", "12.5 ms", "none proven (time limit)"]


@pytest.mark.parametrize("width", [1280, 390])
def test_the_new_fields_fit(page, width, tmp_path):
    """At 1,280 and 390 px the forms with their new fields scroll no page sideways, and no field
    is wider than its form."""
    page.set_viewport_size({"width": width, "height": 900})
    for path in (f"/planner?{query(SEGMENT_JOB)}&segment-gpus=16&per-stage=true",
                 "/search?model=llama3-8b", "/frontier?model=llama3-8b"):  # fmt: skip
        go(page, path)
        sizes = page.evaluate(
            "() => [document.documentElement.scrollWidth, window.innerWidth,"
            " Math.max(...[...document.querySelectorAll('#inputs input, #inputs select,"
            " #inputs textarea')].map((e) => e.getBoundingClientRect().right)),"
            " document.querySelector('#inputs').getBoundingClientRect().right]"
        )
        assert sizes[0] <= sizes[1], (path, sizes)
        assert sizes[2] <= sizes[3], (path, sizes)
        page.locator("#inputs").screenshot(path=str(tmp_path / f"{width}.png"))
