"""Every tab in a real browser (issue 14 item 4): headless Debian Chromium driven by Playwright
against ``trainplan serve``. Each tab loads with no script error and no request leaving
127.0.0.1; an input change brings the figures to the CLI's values for the same input; the
checkpoint animation advances; a bad input shows the CLI's error line; the frontier's CSV
downloads as the CLI writes it. Marked slow (CI runs ``-m slow``); skipped without Chromium or
the extras (see conftest)."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from urllib.parse import urlencode

import pytest
from click.testing import CliRunner

from tests.cli_runs import refusal, trainplan
from tests.web.conftest import TIMEOUT, cli_json, go, need, need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402

from trainplan.interface.cli import cli  # noqa: E402
from trainplan.interface.web.pages import GPU_PAGES  # noqa: E402
from trainplan.optimizer.per_stage import EQUAL_CHUNKS_SCOPE  # noqa: E402

expect.set_options(timeout=TIMEOUT)


TABS = {
    "planner": ("#memory-figure svg", "#memory-total"),
    "pipeline": ("#timeline svg", "#bubble-fraction"),
    "mfu": (None, "#mfu"),
    "ckpt": ("#frame svg", "#peak-held"),
    "rlhf": (None, "#resident"),
    "search": ("#answers .memory-figure svg", "#status.optimal"),
    "frontier": ("#chart svg", "#status.optimal"),
}


@pytest.mark.parametrize("tab", list(TABS))
def test_each_tab_loads(page, tab, tmp_path):
    go(page, f"/{tab}")
    figure, value = TABS[tab]
    expect(page.locator(value)).to_be_visible()
    if figure:
        expect(page.locator(figure).first).to_be_visible()
    if tab not in GPU_PAGES:  # no accelerator chosen on this tab: no accelerator table
        assert page.locator("#gpu-table").count() == 0
        return
    expect(page.locator("#gpu-table tbody tr").first).to_be_visible()  # the accelerator table
    expect(page.locator("#gpu-table")).to_contain_text("NVIDIA H100 Tensor Core GPU datasheet")
    # the rows' status headed as trainplan gpus heads it, the legend under the table
    expect(page.locator("#gpu-table thead")).to_contain_text("figures from")
    expect(page.locator("#gpu-status-legend")).to_contain_text("secondary = a copy of")
    assert "?" in page.url  # a first visit shows an example, in the URL
    page.screenshot(path=str(tmp_path / f"{tab}.png"), full_page=True)


def test_planner_input_change_matches_the_cli(page):
    go(page, "/planner?model=llama3-70b&dp=4&tp=4&pp=4")
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", re.compile(r"\d+"))
    page.fill("input[name=tp]", "8")
    page.fill("input[name=dp]", "2")
    page.select_option("select[name=recompute]", "full")
    want = cli_json(
        "evaluate",
        "--model",
        "llama3-70b",
        "--dp",
        "2",
        "--tp",
        "8",
        "--pp",
        "4",
        "--recompute",
        "full",
    )
    total = want["memory"]["total_bytes"]
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", str(total))
    expect(page.locator("#memory-total")).to_have_text(f"{total / 1e9:,.2f} GB")
    expect(page.locator("#memory-figure svg")).to_contain_text(
        f"total {total / 1e9:,.2f} GB at the peak"
    )
    expect(page.locator("#mfu")).to_have_text(f"{want['time']['mfu'] * 100:.1f}%")
    assert "tp=8" in page.url and "recompute=full" in page.url
    tp_row = [r for r in want["traffic"] if r["axis"] == "tp"][0]
    expect(page.locator("#traffic tbody tr").nth(1)).to_contain_text(
        "NVLink" if tp_row["link"] == "nvlink" else "scale-out"
    )
    # the URL is the plan: opened afresh, it shows the same figures
    go(page, page.url.removeprefix(page.base))  # type: ignore[attr-defined]
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", str(total))
    expect(page.locator("input[name=tp]")).to_have_value("8")


MEMORY_LAYOUTS = {
    # the page's default: a backward working set and NCCL's communicators the page once left out
    "megatron": "model=llama3-70b&dp=2&tp=4&pp=8",
    # gathered units, buffers, the recompute transient, the output layer released, the loss's
    # working set, and below the verdict the reserved peak of the all-gather stream's pool
    "fsdp2": "model=llama3-8b&framework=fsdp2&dp=8&recompute=full",
    # the MoE layer's working set and persistent buffers; over the memory, so no allocator
    # retries (the page once listed them under a layout that does not fit)
    "moe": "model=mixtral-8x7b&dp=8&ep=8&tp=2",
    # the context-parallel buffers
    "cp": "model=llama3-70b&tp=8&cp=2&dp=4&seq-len=32768&global-batch=64",
}


@pytest.mark.parametrize("name", list(MEMORY_LAYOUTS))
def test_planner_memory_table_lists_the_clis_lines(page, name):
    # every memory term the CLI prints is a row of the page's table, with the same figure, so the
    # rows add up to the total on the page as they do in the terminal
    query = MEMORY_LAYOUTS[name]
    args = [a for k, v in (kv.split("=") for kv in query.split("&")) for a in (f"--{k}", v)]
    done = trainplan("evaluate", *args)
    assert done.returncode == 0, done.stderr
    memory = done.stdout.split("Memory per GPU", 1)[1].split("\n\n", 1)[0]
    terms, after = memory.split("  verdict:", 1)
    want = [re.split(r"\s{2,}", line.strip()) for line in terms.splitlines()[1:] if line.strip()]
    # below the verdict the text may add the reserved peak and the allocator's retries
    extra = [w for w in ("reserved at least", "allocator retries") if f"  {w}" in after]
    go(page, f"/planner?{query}")
    expect(page.locator("#memory-total")).to_be_visible()
    rows = page.locator("#memory-table tbody tr")
    expect(rows).to_have_count(len(want) + len(extra))
    got = [
        [c.strip() for c in rows.nth(i).locator("td").all_inner_texts()] for i in range(len(want))
    ]
    assert got == want
    for i, w in enumerate(extra):
        expect(rows.nth(len(want) + i)).to_contain_text(w)


def test_planner_keeps_a_links_options_without_a_field(page):
    # a search answer's link may carry cluster options the form has none for: kept and said
    # (memory-reserve has a field now, the Links' reserve GiB: filled, not listed)
    args = ["--model", "llama3-70b", "--dp", "1", "--tp", "8", "--pp", "2"]
    go(page, "/planner?" + urlencode({"model": "llama3-70b", "dp": "1", "tp": "8", "pp": "2",
                                      "memory-reserve": "10", "hbm-efficiency": "0.8"}))  # fmt: skip
    expect(page.locator("#link-only")).to_have_text(
        "From the link, options without a field here (kept): hbm-efficiency = 0.8"
    )
    expect(page.locator("input[name=memory-reserve]")).to_have_value("10")
    sets = ["--set", "memory_reserve_gib=10", "--set", "hbm_efficiency=0.8"]
    want = cli_json("evaluate", *args, *sets)
    total = want["memory"]["capacity_bytes"]
    assert total != cli_json("evaluate", *args)["memory"]["capacity_bytes"]
    expect(page.locator("#memory-table")).to_contain_text(f"{total / 1e9:,.2f} GB")
    expect(page.locator("#step-time")).to_have_text(f"{want['time']['step_s']:,.3f}\u00a0s")
    page.fill("input[name=pp]", "4")  # a change keeps it too
    expect(page).to_have_url(re.compile(r"memory-reserve=10.*hbm-efficiency=0.8"))


def test_planner_bad_input_shows_the_cli_line(page):
    go(page, "/planner?model=llama3-70b&dp=4&tp=4&pp=4")
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", re.compile(r"\d+"))
    page.fill("input[name=tp]", "0")  # the CLI's line, next to the field it names
    expect(page.locator("#error-tp")).to_have_text("Error: tp: '0' must be at least 1")
    page.fill("input[name=tp]", "3")
    expect(page.locator("#error-tp")).to_contain_text("Error: ")
    page.fill("input[name=tp]", "4")
    expect(page.locator(".field-error")).to_have_count(0)
    expect(page.locator("#error")).to_be_hidden()
    # PyTorch's context_parallel flavours: refused under Megatron as the CLI refuses them, and
    # evaluated under fsdp2 (torchtitan) with the CLI's figure
    page.fill("input[name=dp]", "2")
    page.fill("input[name=cp]", "2")
    page.select_option("select[name=cp-kind]", "pytorch-alltoall")
    expect(page.locator("#error-cp-kind")).to_contain_text(
        "cp-kind: pytorch-alltoall is PyTorch's context_parallel (torchtitan, framework fsdp2)"
    )
    page.select_option("select[name=framework]", "fsdp2")
    args = ["--model", "llama3-70b", "--dp", "2", "--tp", "4", "--pp", "4", "--cp", "2"]
    want = cli_json("evaluate", *args, "--cp-kind", "pytorch-alltoall", "--framework", "fsdp2")
    total = str(want["memory"]["total_bytes"])
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", total)
    expect(page.locator(".field-error")).to_have_count(0)


@pytest.mark.parametrize(
    ("query", "args"),
    [
        ("model=llama3-8bb&tp=8", ["--model", "llama3-8bb", "--tp", "8"]),
        (
            "model=llama3-70b&gpu=H1000&tp=8",
            ["--model", "llama3-70b", "--gpu", "H1000", "--tp", "8"],
        ),
    ],
    ids=["model", "gpu"],
)
def test_a_link_with_a_name_not_in_the_list_shows_the_clis_line(page, query, args):
    # a typo in a link's model or GPU once fell back to the select's default (llama3-70b on an
    # H100-SXM) and showed its figures under the typed name; it is sent as given and refused
    # the CLI names the flag (--model: …), the page and its API the field (model: …)
    line = refusal(trainplan("evaluate", *args))
    assert line.startswith(f"{args[-4]}: ")
    go(page, f"/planner?{query}")
    expect(page.get_by_text(f"Error: {line[2:]}", exact=True).first).to_be_visible()
    expect(page.locator("#memory-total")).to_have_count(0)


def test_planner_uploads_a_config(page):
    go(page, "/planner?model=llama3-70b")
    page.check("input[name=_source][value=config]")
    config = Path(__file__).resolve().parents[1] / "data" / "hf" / "llama3-8b" / "config.json"
    page.set_input_files("#config-file", str(config))
    total = cli_json("evaluate", "--model", str(config))["memory"]["total_bytes"]
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", str(total))
    assert "config=" in page.url and "model=" not in page.url


def test_pipeline_split_schedule(page):
    """The schedule selector's zero-bubble and DualPipe entries: the page shows the CLI's figures
    and the timeline with its overlapped blocks."""
    go(page, "/pipeline?stages=4&microbatches=8")
    page.select_option("select[name=schedule]", "dualpipe")
    page.fill("input[name=t-fb]", "2")
    r = cli_json(
        "pipeline", "--stages", "4", "--microbatches", "8", "--schedule", "dualpipe", "--t-fb", "2"
    )
    expect(page.locator("#bubble-fraction")).to_have_text(
        f"{r['bubble_fraction_exact']} = {r['bubble_fraction'] * 100:.1f}%"
    )
    expect(page.locator("#timeline svg")).to_contain_text("overlapped F&B block")
    # per rank the CLI's "held per rank": chunk micro-batches in flight and W buffers (5 and
    # 1 2 2 1), not held_per_stage's 2.5 (of the rank's layers), which the page showed before
    rows = page.locator("#held-table tbody tr")
    expect(rows).to_have_count(4)
    got = [rows.nth(i).locator("td").all_inner_texts() for i in range(4)]
    want = zip(r["chunks_held_per_stage"], r["w_pending_per_stage"], strict=True)
    assert got == [[str(i), f"{h:g}", f"{w:g}"] for i, (h, w) in enumerate(want)], got


def test_pipeline_and_mfu_and_rlhf_values(page):
    go(page, "/pipeline?stages=4&microbatches=8")
    expect(page.locator("#bubble-fraction")).to_have_text("3/11 = 27.3%")
    page.select_option("select[name=schedule]", "interleaved")
    page.fill("input[name=virtual-stages]", "2")
    r = cli_json(
        "pipeline",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--schedule",
        "interleaved",
        "--virtual-stages",
        "2",
    )
    expect(page.locator("#bubble-fraction")).to_have_text(
        f"{r['bubble_fraction_exact']} = {r['bubble_fraction'] * 100:.1f}%"
    )
    expect(page.locator("#timeline svg")).to_contain_text("interleaved: p=4, m=8, v=2")
    go(page, "/mfu?params=70e9&tokens=4e6&step-seconds=7&peak-tflops=989&chips=512")
    expect(page.locator("#arithmetic")).to_have_text(
        "6 · 70e9 · 4e6 ÷ (989e12 · 512 · 7 s) = 47.4%"
    )
    page.check("input[name=_mode][value=throughput]")
    page.fill("input[name=tokens-per-second]", "571428")
    expect(page.locator("#arithmetic")).to_contain_text("571.428e3 tokens/s")
    go(page, "/rlhf?algorithm=ppo&policy-params=70e9")
    expect(page.locator("#resident")).to_have_text("2.520 TB")
    # the peak line leads with the figure the times use (H100-SXM's dense BF16), not with the
    # FP8 figure its source text opens with
    expect(page.locator("#assumptions")).to_contain_text(
        ". Peak: 989.4 TFLOP/s per chip — H100-SXM dense BF16, the accelerator table's (source: "
    )


def test_checkpoint_animation_advances(page):
    go(page, "/ckpt?layers=9&every=3")
    expect(page.locator("#step-info")).to_have_attribute("data-step", "1")
    page.fill("#delay", "0.1")
    page.click("#play")
    page.wait_for_function("() => Number(document.querySelector('#step-info').dataset.step) >= 6")
    page.click("#play")  # pause
    step = int(page.locator("#step-info").get_attribute("data-step") or 0)
    assert step >= 6 and f"step={step}" in page.url
    expect(page.locator("#frame svg")).to_contain_text(f"step {step}:")
    page.click("#last")
    expect(page.locator("#step-info")).to_contain_text("step 27 of 27")
    expect(page.locator("#frame svg")).to_contain_text("step 27: backward layer 1")


SEARCH = {"model": "llama3-8b", "gpus": "8"}


def test_search_shows_progress_and_the_proof(page):
    go(page, "/search?" + urlencode({"model": "llama3-70b", "gpus": "64"}))
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    expect(page.locator("#progress")).to_be_visible()
    expect(page.locator("#progress-text")).to_contain_text("done in")
    want = cli_json("search", "--model", "llama3-70b", "--gpus", "64")
    expect(page.locator(".answer .total").first).to_have_text(
        f"{want['memory']['total_bytes'] / 1e9:,.2f} GB"
    )
    expect(page.locator(".answer .objective").first).to_have_text(want["objective_text"])
    page.fill("input[name=min-mfu]", "0.9")
    page.click("#run")
    # the explanation re-solves without each constraint family: ~15 s of CPU, more under load
    expect(page.locator("#status")).to_have_text(
        "no layout satisfies the constraints", timeout=4 * TIMEOUT
    )
    # headed by the page's field, as every line the page shows (interface.flags.on_page)
    expect(page.locator("#explanation")).to_contain_text("min-mfu: the best MFU")


def test_search_says_what_a_setting_costs(page):
    # a link that forces the EP overlap on Mixtral 8x7B, 64 H100s: the CLI's note under the status
    job = {"model": "mixtral-8x7b", "gpus": "64", "gpu": "H100-SXM"}
    overlap = "overlap_moe_expert_parallel_comm"
    go(page, "/search?" + urlencode({**job, "moe-ep-overlap": overlap}))
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    args = ["--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "H100-SXM"]
    note = cli_json("search", *args, "--set", f"moe_ep_overlap={overlap}")["settings_cost"]["note"]
    expect(page.locator("#settings-cost")).to_have_text(
        "note: " + note.replace("--set moe_ep_overlap=", "moe-ep-overlap=")
    )
    expect(page.locator("#settings-cost")).to_contain_text("costs 4.6%")
    go(page, "/search?" + urlencode(job))  # without the setting: no note
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    expect(page.locator("#settings-cost")).to_be_hidden()


def test_search_per_stage_shows_the_stages_and_the_flags(page):
    # 6K: at 8K Transformer Engine's placeholder weight gradients (model/terms/dummy_wgrads.py)
    # leave Llama 3 70B on 16 H100s the uniform plan, no stages to show
    args = ["--model", "llama3-70b", "--gpus", "16", "--seq-len", "6144"]
    go(page, "/search?" + urlencode({"model": "llama3-70b", "gpus": "16", "seq-len": "6144"}))
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    page.check("input[name=per-stage]")
    page.click("#run")
    expect(page.locator("#status")).to_have_text(f"OPTIMAL (proven over {EQUAL_CHUNKS_SCOPE})")
    assert "per-stage=true" in page.url
    want = cli_json("search", *args, "--per-stage")
    ps, launch = want["per_stage"], want["launch"]
    rows = page.locator("#stage-table tbody tr")
    expect(rows).to_have_count(len(ps["stage_layers"]))
    # each stage's peak memory per GPU is the JSON's stages row, as the page writes GB (app.js
    # gb: two decimals of 1e9 bytes)
    peaks = [f"{r['stage_total_bytes'] / 1e9:,.2f} GB" for r in want["stages"]]
    want_rows = zip(ps["stage_layers"], ps["recompute_layers"], peaks, strict=True)
    for i, (n, k, peak) in enumerate(want_rows):
        expect(rows.nth(i).locator("td")).to_have_text(
            [str(i), str(n), str(k), want["layout"]["recompute"], peak]
        )
    first = want["stages"][0]["stage_total_bytes"]
    expect(rows.nth(0).locator("td").last).to_have_text(f"{first / 1e9:,.2f} GB")
    expect(page.locator(".per-stage .gain")).to_have_text(f"{ps['gain']:.3f}×")
    expect(page.locator("#megatron-flags")).to_have_text(" ".join(launch["megatron"]))
    # each flag with its value in one box, so the block wraps between flags, never inside one
    boxes = page.locator("#megatron-flags .flag")
    expect(boxes).to_have_count(sum(w.startswith("--") for w in launch["megatron"]))
    assert launch["megatron"][:2] == ["--tensor-model-parallel-size", "8"]
    expect(boxes.first).to_have_text("--tensor-model-parallel-size 8")
    expect(page.locator(".megatron-notes li")).to_have_count(len(launch["megatron_notes"]))
    expect(page.locator("#megatron-step")).to_contain_text("with one --recompute-num-layers")
    expect(page.locator("#torchtitan-toml")).to_have_text("\n".join(launch["torchtitan"]))
    expect(page.locator(".torchtitan-notes")).to_contain_text(launch["torchtitan_notes"][0])
    page.click(".per-stage .planner-link")  # the plan in the Planner, its stages included
    expect(page.locator("input[name=recompute-layers]")).to_have_value(
        ",".join(map(str, ps["recompute_layers"]))
    )
    expect(page.locator("input[name=stage-layers]")).to_have_value(
        ",".join(map(str, ps["stage_layers"]))
    )
    total = want["memory"]["total_bytes"]  # the per-stage plan's peak, not the default split's
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", str(total))
    page.go_back()
    page.fill("input[name=top]", "2")
    page.click("#run")
    expect(page.locator("#error-per-stage")).to_have_text(
        "Error: per-stage: takes neither top nor maximize (one plan, step time)"
    )


def test_frontier_chart_links_and_csv_download(page, tmp_path):
    go(page, "/frontier?" + urlencode(SEARCH))
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    expect(page.locator("#chart svg")).to_be_visible()
    path = tmp_path / "cli.csv"
    CliRunner().invoke(cli, ["frontier", "--model", "llama3-8b", "--gpus", "8", "--csv", str(path)])
    with page.expect_download() as info:
        page.click("#csv")
    download = info.value
    assert download.suggested_filename == "frontier.csv"
    assert Path(download.path()).read_text() == path.read_text()
    rows = path.read_text().splitlines()
    expect(page.locator("#points-table tbody tr")).to_have_count(len(rows) - 1)
    expect(page.locator("#points-table thead")).to_contain_text("framework")  # as the CLI's table
    framework = next(csv.DictReader(rows))["framework"]
    expect(page.locator("#points-table tbody tr").first).to_contain_text(framework)
    expect(page.locator("#points-table thead")).to_contain_text("fit/GPU")  # memory.fit_bytes
    point = page.locator("#chart g#point-1")
    point.hover()
    expect(page.locator("#tooltip")).to_contain_text("#1:")
    expect(page.locator("#points-table tbody tr").first).to_have_class(re.compile("highlight"))
    point.locator("use").click()
    page.wait_for_url(re.compile(r"/planner\?"))
    first = cli_json("frontier", "--model", "llama3-8b", "--gpus", "8")["points"][0]
    expect(page.locator("#verdict")).to_have_attribute(
        "data-total-bytes", str(first["total_bytes"])
    )


def test_frontier_table_shows_the_fit_figure(page):
    """The Frontier tab's points show the figure the search fitted them by (``fit_bytes``: the
    allocated peak, FSDP2's side-stream pools and the communicators) beside the memory axis, as
    the CLI's table: Llama 3 8B on 8 H100s under fsdp2, the fastest point (dp 4 × tp 2) 66.87 GB
    allocated, 67.92 GB to fit (tests/interface/test_fit_figure.py derives it: NCCL's rings by
    placement with their set-up, torchtitan's world barrier ring, and its "batch" and "loss"
    groups, 2 × 484 MiB = 1,015,021,568 B more than the 65.85 / 66.90 GB before they were
    counted; and NVLink SHARP's 2 MiB of credits for each of five rings, 10 MiB: NCCL's tuner
    runs the tp 2 and FSDP 4 rings' all-reduces as rings, model/nccl_search.py, so their
    66 + 130 MiB of buffers, counted before at 67.07 / 68.12 GB, are never set up); 68.05 GB with
    the next unit's copy-in buffer beside FSDP2's two all-gather outputs in the side pool,
    131,334,144 B more (tests/interface/test_fit_figure.py)."""
    go(page, "/frontier?" + urlencode({**SEARCH, "framework": "fsdp2", "pp": "1"}))
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    # pp 1: every point is at pp 1 (tables 10× faster); the CLI prints the same two figures: tests/interface/test_fit_figure.py
    cells = page.locator("#points-table tbody tr").first.locator("td")
    head = page.locator("#points-table thead th")
    expect(head.nth(2)).to_have_text("memory/GPU")
    expect(head.nth(3)).to_have_text("fit/GPU")
    expect(cells.nth(2)).to_have_text("66.87 GB")
    expect(cells.nth(3)).to_have_text("68.05 GB")
    expect(page.locator("#frontier-notes li")).to_have_count(0)  # no --headroom: no note


def test_frontier_says_the_headroom_it_held(page):
    """With a headroom the Frontier tab says what every point was held to, the note the CLI's
    ``frontier --headroom`` prints (frontier JSON ``notes``): 10 % of the H100's usable
    83.21 GB kept free, 74.89 GB searched."""
    go(
        page,
        "/frontier?" + urlencode({**SEARCH, "framework": "fsdp2", "pp": "1", "headroom": "0.1"}),
    )
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    note = cli_json(
        "frontier",
        "--model",
        "llama3-8b",
        "--gpus",
        "8",
        "--framework",
        "fsdp2",
        "--pp",
        "1",
        "--headroom",
        "0.1",
    )["notes"]
    assert len(note) == 1 and "74.89 GB per GPU" in note[0]
    # the page names its field, as its search answer does: "headroom", not the CLI's flag
    expect(page.locator("#frontier-notes li")).to_have_text([f"note: {note[0].removeprefix('--')}"])


def test_frontier_per_stage_box_shows_the_plans(page):
    """The Frontier tab's "per stage" box: frontier --per-stage's points with their plan, stages
    and gain; the fastest per-stage point (6 GPUs, pp 3; the 8-GPU point is Megatron-FSDP at pp 1,
    uniform) opens in the Planner with its split."""
    q = {"model": "llama3-8b", "gpus": "6;8", "seq-len": "8192", "global-batch": "32"}
    go(page, "/frontier?" + urlencode({**q, "against": "gpus"}))
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    page.check("input[name=per-stage]")
    page.click("#run")
    expect(page.locator("#status")).to_have_text(f"OPTIMAL (proven over {EQUAL_CHUNKS_SCOPE})")
    args = ["--model", "llama3-8b", "--gpus", "6;8", "--seq-len", "8192", "--global-batch", "32"]
    want = cli_json("frontier", *args, "--against", "gpus", "--per-stage")["points"]
    rows = page.locator("#points-table tbody tr")
    expect(rows).to_have_count(len(want))
    k = next(i for i, p in enumerate(want) if p["plan"] == "per-stage")  # fastest per-stage one
    expect(rows.nth(k)).to_contain_text("per-stage")
    expect(rows.nth(k)).to_contain_text(f"{want[k]['gain']:.3f}×")
    link = rows.nth(k).locator("a")
    split = re.search(r"stage-layers=([0-9%C,]+)", link.get_attribute("href")).group(1)
    split = split.replace("%2C", ",")
    link.click()
    page.wait_for_url(re.compile(r"/planner\?"))
    expect(page.locator("input[name=stage-layers]")).to_have_value(split)
    # Equal steps can have more than one split (here 12,12,8 and 12,11,9: stage 0's 12 layers
    # set the step, 5.297 s either way), and CP-SAT's two workers may return either; the page's
    # split is held to the CLI point's step and peak, not to its layer list.
    cells = [f"--{a}={want[k][a]}" for a in ("dp", "tp", "pp")] + [f"--gpus={want[k]['num_gpus']}"]
    got = cli_json("evaluate", *args[:2], *args[4:], *cells, "--stage-layers", split)
    assert got["time"]["step_s"] == pytest.approx(want[k]["step_s"], rel=1e-12)
    expect(page.locator("#verdict")).to_have_attribute(
        "data-total-bytes", str(want[k]["total_bytes"])
    )


def test_api_documentation_renders_offline(page):
    go(page, "/docs")
    expect(page.locator(".swagger-ui")).to_be_visible()
    expect(page.get_by_text("/api/evaluate", exact=True).first).to_be_visible()


def test_search_says_what_the_time_limit_cut(page):
    """DeepSeek-V3 on 2,048 H100s with a time limit of 1 ms: the cost tables are cut at their first
    block (64 of 4,912 shapes, the blocks growing from 64 under a limit) and the page said only
    "not proven"; it shows the CLI's note (the
    seconds in it are this run's)."""
    job = {"model": "deepseek-v3", "gpus": "2048", "gpu": "H100-SXM", "time-limit": "0.001"}
    go(page, "/search?" + urlencode(job))
    expect(page.locator("#status")).to_have_text(
        "best found within the time limit — not proven optimal", timeout=4 * TIMEOUT
    )
    args = [
        "--model",
        "deepseek-v3",
        "--gpus",
        "2048",
        "--gpu",
        "H100-SXM",
        "--time-limit",
        "0.001",
    ]
    cut = cli_json("search", *args)["time_limit_note"].split("; ")[0]
    assert cut.startswith("the time limit cut the cost tables at 64 of 4,912 shapes")
    expect(page.locator("#time-limit-note")).to_contain_text(f"note: {cut}; ")
    go(page, "/search?model=llama3-8b&gpus=8")  # no limit: no note
    expect(page.locator("#status")).to_have_text("proven optimal (CP-SAT)")
    expect(page.locator("#time-limit-note")).to_be_hidden()
