"""``trainplan frontier --time-limit`` says when the limit was passed, as ``trainplan search``
does, with the search's own note (:func:`interface.search_notes.time_limit_note`), in the text
and in the JSON's ``notes``. Each command runs in its own process (:mod:`tests.cli_runs`).

Llama 3 8B on 2 H100s has 36 shapes (576 candidates), under the first block of 64 shapes
(:data:`optimizer.table_blocks.FIRST_BLOCK_SHAPES`, which a limit never cuts), so a limit of
0.001 s cuts nothing out of the cost tables (no "cut" note) and is passed by the tables alone,
whatever the machine's speed (on 8 H100s, 156 shapes, the first block of 64 is now a cut). The
limit counts from the command's start, so the note names the seconds of start-up first. Before,
the frontier printed no note at all there, where the search printed this one."""

from __future__ import annotations

import json
import re

from tests.cli_runs import run_many

JOB = ["--model", "llama3-8b", "--gpus", "2", "--gpu", "H100-SXM", "--time-limit", "0.001"]
PASSED = "the time limit of 0.001 s was passed ("
# the rest of time_limit_note's wording after the seconds, the same for both commands
TAIL = (
    "the cost tables are filled in blocks growing from 64 to 512 shapes (with several jobs, "
    "shared among them, at least 64 each), the limit looked at between blocks once a candidate meets the "
    "constraints, and CP-SAT is given at least 1 s to read an answer; the status says whether "
    "that answer is proven"
)


def test_frontier_says_the_time_limit_was_passed_as_search_does():
    runs = run_many(
        {
            "json": ["frontier", *JOB, "--json"],
            "text": ["frontier", *JOB],
            "search": ["search", *JOB, "--json"],
        }
    )
    for done in runs.values():
        assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(runs["json"].stdout)
    assert got["candidates"] == 576  # one block: nothing cut
    assert not any("cut the cost tables" in n for n in got["notes"])
    (note,) = [n for n in got["notes"] if n.startswith(PASSED)]
    tables_s, solve_s = got["tables_seconds"], got["solve_seconds"]
    assert tables_s > 0.001
    spent = f"{tables_s:.2f} s of cost tables + {solve_s:.2f} s of CP-SAT): {TAIL}"
    assert re.fullmatch(re.escape(PASSED) + r"\d+\.\d\d s of start-up \+ " + re.escape(spent), note)
    # the search's note on the same job is the same text (its own seconds)
    search = json.loads(runs["search"].stdout)["time_limit_note"]
    assert search.startswith(PASSED) and search.endswith(f"): {TAIL}")
    text = runs["text"].stdout
    lines = [x for x in text.splitlines() if x.startswith(f"Note: {PASSED}")]
    assert len(lines) == 1 and lines[0].endswith(f"): {TAIL}"), text[:2000]
