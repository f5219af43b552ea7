"""The page's fields against the command line's options: every option of ``evaluate``, ``search``
and ``frontier`` is a field of its page (the Planner, Search, Frontier), or a scenario key the
page's "Other settings" field sends as ``--set`` (one ``KEY=VALUE`` a line), or listed with why
in :data:`interface.web.pages.NO_FIELD`; the new fields (the Slurm segment, the memory reserve,
evaluate's per-stage rows, the per-stage search's shapes and proven gap, the search space's ep,
micro-batch, recompute, schedule…) answer the CLI's figure and refuse with its line. In-process
through FastAPI's TestClient; the browser's half is ``test_page_fields_browser.py``. Skipped
without the extras (see conftest)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.web.conftest import cli_json, need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.cli.query import moved_params, query_params  # noqa: E402
from trainplan.interface.flags import on_page  # noqa: E402
from trainplan.interface.scenario_keys import EVALUATE_KEYS, SEARCH_KEYS  # noqa: E402
from trainplan.interface.web.api import API_ONLY, page_fields  # noqa: E402
from trainplan.interface.web.app import create_app  # noqa: E402
from trainplan.interface.web.pages import NO_FIELD  # noqa: E402
from trainplan.interface.web.params import TERMINAL_ONLY  # noqa: E402

PAGES = Path(__file__).resolve().parents[2] / "interface" / "web" / "pages"
FORMS = {
    "evaluate": ("planner.html",),
    "search": ("search.html", "search_inputs.html"),
    "frontier": ("frontier.html", "search_inputs.html"),
}
"""Each command and the page files whose form holds its fields."""

# qwen3-30b-a3b on 64 GB200 (16 trays of 4 GPUs), dp 64, ep 32: NVIDIA's launcher gives a job of
# 16 trays ≤ 18 one segment, the whole job (model.segments.advised_segment_gpus: 64 GPUs), so
# each ep group of 32 consecutive ranks lies in one segment, one rack: NVLink, 628.6 ms. Given
# segments of 16 GPUs (4 trays), an ep group spans two segments, which may lie in two racks:
# scale-out, 4.429 s (tests/model/test_segments.py, the same figures from the library).
SEGMENT_JOB = ["--model", "qwen3-30b-a3b", "--gpu", "GB200", "--gpus", "64", "--dp", "64",
               "--ep", "32"]  # fmt: skip


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


def query(args: list[str]) -> str:
    """CLI options ``--key value …`` as the API's query."""
    return urlencode([(args[i].lstrip("-"), args[i + 1]) for i in range(0, len(args), 2)])


def fields(command: str) -> set[str]:
    """The form fields' names of ``command``'s page (its own controls, ``_…``, left out)."""
    text = "".join((PAGES / f).read_text() for f in FORMS[command])
    return set(re.findall(r'name="([^"_][^"]*)"', text))


def _ep(d: dict) -> dict:
    return next(r for r in d["traffic"] if r["axis"] == "ep")


@pytest.mark.parametrize("command", list(FORMS))
def test_every_option_is_a_field_a_set_key_or_said_why_not(command):
    """No option of the command is out of the page's reach unless :data:`NO_FIELD` says why;
    every field is a parameter the API takes (no field the API would refuse by name)."""
    options = {q.name for q in query_params(command, TERMINAL_ONLY)}
    have = fields(command)
    assert "set" in have  # the Other settings field: every --set key of the command
    by_set = set(moved_params(command))  # the moved flags: --set keys, the field sends them
    missing = options - have - by_set - set(NO_FIELD.get(command, {}))
    assert not missing, f"{command}: options with no field, no --set key and no reason: {missing}"
    assert set(NO_FIELD.get(command, {})) <= options
    keys = EVALUATE_KEYS if command == "evaluate" else SEARCH_KEYS
    for option, why in NO_FIELD.get(command, {}).items():  # said to be a --set line: it is one
        if why.startswith("Other settings: "):
            assert why.removeprefix("Other settings: ").partition("=")[0] in keys, option
    assert not set(NO_FIELD.get(command, {})) & have  # said to have no field, yet has one
    assert have <= options | set(API_ONLY.get(command, ())), have - options


def test_the_segment_field_answers_the_cli_figure(client):
    """``segment-gpus=16`` is ``--set segment_gpus=16``: the same object, key for key; ep 32
    leaves NVLink (0.6286 s) for the scale-out fabric (4.429 s); the field left empty sends
    nothing and the launcher's segment (the whole job) holds."""
    got = client.get(f"/api/evaluate?{query(SEGMENT_JOB)}&segment-gpus=16").json()
    want = cli_json("evaluate", *SEGMENT_JOB, "--set", "segment_gpus=16")
    want["notes"] = [on_page(n, page_fields("evaluate")) for n in want["notes"]]
    assert got == want
    assert (_ep(got)["link"], round(_ep(got)["seconds"], 3)) == ("scale-out", 4.429)
    note = next(n for n in got["notes"] if "Slurm segments" in n)
    assert note.startswith("ep 32 on scale-out, dp 64 on scale-out")
    default = client.get(f"/api/evaluate?{query(SEGMENT_JOB)}").json()
    assert (_ep(default)["link"], round(_ep(default)["seconds"], 4)) == ("nvlink", 0.6286)
    # the Other settings field's line, the same knob
    by_set = client.get(f"/api/evaluate?{query(SEGMENT_JOB)}&set=segment_gpus%3D16").json()
    assert by_set == got


def test_the_segment_field_refuses_with_the_cli_line(client, capsys, monkeypatch):
    """24 GPUs do not divide the job's 64: the CLI's line, naming the field (HTTP 422)."""
    import sys

    from trainplan.interface.cli import main

    bad = client.get(f"/api/evaluate?{query(SEGMENT_JOB)}&segment-gpus=24")
    rule = "24 must divide the job's 64 GPUs (Slurm's --segment splits a job's nodes into whole segments)"  # noqa: E501
    assert bad.status_code == 422 and bad.json() == {"error": f"segment-gpus: {rule}"}
    monkeypatch.setattr(sys, "argv", ["trainplan", "evaluate", *SEGMENT_JOB, "--set",
                                      "segment_gpus=24"])  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == f"Error: --set segment_gpus: {rule}"
    # 0 states no segment (ranks fill whole NVLink domains), as --set segment_gpus=0 does
    for value, line in (("-1", "segment-gpus: -1 must be at least 0"),
                        ("x", "segment-gpus: 'x' is not a number")):  # fmt: skip
        bad = client.get(f"/api/evaluate?{query(SEGMENT_JOB)}&segment-gpus={value}")
        assert bad.status_code == 422 and bad.json()["error"].startswith(line), bad.json()


def test_the_other_settings_field_takes_each_line_as_set(client):
    """Two lines, two ``set`` parameters: ``--set`` twice; a key ``--set`` does not take is
    refused with the CLI's suggestion."""
    two = f"{query(SEGMENT_JOB)}&set=segment_gpus%3D16&set=memory_reserve_gib%3D4"
    got = client.get(f"/api/evaluate?{two}").json()
    want = cli_json("evaluate", *SEGMENT_JOB, "--set", "segment_gpus=16", "--set",
                    "memory_reserve_gib=4")  # fmt: skip
    want["notes"] = [on_page(n, page_fields("evaluate")) for n in want["notes"]]
    assert got == want
    bad = client.get(f"/api/evaluate?{query(SEGMENT_JOB)}&set=segment_gpu%3D16")
    assert bad.status_code == 422
    assert bad.json()["error"].startswith(
        "set: 'segment_gpu' is not a scenario key evaluate takes; did you mean segment_gpus?"
    )


def test_the_planner_per_stage_rows_are_the_cli_rows(client):
    """``per-stage=true``: evaluate --per-stage's ``stages``; Llama 3 8B's 32 layers on pp 2:
    16 + 16, the first stage holding 2 micro-batches in flight under 1F1B (pp − rank), the last
    1."""
    args = ["--model", "llama3-8b", "--pp", "2"]
    got = client.get(f"/api/evaluate?{query(args)}&per-stage=true").json()
    want = cli_json("evaluate", *args, "--per-stage")
    assert got["stages"] == want["stages"]
    assert [(s["stage_layers"], s["stage_in_flight"]) for s in got["stages"]] == [(16, 2), (16, 1)]
    assert "stages" not in client.get(f"/api/evaluate?{query(args)}").json()


def test_the_per_stage_search_shapes_field_and_its_proven_gap(client):
    """``per-stage-shapes=1`` is ``--per-stage-shapes 1``: the same plan (Llama 3 70B on 16
    H100s at s 6,144: 40 + 40 layers, 38 and 37 recomputed; at 8,192 Transformer Engine's
    placeholder weight gradients leave it the uniform plan) and its proven gap, ``gap_s``, the
    step less the proven lower bound (2 ns: the ns rounding of the order's paths), which the
    page shows; without per-stage the field does not apply (the CLI's line)."""
    args = ["--model", "llama3-70b", "--gpus", "16", "--seq-len", "6144"]
    got = client.get(f"/api/search?{query(args)}&per-stage=true&per-stage-shapes=1").json()
    want = cli_json("search", *args, "--per-stage", "--per-stage-shapes", "1")
    ps, cli_ps = got["per_stage"], want["per_stage"]
    for key in ("status", "stage_layers", "recompute_layers", "step_s", "gap_s", "gain"):
        assert ps[key] == cli_ps[key], key
    assert ps["stage_layers"] == [40, 40] and ps["recompute_layers"] == [38, 37]
    assert ps["status"] == "optimal" and round(ps["gap_s"] * 1e9) == 2
    bad = client.get(f"/api/search?{query(args)}&per-stage-shapes=1")
    assert bad.status_code == 422 and bad.json()["error"].startswith("per-stage-shapes:")


def test_the_search_space_fields_are_the_cli_lists():
    """The Search tab's list fields (``ep=1;2``, ``recompute=selective;full``) are the options
    repeated, read with the command line's grammar."""
    from trainplan.interface.web.params import parse

    kw, _ = parse("search", [("model", "llama3-8b"), ("gpus", "8"), ("ep", "1;2"),
                             ("recompute", "selective;full"), ("schedule", "1f1b"),
                             ("micro-batch", "1;2"), ("max-micro-batch", "4")])  # fmt: skip
    assert (kw["ep"], kw["recompute"], kw["schedule"]) == ((1, 2), ("selective", "full"), ("1f1b",))
    assert (kw["micro_batch"], kw["max_micro_batch"]) == ((1, 2), 4)
