"""The web API's side of tests/test_cli_newuser50.py: a search's or frontier's refusal found in
its own process (:mod:`interface.web.jobs`, after the options are read) names its parameter and
value as the request typed them, as the API's direct refusals do (``set=moe_capacity_factor=0``
was named as the field ``moe-capacity-factor``); the MFU tab's selective recomputation of a
reported FLOP rate says what to give."""

from __future__ import annotations

import json
import warnings

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402

HBM = "must be a fraction of the peak from 0.01 to 1 (a fraction from 0 to 1, or a percent such as 40%)"
"""The rule of ``hbm_efficiency`` (model.quantities.FRACTION_RULE)."""


def test_a_search_jobs_refusal_names_what_the_request_typed():
    """``/api/search``, its stream and ``/api/frontier``, GET and POST: the key typed by
    ``set=`` named as typed, as ``/api/evaluate`` names it and ``trainplan search --set
    moe_capacity_factor=0`` says ``--set moe_capacity_factor: 0 must be positive``."""
    client = TestClient(create_app(("testserver",)))
    small = {"model": "llama3-8b", "gpus": "8", "gpu": "H100-SXM"}
    cases = (
        ({**small, "set": "moe_capacity_factor=0"}, "moe_capacity_factor: 0 must be positive"),
        ({**small, "set": "hbm_efficiency=150%"}, f"hbm_efficiency: 150% {HBM}"),
    )
    for query, line in cases:
        for path in ("/api/search", "/api/search/stream", "/api/frontier"):
            got = client.get(path, params=query)
            assert (got.status_code, got.json()) == (422, {"error": line}), (path, query)
        post = client.post("/api/search", json=query)
        assert (post.status_code, post.json()) == (422, {"error": line}), query


def test_mfu_selective_of_a_flop_rate_says_what_to_give():
    """The MFU tab's query with a reported rate and ``recompute=selective`` names the keys that
    count it, in the API's spelling."""
    client = TestClient(create_app(("testserver",)))
    got = client.get(
        "/api/mfu",
        params={"achieved-tflops-per-gpu": "400", "gpu": "H100-SXM", "recompute": "selective"},
    )
    assert got.status_code == 422
    line = json.loads(got.text)["error"]
    assert line.startswith("recompute: 'selective' cannot be counted from a reported FLOP rate")
    assert "give recomputed-flops-pct" in line and "tokens-per-second" in line


def test_policy_is_read_as_the_rlhf_tabs_model():
    """``/api/rlhf?policy=…`` was refused with ``did you mean off-policy?``; the RLHF commands
    take the policy as ``model`` (interface.flags.PARAMETER_FLAGS), and the line says so, as the
    command line's ``--policy`` refusal does."""
    client = TestClient(create_app(("testserver",)))
    for path in ("/api/rlhf", "/api/rlhf-plan"):
        got = client.get(path, params={"algorithm": "grpo", "policy": "llama3-70b", "gpus": "16"})
        name = path.removeprefix("/api/")
        want = f"'policy': no such parameter of {name}; write it model"
        assert (got.status_code, got.json()) == (422, {"error": want}), path
