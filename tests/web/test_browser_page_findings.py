"""A browser tester's findings, in headless Chromium: the planner shows every step term the CLI
shows and has the offload fields; results are marked busy while their request is on its way and
the edited field's old error goes at once; a rule of several fields is said at the one edited;
picking interleaved sets v = 2; the checkpointing player never asks for a frame while one is
on its way; figures keep a readable width at 390 px and scroll; the planner lists the MoE
host-calls note with its counts, and a dense model gets none. Marked slow and browser; skipped
without Chromium or the extras (see conftest)."""

from __future__ import annotations

import pytest

from tests.web.conftest import go, need, need_chromium, wait_for_held

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402


def test_planner_step_terms_add_up_with_offload(page):
    """DeepSpeed ZeRO-3, optimizer offloaded (the field, not only the link): the CLI's
    ``compute 239.452 s + bubble 0.0 ms + exposed comm 8.297 s + offload 9.009 s = 256.758 s``
    (7.856 s and 256.317 s before each micro-batch's last reduce-scatter bucket, after the
    backward's computation, waited whole, model/dp_exposure.py; 8.722 s and 257.183 s before
    DeepSpeed's coordinator was walked, model/deepspeed_fetches.py).
    The page showed "4.3 min step time = 4.0 min + 0.0 ms + 8.722 s"."""
    go(page, "/planner?model=llama3-8b&framework=deepspeed&dp=8&zero=3")
    page.fill("input[name=offload-optimizer]", "1")
    expect(page.locator("#step-time")).to_have_text("256.758 s")
    expect(page.locator("#step-terms")).to_have_text("239.452 s + 0.0 ms + 8.297 s + 9.009 s")
    label = page.locator("#step-terms + span")
    expect(label).to_have_text("compute + bubble + exposed comm + offload")
    assert page.locator("select[name=offload-params]").count() == 1


def test_results_busy_while_the_request_is_on_its_way(page):
    """The answer held back: the results are dimmed and aria-busy meanwhile, the edited field's
    old error is gone at once, and both clear with the answer."""
    go(page, "/planner?model=llama3-8b&dp=8&micro-batch=x")
    expect(page.locator("#error-micro-batch")).to_be_visible()
    held: list = []
    page.route("**/api/evaluate?*", lambda route: held.append(route))
    page.fill("input[name=micro-batch]", "1")
    expect(page.locator("#error-micro-batch")).to_have_count(0)
    expect(page.locator("#results")).to_have_attribute("aria-busy", "true")
    expect(page.locator("#results")).to_have_class("results stale")
    wait_for_held(page, held)
    for route in held:
        route.continue_()
    page.unroute("**/api/evaluate?*")
    expect(page.locator("#results")).to_have_attribute("aria-busy", "false")
    expect(page.locator("#results")).to_have_class("results")


def test_a_rule_of_several_fields_is_said_at_the_one_edited(page):
    """micro-batch 1e3 with the global batch 2,048 and dp 2: the line names global-batch first
    (``global-batch: 2,048 is not divisible by micro_batch_size 1,000 × dp 2 = 2,000``) and was
    shown at the global-batch field, which the user had not touched."""
    go(page, "/planner?model=llama3-8b&dp=2")
    page.fill("input[name=micro-batch]", "1e3")
    error = page.locator("#error-micro-batch")
    expect(error).to_contain_text("global-batch: 2,048 is not divisible by micro_batch_size 1,000")
    assert page.locator("#error-global-batch").count() == 0


def test_picking_interleaved_sets_two_virtual_stages(page):
    """v = 1 with interleaved is refused (422) at once; picking it sets v = 2, and picking
    another schedule takes that 2 back."""
    go(page, "/pipeline?stages=4&microbatches=8")
    page.select_option("select[name=schedule]", "interleaved")
    expect(page.locator("input[name=virtual-stages]")).to_have_value("2")
    expect(page.locator("#bubble-fraction")).to_contain_text("3/19")  # 3/(2·8 + 3)
    expect(page.locator("#error")).to_be_hidden()
    page.select_option("select[name=schedule]", "1f1b")
    expect(page.locator("input[name=virtual-stages]")).to_have_value("")
    expect(page.locator("#bubble-fraction")).to_contain_text("3/11")  # 3/(8 + 3)


def test_the_player_waits_for_each_frame(page):
    """Frames held back, 0.1 s per step, 2 s of play: one frame request, the one on its way (the
    player asked every 0.1 s whatever was pending, ~20 requests, never aborting them)."""
    go(page, "/ckpt?layers=9&every=3&step=1")
    expect(page.locator("#frame svg")).to_be_visible()
    held: list = []
    page.route("**/api/figures/ckpt-step?*", lambda route: held.append(route))
    page.fill("#delay", "0.1")
    page.click("#play")
    page.wait_for_timeout(2000)
    assert len(held) == 1, [r.request.url for r in held]
    for route in held:
        route.continue_()
    page.unroute("**/api/figures/ckpt-step?*")
    expect(page.locator("#step-info")).not_to_have_attribute("data-step", "2")  # plays on
    page.click("#play")


def test_figures_scroll_at_390_px(browser, server):
    """At 390 px the memory chart kept 100 % of a ~330 px box (labels under 7 px); it keeps
    640 px and its box scrolls sideways."""
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(server + "/planner?model=llama3-8b&dp=8")
    page.wait_for_selector("#memory-figure svg")
    width = page.eval_on_selector("#memory-figure svg", "s => s.getBoundingClientRect().width")
    box = page.eval_on_selector("#memory-figure", "b => [b.scrollWidth, b.clientWidth]")
    page.close()
    assert width >= 640 and box[0] > box[1], (width, box)


def test_planner_shows_the_host_calls_note_and_a_dense_model_none(page):
    """Qwen3-30B-A3B at ep 8 under Megatron on B200s, FP8 tensorwise: 128 / 8 = 16 experts a GPU,
    2 linears × 3 GEMMs × 16 = 96 expert GEMM calls (96 × 13.7 µs = 1.3 ms), and 4 tensors × 4
    kernels × 16 = 256 quantise launches (tests/interface/test_host_calls_note_cli.py derives
    both); the note is in the page's list of notes. Llama 3 8B, dense, gets none."""
    go(page, "/planner?model=qwen3-30b-a3b&gpu=B200&dp=8&ep=8&global-batch=64&seq-len=4096"
             "&precision=fp8&fp8-recipe=tensorwise")  # fmt: skip
    expect(page.locator("#headline")).to_contain_text("qwen3-30b-a3b")
    note = page.locator("#notes li", has_text="host's time to issue the routed experts' calls")
    expect(note).to_contain_text("each MoE layer issues 96 expert GEMM calls per micro-batch")
    expect(note).to_contain_text("about 1.3 ms of host time at 13.7 µs a call")
    expect(note).to_contain_text("256 more kernel launches per micro-batch on a GPU here")
    page.fill("input[name=ep]", "")
    page.select_option("select[name=model]", "llama3-8b")
    expect(page.locator("#headline")).to_contain_text("llama3-8b")  # the dense model's answer
    expect(note).to_have_count(0)
