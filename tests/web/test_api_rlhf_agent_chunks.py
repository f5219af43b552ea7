"""The API refuses, with HTTP 422 and one line, a GRPO step verl's 8 agent-loop workers cannot
split equally (:func:`model.rollout_prefix.check_agent_loop_chunks`: 5 prompts × 4 samples = 20,
20 mod 8 = 4), as ``trainplan rlhf`` and ``rlhf-plan`` exit 2 on it
(tests/test_cli_rlhf_agent_chunks.py). In-process through FastAPI's TestClient."""

from __future__ import annotations

import warnings

import pytest

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


@pytest.mark.parametrize("path", ["rlhf", "rlhf-plan"])
def test_unequal_agent_loop_chunks_are_422(client, path):
    query = "algorithm=grpo&reward=rule&model=qwen2.5-7b&gpus=8&prompts=5&samples-per-prompt=4"
    res = client.get(f"/api/{path}?{query}")
    assert res.status_code == 422, res.text
    assert res.json() == {
        "error": "prompts: 5 × samples-per-prompt 4 = 20 samples a step; verl splits them into "
        "its 8 agent-loop workers' equal chunks (DataProto.chunk asserts the count divides; "
        "agent-workers 8, verl's default actor_rollout_ref.rollout.agent.num_workers): the "
        "nearest that divide: 4 or 6 prompts, samples-per-prompt 8, or agent-workers 5 or 10"
    }
