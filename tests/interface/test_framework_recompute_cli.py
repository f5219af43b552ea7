"""Recompute sqrt under fsdp2 (not a torchtitan mechanism, :func:`model.frameworks.
check_framework_recompute`) as a user meets it: each command its own process, one line naming
the flag, its value and the rule, exit 2; the web API answers 422 with the same line."""

from __future__ import annotations

import warnings

import pytest

from tests.cli_runs import refusal, run_many

LINE = "--recompute: sqrt with --framework fsdp2 is not a torchtitan mechanism"
FSDP2 = ["--model", "llama3-8b", "--gpus", "8", "--framework", "fsdp2", "--recompute", "sqrt"]


def test_evaluate_and_search_refuse_in_one_line() -> None:
    done = run_many(
        {
            "evaluate": ["evaluate", *FSDP2, "--dp", "8", "--zero", "3"],
            "search": ["search", *FSDP2, "--time-limit", "20"],
        }
    )
    assert refusal(done["evaluate"]).startswith(LINE)
    assert refusal(done["search"]).startswith(f"search: {LINE.removeprefix('--')}")


def test_web_api_refuses_with_422() -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    warnings.filterwarnings("ignore", message=".*httpx2.*")
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    client = TestClient(create_app(("testserver",)))
    got = client.get(
        "/api/evaluate?model=llama3-8b&gpu=H100-SXM&gpus=8&dp=8&zero=3&framework=fsdp2"
        "&recompute=sqrt"
    )
    assert got.status_code == 422, got.text
    assert got.json()["error"].startswith(
        "recompute: sqrt with framework fsdp2 is not a torchtitan"
    )
