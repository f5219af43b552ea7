"""The browser tester's second round: the page shows what the CLI shows. The RLHF tab's faithful
accounting (verdict, placement, phase memory; the textbook's scoring FLOPs now the faithful's,
the actor's old log-probs counted), the pipeline tab's chunk micro-batches in flight and W
buffers under zb-v and DualPipe, the planner's cp flavour, active parameters, layers per stage
and tokens/s, refusals echoing numbers in one form, and (in a browser, marked slow) the pages
drawing those figures. API tests run with the ``[web]`` and ``[webtest]`` extras."""

from __future__ import annotations

import pytest

from tests.web.conftest import cli_json, go, need, need_chromium

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402

ACTIVE, TOTAL = 3_353_032_704, 30_532_122_624
"""Qwen3-30B-A3B's active and total parameters (the catalogue file's counts)."""
TOKENS = 1024 * 16 * (1024 + 4096)
"""The RLHF defaults: 1,024 prompts × 16 samples × (1,024 + 4,096) tokens = 83,886,080."""
RLHF = "algorithm=grpo&model=qwen3-30b-a3b&reward=rule"


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


@pytest.fixture(scope="module")
def rlhf(client) -> dict:
    res = client.get(f"/api/rlhf?{RLHF}")
    assert res.status_code == 200, res.text
    return res.json()


def test_rlhf_faithful_verdict_is_the_clis(rlhf):
    """The CLI's "placement: colocated, synchronous — DOES NOT FIT … needs 337.36 GB per GPU in
    the rollout phase, 254.15 GB above the 83.21 GB usable" (336.69 GB and the trained actor's
    Transformer Engine placeholder weight gradients, 669,515,776 B at tp 1: model/terms/
    dummy_wgrads.py; derived in test_rlhf_page_shows_the_faithful_verdict): the same object the
    page reads."""
    f = rlhf["faithful"]
    cli = cli_json("rlhf", "--algorithm", "grpo", "--model", "qwen3-30b-a3b", "--reward", "rule")
    assert (f["placement"], f["off_policy"], f["fits"]) == ("colocated", 0, False)
    assert f["does_not_fit"] == cli["faithful"]["does_not_fit"]
    assert f["does_not_fit"][0].endswith(
        "needs 337.36 GB per GPU in the rollout phase, 254.15 GB above the 83.21 GB usable"
    )
    assert [p["peak_bytes"] for p in f["pools"]] == [
        p["peak_bytes"] for p in cli["faithful"]["pools"]
    ]


def test_rlhf_textbook_scoring_counts_the_actors_old_log_probs(rlhf):
    """Scoring: 2N per token by the reference and 2N by the actor recomputing the old log-probs
    (OpenRLHF make_experience's actor forward; verl compute_log_prob): 4 · 3,353,032,704 ·
    83,886,080 = 1.125e18 in both accountings; the textbook's was the reference's alone
    (5.625e17)."""
    assert rlhf["phase_flops"]["scoring"] == 4 * ACTIVE * TOKENS == 1_125_091_078_601_441_280
    assert rlhf["phase_flops"] == rlhf["faithful"]["phase_flops_total"]
    assert list(rlhf["faithful"]["flops_by_role"]["scoring"]) == ["actor", "reference"]


@pytest.mark.parametrize(
    ("query", "held", "w_buffers"),
    [
        # zb-v 8 ranks × 20: every rank 16 chunk micro-batches in flight, W buffers 2r + 1
        ("stages=8&microbatches=20&schedule=zb-v", [16] * 8, [1, 3, 5, 7, 9, 11, 13, 15]),
        # DualPipe 4 × 8: 5 in flight on every rank (held_per_stage 2.5: of the rank's layers)
        ("stages=4&microbatches=8&schedule=dualpipe", [5] * 4, [1, 2, 2, 1]),
    ],
)
def test_pipeline_held_per_rank_is_the_clis(client, query, held, w_buffers):
    d = client.get(f"/api/pipeline?{query}&timeline=false").json()
    assert (d["chunks_held_per_stage"], d["w_pending_per_stage"]) == (held, w_buffers)
    args = [x for kv in query.split("&") for x in (f"--{kv.split('=')[0]}", kv.split("=")[1])]
    cli = cli_json("pipeline", *args)
    assert (cli["chunks_held_per_stage"], cli["w_pending_per_stage"]) == (held, w_buffers)
    assert (
        d["closed_form"] == cli["closed_form"]
        and d["span_bubble_units"] == cli["span_bubble_units"]
    )


def test_planner_cp_flavour_and_throughput_are_the_clis(client):
    """fsdp2's default cp flavour is PyTorch's all-gather (the CLI's "cp 8 pytorch-allgather");
    tokens/s = B · s ÷ step: 16 · 131,072 ÷ step."""
    q = "model=llama3-70b&framework=fsdp2&dp=2&tp=4&pp=2&cp=8&seq-len=131072&global-batch=16"
    d = client.get(f"/api/evaluate?{q}").json()
    assert d["layout"]["cp_kind"] == "pytorch-allgather"
    assert d["layout"]["stage_layers"] == [40, 40]
    assert d["time"]["tokens_per_s"] == pytest.approx(16 * 131072 / d["time"]["step_s"], rel=1e-12)
    cli = cli_json(
        "evaluate", "--model", "llama3-70b", "--framework", "fsdp2", "--dp", "2", "--tp", "4",
        "--pp", "2", "--cp", "8", "--seq-len", "131072", "--global-batch", "16",
    )  # fmt: skip
    assert cli["time"]["tokens_per_s"] == d["time"]["tokens_per_s"]
    assert cli["layout"]["cp_kind"] == "pytorch-allgather"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/api/ckpt?layers=10&every=4000000", "every: 4,000,000 must be a whole number from 1 to layers = 10"),
        ("/api/rlhf?algorithm=grpo&policy-params=7e9&decode-mfu=4000000", "decode_mfu: 4,000,000 must be in (0, 1]"),
        ("/api/rlhf?algorithm=grpo&policy-params=7e9&decode-mfu=-4", "decode_mfu: -4 must be in (0, 1]"),
        ("/api/rlhf?algorithm=grpo&policy-params=7e9&train-mfu=0", "train_mfu: 0 must be in (0, 1]"),
    ],
)  # fmt: skip
def test_refusals_echo_numbers_in_one_form(client, path, message):
    """``every: 4000000`` (repr) and ``decode-mfu: 4000000.0 / -4.0 / 0.0`` (float) read now as
    model.units.shown_number writes every refused number."""
    res = client.get(path)
    assert res.status_code == 422
    assert message.split(": ", 1)[1] in res.json()["error"], res.json()


# ------------------------------------------------------------------------ in a browser

browser_only = [pytest.mark.slow, pytest.mark.browser]


@pytest.fixture
def browser_page(request):
    need("playwright", "pip install -e '.[webtest]'")
    need_chromium()
    return request.getfixturevalue("page")


@pytest.mark.slow
@pytest.mark.browser
def test_rlhf_page_shows_the_faithful_verdict(browser_page):
    from playwright.sync_api import expect

    page = browser_page
    go(page, f"/rlhf?{RLHF}")
    verdict = page.locator("#rlhf-verdict")
    expect(verdict).to_have_text("placement: colocated, synchronous — DOES NOT FIT")
    expect(verdict).to_have_class("verdict nofit")
    # 336.69 GB and the trained actor's Transformer Engine placeholder weight gradients
    # (model/terms/dummy_wgrads.py; Qwen3 30B-A3B at tp 1: QKV [5,120, 2,048], proj [2,048,
    # 4,096], the experts' FC1 [1,536, 2,048] and FC2 [2,048, 768], the output layer [151,936,
    # 2,048] in BF16: 669,515,776 B)
    assert 2 * (5120 * 2048 + 2048 * 4096 + 1536 * 2048 + 2048 * 768 + 151936 * 2048) == 669_515_776
    expect(page.locator("#rlhf-why")).to_contain_text(
        "needs 337.36 GB per GPU in the rollout phase, 254.15 GB above the 83.21 GB usable"
    )
    expect(page.locator("#rlhf-flops")).to_contain_text(
        "scoring 1.125e+18 (2N per token: actor, reference)"
    )
    expect(page.locator("#rlhf-pools-table")).to_contain_text("337.36")
    expect(page.locator("#inputs select[name=model]")).to_have_value("qwen3-30b-a3b")
    assert page.locator("#inputs input[name=chips]").is_disabled()
    expect(page.locator("#roles-table")).to_contain_text("30.5321B")
    expect(page.locator("#moe")).to_contain_text("actor 3.35303B of 30.5321B")
    page.select_option("#inputs select[name=model]", "")  # the textbook accounting alone
    expect(page.locator("#faithful")).to_be_hidden()
    assert page.locator("#inputs input[name=chips]").is_enabled()


@pytest.mark.slow
@pytest.mark.browser
def test_pipeline_page_shows_chunks_in_flight_and_w_buffers(browser_page):
    from playwright.sync_api import expect

    page = browser_page
    go(page, "/pipeline?stages=4&microbatches=8&schedule=dualpipe")
    table = page.locator("#held-table")
    expect(table).to_contain_text("chunk micro-batches in flight")
    cells = [table.locator(f"tbody tr:nth-child({i + 1}) td").all_inner_texts() for i in range(4)]
    assert cells == [["0", "5", "1"], ["1", "5", "2"], ["2", "5", "2"], ["3", "5", "1"]], cells
    expect(page.locator("#closed-form")).to_contain_text("= 2")
    expect(page.locator("#span-bubble")).to_have_text("2 time units")
    assert page.locator("input[name=backward-ratio]").is_disabled()
    page.select_option("select[name=schedule]", "1f1b")
    expect(page.locator("#split")).to_be_hidden()
    assert (
        page.locator("input[name=t-f]").is_disabled()
        and page.locator("input[name=t-fb]").is_disabled()
    )
    expect(page.locator("#held-table")).to_contain_text("micro-batches held")


@pytest.mark.slow
@pytest.mark.browser
def test_planner_names_the_cp_flavour_the_layout_runs(browser_page):
    from playwright.sync_api import expect

    page = browser_page
    go(
        page,
        "/planner?model=llama3-70b&framework=fsdp2&dp=2&tp=4&pp=2&cp=8&seq-len=131072&global-batch=16",
    )
    expect(page.locator("#layout-line")).to_contain_text("cp 8 pytorch-allgather (ep 1)")
    expect(page.locator("#headline")).to_contain_text(
        "70,553,706,496 parameters (70,553,706,496 active)"
    )
    expect(page.locator("#layers-per-stage")).to_have_text("[40, 40]")
    expect(page.locator("#tokens-per-s")).to_contain_text("per GPU)")
    expect(page.locator("select[name=cp-kind] option").first).to_contain_text(
        "the framework's default"
    )
