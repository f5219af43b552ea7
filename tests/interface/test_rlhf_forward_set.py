"""A scoring role's forward under ``torch.no_grad()`` holds one layer's live tensors at its peak
(:func:`model.rlhf.forward_set.scoring_forward_bytes`); the reward model and the critic, which
compute no logits, counted 0 bytes for it before."""

from __future__ import annotations

from fractions import Fraction

from trainplan.interface.rlhf.faithful import rlhf_inputs
from trainplan.model.arch_parts import Mlp, MoESpec
from trainplan.model.frameworks import Framework
from trainplan.model.moe_working_set import moe_forward_working_set
from trainplan.model.rlhf.forward_set import scoring_forward_bytes
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import Role
from trainplan.model.specs import Architecture
from trainplan.optimizer.rlhf.tables import cost_of

S = 3 * 5120  # b 3 × s 5,120 tokens a micro-batch
H = 2 * S * 8192  # one whole BF16 hidden-state tensor of llama3-70b: 251,658,240 B


def _ppo_70b():
    # first-fit packing: micro-batches of 3 whole rollouts, 15,360 tokens, as derived below (verl's
    # balanced packing, the megatron default, holds 4: tests/model/test_rlhf_micro_batch_tokens.py)
    return rlhf_inputs(
        {"algorithm": "ppo", "model": "llama3-70b", "gpus": 64, "packing": "first-fit"},
        placement=False,
    )


def test_reward_model_counts_one_llama3_70b_layer_at_tp1():
    """llama3-70b reward model, dp 32 × tp 1 × pp 2 (the old answer's): 0 bytes before.
    Attention step n + H + Q + KV + max(3·Q, O + H) with n = H, Q = O = H, KV = 2·S·2,048:
    6·H + KV = 2·15,360·(8,192·6 + 2,048) = 1,572,864,000 B. MLP step (SwiGLU,
    f 28,672): the layer input and the residual 2·H, the normalised input H, act(gate), up and
    their product 3·2·15,360·28,672 = 2,642,411,520: 3·251,658,240 + 2,642,411,520 =
    3,397,386,240 B, the larger."""
    p = _ppo_70b().problem
    attention = H + H + H + 2 * S * 2048 + 3 * H
    assert attention == 1_572_864_000
    mlp = 3 * H + 3 * 2 * S * 28672
    assert mlp == 3_397_386_240
    for dp, pp in ((32, 2), (64, 1)):
        cost = cost_of(p, RoleOption(Role.REWARD, 64, dp, 1, pp, "idle"))
        assert cost.scoring_bytes == mlp
        terms = {t.name: t.value for t in cost.terms}
        assert terms["forward working set (one layer, no grad)"] == mlp


def test_critic_at_tp4_counts_the_sequence_shards():
    """The critic at dp 8 × tp 4 × pp 2 (sequence parallelism): n = H/4 = 62,914,560.
    Attention: n + H + Q/4 + KV/4 + max(3·Q/4, O/4 + H) = 62,914,560 + 251,658,240 + 62,914,560
    + 15,728,640 + 314,572,800 = 707,788,800. MLP: 2·n + H + 3·2·S·28,672/4 = 125,829,120 +
    251,658,240 + 660,602,880 = 1,038,090,240, the larger (0 before)."""
    p = _ppo_70b().problem
    n = H // 4
    attention = n + H + n + 2 * S * 2048 // 4 + max(3 * n, n + H)
    assert attention == 707_788_800
    mlp = 2 * n + H + 3 * 2 * S * 28672 // 4
    assert mlp == 1_038_090_240
    cost = cost_of(p, RoleOption(Role.CRITIC, 64, 8, 4, 2, "idle"))
    assert cost.scoring_bytes == mlp


def test_reference_keeps_the_larger_logits():
    """The reference returns log-probs: on its last stage verl Megatron's FP32 logits and the
    BF16 output beside them at the cast (model.rlhf.logits: 4 + 2 B per element; 8 B before the
    path was read), 6 B × 15,360 × 128,256 / 4 = 2,955,018,240 B, exceed the layer's
    1,038,090,240; the figure is their maximum, not their sum."""
    p = _ppo_70b().problem
    cost = cost_of(p, RoleOption(Role.REFERENCE, 64, 8, 4, 2, "idle"))
    assert 6 * S * 128256 // 4 == 2_955_018_240
    assert cost.scoring_bytes == 2_955_018_240


def test_moe_layer_reuses_the_training_forward_working_set():
    """A MoE layer's step is 2·n + H plus the routed tokens' copies at the combine, the one
    figure the training forward counts (:func:`model.moe_working_set.moe_forward_working_set`,
    ep 1); with a small FFN the attention step is not the larger."""
    arch = Architecture(
        num_layers=2,
        hidden_size=2880,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=64,
        ffn_hidden_size=2880,
        vocab_size=8,
        mlp=Mlp.SWIGLU,
        moe=MoESpec(num_experts=128, experts_per_token=4, expert_ffn_hidden_size=2880),
    )
    tokens = 4096
    h2 = 2 * tokens * 2880
    routed = moe_forward_working_set(arch, "deepspeed", Fraction(tokens), 2, 1, 1, False, False)
    # DeepSpeed's _sparse_decode: the norm output, two expert-output copies, the FP32 product
    # and its FP32 sum: 2·S·h + 2·2·4·S·h + 4·4·S·h + 4·S·h = 38·S·h
    assert routed == 38 * tokens * 2880
    got = scoring_forward_bytes(arch, Framework.DEEPSPEED, tokens, 1, False)
    assert got == 3 * h2 + routed
