"""``trainplan search --per-stage`` gives every stage's memory, not only the busiest stage's:
the JSON's ``stages`` rows (evaluate's, read off the same estimate) and a ``peak GB`` column in
the text's stages table. Each command runs in its own process, as a user runs it."""

from __future__ import annotations

import json
import shlex

from tests.cli_runs import trainplan

SEARCH = ("search", "--model", "llama3-70b", "--gpus", "16", "--seq-len", "6144", "--per-stage")
# the per-stage plan of tests/interface/test_per_stage_cli.py: tp 8 × pp 2, 40 and 40 layers,
# 38 and 37 of them fully recomputed (at 8K, with Transformer Engine's placeholder weight
# gradients held, the plan is the uniform one: no stages table)


def test_every_stage_memory_in_the_json_and_the_table():
    done = trainplan(*SEARCH, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    d = json.loads(done.stdout)
    rows = d["stages"]
    assert [r["stage"] for r in rows] == [0, 1]
    assert [r["stage_layers"] for r in rows] == d["per_stage"]["stage_layers"] == [40, 40]
    # the busiest stage's peak is the existing memory figure, and no stage's is above it
    busiest = d["memory"]["busiest_stage"]
    assert rows[busiest]["stage_total_bytes"] == d["memory"]["total_bytes"]
    assert max(r["stage_total_bytes"] for r in rows) == d["memory"]["total_bytes"]
    assert rows[busiest]["stage_state_bytes"] == d["memory"]["model_state_bytes"]
    # evaluate of the plan (the command the search prints) reports the same rows per stage,
    # stage 0's included
    args = shlex.split(d["evaluate_command"])[1:]
    evaluated = trainplan(*args, "--per-stage", "--json")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    e = json.loads(evaluated.stdout)
    assert e["stages"][0] == rows[0]
    assert e["stages"] == rows
    assert e["memory"]["total_bytes"] == d["memory"]["total_bytes"]

    text = trainplan(*SEARCH)
    assert text.returncode == 0, text.stderr[-2000:]
    lines = text.stdout.splitlines()
    head = next(i for i, x in enumerate(lines) if x.startswith("stage ") and "peak GB" in x)
    for r, line in zip(rows, lines[head + 2 : head + 4], strict=True):
        cells = line.split()
        assert cells[0] == str(r["stage"])
        assert cells[-1] == f"{r['stage_total_bytes'] / 1e9:,.2f}"
