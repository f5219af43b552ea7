"""``--old-log-prob`` in both RLHF accountings: one rule (:func:`model.rlhf.phases.step_roles`,
:func:`model.rlhf.phases.phase_flops`). The actor recomputes the PPO ratio's old log-probs with a
forward (verl ``RayPPOTrainer.fit`` → ``_compute_old_log_prob`` → ``compute_log_prob``; OpenRLHF
``make_experience``'s actor forward) unless the engine's are used (verl's
``rollout_correction.bypass_mode``): ``engine`` takes the actor out of the scoring phase. The
textbook accounting refused the option (faithful only) and, beside ``--model``, counted the
actor's forward whatever the option said."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many

GRPO70 = ["rlhf", "--algorithm", "grpo", "--policy-params", "70e9", "--reward", "rule"]
TOKENS = 1024 * 16 * (1024 + 4096)  # the tab's defaults: 16,384 sequences of 5,120 = 83,886,080
N = 70 * 10**9


def test_textbook_engine_log_probs_and_refusals():
    """GRPO with a rule reward, 70e9 parameters, the engine's log-probs: rollout 2N, scoring 2N
    (the reference alone), training 6N per token — 2 · 70e9 · 83,886,080 = 1.174e19 in the
    rollout and in scoring, 3.523e19 in training; the rollout is 2/10 of the FLOPs (1/6 when the
    actor recomputes, scoring 4N) and at decode MFU 0.04 and training MFU 0.4 2/0.04 ÷ (2/0.04 +
    2/0.4 + 6/0.4) = 50/70 = 5/7 of the time (2/3 when it recomputes)."""
    done = run_many(
        {
            "engine": [*GRPO70, "--old-log-prob", "engine", "--json"],
            "recompute": [*GRPO70, "--old-log-prob", "recompute", "--json"],
            "dpo": ["rlhf", "--algorithm", "dpo", "--policy-params", "70e9", "--old-log-prob",
                    "engine"],
            "bad": [*GRPO70, "--old-log-prob", "sometimes"],
        }
    )  # fmt: skip
    for name in ("engine", "recompute"):
        assert done[name].returncode == 0, done[name].stderr[-2000:]
    r = json.loads(done["engine"].stdout)
    assert r["old_log_prob"] is False
    assert r["phase_flops"] == {
        "rollout": 2 * N * TOKENS,  # 11,744,051,200,000,000,000
        "scoring": 2 * N * TOKENS,
        "training": 6 * N * TOKENS,  # 35,232,153,600,000,000,000
    }
    assert r["phase_flops"]["scoring"] == 11_744_051_200_000_000_000
    assert abs(r["rollout_flops_share"] - 2 / 10) < 1e-12
    assert abs(r["rollout_time_share"] - 5 / 7) < 1e-12
    again = json.loads(done["recompute"].stdout)
    assert again["old_log_prob"] is True and again["phase_flops"]["scoring"] == 4 * N * TOKENS
    assert abs(again["rollout_time_share"] - 2 / 3) < 1e-12
    assert "--old-log-prob: 'engine' does not apply: DPO" in refusal(done["dpo"])
    assert "--old-log-prob: 'sometimes' is not one of recompute, engine" in refusal(done["bad"])
