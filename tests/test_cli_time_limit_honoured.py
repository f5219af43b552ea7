"""``trainplan search --time-limit`` ends within the limit on a search whose cost tables alone
take several times the limit, and says that the limit cut them. Run in a process of its own
(:mod:`tests.cli_runs`).

DeepSeek-V3 on 1,024 H100s under fsdp2 has 8,289 shapes; its complete tables took 18 s of CPU on
the 2-core development machine (33 s of wall clock with the machine shared), so an 8 s limit
must cut them. The tables are filled 512 shapes a block, and a block is not started that the
last block's pace says would end past the limit (:func:`optimizer.tables._block_would_pass`): the
tables can pass the limit only by how much slower the last block ran than the one before (a
512-shape block here took 0.5 s of CPU, up to 2 s of wall clock on the loaded machine), hence the
2 s allowed on the tables and CP-SAT together. The process's start-up (imports, about 1 s of
CPU) and its report come before and after the limit's clock: not asserted (on the shared machine,
load average 15, the whole process took 13.7 s of wall clock at a 6 s limit)."""

from __future__ import annotations

import json

from tests.cli_runs import trainplan

LIMIT_S = 8.0
TABLES_AND_SOLVE_SLACK_S = 2.0
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
    spent = got["tables_seconds"] + got["solve_seconds"]
    # the first block (512 shapes) is never cut: on a machine so loaded that it alone takes the
    # limit (load average 11: 7 to 8 s of wall clock for its 1.7 s of CPU), only it is held
    assert held == 512 or spent <= LIMIT_S + TABLES_AND_SOLVE_SLACK_S, (spent, note)
