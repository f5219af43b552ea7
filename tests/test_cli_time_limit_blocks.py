"""``--time-limit`` binds inside one job's cost tables, each ``trainplan`` call its own process
(:mod:`tests.cli_runs`).

``trainplan search --model deepseek-v3 --gpus 2048 --gpu H100-SXM --time-limit 2`` spent 12.7 s
building the tables of its one job (4,912 shapes) and printed "proven optimal": the limit was
looked at only between jobs. Now a job's shapes are filled in blocks under a time limit, the
limit looked at between blocks once some candidate fits; the blocks grow from 64 shapes
(:data:`optimizer.table_blocks.FIRST_BLOCK_SHAPES`) to 512. With ``--time-limit 0.001`` (spent
before the search begins: it counts from the command's start) the first block of 64 (whose
candidates include fitting ones) is all the tables hold, whatever the machine's speed; its best
is the layout the first 512 shapes gave when the first block was 512 (43.692 s, dp 1024 × tp 2
× ep 8, ZeRO-3): the search says so, status
``feasible``, and its answer is a real layout — ``trainplan evaluate`` on the printed line gives
the same step time and memory."""

from __future__ import annotations

import json
import re
import shlex
import time

from tests.cli_runs import run_many, trainplan

DEEPSEEK = ["search", "--model", "deepseek-v3", "--gpus", "2048", "--gpu", "H100-SXM",
            "--time-limit", "0.001"]  # fmt: skip

ALLOWANCE_S = 120
"""What the cut search may take on a loaded two-core machine: the limit (0.001 s), one block of
64 shapes (under 1 s of CPU), CP-SAT's 1 s floor and the process's start, with room for other
work on the CPUs. Not a timing assertion of the cut itself: that is the shape count."""


def test_a_time_limit_cuts_one_jobs_tables_and_says_so():
    start = time.monotonic()
    runs = run_many({"json": [*DEEPSEEK, "--json"], "text": DEEPSEEK})
    assert time.monotonic() - start < ALLOWANCE_S
    for done in runs.values():
        assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(runs["json"].stdout)
    assert got["status"] == "feasible" and got["interrupted"] is False
    assert got["shapes"] == 64 and got["candidates"] == 64 * 16  # 4 ZeRO stages × 4 recompute
    note = got["time_limit_note"]
    assert note.startswith(
        "the time limit cut the cost tables at 64 of 4,912 shapes, the first in tie-break "
        "order (fewest model-parallel GPUs first); "
    )
    assert note.endswith(
        "the answer is the best of those, not proven; a longer --time-limit searches the rest"
    )
    text = runs["text"].stdout
    assert "objective step-time: best found within the time limit (not proven)" in text
    assert "Note: the time limit cut the cost tables at 64 of 4,912 shapes" in text
    assert f"\nevaluate it: {got['evaluate_command']}\n" in text
    # the answer is a layout evaluate() gives the same figures for
    words = shlex.split(got["evaluate_command"])
    assert words[:2] == ["trainplan", "evaluate"]
    evaluated = trainplan(*words[1:], "--json")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    again = json.loads(evaluated.stdout)
    assert again["time"]["step_s"] == got["time"]["step_s"]
    assert abs(got["objective_s"] - again["time"]["step_s"]) < 1e-9  # the tables' whole ns
    assert round(again["time"]["step_s"], 3) == 43.692  # dp 1024 × tp 2 × ep 8, ZeRO-3
    assert again["memory"]["total_bytes"] == got["memory"]["total_bytes"]


def test_a_per_stage_search_says_what_the_time_limit_cut():
    """``--per-stage`` takes its base layouts from the uniform search's cost tables; cut, its
    text and JSON said only "not proven". They now say where the tables were cut."""
    runs = run_many(
        {"json": [*DEEPSEEK, "--per-stage", "--json"], "text": [*DEEPSEEK, "--per-stage"]}
    )
    for done in runs.values():
        assert done.returncode == 0, done.stderr[-2000:]
    ps = json.loads(runs["json"].stdout)["per_stage"]
    cut = (
        "the time limit cut the cost tables at 64 of 4,912 shapes, the first in tie-break order "
        "(fewest model-parallel GPUs first)"
    )
    assert ps["status"] == "feasible" and ps["cut"] == cut
    said = re.search(  # the start-up the limit counted, as the search's own note names it
        rf"\nNote: {re.escape(cut)}; (\d+\.\d\d) s of start-up counted by the limit: the plans "
        r"are the best of those shapes, not proven\n",
        runs["text"].stdout,
    )
    assert said is not None and float(said.group(1)) > 0


def test_the_per_stage_frontier_says_what_the_time_limit_cut():
    """``frontier --per-stage`` searches over the uniform search's cost tables; cut, its text
    and JSON said only "not proven" (``best found within the time limit``). They now carry the
    note the frontier without ``--per-stage`` gives (its notes, from the same function)."""
    frontier = ["frontier", *DEEPSEEK[1:], "--per-stage"]
    runs = run_many({"json": [*frontier, "--json"], "text": frontier})
    for done in runs.values():
        assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(runs["json"].stdout)
    cut = (
        "the time limit cut the cost tables at 64 of 4,912 shapes, the first in tie-break order "
        "(fewest model-parallel GPUs first)"
    )
    rest = (
        "s of start-up counted by the limit: the points are the frontier of those shapes, not "
        "proven; a longer --time-limit searches the rest"
    )  # the start-up the limit counted, as the search's note names it: the JSON's own seconds
    note = f"{cut}; {out['startup_seconds']:.2f} {rest}"
    assert out["status"] == "feasible" and out["notes"] == [note]
    said = re.search(
        rf"\nNote: {re.escape(cut)}; \d+\.\d\d {re.escape(rest)}\n", runs["text"].stdout
    )
    assert said is not None
