"""``trainplan search --time-limit`` stops its cost tables at the limit on a search whose tables alone
take several times the limit, and says that the limit cut them. Run in a process of its own
(:mod:`tests.cli_runs`).

DeepSeek-V3 on 1,024 H100s under fsdp2 has 8,289 shapes; its complete tables took 18 s of CPU on
the 2-core development machine (33 s of wall clock with the machine shared), so a 2 s limit
cuts them, on a machine several times faster too. The tables are
filled 512 shapes a block, and a block is not started that the last block's pace says would end
past the limit (:func:`optimizer.tables._block_would_pass`); the first block is never cut."""

from __future__ import annotations

import json

from tests.cli_runs import trainplan

LIMIT_S = 2.0
JOB = (
    "search", "--model", "deepseek-v3", "--gpus", "1024", "--gpu", "H100-SXM",
    "--framework", "fsdp2", "--time-limit", f"{LIMIT_S:g}", "--json",
)  # fmt: skip


def test_a_short_limit_ends_the_search_within_it_and_says_the_tables_were_cut():
    done = trainplan(*JOB)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got["status"] == "feasible" and got["time_limit_seconds"] == LIMIT_S
    held = got["shapes"]
    assert 512 <= held < 8289 and got["candidates"] == held * 16
    note = got["time_limit_note"]
    assert note.startswith(
        f"the time limit cut the cost tables at {held:,} of 8,289 shapes, the first in "
        "tie-break order (fewest model-parallel GPUs first); "
    ), note
    assert "the answer is the best of those, not proven" in note
    # How close to the limit the tables end is a matter of the machine's load; the pace rule
    # that decides it is tested on a fake clock (tests/optimizer/test_tables_time_limit.py) and
    # the wall clock in the benchmark (interface.bench.search LIMIT_CASES), not here.
