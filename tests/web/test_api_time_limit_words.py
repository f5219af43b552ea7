"""The web's search names its own key in what the time limit did: ``time_limit_note`` said "a
longer --time-limit searches the rest", the command line's flag, where the page's field and the
API's key are ``time-limit`` (interface.web.api.run_object, interface.flags.on_page); the
answers' notes already did."""

from __future__ import annotations

import warnings

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402


def test_the_search_time_limit_note_names_the_web_key():
    """A 0.001 s limit cuts Llama 3 70B's cost tables on 64 GPUs at their first block (the cut
    is what the limit did, whatever the machine): the note ends "a longer time-limit searches
    the rest", and no ``--`` flag is left in it; the JSON says the start-up it counted
    (``startup_seconds``: none on the web, whose limit counts from the search's start)."""
    client = TestClient(create_app(("testserver",)))
    query = {"model": "llama3-70b", "gpus": 64, "time-limit": 0.001}
    got = client.get("/api/search", params=query)
    assert got.status_code == 200, got.text
    note = got.json()["time_limit_note"]
    assert note.startswith("the time limit cut the cost tables at 64 of "), note
    assert note.endswith("a longer time-limit searches the rest") and "--" not in note, note
    assert got.json()["startup_seconds"] == 0.0
