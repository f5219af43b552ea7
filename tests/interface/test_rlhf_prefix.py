"""verl's GRPO samples share their prompt's KV blocks on an engine replica (vLLM prefix caching,
model.rollout_prefix); OpenRLHF's do not. Qwen2.5 7B, GRPO, 64 prompts × 16 samples, 1,024
prompt + 4,096 completion tokens, on 8 H100s: the engine at tp 1 × dp 8, fraction 1/2.

verl (``megatron``) round-robins each prompt's 16 samples over the 8 replicas: 2 on each, the
second reusing ⌊(1,024 − 1)/16⌋·16 = 1,008 prompt tokens from the first's full blocks (vLLM's
hit stops before the last prompt token; its 16-token blocks). A sample prefills and holds
1,024 − 1,008/2 = 520 prompt tokens on average:

* prefill tokens per step 1,024 × 1,024 = 1,048,576 → 1,024 × 520 = 532,480 (per replica
  131,072 → 66,560); at tp 1 the prefill has no collectives, so its seconds scale by 520/1,024;
* KV per sample 57,344 B a token (2 · 28 layers · 4 KV heads · 128 · 2 B) × 5,120 =
  293,601,280 B → × 4,616 = 264,699,904 B; the KV space, 0.5 × 85,017,493,504 −
  2 × 7,615,616,512 = 27,277,513,728 B, holds 92 → 103 at once (of the replica's 128: two
  waves either way).

OpenRLHF (``deepspeed``) turns prefix caching off by default: 1,024 prompt tokens a sample, 92.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.interface.rlhf.faithful import rlhf_inputs
from trainplan.model.errors import InputError
from trainplan.model.rlhf.engine import prompt_sharing
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import Role
from trainplan.model.rollout_prefix import (
    group_replicas,
    saved_prompt_tokens,
    shared_prompt_tokens,
)
from trainplan.optimizer.rlhf.tables import cost_of


def _engine(framework: str, dp: int = 8, tp: int = 1):
    inp = rlhf_inputs(
        {"algorithm": "grpo", "model": "qwen2.5-7b", "reward": "rule", "prompts": 64,
         "samples_per_prompt": 16, "prompt_tokens": 1024, "completion_tokens": 4096,
         "gpus": 8, "framework": framework},
        placement=False,
    )  # fmt: skip
    option = RoleOption(Role.ROLLOUT, 8, dp, tp, 1, "none", Fraction(1, 2))
    cost = cost_of(inp.problem, option)
    terms = {t.name.split(" (")[0]: t.value for t in cost.terms if t.phase == "rollout"}
    return inp.problem.spec, terms


def test_a_sample_reuses_the_full_blocks_before_its_last_prompt_token():
    assert [shared_prompt_tokens(t) for t in (1, 16, 17, 1024, 1025)] == [0, 0, 16, 1008, 1024]
    # 16 samples: on 1 replica 15 reuse 1,008 tokens; on 8, 8 of 16; on 16 or more, none
    assert saved_prompt_tokens(16, 1, 1024) == Fraction(15 * 1008, 16) == Fraction(945)
    assert saved_prompt_tokens(16, 8, 1024) == Fraction(8 * 1008, 16) == 504
    assert saved_prompt_tokens(16, 16, 1024) == saved_prompt_tokens(16, 64, 1024) == 0
    assert saved_prompt_tokens(1, 1, 1024) == 0  # PPO's one sample a prompt shares nothing
    with pytest.raises(InputError, match="samples_per_prompt: 0"):
        saved_prompt_tokens(0, 8, 1024)


def test_verl_prefills_520_tokens_a_sample_and_holds_103_at_once_openrlhf_1024_and_92():
    verl, on = _engine("megatron")
    openrlhf, off = _engine("deepspeed")
    assert prompt_sharing(verl, 8) == 504 and prompt_sharing(openrlhf, 8) == 0
    assert verl.sequences * (1024 - 504) == 532_480 and verl.sequences * 1024 == 1_048_576
    kv_space = Fraction(1, 2) * 85_017_493_504 - 2 * 7_615_616_512
    assert kv_space == 27_277_513_728
    assert (kv_space // (57_344 * 4_616), kv_space // (57_344 * 5_120)) == (103, 92)
    assert (on["sequences decoded at once"], off["sequences decoded at once"]) == (103, 92)
    assert on["KV cache"] == 103 * 264_699_904 and off["KV cache"] == 92 * 293_601_280
    # tp 1: no collectives; both run two waves of the replica's 128 samples
    assert float(on["prefill"]) == pytest.approx(float(off["prefill"]) * 520 / 1024, rel=1e-12)


def test_no_sharing_when_the_replicas_are_as_many_as_the_samples():
    """dp 8 engine replicas of tp 1 on 8 GPUs share for 16 samples; a tp 8 engine is one
    replica (15 of 16 share, 945 tokens); the round robin spreads 16 samples over 16 or more
    replicas one each (model.rollout_prefix)."""
    verl, _ = _engine("megatron")
    assert prompt_sharing(verl, 1) == 945
    assert prompt_sharing(verl, 16) == 0


def test_verl_chunks_the_samples_over_its_8_agent_loop_workers():
    """verl splits the step's samples into 8 contiguous chunks, one per agent-loop worker, each
    with its own round robin over the replicas in a shuffled order (``AgentLoopManager.
    generate_sequences``, ``AsyncLLMServerManager``, b178a3cd5). 4 prompts × 16 samples: chunks
    of 8, every group in two halves on two workers. 16 replicas: each half reaches 8 replicas, a
    random half of them, 16 · (1 − ½ · ½) = 12 per group on average, so 4 of 16 samples reuse
    1,008 tokens: 252 (the single round robin gave 0). 8 replicas: each half reaches all 8, the
    same 8 + 8 samples reuse as one round robin: 504. 64 prompts: chunks of 128, no group split:
    the single round robin's figures."""
    assert group_replicas(4, 16, 16, 8) == 4 * 12
    assert saved_prompt_tokens(16, 16, 1024, prompts=4, workers=8) == Fraction(4 * 1008, 16) == 252
    assert saved_prompt_tokens(16, 8, 1024, prompts=4, workers=8) == 504
    for r in (1, 8, 16):
        assert saved_prompt_tokens(16, r, 1024, 64, 8) == saved_prompt_tokens(16, r, 1024)
    # 3 prompts × 6 samples over 8 workers: chunks of ⌈18 / 8⌉ = 3; each group in two runs of 3
    # on 4 replicas: 4 · (1 − ¼ · ¼) = 3.75 replicas per group, 6 − 3.75 = 2.25 of 6 share
    assert group_replicas(3, 6, 4, 8) == 3 * Fraction(15, 4)
    assert saved_prompt_tokens(6, 4, 1024, 3, 8) == Fraction(1008 * 9, 4 * 6) == 378
    verl, _ = _engine("megatron")
    assert verl.prompts * verl.samples_per_prompt // 8 % verl.samples_per_prompt == 0
