"""The critic and the reward model carry a value head ``[h → 1]`` in place of the LM head
(:mod:`model.value_head`): verl's FSDP critic is ``AutoModelForTokenClassification`` with one
label (``nn.Linear(h, 1)``, bias on), its Megatron critic ``LinearForLastLayer(h, 1)`` (bias on),
OpenRLHF's ``nn.Linear(h, 1, bias=False)`` on the base model. One rule read by the parameter
count, the stages' parameters, the logits' columns, the output layer's FLOPs and the RLHF roles."""

from __future__ import annotations

from tests.model._rlhf_specs import QWEN, qwen_grpo
from trainplan.model.flops import output_forward_flops
from trainplan.model.params import count_params, shares_embedding_with_last_stage, stage_params
from trainplan.model.rlhf.spec import Role
from trainplan.model.value_head import logits_columns_of, output_params, value_head_arch
from trainplan.scenarios.catalogue import get_model

P = 7_615_616_512
"""Qwen2.5 7B's parameters (untied: the output layer 152,064 × 3,584 = 544,997,376 of them)."""


def test_untied_lm_head_leaves_and_the_head_joins() -> None:
    """P − V·h + h (+ 1 with verl's bias): 7,615,616,512 − 544,997,376 + 3,584 + 1."""
    assert 152_064 * 3_584 == 544_997_376
    verl = count_params(value_head_arch(QWEN.arch, "megatron")).total
    openrlhf = count_params(value_head_arch(QWEN.arch, "deepspeed")).total
    assert verl == P - 544_997_376 + 3_584 + 1 == 7_070_622_721
    assert openrlhf == verl - 1 == 7_070_622_720
    assert count_params(value_head_arch(QWEN.arch, "fsdp2")).total == verl


def test_a_tied_embedding_stays_and_is_not_copied_to_the_last_stage() -> None:
    """GPT-3 175B ties its output layer to the embedding: nothing leaves, the head's h + 1 =
    12,289 joins; at pp 2 the last stage no longer keeps a copy of the 50,257 × 12,288 table
    (Megatron-LM's tied-embedding copy): its dense parameters are 48 layers, the final LayerNorm
    (2h) and the head."""
    gpt3 = get_model("gpt3-175b").model.arch
    critic = value_head_arch(gpt3, "megatron")
    assert count_params(critic).total == count_params(gpt3).total + 12_288 + 1
    assert shares_embedding_with_last_stage(gpt3) and not shares_embedding_with_last_stage(critic)
    lm, vh = stage_params(gpt3, 2)[1], stage_params(critic, 2)[1]
    assert lm.dense - vh.dense == 50_257 * 12_288 - 12_289
    assert vh.tp_replicated - lm.tp_replicated == 12_289  # the head, whole on every tp rank


def test_logits_flops_and_columns_are_one_wide() -> None:
    """The output projection's forward: 2·s·b·h·V for the LM head, 2·s·b·h for the value head
    (4,096 tokens: 2 × 4,096 × 3,584 = 29,360,128). Its columns over tp 8 ranks: V padded
    (megatron: 152,064 to a multiple of 128 × 8 = 152,576), the head's one column on each rank: 8."""
    critic = value_head_arch(QWEN.arch, "megatron")
    assert output_forward_flops(critic, 4096, 1) == 2 * 4096 * 3584 == 29_360_128
    assert output_forward_flops(QWEN.arch, 4096, 1) == 2 * 4096 * 3584 * 152_064
    assert logits_columns_of(QWEN.arch, None, "megatron", 8) == 152_576
    assert logits_columns_of(critic, None, "megatron", 8) == 8
    assert output_params(critic) == 3_585 and output_params(QWEN.arch) == 544_997_376


def test_the_rlhf_value_roles_count_the_head() -> None:
    """PPO with a reward model: the actor and the reference keep the LM head, the critic and the
    reward model count P − V·h + h + 1 (megatron) or + h (deepspeed); the scoring phase's FLOPs
    per token are 2N of each role's network."""
    for framework, bias in (("megatron", 1), ("deepspeed", 0)):
        spec = qwen_grpo(algorithm="ppo", reward="model", framework=framework)
        assert spec.role(Role.ACTOR).params == spec.role(Role.REFERENCE).params == P
        for role in (Role.CRITIC, Role.REWARD):
            assert spec.role(role).params == P - 544_997_376 + 3_584 + bias
        flops = spec.phase_flops()["scoring"]
        tokens = spec.sequences * spec.seq_len
        assert flops["critic"] == 2 * tokens * (P - 544_997_376 + 3_584 + bias)
