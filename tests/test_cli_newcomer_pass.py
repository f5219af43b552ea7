"""What a new user met from a clean clone, each command its own ``trainplan`` process as the
user ran it (:func:`tests.cli_runs.run_many`):

* ``search --headroom 0.5`` answered a different layout than without it and said nowhere that
  the headroom was applied: its memory verdict compared the peak with the whole 83.21 GB. The
  answer's notes (text and JSON) now say what the search held every layout to, and a search
  with no layout says it beside its memory line.
"""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import Done, run_many

SEARCH8 = ["search", "--model", "llama3-8b", "--gpus", "8"]

CALLS: dict[str, list[str]] = {
    "headroom": [*SEARCH8, "--headroom", "0.5"],
    "headroom json": [*SEARCH8, "--headroom", "0.5", "--json"],
    "no headroom json": [*SEARCH8, "--json"],
    "headroom none fits": ["search", "--model", "llama3-8b", "--gpus", "1", "--headroom", "0.5"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Done]:
    folder = tmp_path_factory.mktemp("newcomer")
    return run_many(CALLS, cwd=folder)


def test_a_search_says_the_headroom_it_held_every_layout_to(runs):
    """The H100's usable bytes (the answer's ``capacity_bytes``) × (1 − 0.5) = 41.61 GB: the
    answer fits that, the search without the headroom answers a layout above it, and only the
    search with it says so."""
    held = runs["headroom json"]
    assert held.returncode == 0, held.stderr[-2000:]
    answer = json.loads(held.stdout)
    capacity = answer["memory"]["capacity_bytes"]
    assert (round(capacity / 1e9, 2), round(int(capacity * 0.5) / 1e9, 2)) == (83.21, 41.61)
    note = (
        "--headroom 0.5: only layouts that fit 41.61 GB per GPU were searched, 50% of the "
        "83.21 GB usable (50% kept free); the verdict compares the peak with the whole 83.21 GB"
    )
    assert note in answer["notes"]
    assert answer["memory"]["total_bytes"] <= int(capacity * 0.5)
    free = json.loads(runs["no headroom json"].stdout)
    assert free["memory"]["total_bytes"] > int(capacity * 0.5)
    assert not any("--headroom" in n for n in free["notes"])
    assert runs["headroom"].returncode == 0
    assert f"Note: {note}\n" in runs["headroom"].stdout


def test_a_search_with_no_layout_says_its_memory_line_is_less_the_headroom(runs):
    done = runs["headroom none fits"]
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines[1].startswith("  - memory: no layout fits 41.61 GB per GPU;")
    assert lines[2] == (
        "  - --headroom 0.5: that memory is 50% of the GPU's usable bytes (50% kept free)"
    )
