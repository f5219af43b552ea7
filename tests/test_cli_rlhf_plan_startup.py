"""``rlhf-plan --time-limit`` counts the command's start-up (loading the model, the accelerator
and the solver) as ``search`` does, and says so: a limit shorter than the start-up ran out with
"tables 0.03 s, CP-SAT 0.00 s" on the headline and nothing naming where the rest went (a 1 s
limit on a loaded 2-core machine took 8 s on the wall, 6 of them importing). The headline, the
stderr line and ``--json`` (``startup_seconds``) now name the start-up's seconds. Each call its
own process (:mod:`tests.cli_runs`)."""

from __future__ import annotations

import json
import re

from tests.cli_runs import run_many

ARGS = "rlhf-plan --algorithm grpo --reward rule --model llama3-70b --gpus 256".split()
"""tests/test_cli_review49.py's limited plan: 0.01 s ends before any pool's options are costed,
whatever the machine."""


def test_a_limited_rlhf_plan_names_the_start_up_its_limit_counted():
    """Text: the headline ends its timings with ", start-up X s (counted by the time limit)" and
    the stderr line says the start-up took X s of the limit; JSON: ``startup_seconds``, a positive
    float beside ``time_limit_seconds`` 0.01 (the start-up is the process's own: more than the
    limit here, less than a minute)."""
    args = [*ARGS, "--time-limit", "0.01"]
    runs = run_many({"text": args, "json": [*args, "--json"]})
    assert runs["text"].returncode == runs["json"].returncode == 1
    head = runs["text"].stdout.splitlines()[0]
    said = re.search(
        r", CP-SAT \d+\.\d\d s, start-up (\d+\.\d\d) s \(counted by the time limit\); ", head
    )
    assert said and 0.01 < float(said[1]) < 60, head
    err = runs["text"].stderr
    assert re.search(
        r"give a longer --time-limit \(start-up, loading the model, the accelerator and the "
        r"solver, took \d+\.\d\d s of it\)",
        err,
    ), err
    got = json.loads(runs["json"].stdout)
    assert got["time_limit_seconds"] == 0.01 and 0.01 < got["startup_seconds"] < 60
