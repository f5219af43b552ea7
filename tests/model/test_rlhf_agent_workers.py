"""verl's agent-loop workers as a setting (``RLHFSpec.agent_workers``, verl's
``actor_rollout_ref.rollout.agent.num_workers``, default 8 in ``verl/trainer/config/rollout/
rollout.yaml``, b178a3cd5): the count the step's samples must split into equally
(:func:`model.rollout_prefix.check_agent_loop_chunks`) and the chunks the prompt sharing is counted
over (:func:`model.rlhf.engine.prompt_sharing`); OpenRLHF (``deepspeed``) has no agent loop, so
giving one there is refused (:func:`model.rollout_prefix.agent_workers_of`)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.model._rlhf_specs import qwen_grpo
from trainplan.model.errors import InputError
from trainplan.model.rlhf.engine import prompt_sharing


def test_verl_profiles_default_to_eight_workers_and_openrlhf_to_none() -> None:
    assert qwen_grpo().agent_workers == 8
    assert qwen_grpo(framework="fsdp2").agent_workers == 8
    assert qwen_grpo(framework="deepspeed").agent_workers is None
    assert qwen_grpo(agent_workers=16).agent_workers == 16


def test_the_chunks_follow_the_workers_given() -> None:
    """5 prompts × 4 samples = 20: 20 mod 8 = 4, refused at verl's default; 5 workers take 4
    samples each, 10 take 2."""
    with pytest.raises(InputError, match=r"`agent_workers` 8, verl's default"):
        qwen_grpo(prompts=5, samples_per_prompt=4)
    for workers in (5, 10):
        assert qwen_grpo(prompts=5, samples_per_prompt=4, agent_workers=workers).sequences == 20
    with pytest.raises(InputError) as err:
        qwen_grpo(prompts=5, samples_per_prompt=4, agent_workers=6)
    assert str(err.value) == (
        "prompts: 5 × `samples_per_prompt` 4 = 20 samples a step; verl splits them into its 6 "
        "agent-loop workers' equal chunks (DataProto.chunk asserts the count divides; "
        "`agent_workers` 6, verl's actor_rollout_ref.rollout.agent.num_workers): the nearest that "
        "divide: 3 or 6 prompts, `samples_per_prompt` 6, or `agent_workers` 5 or 10"
    )
    # 6 / gcd(6, 4) = 3: prompts a multiple of 3; 6 / gcd(6, 5) = 6 samples; divisors of 20
    assert (3 * 4 % 6, 6 * 4 % 6, 5 * 6 % 6, 20 % 5, 20 % 10) == (0, 0, 0, 0, 0)


def test_bad_counts_and_openrlhf_are_refused_in_one_line() -> None:
    with pytest.raises(InputError) as err:
        qwen_grpo(framework="deepspeed", agent_workers=4)
    assert str(err.value) == (
        "agent_workers: 4 is verl's actor_rollout_ref.rollout.agent.num_workers; OpenRLHF "
        "(`framework` deepspeed) has no agent-loop workers: leave it out, or use `framework` "
        "megatron or fsdp2"
    )
    for bad in (0, -8, 2.5, True):
        with pytest.raises(
            InputError, match=r"^agent_workers: .* must be a whole number of at least 1"
        ):
            qwen_grpo(agent_workers=bad)


def test_prompt_sharing_reads_the_workers() -> None:
    """4 prompts × 16 samples over 8 engine replicas, 1,024-token prompts (a sample after a
    replica's first reuses ⌊1,023 / 16⌋·16 = 1,008 tokens). 8 workers: chunks of 8 samples, each
    group in two halves, each half reaching all 8 replicas: 8 a group, 32 of the 64 samples
    first on their replica, 1,008 × (64 − 32) / 64 = 504 tokens a sample. 16 workers: chunks of 4,
    each group in four quarters each reaching 4 of the 8 replicas, 8 × (1 − (1 − 4/8)⁴) = 7.5 a
    group, 30 in all: 1,008 × 34 / 64 = 535.5."""
    assert prompt_sharing(qwen_grpo(), 8) == 1008 * Fraction(64 - 32, 64) == 504
    reached = 4 * 8 * (1 - Fraction(1, 2) ** 4)
    assert reached == 30
    assert prompt_sharing(qwen_grpo(agent_workers=16), 8) == 1008 * (64 - reached) / 64
    assert 1008 * (64 - reached) / 64 == Fraction(1071, 2)
