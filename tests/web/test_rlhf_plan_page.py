"""The RLHF tab's placement plan section is ``trainplan rlhf-plan``: its form's fields are the
command's options by their query keys (each empty field's grey text the option's default), Plan
runs ``/api/rlhf-plan/stream`` with its progress and Cancel, and the answer shows the figures
the command prints (its own text rules, :mod:`interface.rlhf.text`, applied to its ``--json``
object); a refusal is said at the field it names; the page's address holds the form, so a link
opens the same plan. The stream itself (its events, a refusal as HTTP 422) in-process."""

from __future__ import annotations

import json
import re
import warnings
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.web.conftest import cli_json, go, need, need_chromium

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.cli.query import query_params  # noqa: E402
from trainplan.interface.rlhf.text import result_lines, roles_lines  # noqa: E402
from trainplan.interface.web.app import create_app  # noqa: E402
from trainplan.interface.web.pages import _page  # noqa: E402
from trainplan.interface.web.params import TERMINAL_ONLY  # noqa: E402

PLAN = ["--algorithm", "grpo", "--reward", "rule", "--model", "llama3-8b", "--gpus", "8"]
"""GRPO with a rule reward, Llama 3 8B on 8 H100s: actor, reference and engine; about 2 s of
tables and 0.4 s of CP-SAT on a 2-core machine (tests/web/test_api_rlhf_plan.py's grpo-8b-8)."""
QUERY = "algorithm=grpo&reward=rule&model=llama3-8b&gpus=8"


class _Fields(HTMLParser):
    """The named fields inside ``<form id="plan-inputs">``: name → (tag, placeholder)."""

    def __init__(self) -> None:
        super().__init__()
        self.inside, self.fields = False, {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.inside = a.get("id") == "plan-inputs"
        elif self.inside and tag in ("input", "select") and a.get("name"):
            self.fields[a["name"]] = (tag, a.get("placeholder"))

    def handle_endtag(self, tag):
        if tag == "form":
            self.inside = False


def test_the_form_has_every_option_of_rlhf_plan_and_its_defaults():
    """Every option the API takes (all of rlhf-plan's but ``--width``, the terminal's timeline)
    has its field, named as its query key, and no field is anything else; a field whose option
    has a default shows that default in grey (``--prompts`` 1024, ``--workers`` 2, …)."""
    parser = _Fields()
    parser.feed(_page("rlhf"))
    options = {q.name: q for q in query_params("rlhf-plan", TERMINAL_ONLY)}
    assert set(parser.fields) == set(options)
    for name, (tag, placeholder) in parser.fields.items():
        default = options[name].default
        if tag == "input" and isinstance(default, int | float) and not isinstance(default, bool):
            assert placeholder == f"{default:g}", name


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


def test_the_stream_says_its_progress_then_answers_the_plan_object(client):
    """``tables`` events (pool sizes × roles costed, up to their total), then ``solve`` 0 to 3
    (the best, the best colocated, the best split placement), then ``result``: the object of
    ``/api/rlhf-plan``, the command's ``--json`` but for the two solve times."""
    res = client.get(f"/api/rlhf-plan/stream?{QUERY}")
    assert res.status_code == 200 and res.headers["content-type"] == "application/x-ndjson"
    events = [json.loads(line) for line in res.text.splitlines() if line]
    tables = [e for e in events if e["event"] == "tables"]
    assert tables and tables[-1]["done"] == tables[-1]["total"]
    assert [e["done"] for e in events if e["event"] == "solve"] == [0, 1, 2, 3]
    assert events[-1]["event"] == "result" and len(events) == len(tables) + 5
    clocks = ("tables_seconds", "solve_seconds")
    got = {k: v for k, v in events[-1]["result"].items() if k not in clocks}
    want = cli_json("rlhf-plan", *PLAN)
    assert got == {k: v for k, v in want.items() if k not in clocks}


def test_a_refused_stream_is_422_with_the_clis_line(client):
    res = client.get("/api/rlhf-plan/stream?algorithm=grpo&model=llama3-8b&gpus=0")
    assert res.status_code == 422 and res.json() == {"error": "gpus: '0' must be at least 1"}


@pytest.fixture
def browser_page(request):
    need("playwright", "pip install -e '.[webtest]'")
    need_chromium()
    return request.getfixturevalue("page")


def _text(locator) -> str:
    """The element's text with the page's no-break spaces (a step time's "291.541 s") as the
    CLI's spaces."""
    return locator.inner_text().replace("\u00a0", " ")


def _shows_the_clis_plan(page, want: dict) -> None:
    """The answer on the page is the command's: its headline (but for the solve times, each
    run's own clock), status, step, roles, the alternatives and why."""
    from playwright.sync_api import expect

    lines = result_lines(want)
    expect(page.locator("#plan-status")).to_have_text(
        re.compile(r"^optimal \(proven optimal within the model\)$"), timeout=180_000
    )
    head = lines[0].split("; tables")[0]
    assert _text(page.locator("#plan-head")).split("; tables")[0] == head
    best = want["best"]
    step = next(line for line in lines if line.startswith("step: "))
    assert _text(page.locator("#plan-step")) == step
    assert _text(page.locator("#plan-verdict")) == "placement: colocated, synchronous — fits"
    rows = page.locator("#plan-roles-table tbody tr")
    expect(rows).to_have_count(len(best["roles"]))
    # the CLI's roles table, row by row: the same cells (its columns padded with spaces)
    for i, line in enumerate(roles_lines(best)[2:]):
        cells = [c.strip() for c in rows.nth(i).locator("td").all_inner_texts()]
        assert re.split(r"\s{2,}", line.strip()) == cells
    for key in ("colocated", "split"):
        said = next(line for line in lines if line.startswith(f"best {key}: "))
        assert _text(page.locator(f"#plan-{key}")) == said
    assert _text(page.locator("#plan-reason")) == f"why: {want['reason']}"


@pytest.mark.slow
@pytest.mark.browser
def test_the_plan_shows_the_clis_figures_a_refusal_at_its_field_and_a_link_reproduces_it(
    browser_page,
):
    from playwright.sync_api import expect

    page = browser_page
    go(page, "/rlhf?algorithm=grpo&policy-params=70e9&reward=rule")
    form = page.locator("#plan-inputs")
    expect(page.locator("#plan-status")).to_have_text("Choose a model and a GPU count, then Plan.")
    form.locator("select[name=model]").select_option("llama3-8b")
    form.locator("select[name=reward]").select_option("rule")
    form.locator("input[name=gpus]").fill("0")
    page.click("#plan-run")
    # refused: said at the GPUs field of the plan's form, as the command's line (--gpus → gpus)
    gpus = form.locator("input[name=gpus]")
    expect(gpus).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#plan-inputs #error-gpus")).to_have_text(
        "Error: gpus: '0' must be at least 1"
    )
    expect(page.locator("#plan-status")).to_contain_text("not run: an input is refused")
    gpus.fill("8")
    expect(gpus).not_to_have_attribute("aria-invalid", "true")
    page.click("#plan-run")
    want = cli_json("rlhf-plan", *PLAN)
    _shows_the_clis_plan(page, want)
    expect(page.locator("#plan-progress-text")).to_contain_text("done in")
    expect(page.locator("#plan-cancel")).to_be_hidden()
    expect(page.locator("#plan-results")).to_have_attribute("aria-busy", "false")
    # the address holds the plan's form beside the tab's own fields
    plan = parse_qs(urlsplit(page.url).query)["plan"][0]
    assert parse_qs(plan) == {
        "model": ["llama3-8b"],
        "gpus": ["8"],
        "algorithm": ["grpo"],
        "reward": ["rule"],
    }
    # a link: the same form, the plan run on arrival, the same figures
    link = page.url.removeprefix(page.base)
    go(page, "/about")
    go(page, link)
    form = page.locator("#plan-inputs")
    expect(form.locator("select[name=model]")).to_have_value("llama3-8b")
    expect(form.locator("input[name=gpus]")).to_have_value("8")
    expect(form.locator("select[name=reward]")).to_have_value("rule")
    _shows_the_clis_plan(page, want)
    expect(page.locator("#inputs input[name=policy-params]")).to_have_value("70e9")


@pytest.mark.slow
@pytest.mark.browser
def test_cancel_stops_the_plan_on_the_server(browser_page):
    """Llama 3 70B on 64 GPUs takes far longer than the test: Cancel closes the request, the
    page says so, and the server's job list empties (the job's process is terminated)."""
    from playwright.sync_api import expect

    page = browser_page
    go(page, "/rlhf?plan=algorithm%3Dgrpo%26model%3Dllama3-70b")
    page.locator("#plan-inputs input[name=gpus]").fill("64")
    page.click("#plan-run")
    expect(page.locator("#plan-cancel")).to_be_visible()
    expect(page.locator("#plan-results")).to_have_attribute("aria-busy", "true")
    expect(page.locator("#plan-progress-text")).to_contain_text("cost tables")
    page.click("#plan-cancel")
    expect(page.locator("#plan-status")).to_have_text("cancelled")
    expect(page.locator("#plan-progress-text")).to_contain_text("the server stopped the search")
    page.wait_for_function(
        "async () => (await (await fetch('/api/jobs')).json()).length === 0", polling=250
    )


@pytest.mark.slow
@pytest.mark.browser
def test_a_links_unknown_model_is_refused_at_the_plans_model_field(browser_page):
    """A link's plan naming a model the catalogue lacks keeps the name (never the select's
    empty choice, which would say "required") and runs: the command's refusal, at the field."""
    from playwright.sync_api import expect

    page = browser_page
    go(
        page,
        "/rlhf?algorithm=grpo&policy-params=70e9&plan=algorithm%3Dgrpo%26model%3Dllama3-8bx%26gpus%3D8",
    )
    model = page.locator("#plan-inputs select[name=model]")
    expect(model).to_have_value("llama3-8bx")
    expect(model).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#plan-inputs #error-model")).to_contain_text(
        "Error: model: unknown model 'llama3-8bx'; did you mean llama3-8b"
    )
    tab = cli_json("rlhf", "--algorithm", "grpo", "--policy-params", "70e9")["resident_bytes"]
    expect(page.locator("#resident")).to_have_text(f"{tab / 1e12:.3f} TB")  # the tab's own, kept


@pytest.mark.slow
@pytest.mark.browser
def test_plan_pressed_before_the_tabs_first_answer_runs_the_plan(browser_page):
    """The section started only with the tab's first answer: Plan pressed before it was the
    browser's own submit of the form, which reloaded the page with the plan's fields as the
    tab's (CI once caught it in the cancel test). The tab's answer is held back here: Plan runs
    the plan of the fields as they are, and the address keeps them."""
    from playwright.sync_api import expect

    from tests.web.conftest import wait_for_held

    page = browser_page
    held: list = []
    page.route("**/api/rlhf?*", lambda route: held.append(route))
    go(page, "/rlhf?plan=algorithm%3Dgrpo%26model%3Dllama3-70b")
    wait_for_held(page, held)
    page.locator("#plan-inputs input[name=gpus]").fill("64")
    page.click("#plan-run")
    expect(page.locator("#plan-cancel")).to_be_visible()
    plan = parse_qs(parse_qs(urlsplit(page.url).query)["plan"][0])
    assert plan["gpus"] == ["64"] and plan["model"] == ["llama3-70b"]
    page.click("#plan-cancel")
    expect(page.locator("#plan-status")).to_have_text("cancelled")
    for route in held:
        route.continue_()
    page.unroute("**/api/rlhf?*")
