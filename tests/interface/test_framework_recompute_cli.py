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
    # the rule reads pp too, so the search filters per shape and refuses when none is left
    assert refusal(done["search"]).startswith(LINE)


def _api_get(query: str):
    """``GET query`` against the web app in a test client (the page's API, as a browser calls it)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    warnings.filterwarnings("ignore", message=".*httpx2.*")
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    return TestClient(create_app(("testserver",))).get(query)


def test_web_api_refuses_with_422() -> None:
    got = _api_get(
        "/api/evaluate?model=llama3-8b&gpu=H100-SXM&gpus=8&dp=8&zero=3&framework=fsdp2"
        "&recompute=sqrt"
    )
    assert got.status_code == 422, got.text
    assert got.json()["error"].startswith(
        "recompute: sqrt with framework fsdp2 is not a torchtitan"
    )


def test_torchtitan_fragment_never_writes_none_for_sqrt() -> None:
    """A (Megatron) sqrt plan's torchtitan fragment: mode full, with the note saying why — not
    mode none, which would keep every activation."""
    from trainplan.interface.launch import torchtitan_toml
    from trainplan.model.layout import Layout
    from trainplan.model.specs import Architecture

    arch = Architecture(num_layers=8, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32,
                        vocab_size=16)  # fmt: skip
    titan = torchtitan_toml(arch, Layout(pp=2, recompute="sqrt"))
    assert titan.flags[-2:] == ("[activation_checkpoint]", 'mode = "full"')
    assert any(n.startswith("recompute sqrt: torchtitan has no multi-block") for n in titan.notes)


def test_web_api_refuses_fsdp2_blockwise_fp8_with_422() -> None:
    """torchtitan has no blockwise FP8 recipe (model/precision.py check_framework_fp8_recipe):
    the web API answers 422 with the command line's rule."""
    got = _api_get(
        "/api/evaluate?model=llama3-8b&gpu=H100-SXM&gpus=8&dp=8&zero=2&framework=fsdp2"
        "&precision=fp8&fp8-recipe=blockwise"
    )
    assert got.status_code == 422, got.text
    assert got.json()["error"].startswith("fp8-recipe: blockwise is Transformer Engine's")
