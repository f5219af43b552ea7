"""The API's ``agent-workers`` (verl's ``actor_rollout_ref.rollout.agent.num_workers``, default
8): ``/api/rlhf-plan`` runs 5 prompts × 4 samples at 5 workers and echoes them; a count below 1,
one the step's 20 samples do not split into and one given to OpenRLHF (``framework=deepspeed``)
are HTTP 422 with the command's one line, the flag written as its query key
(tests/test_cli_rlhf_agent_workers.py). In-process through FastAPI's TestClient."""

from __future__ import annotations

import warnings

import pytest

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402

BASE = "algorithm=grpo&reward=rule&model=qwen2.5-7b&gpus=8&prompts=5&samples-per-prompt=4"


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


def test_the_workers_given_are_run_and_echoed(client):
    res = client.get(f"/api/rlhf-plan?{BASE}&agent-workers=5")
    assert res.status_code == 200, res.text
    body = res.json()
    assert body["agent_workers"] == 5 and "agent_workers" not in body["defaults_used"]
    assert body["status"] == "optimal"


@pytest.mark.parametrize(
    "extra, line",
    [
        ("agent-workers=0", "agent-workers: '0' must be at least 1"),
        (
            "agent-workers=6",
            "prompts: 5 × samples-per-prompt 4 = 20 samples a step; verl splits them into its 6 "
            "agent-loop workers' equal chunks (DataProto.chunk asserts the count divides; "
            "agent-workers 6, verl's actor_rollout_ref.rollout.agent.num_workers): the nearest "
            "that divide: 3 or 6 prompts, samples-per-prompt 6, or agent-workers 5 or 10",
        ),
        (
            "agent-workers=4&framework=deepspeed",
            "agent-workers: 4 is verl's actor_rollout_ref.rollout.agent.num_workers; OpenRLHF "
            "(framework deepspeed) has no agent-loop workers: leave it out, or use framework "
            "megatron or fsdp2",
        ),
    ],
)
@pytest.mark.parametrize("path", ["rlhf", "rlhf-plan"])
def test_bad_workers_are_422_with_one_line(client, path, extra, line):
    res = client.get(f"/api/{path}?{BASE}&{extra}")
    assert res.status_code == 422, res.text
    assert res.json() == {"error": line}
