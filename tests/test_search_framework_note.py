"""A search over two frameworks with a setting only one of them runs says which framework the
setting left out and by which rule (reviewer: ``--framework megatron --framework fsdp2
--optimizer muon --set muon_tp_mode=blockwise`` searched Megatron's layouts only and said
nothing). The rule is Megatron-Core's: ``muon_tp_mode`` is its ``OptimizerConfig`` option
(:func:`model.muon.muon_tp_gathers`); FSDP2 orthogonalises whole matrices, so every fsdp2
layout is refused and the note names it, as it names a requested tp no layout uses
(:func:`interface.search_notes.unused_note`). Each CLI call its own process; the web API
through the test client."""

from __future__ import annotations

import json
import warnings

from tests.cli_runs import run_many

ARGS = ["search", "--model", "llama3-8b", "--gpus", "64", "--gpu", "H100-SXM", "--pp", "1"]
ARGS += ["--framework", "megatron", "--framework", "fsdp2", "--optimizer", "muon"]
NOTE = (
    "requested values no layout uses: framework fsdp2 (muon_tp_mode: blockwise is "
    "Megatron-Core's option; fsdp2 orthogonalises whole matrices)"
)


def test_the_note_names_the_framework_left_out():
    done = run_many(
        {
            "text": [*ARGS, "--set", "muon_tp_mode=blockwise"],
            "json": [*ARGS, "--set", "muon_tp_mode=blockwise", "--json"],
            "both run": [*ARGS, "--json"],
        }
    )
    for d in done.values():
        assert d.returncode == 0, d.stderr[-2000:]
    assert f"Note: {NOTE}" in done["text"].stdout.splitlines()
    blockwise, both = json.loads(done["json"].stdout), json.loads(done["both run"].stdout)
    assert blockwise["notes"][-1] == NOTE
    assert blockwise["layout"]["framework"] == "megatron"
    # without the setting fsdp2 runs Muon too: more candidates, and no such note
    assert both["candidates"] > blockwise["candidates"]
    assert not any("framework fsdp2" in n for n in both["notes"])


def test_the_web_api_says_it_too():
    warnings.filterwarnings("ignore", message=".*httpx2.*")
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    client = TestClient(create_app(("testserver",)))
    query = (
        "model=llama3-8b&gpus=64&gpu=H100-SXM&pp=1&framework=megatron&framework=fsdp2"
        "&optimizer=muon&set=muon_tp_mode%3Dblockwise"
    )
    got = client.get(f"/api/search?{query}")
    assert got.status_code == 200, got.text[:300]
    assert got.json()["notes"][-1] == NOTE
