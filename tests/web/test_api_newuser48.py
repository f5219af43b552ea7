"""The web API's side of tests/test_cli_newuser48.py: a JSON body's numbers are read as the body
wrote them, as the GET query's are (``workers: 1e9`` was echoed as ``1000000000.0``, ``1e400``
refused as ``'Infinity'`` is not a number), and ``time-limit`` reads a time's units as
``--time-limit`` does."""

from __future__ import annotations

import json
import warnings

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402

SMALL = {"model": "llama3-8b", "gpus": 8, "gpu": "H100-SXM", "tp": 1, "pp": 1, "zero": 1}
"""A small search (tp 1, pp 1, ZeRO-1 only)."""

JSON = {"content-type": "application/json"}


def test_a_bodys_numbers_are_refused_as_written():
    """The same refusal, word for word, as the GET query's for the same text."""
    client = TestClient(create_app(("testserver",)))
    body = json.dumps(SMALL)[:-1] + ', "workers": 1e9}'  # as typed: json= writes 1000000000.0
    post = client.post("/api/search", content=body, headers=JSON)
    get = client.get("/api/search", params={**SMALL, "workers": "1e9"})
    line = (
        "workers: 1e9 is above the limit of 1,024 threads (2^10; CP-SAT runs one search thread "
        "per worker)"
    )
    assert (post.status_code, post.json()) == (422, {"error": line})
    assert (get.status_code, get.json()) == (422, {"error": line})
    huge = client.post(
        "/api/evaluate",
        content=b'{"model": "llama3-70b", "gpus": 1e400}',
        headers=JSON,
    )
    assert (huge.status_code, huge.json()) == (
        422,
        {
            "error": "gpus: '1e400' is out of range: a number is 0 or between 1e-300 and 1e300 "
            "in size (beyond, a float cannot hold it)"
        },
    )


def test_a_bodys_time_limit_takes_a_unit():
    """``"time-limit": "20s"`` and ``"2min"`` are 20 and 120 s, as the answer's ``time_limit_seconds``
    says; ``"20GB"`` is refused naming the unit of a time."""
    client = TestClient(create_app(("testserver",)))
    for text, seconds in (("20s", 20), ("2min", 120)):
        r = client.post("/api/search", json={**SMALL, "time-limit": text})
        assert r.status_code == 200, r.text
        assert r.json()["time_limit_seconds"] == seconds
    bad = client.post("/api/search", json={**SMALL, "time-limit": "20GB"})
    assert (bad.status_code, bad.json()) == (
        422,
        {
            "error": "time-limit: '20GB' is a size in bytes, not a time (given in s): write e.g. "
            "2.5, 2.5s or 2500ms"
        },
    )
