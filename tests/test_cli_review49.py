"""A new user's pass over time-limited searches, each ``trainplan`` call its own process
(:mod:`tests.cli_runs`): a limit so small (0.01 s) that no machine builds the cost tables within
it, so the answers below do not depend on the machine's speed."""

from __future__ import annotations

import json

from tests.cli_runs import run_many


def test_a_per_stage_frontier_cut_before_any_base_layout_proves_no_gap():
    """``frontier --per-stage --time-limit 0.01`` on Llama 3 70B and 256 H100s spends the limit
    on the uniform tables; its per-stage search searches no base layout (no shape, status
    feasible), so nothing bounds a split. Its point said "proven gap 0 ns" (``gap_s`` 0.0): a
    proof that was never made. The gap is now null, as ``search --per-stage`` says it
    (:attr:`optimizer.per_stage.PerStageResult.gap_ns`), and the table says none was proven."""
    args = "frontier --per-stage --model llama3-70b --gpus 256 --time-limit 0.01".split()
    runs = run_many({"text": args, "json": [*args, "--json"]})
    for name in ("text", "json"):
        assert runs[name].returncode == 0, runs[name].stderr[-2000:]
    points = json.loads(runs["json"].stdout)["points"]
    assert [(p["plan"], p["proven"], p["gap_s"]) for p in points] == [("uniform", False, None)]
    text = runs["text"].stdout
    assert "none proven (time limit)" in text
    assert " 0 ns " not in text


def test_an_rlhf_plan_cut_by_its_time_limit_says_the_limit_was_the_cause():
    """``rlhf-plan --time-limit 0.01`` on Llama 3 70B and 256 H100s: the limit ends before any
    pool size's options are costed. The answer must name the limit as the cause and the way out
    (a longer --time-limit), not claim that no placement fits: exit 1, status ``unknown``."""
    args = "rlhf-plan --algorithm grpo --reward rule --model llama3-70b --gpus 256".split()
    args += ["--time-limit", "0.01"]
    runs = run_many({"text": args, "json": [*args, "--json"]})
    assert runs["text"].returncode == runs["json"].returncode == 1
    text = runs["text"].stdout + runs["text"].stderr
    assert "No placement found within the time limit of 0.01 s (not proven infeasible): " in text
    assert "give a longer --time-limit" in text and "no placement fits" not in text
    got = json.loads(runs["json"].stdout)
    assert (got["status"], got["best"], got["tables_complete"]) == ("unknown", None, False)
    assert got["reason"].startswith("the time limit ran out before any placement was found")
