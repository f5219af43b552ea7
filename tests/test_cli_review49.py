"""A new user's pass over time-limited searches, each ``trainplan`` call its own process
(:mod:`tests.cli_runs`): a limit so small (0.01 s) that no machine builds the cost tables within
it, so the answers below do not depend on the machine's speed."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import refusal, run_many, trainplan


def test_a_per_stage_frontier_cut_before_any_base_layout_proves_no_gap():
    """``frontier --per-stage --time-limit 0.01`` on Llama 3 70B and 256 H100s spends the limit
    on the uniform tables; where its per-stage search then searches no base layout (no shape,
    status feasible), nothing bounds a split. Its point said "proven gap 0 ns" (``gap_s`` 0.0): a
    proof that was never made. The gap is now null, as ``search --per-stage`` says it
    (:attr:`optimizer.per_stage.PerStageResult.gap_ns`), and the table says none was proven.

    The first search has at least 1 s (:meth:`optimizer.per_stage_frontier.Budget.time_limit`);
    since the uniform tables are cut after a first block of 64 shapes (it was 512, which took
    that second), a machine fast enough searches a base in it and the point is a per-stage plan,
    not proven, with the gap it proved (or none, where the limit stopped that proof): either
    way no gap is claimed that was not proven."""
    args = "frontier --per-stage --model llama3-70b --gpus 256 --time-limit 0.01".split()
    runs = run_many({"text": args, "json": [*args, "--json"]})
    for name in ("text", "json"):
        assert runs[name].returncode == 0, runs[name].stderr[-2000:]
    points = json.loads(runs["json"].stdout)["points"]
    assert len(points) == 1 and points[0]["proven"] is False
    text = runs["text"].stdout
    point = points[0]
    assert point["plan"] in ("uniform", "per-stage")
    if point["plan"] == "uniform":  # no base searched: no gap
        assert point["gap_s"] is None
    assert point["gap_s"] is None or point["gap_s"] >= 0  # a gap only where one was proven
    # the text is another process, which may have searched a base or not: it never says both
    assert not ("none proven (time limit)" in text and " 0 ns " in text)


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


PLAN_8B = "rlhf-plan --algorithm grpo --reward rule --model llama3-8b --gpus 16".split()
"""GRPO with a rule reward, Llama 3 8B on 16 H100s: colocated wins, synchronous or not (every
GPU works in every phase; docs/guides/rlhf.md's placement table says "colocated, as
synchronous" for the off-policy rows)."""
RLHF_8B = "rlhf --algorithm grpo --reward rule --model llama3-8b --gpus 16".split()


def test_a_colocated_plan_of_an_off_policy_search_says_it_runs_synchronously():
    """``rlhf-plan --off-policy 1`` picks the colocated placement and printed "placement:
    colocated, one-step off-policy", though its step is the synchronous one (1,900.088 s, the
    same as without --off-policy) and ``rlhf --off-policy 1`` without ``--rollout-gpus`` is
    refused: colocated, the next rollout cannot run beside training. The verdict now says the
    plan runs synchronously and why, and its step line says (synchronous); the plan,
    re-evaluated by ``rlhf`` as it runs (synchronous, colocated: engine tp 2 at fraction 0.9,
    actor and reference tp 1 × pp 2 offloaded when idle), gives the same step. The plan's JSON
    keeps the search's ``off_policy`` 1."""
    same = ["--train-tp", "1", "--train-pp", "2", "--rollout-tp", "2", "--offload", "idle"]
    runs = run_many(
        {
            "plan": [*PLAN_8B, "--off-policy", "1", "--time-limit", "120"],
            "json": [*PLAN_8B, "--off-policy", "1", "--time-limit", "120", "--json"],
            "rlhf": [*RLHF_8B, *same, "--engine-memory-fraction", "0.9"],
            "refused": [*RLHF_8B, *same, "--off-policy", "1"],
        }
    )
    for name in ("plan", "json", "rlhf"):
        assert runs[name].returncode == 0, runs[name].stderr[-2000:]
    text = runs["plan"].stdout
    assert (
        "placement: colocated, synchronous (one-step off-policy needs the engine on GPUs of its "
        "own: colocated, the next rollout cannot run beside training) — fits"
    ) in text
    assert "one-step off-policy —" not in text and "per step (one-step off-policy)" not in text
    best = json.loads(runs["json"].stdout)["best"]
    assert (best["placement"], best["off_policy"]) == ("colocated", 1)
    step = next(line for line in text.splitlines() if line.startswith("step: "))
    assert step.split(" → ")[1].startswith("1,900.088 s (31.7 min) per step (synchronous)")
    assert step in runs["rlhf"].stdout.splitlines()
    assert refusal(runs["refused"]).startswith(
        "--off-policy: 1 needs the engine on GPUs of its own"
    )


def test_a_roles_rollout_seconds_hold_the_weight_sync_listed_under_it():
    # Qwen2.5 7B GRPO, the engine on 8 GPUs of its own: the engine's rollout seconds are its
    # prefill + decode + the broadcast listed under it (interface.rlhf.report.plan_dict), so the
    # role table, its terms and the engine's pool agree (they disagreed by the sync before).
    done = trainplan(
        *("rlhf", "--algorithm", "grpo", "--reward", "rule", "--model", "qwen2.5-7b"),
        *("--gpus", "16", "--rollout-gpus", "8", "--rollout-tp", "1", "--json"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)["faithful"]
    engine = next(r for r in plan["roles"] if r["role"] == "rollout")
    terms = [t for t in plan["terms"] if t["role"] == "rollout" and t["unit"] == "s"]
    assert any(t["term"].startswith("weight sync") for t in terms)
    listed = sum(t["value"] for t in terms if t["phase"] == "rollout")
    assert engine["seconds"]["rollout"] == pytest.approx(listed, rel=1e-12)
    pool = next(p for p in plan["pools"] if p["roles"] == ["rollout"])
    assert pool["busy_seconds"]["rollout"] == pytest.approx(listed, rel=1e-12)


def test_an_impossible_hfu_names_the_step_as_well_as_the_recomputation():
    # Llama 3 70B, 4M tokens in 7 s on 256 H100s: the MFU alone is 95.5 % (below 100 %, so the
    # step is not refused), and full recomputation's extra forward takes the HFU to 126.4 %:
    # the recomputation may be right and the step wrong, so both are named.
    done = trainplan(
        *("mfu", "--model", "llama3-70b", "--tokens", "4M", "--step-seconds", "7"),
        *("--gpu", "H100-SXM", "--chips", "256", "--recompute", "full"),
    )
    line = refusal(done)
    assert line.startswith("hfu: mfu 95.5% × (1 + ")
    assert line.endswith(
        "the likely wrong input is --recomputed-flops-pct (a percentage of model FLOPs, e.g. 25) "
        "or --recompute, else the step (--step-seconds, --tokens, --chips) that gives the mfu of "
        "95.5%"
    )
