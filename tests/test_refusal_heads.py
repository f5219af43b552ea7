"""Every refusal starts with what its reader typed (:func:`interface.flags.refusal`): on the
command line the flag (``--gpus:``, ``--global-batch:``, ``--zero:``), a ``--set`` key as typed
(``--set compile:``); in the web API the query key (``global-batch:``, ``zero:``). Run in-process
through the console script's own entry (:func:`interface.cli.common.run_guarded`) and the ASGI
test client."""

from __future__ import annotations

import re
import warnings

import pytest

from trainplan.interface.cli import cli
from trainplan.interface.cli.common import run_guarded

BASE = ["evaluate", "--model", "llama3-8b", "--gpu", "H100-SXM"]
CLI = [
    (["--gpus", "8", "--dp", "3"], "--gpus"),
    (["--dp", "1,000"], "--global-batch"),
    (["--global-batch", "7", "--gpus", "8"], "--global-batch"),
    (["--zero", "5"], "--zero"),
    (["--recompute", "foo"], "--recompute"),
    (["--micro-batch", "0"], "--micro-batch"),
    (["--gpus", "8", "--gpus", "7"], "--gpus"),
    (["--set", "compile=maybe"], "--set compile"),
    (["--set", "compile=true", "--set", "compile=false"], "--set compile"),
    (["--set", "nvlink_gbps=0"], "--set nvlink_gbps"),
    (["--set", "nope=1"], "--set"),
    (["--set", "offload_optimizer=2"], "--set offload_optimizer"),  # a key that also has a flag
    (["--set=offload_optimizer=2"], "--set offload_optimizer"),
    (["--offload-optimizer", "2"], "--offload-optimizer"),
    (["--nvlink-gbps", "900"], "--nvlink-gbps"),
]
WEB = [
    ("gpus=8&dp=3", "gpus"),
    ("dp=1,000", "global-batch"),
    ("zero=5", "zero"),
    ("recompute=foo", "recompute"),
    ("micro-batch=0", "micro-batch"),
    ("compile=maybe", "compile"),
    ("nvlink-gbps=0", "nvlink-gbps"),
]


def _head(line: str) -> str:
    return re.sub(r"^Error: ", "", line).split(":")[0]


@pytest.mark.parametrize(("args", "head"), CLI)
def test_command_line_heads(args, head, monkeypatch, capsys) -> None:
    monkeypatch.setattr("sys.argv", ["trainplan", *BASE, *args])
    with pytest.raises(SystemExit) as stop:
        run_guarded(cli)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and _head(lines[0]) == head, lines


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    warnings.filterwarnings("ignore", message=".*httpx2.*")
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    return TestClient(create_app(("testserver",)))


@pytest.mark.parametrize(("query", "head"), WEB)
def test_web_heads(query, head, client) -> None:
    got = client.get(f"/api/evaluate?model=llama3-8b&gpu=H100-SXM&{query}")
    assert got.status_code == 422, got.text
    assert _head(got.json()["error"]) == head, got.json()["error"]


def test_a_default_batch_refused_on_the_page_names_its_field(client) -> None:
    """4,000 GPUs of Llama 3 70B (tp = pp = cp = 1: dp 4,000) with the model's published batch,
    2,048 sequences, not typed: 422, the line says whose default it is and names the page's
    field that sets it (``global-batch``), as the command line names ``--global-batch``."""
    got = client.get("/api/evaluate?model=llama3-70b&gpus=4,000")
    assert got.status_code == 422, got.text
    assert got.json()["error"] == (
        "global-batch: 2,048 is not divisible by micro_batch_size 1 × dp 4,000 = 4,000 "
        "(2,048 is llama3-70b's default; give global-batch to set another)"
    )


def test_set_reads_on_off_words_and_quotes_what_was_typed() -> None:
    """``--set``'s on/off grammar is the web query's (any case; 1/0, yes/no, on/off); a key set
    twice is refused with both items as typed, not as parsed (``True, then False``)."""
    from trainplan.interface.scenario_keys import read_line, read_sets
    from trainplan.model.errors import InputError

    assert read_line("compile=True") == {"compile": True}
    assert read_line("compile=OFF") == {"compile": False}
    assert read_line("model=True") == {"model": "True"}  # a text key keeps its text
    keys = frozenset({"compile"})
    with pytest.raises(InputError) as err:
        read_sets(["compile=TRUE", "compile=no"], keys, "evaluate")
    assert str(err.value) == (
        "compile: set twice with different values ('compile=TRUE', then 'compile=no'); give it once"
    )
    assert read_sets(["compile=yes", "compile=1"], keys, "evaluate") == {"compile": True}


def test_a_missing_scenario_file_is_said_so(tmp_path) -> None:
    """``Scenario.load`` of a path that is not there: "no such file" (a folder is "not a regular
    file")."""
    from trainplan import Scenario
    from trainplan.model.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"^scenario \S+nope\.toml: no such file$"):
        Scenario.load(tmp_path / "nope.toml")
    with pytest.raises(ScenarioError, match="not a regular file"):
        Scenario.load(tmp_path)


def test_the_api_help_of_model_names_what_the_api_takes(client) -> None:
    """The API's ``model`` help does not offer a config.json path (refused: the server reads no
    files); it points at the upload (``config=``)."""
    spec = client.get("/openapi.json").json()
    for path in ("/api/search", "/api/evaluate"):
        params = spec["paths"][path]["get"]["parameters"]
        (model,) = (p["description"] for p in params if p["name"] == "model")
        assert "config.json path is refused" in model and "config=" in model
    assert client.get("/api/search?model=./config.json").status_code == 422
