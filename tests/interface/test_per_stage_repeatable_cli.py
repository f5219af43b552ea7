"""The per-stage search prints the same split on every run, where two splits tie.

Llama 3 8B on 6 H100s (s 8,192, B 32, ZeRO-0 or 1): the per-stage plan is pp 3 and dp 2 with
12 + 12 + 8 layers; 12 + 11 + 9 takes the same step to the nanosecond and the same peak to the
byte (stage 0's 12 layers and the embedding set both).
With several CP-SAT workers whichever worker reports first is kept, so two runs could print
either; the per-stage search runs one worker unless ``--workers`` is given
(:data:`optimizer.solver.STAGE_WORKERS`). Each command here is its own interpreter with its own
hash seed, as two users' runs are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SEARCH = ["search", "--model", "llama3-8b", "--gpus", "6", "--seq-len", "8192"]
SEARCH += ["--global-batch", "32", "--zero", "0", "--zero", "1", "--per-stage", "--json"]
TIMINGS = ("uniform_seconds", "tables_seconds", "solve_seconds")


def _fresh(args: list[str], hash_seed: str) -> dict:
    """``trainplan ARGS`` in a new interpreter under ``PYTHONHASHSEED=hash_seed``; its JSON."""
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    cmd = [sys.executable, "-m", "trainplan", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _untimed(answer: dict) -> dict:
    """``answer`` without its seconds (the search's and each shape's)."""
    per_stage = {k: v for k, v in answer["per_stage"].items() if k not in TIMINGS}
    shapes = [{k: v for k, v in s.items() if k not in TIMINGS} for s in per_stage["shapes"]]
    return {**answer, "per_stage": {**per_stage, "shapes": shapes}}


def test_two_runs_print_one_split_of_two_that_tie():
    first, second = _fresh(SEARCH, "1"), _fresh(SEARCH, "2")
    assert _untimed(first) == _untimed(second)
    plan = first["per_stage"]
    assert (plan["status"], plan["stage_layers"], plan["recompute_layers"]) == (
        "optimal",
        [12, 12, 8],
        [0, 0, 0],
    )
    # the tie is real: evaluate the other split of the same layout
    command = first["evaluate_command"].split()[1:]
    at = command.index("--stage-layers") + 1
    assert command[at] == "12,12,8"
    other = _fresh([*command[:at], "12,11,9", *command[at + 1 :], "--json"], "3")
    assert other["time"]["step_s"] == first["time"]["step_s"]
    # 82,004,017,152 B + Transformer Engine's placeholder weight gradients on stage 0 at tp 1
    # (model/terms/dummy_wgrads.py): QKV [6,144, 4,096], proj [4,096, 4,096], FC1 [28,672,
    # 4,096], FC2 [4,096, 14,336] in BF16, 436,207,616 B
    assert 2 * 4096 * (6144 + 4096 + 28672 + 14336) == 436_207_616
    peak = 82_004_017_152 + 436_207_616
    assert other["memory"]["total_bytes"] == first["memory"]["total_bytes"] == peak


def test_workers_still_taken_and_refused_as_a_count():
    """``--workers`` still sets the per-stage search's workers (any count prints the proven
    step); a count below one is refused in one line."""
    answer = _fresh([*SEARCH, "--workers", "2"], "4")
    assert answer["per_stage"]["status"] == "optimal"
    # 5.297227635 s before the optimizer step zeroed the distributed optimizer's whole FP32
    # gradient buffer (model.terms.optimizer_time.whole_buffer_zeroing_bytes); 5.299343918 s
    # before Megatron-Core's own optimizer-step passes (model.step_passes: 12 B more an element
    # stepped, the clip's scaling and the master's second read, over half the first stage's
    # 12 × 218,112,000 + 525,336,576 elements at 2.97 TB/s, 6.349 ms)
    assert round(answer["time"]["step_s"], 9) == 5.305692768
    bad = subprocess.run(
        [sys.executable, "-m", "trainplan", *SEARCH, "--workers", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and len(lines) == 1 and "--workers" in lines[0], bad.stderr
