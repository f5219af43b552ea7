"""The web API reads numbers and lists with the command line's grammar (the page sends a field's
text as typed): a comma only groups thousands, several values are the key repeated or ``;``
between them, and a key of one value given twice with different values is HTTP 422 — the last
one no longer wins."""

from __future__ import annotations

import warnings

import pytest

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402

SEARCH = "/api/search?model=llama3-8b&gpu=H100-SXM&global-batch=48"


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


def _ok(client: TestClient, url: str) -> dict:
    got = client.get(url)
    assert got.status_code == 200, got.text
    return got.json()


def _refused(client: TestClient, url: str) -> str:
    got = client.get(url)
    assert got.status_code == 422 and "Traceback" not in got.text, got.text
    return got.json()["error"]


def test_a_field_typed_16_384_is_one_number(client):
    out = _ok(client, "/api/evaluate?model=llama3-8b&dp=8&global-batch=4,096")
    assert out["layout"]["global_batch_size"] == 4096
    out = _ok(client, "/api/search?model=llama3-70b&gpu=H100-SXM&gpus=16,384")
    assert out["jobs"] == 1 and out["num_gpus"] == 16384


def test_lists_are_repeated_keys_semicolons_or_ranges(client):
    assert _ok(client, f"{SEARCH}&gpus=8&gpus=16")["jobs"] == 2
    assert _ok(client, f"{SEARCH}&gpus=8;16")["jobs"] == 2
    assert _ok(client, f"{SEARCH}&gpus=8..16")["jobs"] == 3  # 8, 12, 16
    # names hold no comma: a field's "megatron,fsdp2" is two frameworks, as megatron;fsdp2
    both = _ok(client, f"{SEARCH}&gpus=8&framework=megatron,fsdp2")["candidates"]
    assert both == _ok(client, f"{SEARCH}&gpus=8&framework=megatron;fsdp2")["candidates"]
    assert both > _ok(client, f"{SEARCH}&gpus=8&framework=megatron")["candidates"]


def test_ambiguous_commas_and_repeated_single_values_are_422(client):
    assert _refused(client, "/api/evaluate?model=llama3-8b&dp=4,0").startswith(
        "dp: '4,0' is not a number: a comma only separates thousands"
    )
    assert _refused(client, "/api/evaluate?model=llama3-8b&dp=8&dp=16") == (
        "dp: given twice (8, 16); it takes one value, so give it once"
    )
    assert _refused(client, f"{SEARCH}&gpus=2048,4096").endswith(
        "for several values repeat the option, or put ';' between them (64;128)"
    )
    assert _refused(client, "/api/evaluate?config=%7B%7D&config=%7B%22a%22%3A1%7D").startswith(
        "config: given twice with different values"
    )


def test_a_query_key_has_one_spelling(client):
    """The documented key is the option without its leading -- (docs/reference/api.md): cp_kind
    was read as cp-kind; now it is refused naming it and the spelling to use."""
    base = "/api/evaluate?model=llama3-8b&dp=4&cp=2"
    assert _ok(client, f"{base}&cp-kind=ulysses")["layout"]["cp_kind"] == "ulysses"
    assert _refused(client, f"{base}&cp_kind=ulysses") == (
        "'cp_kind': no such parameter of evaluate; write it cp-kind (a key, in a query or a JSON body, is the command's "
        "option without its leading --)"
    )
    assert _refused(client, f"{base}&time_model=single").startswith(
        "'time_model': no such parameter of evaluate; write it time-model"
    )


def test_the_tabs_refuse_a_count_below_one_with_one_rule(client):
    assert _refused(client, "/api/pipeline?stages=-4&microbatches=8") == (
        "stages: '-4' must be at least 1"
    )
    assert _refused(client, "/api/ckpt?layers=0") == "layers: '0' must be at least 1"
    assert _refused(
        client, "/api/rlhf?algorithm=grpo&model=llama3-8b&prompts=4,000,000"
    ).startswith(
        "prompts: 4,000,000 × 16 rollouts per prompt (samples-per-prompt) = 64,000,000 sequences"
    )


def test_an_endpoint_that_is_none_is_one_line_naming_the_endpoints(client):
    got = client.get("/api/estimate?model=llama3-8b")
    assert got.status_code == 404
    line = got.json()["error"]
    assert line.startswith("/api/estimate: no such endpoint; the API's are /api/ckpt, ")
    assert "/api/evaluate, " in line and line.endswith("(and /docs)")
