"""The web API's side of tests/test_cli_newuser46b.py: the global batch in tokens
(``global-batch-tokens``, the planner's field of that name) and the note on a batch in sequences
no published run comes near, as the command line answers them."""

from __future__ import annotations

import warnings

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402

LAYOUT = "/api/evaluate?model=llama3-70b&tp=4&pp=4&dp=16"


def test_a_batch_in_tokens_and_a_huge_batch_in_sequences_on_the_web():
    """16,777,216 tokens = 2,048 sequences of 8,192: the answer of ``global-batch=2048``; 16e6 is
    no whole number of sequences, refused with HTTP 422 naming the field; 4,000,000 sequences
    (32,768,000,000 tokens a step, 521 × DeepSeek-V3's 62,914,560) planned with the note."""
    client = TestClient(create_app(("testserver",)))
    tokens = client.get(LAYOUT + "&global-batch-tokens=16,777,216")
    sequences = client.get(LAYOUT + "&global-batch=2048")
    assert tokens.status_code == 200, tokens.text
    assert tokens.json()["layout"]["global_batch_size"] == 2048
    assert tokens.json() == sequences.json()
    bad = client.get(LAYOUT + "&global-batch-tokens=16e6")
    assert bad.status_code == 422
    assert bad.json() == {
        "error": "global-batch-tokens: 16,000,000 is not a whole number of sequences of 8,192 "
        "(15,998,976 is 1,953, 16,007,168 is 1,954)"
    }
    huge = client.get(LAYOUT + "&global-batch=4,000,000")
    assert huge.status_code == 200, huge.text
    assert huge.json()["notes"][-1] == (
        "global-batch: 4,000,000 counts sequences: × 8,192 tokens = 32,768,000,000 tokens a "
        "step, 521 × the largest published batch (DeepSeek-V3: 15,360 × 4,096 = 62,914,560 "
        "tokens, arXiv 2412.19437 §4.2); for a batch in tokens give global-batch-tokens"
    )
