"""The web API's side of tests/test_cli_newuser44b.py: a micro-batch count given to a command
that derives it from the batch, and the cost objective without a price, refused with HTTP 422
and the command line's line as the page reads it."""

from __future__ import annotations

import warnings

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402


def test_a_micro_batch_count_and_an_unpriced_cost_objective_are_refused_as_on_the_command_line():
    """``/api/evaluate?microbatches=8`` suggested ``micro-batch`` (the sequences of one
    micro-batch, another figure); the cost objective's line now names the accelerator."""
    client = TestClient(create_app(("testserver",)))
    count = client.get("/api/evaluate?model=llama3-8b&microbatches=8")
    assert count.status_code == 422
    assert count.json() == {
        "error": "microbatches: no such parameter of evaluate, which derives the micro-batch "
        "count m from the batch: m = global-batch ÷ (micro-batch × dp), micro-batch being the "
        "sequences of one micro-batch"
    }
    cost = client.get("/api/search?model=llama3-8b&gpus=8&objective=cost&tokens=1e9")
    assert cost.status_code == 422
    assert cost.json() == {
        "error": "objective: 'cost' needs gpu-hour-price for every accelerator; none given for "
        "H100-SXM (e.g. gpu-hour-price H100-SXM=2.5)"
    }
