"""The web API's side of tests/test_cli_newuser49.py: a refusal names its parameter and value as
the request typed them, as the command line's does (interface.flags.typed_on_page): a percent
(``headroom=100%`` was echoed as ``headroom: 1``), a key given by ``set=KEY=VALUE`` (named as
the field ``moe-capacity-factor``), a framework's case; and an inline accelerator's absurd FLOP
rate is refused as a ``--gpu`` file's is (topology.rate_bounds)."""

from __future__ import annotations

import json
import warnings

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402

RULE = "(a fraction from 0 to 1, or a percent such as 40%)"
"""The words of a fraction's rule (model.quantities.FRACTION_RULE)."""


def test_a_refusal_names_what_the_request_typed():
    """GET and POST alike: the percent typed beside the value it reads as, as ``--headroom
    100%`` says ``--headroom: 100% (1) must…``; a ``set=`` key as typed; a value typed as a
    number echoed as it was; a field typed as itself named as itself."""
    client = TestClient(create_app(("testserver",)))
    small = {"model": "llama3-8b", "gpus": "8"}
    evaluate = {"model": "llama3-70b", "gpus": "256"}
    head = f"must be at least 0 and below 1 (100%) {RULE}"
    cases = (
        ("/api/search", {**small, "headroom": "100%"}, f"headroom: 100% (1) {head}"),
        ("/api/search", {**small, "headroom": "1"}, f"headroom: 1 {head}"),
        (
            "/api/evaluate",
            {**evaluate, "set": "moe_capacity_factor=0"},
            "moe_capacity_factor: 0 must be positive",
        ),
        (
            "/api/evaluate",
            {**evaluate, "moe-capacity-factor": "0"},
            "moe-capacity-factor: 0 must be positive",
        ),
        (
            "/api/evaluate",
            {**evaluate, "set": "memory_reserve_gib=-1"},
            "memory_reserve_gib: -1 must be at least 0 GiB and below the H100-SXM's 79.64 GiB",
        ),
        (
            "/api/pipeline",
            {"stages": "4", "microbatches": "8", "framework": "Bogus"},
            "framework: 'Bogus' is not one of megatron, deepspeed, fsdp2, textbook",
        ),
    )
    for path, query, line in cases:
        got = client.get(path, params=query)
        assert (got.status_code, got.json()) == (422, {"error": line}), query
    post = client.post("/api/search", json={**small, "headroom": "100%"})
    assert (post.status_code, post.json()) == (422, {"error": f"headroom: 100% (1) {head}"})
    post = client.post("/api/evaluate", json={**evaluate, "set": "moe_capacity_factor=0"})
    assert post.json() == {"error": "moe_capacity_factor: 0 must be positive"}
    # a line whose head is no value keeps its words: a percent typed is not put in them
    post = client.post("/api/evaluate", json={**evaluate, "headroom": "150%"})
    assert post.json()["error"].startswith("headroom: no such parameter of evaluate")


def test_an_inline_accelerators_absurd_rate_is_refused():
    """``bf16_tflops: 1e9`` in the page's accelerator was taken (an MFU of 0.0 %); it is now
    refused with the ``--gpu`` file's line: 100 × the MI355X's 5,032 TFLOP/s dense FP8, the
    table's fastest rate, is 503,200 TFLOP/s."""
    client = TestClient(create_app(("testserver",)))
    part = {"base": "H100-SXM", "name": "H100-typo", "source": "typo", "bf16_tflops": 1e9}
    got = client.get(
        "/api/evaluate",
        params={"model": "llama3-8b", "dp": "8", "accelerator": json.dumps(part)},
    )
    assert got.status_code == 422
    assert got.json()["error"] == (
        "accelerator: key 'bf16_tflops' must be at most 503,200 TFLOP/s (100× the fastest FLOP "
        "rate in the accelerator table, the MI355X's 5,032 TFLOP/s), got 1,000,000,000"
    )
