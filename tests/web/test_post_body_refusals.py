"""POST bodies the reviewer found answered with HTTP 500 or read silently (:mod:`interface.web.body`),
each now refused in one line, HTTP 422, as the GET form refuses the same value; and a number of
more than 4,300 digits on the command line (Python's ``int()`` limit, once a traceback from
``model/units.py``), refused in one line naming the option, exit 2 (each call its own process).

The figures: ``"9" * 5000`` is 5,000 characters (over :data:`model.units.MAX_DIGITS` = 4,000 and
Python's 4,300-digit ``int()`` limit); its echo is cut to 80 characters with the length of the
whole repr, 5,002 (:func:`model.units.shown_text`); a body of 100,000 ``[`` nests deeper than
the reader's recursion limit (1,000 frames)."""

from __future__ import annotations

import asyncio
import re
import warnings

import pytest

from tests.cli_runs import refusal, run_many
from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web import body as body_module  # noqa: E402
from trainplan.interface.web.app import create_app  # noqa: E402
from trainplan.model.errors import InputError  # noqa: E402

BIG = "9" * 5000
DIGITS_LINE = (
    "dp: '" + "9" * 78 + "… (5,002 characters) is 5,000 characters long: a number is written in "
    "at most 4,000 (any number within ±1e300 takes far fewer)"
)
BASE = '{"model": "llama3-8b", "gpu": "H100-SXM", "tp": 2, '


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


def _post(client: TestClient, path: str, text: str):
    return client.post(path, content=text, headers={"content-type": "application/json"})


def test_long_integers_are_refused_by_the_number_rule(client):
    for got in (
        _post(client, "/api/evaluate", BASE + '"dp": ' + BIG + "}"),
        _post(client, "/api/figures/memory", BASE + '"dp": ' + BIG + "}"),
        client.get("/api/evaluate?model=llama3-8b&gpu=H100-SXM&tp=2&dp=" + BIG),
    ):
        assert got.status_code == 422, got.text[:200]
        assert got.json() == {"error": DIGITS_LINE}


def test_deep_duplicate_and_null(client):
    deep = _post(client, "/api/search", '{"tp": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert deep.status_code == 422
    assert deep.json()["error"] == (
        "body: nested deeper than the JSON reader goes; send a flat JSON object of the GET "
        "form's parameters"
    )
    dup = _post(client, "/api/evaluate", BASE + '"dp": 4, "model": "llama3-70b"}')
    assert dup.status_code == 422
    assert dup.json()["error"] == (
        "body: 'model' given twice; give it once (a list for a parameter that repeats)"
    )
    # null is the query's empty value: refused by the GET form's own line for tp=
    null = _post(client, "/api/evaluate", BASE + '"dp": null}')
    get = client.get("/api/evaluate?model=llama3-8b&gpu=H100-SXM&tp=2&dp=")
    assert null.status_code == get.status_code == 422
    assert null.json() == get.json()
    assert null.json()["error"].startswith("dp: '' is empty; give a value")  # as a list's


def test_a_body_over_the_limit_is_refused_by_its_length(client, monkeypatch):
    monkeypatch.setattr(body_module, "MAX_BODY_BYTES", 100)
    text = BASE + '"dp": 4, "pad": "' + "x" * 200 + '"}'
    got = _post(client, "/api/evaluate", text)
    assert got.status_code == 422
    assert got.json()["error"] == f"body: {len(text.encode()):,} bytes is over the 100 read"

    # no Content-Length (a chunked body): the reading stops once past the limit
    sent = []

    class Chunked:
        headers: dict[str, str] = {}
        query_params = None

        async def stream(self):
            for _ in range(1000):
                sent.append(64)
                yield b"x" * 64

    with pytest.raises(InputError, match="body: over the 100 bytes read"):
        asyncio.run(body_module.body_pairs(Chunked()))  # type: ignore[arg-type]
    assert len(sent) == 2  # 64 + 64 = 128 > 100: the third chunk is never asked for


def test_the_cli_refuses_a_long_number_in_one_line():
    done = run_many(
        {
            "digits": ["evaluate", "--model", "llama3-8b", "--tp", "2", "--dp", BIG],
            "exponent": ["evaluate", "--model", "llama3-8b", "--tp", "2", "--dp", "1e" + BIG],
        }
    )
    assert refusal(done["digits"]) == "--" + DIGITS_LINE
    assert refusal(done["exponent"]).startswith("--dp: '1e999")
    assert "is 5,002 characters long" in refusal(done["exponent"])


def test_the_frontier_figure_and_csv_take_a_post_body(client):
    """The frontier page's chart and CSV go as POST when their query is long (an uploaded
    config.json), like its search: the same chart and the same CSV as GET."""
    query = "model=llama3-8b&gpu=H100-SXM&gpus=8&gpus=16&pp=1"
    body = {"model": "llama3-8b", "gpu": "H100-SXM", "gpus": [8, 16], "pp": 1}
    for path in ("/api/figures/frontier", "/api/figures/frontier.csv"):
        got, want = client.post(path, json=body), client.get(f"{path}?{query}")
        assert got.status_code == want.status_code == 200, got.text[:300]
        assert got.headers["content-type"] == want.headers["content-type"]

        # the same figure but the moment matplotlib wrote it
        def undated(text: str) -> str:
            return re.sub(r"<dc:date>[^<]*</dc:date>", "", text)

        assert undated(got.text) == undated(want.text)
    csv = client.post("/api/figures/frontier.csv", json=body)
    assert csv.headers["content-disposition"] == 'attachment; filename="frontier.csv"'
    assert len(csv.text.splitlines()) >= 2  # the header and a point at least
