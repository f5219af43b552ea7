"""The web API's side of tests/test_cli_newuser47b.py: ``/api/examples?example=NAME`` reads an
example's name in any case or separator as ``trainplan example NAME`` does (the page's
``example=`` links ask it), and refuses an unknown one with the command line's words."""

from __future__ import annotations

import warnings

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402


def test_the_examples_endpoint_reads_a_name_as_the_command_line_does():
    client = TestClient(create_app(("testserver",)))
    plain = client.get("/api/examples").json()
    assert "example" not in plain
    for typed in ("FSDP-70B-64", "fsdp_70b_64", "fsdp-70b-64"):
        body = client.get("/api/examples", params={"example": typed}).json()
        assert body["example"] == "fsdp-70b-64", typed
        assert body["examples"] == plain["examples"]
    bad = client.get("/api/examples", params={"example": "FSDP-70C"})
    assert bad.status_code == 422
    assert bad.json() == {
        "error": "example: 'FSDP-70C' is not an example; did you mean fsdp-70b-64, dpo-70b, "
        "ppo-70b? (trainplan example --list lists them all)"
    }
    other = client.get("/api/examples?x=1")
    assert other.status_code == 422
    assert other.json() == {"error": "examples: takes no parameters but example (a name to read)"}
