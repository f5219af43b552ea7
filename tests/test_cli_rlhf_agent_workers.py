"""``--agent-workers`` (verl's ``actor_rollout_ref.rollout.agent.num_workers``, default 8) as a
user runs ``rlhf-plan`` and the ``rlhf`` tab: each call its own process (:mod:`tests.cli_runs`),
text and JSON. 5 prompts × 4 samples = 20 samples, which verl's default 8 workers cannot split
equally (tests/test_cli_rlhf_agent_chunks.py), run at 5 workers (4 samples each); the value is
echoed, said in the text where given, and refused in one line where it is not a count, does not
divide the samples or is given to OpenRLHF (``--framework deepspeed``), which has no agent loop."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many

BASE = ["--algorithm", "grpo", "--reward", "rule", "--model", "qwen2.5-7b", "--gpus", "8"]
FIVE = ["--prompts", "5", "--samples-per-prompt", "4"]


def test_agent_workers_run_echo_and_refuse() -> None:
    done = run_many({
        "text": ["rlhf-plan", *BASE, *FIVE, "--agent-workers", "5"],
        "json": ["rlhf-plan", *BASE, *FIVE, "--agent-workers", "5", "--json"],
        "default": ["rlhf-plan", *BASE, "--json"],
        "openrlhf": ["rlhf-plan", *BASE, *FIVE, "--framework", "deepspeed", "--json"],
        "tab": ["rlhf", *BASE, *FIVE, "--agent-workers", "10", "--json"],
        "zero": ["rlhf-plan", *BASE, "--agent-workers", "0"],
        "six": ["rlhf-plan", *BASE, *FIVE, "--agent-workers", "6"],
        "given-to-openrlhf": ["rlhf", *BASE, "--framework", "deepspeed", "--agent-workers", "4"],
    })  # fmt: skip
    for name in ("text", "json", "default", "openrlhf", "tab"):
        assert done[name].returncode == 0, (name, done[name].stderr[-2000:])
    head = done["text"].stdout.splitlines()[0]
    assert "megatron ZeRO-1, 5 agent-loop workers): " in head
    given = json.loads(done["json"].stdout)
    assert given["agent_workers"] == 5 and "agent_workers" not in given["defaults_used"]
    default = json.loads(done["default"].stdout)
    assert default["agent_workers"] == 8 and default["defaults_used"]["agent_workers"] == 8
    assert json.loads(done["openrlhf"].stdout)["agent_workers"] is None
    assert json.loads(done["tab"].stdout)["faithful"]["agent_workers"] == 10
    assert refusal(done["zero"]) == "--agent-workers: '0' must be at least 1"
    assert refusal(done["six"]) == (
        "--prompts: 5 × --samples-per-prompt 4 = 20 samples a step; verl splits them into its 6 "
        "agent-loop workers' equal chunks (DataProto.chunk asserts the count divides; "
        "--agent-workers 6, verl's actor_rollout_ref.rollout.agent.num_workers): the nearest that "
        "divide: 3 or 6 prompts, --samples-per-prompt 6, or --agent-workers 5 or 10"
    )
    assert refusal(done["given-to-openrlhf"]) == (
        "--agent-workers: 4 is verl's actor_rollout_ref.rollout.agent.num_workers; OpenRLHF "
        "(--framework deepspeed) has no agent-loop workers: leave it out, or use --framework "
        "megatron or fsdp2"
    )
