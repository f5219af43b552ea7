"""The pipeline tab's error names the tab's own field: ``stages`` (the command line's
``--stages``, the field labelled "stages p"), not evaluate's ``pp`` — the API answered with
every command's keys, where evaluate's ``--pp`` came first (a new user's finding)."""

from __future__ import annotations

import warnings

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")
warnings.filterwarnings("ignore", message=".*httpx2.*")

from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402


def test_the_pipeline_error_names_the_pipeline_field():
    """m = 6 on p = 4 interleaved: Megatron-Core's interleaved schedule needs m a multiple of p
    (model/pipeline.py check_schedule); the CLI says --stages, the page's field is ``stages``."""
    client = TestClient(create_app(("testserver",)))
    query = {"stages": 4, "microbatches": 6, "schedule": "interleaved", "virtual-stages": 2}
    r = client.get("/api/pipeline", params=query)
    assert r.status_code == 422
    assert r.json() == {
        "error": "microbatches: 6 must be a multiple of stages = 4 for the interleaved schedule"
    }
    # evaluate's own field for the same rule stays pp
    r = client.get(
        "/api/evaluate",
        params={"model": "llama3-8b", "pp": 4, "dp": 1, "schedule": "interleaved",
                "virtual-stages": 2, "global-batch": 6, "micro-batch": 1},
    )  # fmt: skip
    assert r.status_code == 422 and "multiple of pp = 4" in r.json()["error"], r.json()
