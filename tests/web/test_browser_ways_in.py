"""The page as the original tool was, in a real browser: its hash links and named examples, links
that reproduce the screen, tab state, errors next to their field, number fields read by the API,
the fixes of the checkpointing player, the size-only Planner, accelerators without a link figure,
mode switches, a search that can be cancelled, a long timeline a browser can hold, keyboard use,
and the API page's "Try it out". Each test fails on any script or console error (the ``page``
fixture of test_browser). Marked slow and browser, as test_browser."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from tests.web.conftest import TIMEOUT, cli_json, go, need, need_chromium, wait_for_held

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import Page, expect  # noqa: E402

expect.set_options(timeout=TIMEOUT)


def api_json(page: Page, path: str):
    with urllib.request.urlopen(page.base + path, timeout=60) as res:  # type: ignore[attr-defined]
        return json.loads(res.read())


def sent(requests: list[str], path: str) -> list[list[tuple[str, str]]]:
    """The query pairs of every request the page made to ``path``."""
    return [parse_qsl(urlsplit(u).query) for u in requests if urlsplit(u).path == path]


def record(page: Page) -> list[str]:
    urls: list[str] = []
    page.on("request", lambda r: urls.append(r.url))
    return urls


# ------------------------------------------------------------------------ number fields


def test_fields_go_to_the_api_as_typed(page):
    """The page splits and reads nothing: "16,384" and "4e 6" reach the API exactly as typed,
    each as one value of its parameter."""
    urls = record(page)
    go(page, "/frontier?model=llama3-8b&gpus=8")
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    page.fill("input[name=gpus]", "16,384")
    page.fill("input[name=tp]", "4e 0")
    page.click("#run")
    expect(page.locator("#cancel")).to_be_hidden()  # the search ended (Search stays live)
    last = sent(urls, "/api/frontier/stream")[-1]
    assert [v for k, v in last if k == "gpus"] == ["16,384"]
    assert [v for k, v in last if k == "tp"] == ["4e 0"]
    assert "gpus=16%2C384" in page.url  # the address keeps the text too


def test_16384_is_one_gpu_count_in_search(page):
    # the degrees fixed: the number's grammar is under test, not a free search of 16,384 GPUs
    go(page, "/search?model=llama3-70b&gpus=64&tp=8&pp=8&micro-batch=1")
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    page.fill("input[name=gpus]", "16,384")
    page.click("#run")
    expect(page.locator("#status")).to_have_text(re.compile("proven optimal|best found"))
    expect(page.locator(".answer h3").first).to_contain_text("16,384 ×")


def test_4_comma_0_is_refused_next_to_its_field(page):
    go(page, "/planner?model=llama3-70b&dp=2&tp=4&pp=8")
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", re.compile(r"\d+"))
    page.fill("input[name=tp]", "4,0")
    error = page.locator("#error-tp")
    expect(error).to_contain_text("'4,0' is not a number")
    expect(page.locator("input[name=tp]")).to_have_attribute("aria-invalid", "true")


# ------------------------------------------------------------------------ errors next to fields


def test_errors_sit_next_to_their_field_and_stale_results_are_dimmed(page):
    go(page, "/planner?model=llama3-70b&dp=4&tp=4&pp=4")
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", re.compile(r"\d+"))
    page.fill("input[name=tp]", "0")
    expect(page.locator("#error-tp")).to_have_text("Error: tp: '0' must be at least 1")
    top = page.locator("#error")  # at the top only a link to the field (it may be out of view)
    expect(top).to_have_text("Error at the tp field: go to the field")
    top.locator("a").click()
    expect(page.locator("input[name=tp]")).to_be_focused()
    assert _seen_opacity(page, "#verdict") == 0.45  # the last answer, dimmed
    page.fill("input[name=tp]", "4")
    expect(page.locator(".field-error")).to_have_count(0)  # at once, the answer on its way
    expect(page.locator("#results")).to_have_attribute("aria-busy", "false")  # the answer in
    assert _seen_opacity(page, "#verdict") == 1
    go(page, "/rlhf?algorithm=ppo&samples-per-prompt=0")  # another tab, another field
    expect(page.locator("#error-samples-per-prompt")).to_contain_text("samples")


def test_a_refused_search_says_it_did_not_run(page):
    """A search the API refused left its status card empty, a blank box above the last answer;
    now it says it did not run, and the error names the field."""
    go(page, "/search?model=llama3-70b&gpus=0")
    expect(page.locator("#error-gpus")).to_have_text("Error: gpus: '0' must be at least 1")
    expect(page.locator("#status")).to_have_text(
        "not run: an input is refused (the error above names it)"
    )
    # the line is what became of this run, at full strength; the last answer's area is dimmed
    assert _seen_opacity(page, "#status") == 1 and _seen_opacity(page, "#answers") == 0.45


def _seen_opacity(page, selector: str) -> float:
    """The opacity an element is drawn at: its own times every ancestor's."""
    return page.evaluate(
        """(sel) => { let o = 1; for (let e = document.querySelector(sel); e; e = e.parentElement)
            o *= Number(getComputedStyle(e).opacity); return Math.round(o * 1000) / 1000; }""",
        selector,
    )


@pytest.mark.parametrize(
    "query, field, other",
    [
        ("stages=4&microbatches=8&t-fb=2", "t-fb", "backward-ratio"),
        ("stages=4&microbatches=8&schedule=zb-h1&backward-ratio=2", "backward-ratio", "t-b"),
    ],
)
def test_a_value_that_does_not_apply_is_marked_not_the_field_it_asks_for(page, query, field, other):
    """A refused value's line also says what to give instead ("t-fb: '2' does not apply: 1f1b
    runs whole backwards: give backward-ratio"): the field marked is the one holding the value."""
    go(page, f"/pipeline?{query}")
    error = page.locator(f"#error-{field}")
    expect(error).to_contain_text(f"{field}: '2' does not apply")
    expect(error).to_contain_text(f"give {other}")
    expect(page.locator(f"input[name={field}]")).to_have_attribute("aria-invalid", "true")
    expect(page.locator(f"input[name={other}]")).not_to_have_attribute("aria-invalid", "true")
    expect(page.locator(".field-error")).to_have_count(1)


@pytest.mark.parametrize(
    "query, line",
    [
        ("model=llama3-70b&layers=12", "layers: 12 does not apply: model llama3-70b has its own"),
    ],
)
def test_a_link_with_a_model_and_its_dimensions_says_they_do_not_apply(page, query, line):
    """The size fields are hidden beside a named model and not sent; a link that gives both is
    refused at the top with the API's (and the CLI's) line, not shown as if the size were read."""
    go(page, f"/planner?{query}")
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", re.compile(r"\d+"))
    error = page.locator("#error")
    expect(error).to_contain_text(line)
    expect(error).to_contain_text("give them with params instead of model")
    page.fill("input[name=tp]", "4")  # an edit: the link's error has been read
    expect(error).to_be_hidden()


def test_a_link_with_a_dimension_and_no_model_is_read_as_the_command_line_reads_it(page):
    """``/planner?kv_heads=2`` (a dimension, no model, no size) showed the default model beside
    the refusal ``kv-heads: 2 does not apply: model llama3-70b has its own``. A link's dimensions
    without a model now open the size fields (tests/web/test_browser_newuser47b.py), the size's
    default not sent beside them, so the page refuses what ``trainplan evaluate --kv-heads 2``
    refuses, in its words."""
    go(page, "/planner?kv_heads=2")
    expect(page.locator("input[name=_source][value=size]")).to_be_checked()
    expect(page.locator("#error")).to_contain_text(
        "model: give model NAME (a catalogue name or a config.json path), params SIZE, or the "
        "dimensions layers hidden heads"
    )


def test_a_word_of_an_aside_is_not_the_field_edited(page):
    """Checkpointing at n = 5,000 is refused ("layers: 5,000 is above the limit of 1,000 layers
    (the walk-through lists every tensor …)"); editing every then moved the layers' line under
    the every field, since the aside spells "every". The line stays at layers."""
    go(page, "/ckpt?layers=5000&every=3")
    line = "Error: layers: 5,000 is above the limit of 1,000 layers (the walk-through lists"
    expect(page.locator("#error-layers")).to_contain_text(line)
    with page.expect_response(lambda r: "/api/ckpt?" in r.url and "every=4" in r.url):
        page.fill("input[name=every]", "4")
    expect(page.locator("#error-layers")).to_contain_text(line)
    expect(page.locator("#error-every")).to_have_count(0)


# ------------------------------------------------------------------------ the player, 70B, links


def test_checkpoint_player_after_an_edit(page):
    urls = record(page)
    go(page, "/ckpt?layers=9&every=3&step=4")
    expect(page.locator("#step-info")).to_contain_text("step 4 of 27")
    page.fill("input[name=layers]", "12")
    expect(page.locator("#step-info")).to_contain_text("of 36")
    page.click("#next")
    step = int(page.locator("#step-info").get_attribute("data-step") or 0)
    page.click("#next")
    expect(page.locator("#step-info")).to_have_attribute("data-step", str(step + 1))
    expect(page.locator("#frame svg")).to_contain_text(f"step {step + 1}:")
    page.fill("#delay", "0.05")
    page.click("#play")
    page.wait_for_function("() => Number(document.querySelector('#step-info').dataset.step) >= 36")
    assert "step=36" in page.url and "layers=12" in page.url
    for query in sent(urls, "/api/ckpt"):  # the page's step never reaches the report
        assert "step" not in dict(query)


def test_planner_size_70b_replaces_the_previous_model(page):
    go(page, "/planner?model=llama3-405b&dp=8&tp=8&pp=16")
    expect(page.locator("#headline")).to_contain_text("llama3-405b")
    page.check("input[name=_source][value=size]")
    page.fill("input[name=params]", "70B")
    want = cli_json("evaluate", "--params", "70B", "--dp", "8", "--tp", "8", "--pp", "16")
    expect(page.locator("#headline")).to_contain_text("70B: 70,000,000,000 parameters")
    total = str(want["memory"]["total_bytes"])
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", total)
    expect(page.locator("#memory-figure")).to_have_attribute("data-src", re.compile("params=70B"))
    expect(page.locator("#mfu")).to_have_text("—")  # a size has no step time: said, not stale
    assert "model=" not in page.url


@pytest.mark.parametrize(
    ("gpu", "fields"),
    [
        ("MI300X", {"scaleout-gbps": "50"}),
        ("TPUv4", {"nvlink-domain": "4", "nvlink-gbps": "45", "scaleout-gbps": "25"}),
    ],
)
def test_an_accelerator_without_a_link_figure_takes_it_on_the_page(page, gpu, fields):
    go(page, "/planner?model=llama3-70b&dp=8&tp=8")
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", re.compile(r"\d+"))
    page.select_option("select[name=gpu]", gpu)
    first = next(iter(fields))
    # a knob the command line takes by --set, named by its query parameter (the field's name)
    expect(page.locator(f"#error-{first}")).to_contain_text(f"give {first}")
    expect(page.locator("#links-note")).to_contain_text(f"{gpu}'s row")
    args = ["--model", "llama3-70b", "--dp", "8", "--tp", "8", "--gpu", gpu]
    for name, value in fields.items():
        page.fill(f"input[name={name}]", value)
        args += ["--set", f"{name.replace('-', '_')}={value}"]  # a knob taken by --set
    total = cli_json("evaluate", *args)["memory"]["total_bytes"]
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", str(total))
    expect(page.locator(".field-error")).to_have_count(0)


def test_mfu_mode_switches_keep_one_measurement(page):
    go(page, "/mfu")
    expect(page.locator("#mfu")).to_have_text("47.4%")
    for mode in ("throughput", "rate", "step", "rate", "throughput"):
        page.check(f"input[name=_mode][value={mode}]")
        expect(page.locator("#mfu")).to_have_text("47.4%")  # the same run in each form
        expect(page.locator("#error")).to_be_hidden()
        expect(page.locator(".field-error")).to_have_count(0)
    page.fill("input[name=params]", "35e9")  # one params field serves step and throughput
    expect(page.locator("#mfu")).to_have_text("23.7%")
    page.check("input[name=_mode][value=step]")
    expect(page.locator("#mfu")).to_have_text("23.7%")


def test_rlhf_algorithm_and_reward_switches(page):
    go(page, "/rlhf?algorithm=ppo&policy-params=70e9&reward=rule&samples-per-prompt=4")
    ppo = cli_json("rlhf", "--algorithm", "ppo", "--policy-params", "70e9", "--reward", "rule",
                   "--samples-per-prompt", "4")["resident_bytes"]  # fmt: skip
    expect(page.locator("#resident")).to_have_text(f"{ppo / 1e12:.3f} TB")
    for algorithm, reward in (("dpo", None), ("grpo", "rule"), ("ppo", "model"), ("dpo", None)):
        page.select_option("#inputs select[name=algorithm]", algorithm)
        if reward:
            page.select_option("#inputs select[name=reward]", reward)
        args = ["--algorithm", algorithm, "--policy-params", "70e9"]
        if algorithm != "dpo":
            args += ["--reward", reward or "model", "--samples-per-prompt", "4"]
        want = cli_json("rlhf", *args)["resident_bytes"]
        expect(page.locator("#resident")).to_have_text(f"{want / 1e12:.3f} TB")
        expect(page.locator("#error")).to_be_hidden()
        expect(page.locator(".field-error")).to_have_count(0)
    expect(page.locator("#inputs select[name=reward]")).to_be_disabled()  # DPO has no reward
    expect(page.locator("#inputs input[name=samples-per-prompt]")).to_be_disabled()
    expect(page.locator("#inputs select[name=old-log-prob]")).to_be_disabled()  # nor a PPO ratio
    # the engine's log-probs: the actor's forward leaves the scoring phase, as on the CLI
    # (rule-reward GRPO: rollout 2N, scoring 2N, training 6N per token — scoring 20% of the FLOPs)
    page.select_option("#inputs select[name=algorithm]", "grpo")
    page.select_option("#inputs select[name=reward]", "rule")
    page.select_option("#inputs select[name=old-log-prob]", "engine")
    want = cli_json("rlhf", "--algorithm", "grpo", "--policy-params", "70e9", "--reward", "rule",
                    "--samples-per-prompt", "4", "--old-log-prob", "engine")  # fmt: skip
    assert want["phase_flops_share"]["scoring"] == 0.2
    expect(_cells(page, "#phases-table", 1).nth(2)).to_contain_text(_pct(0.2))


# ------------------------------------------------------------------------ hash links and examples


def _examples() -> list[tuple[str, str]]:
    from trainplan.interface.examples import examples

    return [(name, ex["tab"]) for name, ex in examples().items()]


HASH = {"planner": "plan", "pipeline": "pipeline", "mfu": "mfu", "ckpt": "ckpt", "rlhf": "rlhf"}
"""The original tool's hash of each tab."""


def _fixed(x: float, digits: int) -> str:
    """``x`` with ``digits`` decimals and thousands separators as the page writes it (app.js
    ``TP.fixed``, as Python's format does: the double's exact value, a tie to the even digit)."""
    q = Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_EVEN)
    return f"{q:,}"


def _gb(b: float) -> str:
    """The page's bytes (app.js ``gb``): GB with two decimals and thousands separators."""
    return f"{_fixed(b / 1e9, 2)} GB"


def _pct(x: float) -> str:
    """The page's fractions (app.js ``pct``)."""
    return f"{_fixed(x * 100, 1)}%"


def _secs(s: float | None) -> str:
    """The page's durations (app.js ``secs``)."""
    if s is None:
        return "—"
    for limit, scale, unit, digits in ((1, 1e-3, "ms", 1), (120, 1, "s", 3), (7200, 60, "min", 1),
                                       (172800, 3600, "h", 1)):  # fmt: skip
        if s < limit:
            return f"{_fixed(s / scale, digits)} {unit}"
    return f"{_fixed(s / 86400, 1)} days"


def _cells(page: Page, table: str, row: int):
    return page.locator(f"{table} tr[data-row='{row}'] td")


def expect_tab_figures(page: Page, tab: str, want: dict) -> None:
    """The page shows the CLI's figures of its tab for the same inputs: the headline figure, and
    the tables the original page had beside it (the planner's ZeRO comparison and its traffic
    table's time if nothing overlapped; the micro-batches held per stage; HFU and the attention
    FLOPs line; the tensors held without checkpointing and the checkpoints by name; the RLHF
    phases' FLOPs and time shares)."""
    if tab == "planner":
        total = str(want["memory"]["total_bytes"])
        expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", total)
        for i, r in enumerate(want["zero_table"]):
            expect(_cells(page, "#zero-table", i).nth(0)).to_have_text(str(r["zero_stage"]))
            expect(_cells(page, "#zero-table", i).nth(1)).to_have_text(_gb(r["model_state_bytes"]))
        for i, r in enumerate(want["traffic"]):
            expect(_cells(page, "#traffic-table", i).nth(5)).to_have_text(_secs(r["seconds"]))
    elif tab == "pipeline":
        frac = f"{want['bubble_fraction_exact']} = {want['bubble_fraction'] * 100:.1f}%"
        expect(page.locator("#bubble-fraction")).to_have_text(frac)
        for i, held in enumerate(want["held_per_stage"]):
            expect(_cells(page, "#held-table", i).nth(1)).to_have_text(f"{held:g}")
    elif tab == "mfu":
        expect(page.locator("#mfu")).to_have_text(_pct(want["mfu"]))
        if want.get("hfu") is not None:
            expect(page.locator("#hfu")).to_have_text(_pct(want["hfu"]))
        attention = want["attention"]
        line = f"attention {attention['formula']}" if attention["included"] else None
        expect(page.locator("#attention-line")).to_have_text(line or "attention FLOPs not counted")
    elif tab == "ckpt":
        expect(page.locator("#peak-held")).to_have_text(str(want["peak_held"]))
        summary = page.locator("#summary div b")
        expect(summary.nth(1)).to_have_text(str(want["peak_held_without_checkpointing"]))
        expect(summary.nth(3)).to_have_text(", ".join(want["checkpoints"]))
    else:
        expect(page.locator("#resident")).to_have_text(f"{want['resident_bytes'] / 1e12:.3f} TB")
        for i, phase in enumerate(("rollout", "scoring", "training")):
            cells = _cells(page, "#phases-table", i)
            expect(cells.nth(2)).to_contain_text(_pct(want["phase_flops_share"][phase]))
            expect(cells.nth(4)).to_contain_text(_pct(want["phase_time_share"][phase]))


@pytest.mark.parametrize(("name", "tab"), _examples(), ids=[n for n, _ in _examples()])
def test_every_example_opens_from_its_hash_link(page, name, tab):
    go(page, f"/#{HASH[tab]}?example={name}")
    page.wait_for_url(re.compile(rf"/{tab}\?"))
    expect(page.locator("#preset")).to_contain_text(f"Example {name}:")
    expect_tab_figures(page, tab, cli_json("example", name))


def test_link_parameters_override_the_example_and_a_wrong_tab_is_followed(page):
    go(page, "/#plan?example=fsdp-70b-64&dp=128&zero_stage=2")
    page.wait_for_url(re.compile(r"/planner\?"))
    expect(page.locator("input[name=dp]")).to_have_value("128")
    expect(page.locator("select[name=zero]")).to_have_value("2")
    want = cli_json("example", "fsdp-70b-64", "--dp", "128", "--zero", "2")
    expect_tab_figures(page, "planner", want)
    go(page, "/#plan?example=gpipe-4x8")  # a pipeline example named on the planner's hash
    page.wait_for_url(re.compile(r"/pipeline\?"))
    expect(page.locator("select[name=schedule]")).to_have_value("gpipe")
    page.fill("input[name=microbatches]", "16")  # an edit: the address holds the values now
    expect(page).to_have_url(re.compile(r"microbatches=16"))
    assert "example=" not in page.url
    expect(page.locator("#preset")).to_contain_text("edited")


HAND_WRITTEN = [
    ("plan", "model=llama3-8b&dp=8&zero_stage=3&micro_batch_size=2&framework=fsdp2", "evaluate",
     ["--model", "llama3-8b", "--dp", "8", "--zero", "3", "--micro-batch", "2", "--framework",
      "fsdp2"], "planner"),
    ("pipeline", "p=8&m=16&schedule=gpipe", "pipeline",
     ["--stages", "8", "--microbatches", "16", "--schedule", "gpipe"], "pipeline"),
    ("mfu", "params=8e9&tokens_per_second=1,000,000&gpu=H100-SXM&chips=64", "mfu",
     ["--params", "8e9", "--tokens-per-second", "1000000", "--gpu", "H100-SXM", "--chips", "64"],
     "mfu"),
    ("ckpt", "n=16&k=4", "ckpt", ["--layers", "16", "--every", "4"], "ckpt"),
    ("rlhf", "algorithm=dpo&policy_params=8e9", "rlhf",
     ["--algorithm", "dpo", "--policy-params", "8e9"], "rlhf"),
    ("pipeline", "stages=4", "pipeline", ["--stages", "4", "--microbatches", "8"], "pipeline"),
    ("ckpt", "every=2", "ckpt", ["--layers", "9", "--every", "2"], "ckpt"),
    ("ckpt", "n=16&k=4&labels=inputs", "ckpt",
     ["--layers", "16", "--every", "4", "--labels", "inputs"], "ckpt"),  # named by layer inputs
    ("mfu", "chips=1024", "mfu", ["--params", "70e9", "--tokens", "4e6", "--step-seconds", "7",
                                  "--peak-tflops", "989", "--chips", "1024"], "mfu"),
    ("rlhf", "algorithm=grpo", "rlhf", ["--algorithm", "grpo", "--policy-params", "70e9"], "rlhf"),
    ("mfu", "params=70e+9&tokens=4,000,000&step_seconds=7&peak_tflops=989&chips=512", "mfu",
     ["--params", "70e9", "--tokens", "4e6", "--step-seconds", "7", "--peak-tflops", "989",
      "--chips", "512"], "mfu"),  # the original's number forms: a link's + read back as a space
]  # fmt: skip
"""(hash, query, command, the CLI's arguments, page): links written by hand with the commands'
parameter names and one-letter options, the original's number forms, and parameters left out
(each tab's defaults fill them)."""


@pytest.mark.parametrize(("tab", "query", "command", "args", "path"), HAND_WRITTEN)
def test_a_hand_written_link_opens_its_tab_with_its_values(page, tab, query, command, args, path):
    go(page, f"/#{tab}?{query}")
    page.wait_for_url(re.compile(rf"/{path}\?"))
    expect_tab_figures(page, path, cli_json(command, *args))
    expect(page.locator("#error")).to_be_hidden()


ORIGINAL_LINKS = [
    ("plan", "model=llama3-70b&dp=8&tp=8&pp=2&zero_stage=1", "evaluate",
     ["--model", "llama3-70b", "--dp", "8", "--tp", "8", "--pp", "2", "--zero", "1"], "planner",
     {"dp": "8", "tp": "8", "pp": "2"}),
    ("pipeline", "pp=6&m=12&schedule=1f1b", "pipeline",
     ["--stages", "6", "--microbatches", "12", "--schedule", "1f1b"], "pipeline",
     {"stages": "6", "microbatches": "12"}),
    ("mfu", "params=70e9&tokens=4,000,000&gpus=512&step=7", "mfu",
     ["--params", "70e9", "--tokens", "4e6", "--chips", "512", "--step-seconds", "7",
      "--peak-tflops", "989"], "mfu",
     {"params": "70e9", "tokens": "4,000,000", "chips": "512", "step-seconds": "7"}),
    ("ckpt", "n=100&k=10", "ckpt", ["--layers", "100", "--every", "10"], "ckpt",
     {"layers": "100", "every": "10"}),
    ("rlhf", "algorithm=grpo&model=llama3-8b&gpus=16", "rlhf",
     ["--algorithm", "grpo", "--model", "llama3-8b", "--gpus", "16"], "rlhf",
     {"policy-params": ""}),
]  # fmt: skip
"""(hash, query, command, the CLI's arguments, page, field → shown text): one link per tab with
the original tool's names (``pp`` for the pipeline's stages, ``gpus`` and ``step`` for the MFU
tab's chips and seconds), a model given instead of a size on the RLHF tab (its 70e9 default is
then not sent)."""


@pytest.mark.parametrize(("tab", "query", "command", "args", "path", "fields"), ORIGINAL_LINKS)
def test_an_original_link_shows_its_values_and_no_error(page, tab, query, command, args, path,
                                                        fields):  # fmt: skip
    go(page, f"/#{tab}?{query}")
    page.wait_for_url(re.compile(rf"/{path}\?"))
    expect_tab_figures(page, path, cli_json(command, *args))
    for name, text in fields.items():
        expect(page.locator(f"input[name={name}]")).to_have_value(text)
    expect(page.locator("#error")).to_be_hidden()
    expect(page.locator(".field-error")).to_have_count(0)


def test_a_link_with_an_unknown_parameter_says_so(page):
    go(page, "/#pipeline?stagez=8&m=12")
    page.wait_for_url(re.compile(r"/pipeline\?"))
    error = page.locator("#error")
    expect(error).to_contain_text("'stagez' is no parameter of this tab")
    expect(error).to_contain_text("stages")
    expect(error).not_to_contain_text("No such option")
    expect(page.locator("input[name=microbatches]")).to_have_value("12")  # the rest applies
    page.fill("input[name=stages]", "8")  # an edit: the link's error has been read
    expect(error).to_be_hidden()


def test_a_shared_link_restores_the_screen(page, browser):
    go(page, "/mfu")
    expect(page.locator("#mfu")).to_have_text("47.4%")
    page.check("input[name=_mode][value=throughput]")
    page.fill("input[name=tokens-per-second]", "400000")
    page.check("input[name=attention]")
    page.fill("input[name=layers]", "80")
    page.fill("input[name=hidden]", "8192")
    page.fill("input[name=seq-len]", "4096")
    want = cli_json("mfu", "--params", "70e9", "--tokens-per-second", "400000", "--peak-tflops",
                    "989", "--chips", "512", "--attention", "--layers", "80", "--hidden", "8192",
                    "--seq-len", "4096")  # fmt: skip
    shown = f"{want['mfu'] * 100:.1f}%"
    expect(page.locator("#mfu")).to_have_text(shown)
    expect(page).to_have_url(re.compile("seq-len=4096"))
    other = browser.new_context().new_page()  # a colleague opens the link
    other.goto(page.url)
    expect(other.locator("#mfu")).to_have_text(shown)
    expect(other.locator("input[name=_mode][value=throughput]")).to_be_checked()
    expect(other.locator("input[name=hidden]")).to_have_value("8192")
    expect(other.locator("#attention-line")).to_have_text(
        page.locator("#attention-line").inner_text()
    )
    other.context.close()


def test_each_tab_keeps_its_state_across_tabs(page):
    go(page, "/pipeline?stages=4&microbatches=8")
    page.fill("input[name=microbatches]", "12")
    expect(page.locator("#bubble-fraction")).to_have_text("1/5 = 20.0%")  # 3/15
    page.click("header nav a[data-tab=ckpt]")
    page.wait_for_url(re.compile(r"/ckpt\?"))
    page.wait_for_selector("body[data-ready=true]", state="attached")  # else bind() refills it
    page.fill("input[name=layers]", "16")
    expect(page.locator("#peak-held")).to_have_text("8")
    page.click("header nav a[data-tab=pipeline]")
    page.wait_for_url(re.compile(r"/pipeline\?"))
    expect(page.locator("input[name=microbatches]")).to_have_value("12")
    expect(page.locator("#bubble-fraction")).to_have_text("1/5 = 20.0%")
    go(page, "/ckpt")  # a tab opened without a query shows its last state
    expect(page.locator("input[name=layers]")).to_have_value("16")


# ------------------------------------------------------------------------ cancel, size, keyboard


def test_cancel_stops_the_search_on_the_server(page):
    go(page, "/search?model=llama3-8b&gpus=8")
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    page.select_option("select[name=model]", "llama3-405b")
    page.fill("input[name=gpus]", "64..16384")
    page.fill("input[name=gpu]", "H100-SXM")
    page.click("#run")
    expect(page.locator("#cancel")).to_be_visible()
    deadline = time.time() + 30
    jobs: list = []
    while not jobs and time.time() < deadline:
        jobs = api_json(page, "/api/jobs")
        time.sleep(0.2)
    assert jobs and jobs[0]["kind"] == "search", "the search never started on the server"
    pid = jobs[0]["pid"]
    page.click("#cancel")
    expect(page.locator("#status")).to_have_text("cancelled")
    expect(page.locator("#run")).to_be_enabled()
    deadline = time.time() + 10
    while (api_json(page, "/api/jobs") or Path(f"/proc/{pid}").exists()) and time.time() < deadline:
        time.sleep(0.2)
    assert api_json(page, "/api/jobs") == []
    assert not Path(f"/proc/{pid}").exists(), "the search's process still runs"


def test_search_during_the_first_visit_example_cancels_it_and_answers_the_users(page):
    """The first visit to the Search tab runs the example (llama3-70b on 64 GPUs). The user
    changes the model and clicks Search while it runs: the example is cancelled and the user's
    search is answered (the button used to stay disabled until the example ended). The example's
    stream is held unanswered (page.route) so that it still runs at the click on any machine."""
    held: list = []

    def hold_the_first(route):
        if held:
            route.continue_()
        else:
            held.append(route)  # never answered: the page's click on Search aborts it

    page.route(lambda url: urlsplit(url).path == "/api/search/stream", hold_the_first)
    go(page, "/search")
    expect(page.locator("#cancel")).to_be_visible()  # the example runs
    wait_for_held(page, held)
    assert ("model", "llama3-70b") in parse_qsl(urlsplit(held[0].request.url).query)
    page.select_option("select[name=model]", "llama3-8b")
    page.fill("input[name=gpus]", "8")
    page.click("#run", timeout=5_000)
    want = cli_json("search", "--model", "llama3-8b", "--gpus", "8")
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    expect(page.locator(".answer h3")).to_have_text([want["job"]])
    expect(page.locator(".answer .objective")).to_have_text([want["objective_text"]])
    expect(page.locator("#cancel")).to_be_hidden()
    assert "model=llama3-8b" in page.url and "gpus=8" in page.url


def test_a_long_timeline_is_drawn_at_a_size_a_browser_holds(page):
    go(page, "/pipeline?stages=64&microbatches=512")
    svg = page.locator("#timeline svg")
    expect(svg).to_contain_text("summarised: 65,536 passes")
    size = page.evaluate("document.querySelector('#timeline').innerHTML.length")
    assert size < 1_000_000, size
    assert page.evaluate("document.documentElement.outerHTML.length") < 2_000_000
    expect(page.locator("#bubble-fraction")).to_have_text("63/575 = 11.0%")


def test_skip_link_named_charts_and_the_keyboard_player(page):
    go(page, "/ckpt?layers=9&every=3")
    expect(page.locator("#frame svg")).to_be_visible()
    page.keyboard.press("Tab")
    skip = page.locator("a.skip")
    expect(skip).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    for sel in ("#frame svg", "#held svg"):
        expect(page.locator(sel)).to_have_attribute("role", "img")
        expect(page.locator(sel)).to_have_attribute("aria-label", re.compile(r"\w+: \w+"))
    page.focus("#player")
    page.keyboard.press("ArrowRight")
    expect(page.locator("#step-info")).to_have_attribute("data-step", "2")
    page.keyboard.press("End")
    expect(page.locator("#step-info")).to_contain_text("step 27 of 27")
    page.keyboard.press("Home")
    expect(page.locator("#step-info")).to_have_attribute("data-step", "1")
    page.fill("#delay", "0.05")
    page.focus("#player")
    page.keyboard.press(" ")
    page.wait_for_function("() => Number(document.querySelector('#step-info').dataset.step) >= 5")
    page.keyboard.press(" ")
    expect(page.locator("#play")).to_have_attribute("aria-label", "play")


def test_about_lists_the_examples_sources_and_limits(page):
    go(page, "/about")
    rows = page.locator("#examples-table tbody tr")
    expect(rows).to_have_count(20)
    expect(page.locator("#sources")).to_be_visible()
    expect(page.locator("#limits")).to_be_visible()
    expect(page.locator(".prose")).to_contain_text("Rajbhandari et al., ZeRO (2019)")
    page.click("#examples-table a >> text=ckpt-100-every-10")
    page.wait_for_url(re.compile(r"/ckpt\?"))
    expect(page.locator("#peak-held")).to_have_text("20")


def test_api_page_try_it_out_sends_no_sentinel(page):
    go(page, "/docs")
    op = page.locator("[id$='-pipeline_api_pipeline_get']")
    op.locator(".opblock-summary").click()
    op.get_by_role("button", name="Try it out").click()
    values = op.locator("input[type=text]").evaluate_all("els => els.map(e => e.value)")
    assert not any("Sentinel" in v for v in values), values
    op.locator("input[placeholder=stages]").fill("4")
    op.locator("input[placeholder=microbatches]").fill("8")
    op.get_by_role("button", name="Execute").click()
    expect(op.locator(".live-responses-table tbody .response-col_status").first).to_have_text("200")
    expect(op.locator(".live-responses-table")).to_contain_text("bubble_fraction")


def test_address_uses_the_pages_names(page):
    go(page, "/#plan?seq_len=8192&micro_batch_size=2&model=llama3-8b")
    expect(page).to_have_url(re.compile(r"/planner\?.*seq-len=8192"))
    query = dict(parse_qsl(urlsplit(page.url).query))
    assert query["seq-len"] == "8192" and query["micro-batch"] == "2"
