"""A config.json too large for a URL (issue: over ~260 KB, a GET's query string is refused by the
HTTP server with a bare 400, before the app can say why): the POST form of the planner's
endpoints (:mod:`interface.web.body`) takes the same parameters in a JSON body, with the same
checks and one-line HTTP 422 refusals, and the planner page sends its requests that way when
their URL is long. GET keeps working for the rest.

The config: Llama 3 8B's (tests/data/hf/llama3-8b) with an ``id2label`` table of 9,000 labels
(keys the reader does not use), about 385 KB; the model is the file's, so its figures are the
CLI's ``evaluate --model FILE``'s, figure for figure."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.web.conftest import TIMEOUT, cli_json, go, need, need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]
need("fastapi", "pip install -e '.[web]'")
need("playwright", "pip install -e '.[webtest]'")
need_chromium()

from playwright.sync_api import expect  # noqa: E402

expect.set_options(timeout=TIMEOUT)

HF_8B = Path(__file__).resolve().parents[1] / "data" / "hf" / "llama3-8b" / "config.json"


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    config = json.loads(HF_8B.read_text())
    config["id2label"] = {str(i): f"LABEL_{i}_" + "x" * 20 for i in range(9000)}
    path = tmp_path_factory.mktemp("large") / "config.json"
    path.write_text(json.dumps(config))
    assert path.stat().st_size > 300_000
    return path


def _post(server: str, path: str, body: object) -> tuple[int, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(
        server + path, data=data, headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_post_takes_a_config_a_url_cannot_hold(server, big):
    text = big.read_text()
    want = cli_json("evaluate", "--model", str(big), "--dp", "8")
    # the GET form: the server refuses the request line before the app sees it
    url = server + "/api/evaluate?" + urllib.parse.urlencode({"config": text, "dp": "8"})
    with pytest.raises((urllib.error.HTTPError, ConnectionError)):
        urllib.request.urlopen(url, timeout=120).read()
    status, raw = _post(server, "/api/evaluate", {"config": text, "dp": 8})
    assert status == 200
    got = json.loads(raw)
    assert got["memory"]["total_bytes"] == want["memory"]["total_bytes"]
    assert got["time"]["step_s"] == want["time"]["step_s"]
    # the config as the JSON object itself is the same model
    status, raw = _post(server, "/api/evaluate", {"config": json.loads(text), "dp": [8]})
    assert status == 200 and json.loads(raw)["memory"] == got["memory"]
    # the same checks and one-line refusals as GET (HTTP 422)
    status, raw = _post(server, "/api/evaluate", {"config": text, "tp": 0})
    assert (status, json.loads(raw)) == (422, {"error": "tp: '0' must be at least 1"})
    status, raw = _post(server, "/api/evaluate", {"config": text, "model": "llama3-8b"})
    assert status == 422 and json.loads(raw)["error"].startswith(
        "model: 'llama3-8b' does not apply"
    )
    status, raw = _post(server, "/api/evaluate", b"[1]")
    assert (status, json.loads(raw)["error"]) == (
        422,
        'body: a JSON list; send a JSON object {"name": value, …} of the GET form\'s parameters',
    )
    status, raw = _post(server, "/api/evaluate", b"{x")
    assert status == 422 and json.loads(raw)["error"].startswith("body: not JSON (")
    # the memory figure and the search, the page's other planner requests
    status, raw = _post(server, "/api/figures/memory", {"config": text, "dp": 8})
    assert status == 200 and b"<svg" in raw[:2000]
    status, raw = _post(server, "/api/search", {"model": "llama3-8b", "gpus": 8})
    with urllib.request.urlopen(server + "/api/search?model=llama3-8b&gpus=8", timeout=300) as r:
        assert status == 200 and json.loads(raw)["layout"] == json.loads(r.read())["layout"]


def test_the_planner_page_sends_a_large_config(page, big):
    """The page's evaluate and memory figure go as POST (their URL is over 8,000 characters): the
    figures are the CLI's; the page fixture fails on any failed request (a 400 is a console
    error)."""
    go(page, "/planner?model=llama3-70b")
    posted: list[str] = []
    page.on("request", lambda r: posted.append(r.url) if r.method == "POST" else None)
    page.check("input[name=_source][value=config]")
    page.set_input_files("#config-file", str(big))
    total = cli_json("evaluate", "--model", str(big))["memory"]["total_bytes"]
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", str(total))
    expect(page.locator("#memory-figure svg")).to_have_count(1)
    assert page.base + "/api/evaluate" in posted and page.base + "/api/figures/memory" in posted


def test_a_reload_after_a_large_upload_keeps_it(page, big):
    """The address leaves the uploaded file out (a 475,601-character URL made the reload a GET
    the HTTP server refused with a bare 400): it stays under the page's POST threshold of 8,000
    characters, the page says the link does not carry the file, and a reload restores the file
    from the tab's sessionStorage — the same figures, the CLI's."""
    go(page, "/planner?model=llama3-70b&dp=8")
    page.check("input[name=_source][value=config]")
    page.set_input_files("#config-file", str(big))
    total = cli_json("evaluate", "--model", str(big), "--dp", "8")["memory"]["total_bytes"]
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", str(total))
    expect(page.locator("#address-note")).to_contain_text("do not carry the uploaded file")
    expect(page.locator("#address-note")).to_contain_text("a reload of this tab restores it")
    assert len(page.url) < 8000 and "config=" not in page.url and "dp=8" in page.url
    answer = page.reload()
    assert answer is not None and answer.status == 200
    expect(page.locator("input[name=_source][value=config]")).to_be_checked()
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", str(total))
    assert len(page.url) < 8000
    # back to a catalogue model: the address holds everything again, and the note goes
    page.check("input[name=_source][value=catalogue]")
    page.select_option("select[name=model]", "llama3-8b")
    expect(page.locator("#address-note")).to_be_hidden()
    expect(page).to_have_url(re.compile(r"model=llama3-8b"))


def test_the_search_takes_a_config_and_its_small_links_carry_it(server):
    """Search and frontier take the uploaded config as the planner does (``config=`` text; the
    model is the file's, so the answer is the CLI's ``search --model FILE``'s, byte for byte);
    a small config stays in each answer's planner link (a GET link, unchanged), and a model
    beside it is refused by name."""
    text = HF_8B.read_text()
    want = cli_json("search", "--model", str(HF_8B), "--gpus", "8", "--global-batch", "64")
    query = urllib.parse.urlencode({"config": text, "gpus": "8", "global-batch": "64"})
    with urllib.request.urlopen(f"{server}/api/search/stream?{query}", timeout=300) as r:
        last = json.loads(r.read().decode().strip().splitlines()[-1])
    assert last["result"]["memory"]["total_bytes"] == want["memory"]["total_bytes"]
    assert last["result"]["layout"] == want["layout"]
    link = urllib.parse.urlsplit(last["planner"][0])
    assert link.path == "/planner" and urllib.parse.parse_qs(link.query)["config"] == [text]
    status, raw = _post(server, "/api/search", {"config": text, "gpus": 8, "model": "llama3-8b"})
    assert status == 422 and json.loads(raw)["error"].startswith(
        "model: 'llama3-8b' does not apply: the uploaded config.json is the model"
    )


def test_a_search_answer_opens_the_planner_with_a_large_upload(page, big):
    """The Search tab's answer link with a 385 KB config: its address leaves the file out (under
    8,000 characters, ``large=config``); a click keeps the file in the tab's storage for the
    planner, which shows the CLI's total bytes of that layout (``search --model FILE``'s answer
    is evaluated by the same cost model). The same address opened in another browser tab (no
    such storage) says the file must be chosen again, instead of another model's figures."""
    want = cli_json("search", "--model", str(big), "--gpus", "8", "--global-batch", "64")
    total = want["memory"]["total_bytes"]
    go(page, "/search?gpus=8&global-batch=64")
    page.set_input_files("#config-file", str(big))
    page.click("#run")
    link = page.locator(".answer a.planner-link").first
    expect(link).to_have_attribute("href", re.compile(r"large=config"))
    expect(page.locator(".answer .total").first).to_have_text(re.compile(r"\S"))
    href = link.get_attribute("href")
    assert href is not None and len(href) < 8000 and "config=" not in href
    assert f"dp={want['layout']['dp']}&" in href and f"tp={want['layout']['tp']}&" in href
    link.click()
    page.wait_for_url(re.compile(r"/planner\?"))
    page.wait_for_selector("body[data-ready=true]", state="attached")
    expect(page.locator("input[name=_source][value=config]")).to_be_checked()
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", str(total))
    expect(page.locator("#address-note")).to_contain_text("do not carry the uploaded file")
    assert len(page.url) < 8000
    other = page.context.new_page()
    other.goto(page.base + href)
    other.wait_for_selector("body[data-ready=true]", state="attached")
    expect(other.locator("#error")).to_contain_text("Error at the config field")
    expect(other.locator("#error-config")).to_be_visible()
    expect(other.locator("#error-config")).to_contain_text(
        "config: this link did not carry the uploaded file (too large for a URL)"
    )
    expect(other.locator("input[name=_source][value=config]")).to_be_checked()
    expect(other.locator("#verdict")).not_to_have_attribute("data-total-bytes", re.compile("."))


def test_a_frontier_point_opens_the_planner_with_a_large_upload(page, big):
    """The Frontier tab's point links with the 385 KB config: the table's and the chart's leave
    the file out (the server's chart links drop a config over 8,000 characters, so the SVG is
    not megabytes); a click on the last point's table link opens the planner with the file, and
    it shows that point's total bytes, the CLI's ``frontier --model FILE``'s."""
    want = cli_json("frontier", "--model", str(big), "--gpus", "8", "--global-batch", "64")
    go(page, "/frontier?gpus=8&global-batch=64")
    page.set_input_files("#config-file", str(big))
    page.click("#run")
    rows = page.locator("#points-table a.planner-link")
    expect(rows).to_have_count(len(want["points"]))
    expect(page.locator("#chart svg")).to_have_count(1)
    assert page.locator("#chart a").count() == len(want["points"])
    for a in [*rows.all(), *page.locator("#chart a").all()]:
        href = a.get_attribute("href") or a.get_attribute("xlink:href") or ""
        assert href.startswith("/planner?") and len(href) < 8000 and "config=" not in href
    rows.last.click()
    page.wait_for_url(re.compile(r"/planner\?"))
    total = want["points"][-1]["total_bytes"]
    expect(page.locator("#verdict")).to_have_attribute("data-total-bytes", str(total))


def test_a_chart_link_leaves_a_config_over_the_limit_out():
    """planner_link with a limit: a 9,000-character config makes the link longer than 8,000
    characters, so it goes without it (the gpu is the row's); a 7-character one stays (urlencode of {"a":1} is
    %7B%22a%22%3A1%7D, 17 characters)."""
    from trainplan.interface.web.figures import URL_LIMIT, planner_link

    row = {"dp": 8, "tp": 1, "gpu": "H100-SXM", "num_gpus": 8}
    cluster = ("nvlink-gbps", "450")  # a cluster option the planner has: carried
    big_link = planner_link([("config", "x" * 9000), cluster], row, URL_LIMIT)
    assert big_link == "/planner?nvlink-gbps=450&dp=8&tp=1&gpu=H100-SXM&gpus=8"
    small = planner_link([("config", '{"a":1}'), cluster], row, URL_LIMIT)
    assert (
        small == "/planner?config=%7B%22a%22%3A1%7D&nvlink-gbps=450&dp=8&tp=1&gpu=H100-SXM&gpus=8"
    )
