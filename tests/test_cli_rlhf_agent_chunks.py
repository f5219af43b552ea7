"""``trainplan rlhf`` and ``rlhf-plan`` refuse a GRPO step verl's 8 agent-loop workers cannot
split into equal chunks (:func:`model.rollout_prefix.check_agent_loop_chunks`: 5 prompts × 4
samples = 20, 20 mod 8 = 4), one ``Error:`` line and exit 2, each call its own process
(:mod:`tests.cli_runs`); the same step under OpenRLHF's profile runs."""

from __future__ import annotations

from tests.cli_runs import refusal, run_many

LINE = (
    "--prompts: 5 × --samples-per-prompt 4 = 20 samples a step; verl splits them into its 8 "
    "agent-loop workers' equal chunks (DataProto.chunk asserts the count divides; "
    "--agent-workers 8, verl's default actor_rollout_ref.rollout.agent.num_workers): the nearest "
    "that divide: 4 or 6 prompts, --samples-per-prompt 8, or --agent-workers 5 or 10"
)


def test_unequal_agent_loop_chunks_are_refused() -> None:
    base = ["--algorithm", "grpo", "--reward", "rule", "--model", "qwen2.5-7b", "--gpus", "8",
            "--prompts", "5", "--samples-per-prompt", "4"]  # fmt: skip
    done = run_many({
        "rlhf": ["rlhf", *base],
        "plan": ["rlhf-plan", *base],
        "plan-fsdp2": ["rlhf-plan", *base, "--framework", "fsdp2"],
        "openrlhf": ["rlhf", *base, "--framework", "deepspeed"],
    })  # fmt: skip
    for name in ("rlhf", "plan", "plan-fsdp2"):
        assert refusal(done[name]) == LINE, name
    assert done["openrlhf"].returncode == 0, done["openrlhf"].stderr[-2000:]
