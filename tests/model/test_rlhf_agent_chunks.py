"""verl's agent loop refuses a step whose samples its 8 workers cannot split equally
(:func:`model.rollout_prefix.check_agent_loop_chunks`): ``AgentLoopManager.generate_sequences``
calls ``prompts.chunk(8)`` on the ``prompts × n`` repeated batch, and ``DataProto.chunk``
asserts ``len(self) % chunks == 0`` (volcengine/verl b178a3cd5 ``verl/protocol.py``); OpenRLHF
(the ``deepspeed`` profile) has no such split."""

from __future__ import annotations

import pytest

from trainplan.model.errors import InputError
from trainplan.model.rlhf.spec import RLHFSpec
from trainplan.model.rollout_prefix import check_agent_loop_chunks
from trainplan.scenarios.catalogue import get_model

QWEN = get_model("qwen2.5-7b").model


def _spec(prompts: int, n: int, framework: str = "megatron") -> RLHFSpec:
    return RLHFSpec(
        algorithm="grpo", policy=QWEN, reward="rule", prompts=prompts, samples_per_prompt=n,
        prompt_tokens=1024, completion_tokens=2048, framework=framework,
    )  # fmt: skip


def test_equal_chunks_pass() -> None:
    """64 × 8 = 512 samples, 64 a worker; 1 × 8 = 8, one each; 3 × 16 = 48, 6 each."""
    for prompts, n in ((64, 8), (1, 8), (3, 16)):
        check_agent_loop_chunks(prompts, n)
        assert _spec(prompts, n).sequences % 8 == 0


@pytest.mark.parametrize("framework", ["megatron", "fsdp2"])
def test_verl_profiles_refuse_unequal_chunks(framework: str) -> None:
    """5 × 4 = 20 samples: 20 mod 8 = 4. With n = 4, prompts must be even (8 / gcd(8, 4) = 2):
    the nearest are 4 and 6 (16 and 24 samples)."""
    with pytest.raises(InputError) as err:
        _spec(5, 4, framework)
    assert str(err.value) == (
        "prompts: 5 × `samples_per_prompt` 4 = 20 samples a step; verl splits them into its 8 "
        "agent-loop workers' equal chunks (DataProto.chunk asserts the count divides; "
        "`agent_workers` 8, verl's default actor_rollout_ref.rollout.agent.num_workers): the "
        "nearest that divide: 4 or 6 prompts, `samples_per_prompt` 8, or `agent_workers` 5 or 10"
    )


def test_nearest_counts_follow_the_group_size() -> None:
    """n = 1: prompts a multiple of 8 (3 → only 8, 0 prompts is no step); n = 6: gcd(8, 6) = 2,
    prompts a multiple of 4 (13 → 12 or 16: 72 and 96 samples)."""
    with pytest.raises(
        InputError,
        match=r"1 = 3 samples a step.*divide: 8 prompts, `samples_per_prompt` 8, or `agent_workers` 3$",
    ):
        check_agent_loop_chunks(3, 1)
    with pytest.raises(
        InputError,
        match=r"divide: 12 or 16 prompts, `samples_per_prompt` 8, or `agent_workers` 6 or 13$",
    ):
        check_agent_loop_chunks(13, 6)
    assert (12 * 6 % 8, 16 * 6 % 8) == (0, 0)


def test_openrlhf_takes_any_count() -> None:
    """OpenRLHF sends each sample to an engine on its own: 5 × 4 = 20 samples stand."""
    assert _spec(5, 4, "deepspeed").sequences == 20
