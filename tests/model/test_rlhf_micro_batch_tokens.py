"""The fullest micro-batch of the RLHF update and log-prob forwards, held to hand-derived bytes:
whole mean-length rollouts where every rollout has the mean, verl's dynamic-batch token cap
(``ppo_max_token_len_per_gpu``, ``--micro-batch-tokens``) where lengths vary
(:meth:`model.rlhf.spec.RLHFSpec.micro_batch_peak_tokens`); the seconds do not move."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.hardware import ClusterLinks
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import RLHFSpec, Role
from trainplan.optimizer.rlhf.tables import RLHFProblem, cost_of
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

QWEN = get_model("qwen2.5-7b").model  # V 152,064
H100 = get_accelerator("H100-SXM")


def _spec(**kw) -> RLHFSpec:
    base = dict(
        algorithm="grpo",
        policy=QWEN,
        reward="rule",
        prompts=4,
        samples_per_prompt=16,
        prompt_tokens=1024,
        completion_tokens=4096,
    )
    return RLHFSpec(**{**base, **kw})


def _term(cost, name: str):
    return next(t.value for t in cost.terms if t.name.startswith(name))


def test_the_fullest_micro_batch_by_hand():
    """Rollouts of 1,024 + 4,096 = 5,120 tokens under a 16,384-token cap: ⌊16,384 / 5,120⌋ = 3
    whole ones, 15,360 tokens, when every rollout has the mean. With a longest completion of
    8,192, lengths vary and verl's dynamic batch packs up to the cap: 16,384. A longest rollout
    above the cap (1,024 + 20,000 = 21,024) is the least a micro-batch holds (verl requires the
    cap to hold it)."""
    assert _spec().micro_batch_peak_tokens() == 3 * 5_120 == 15_360
    assert _spec(max_completion_tokens=4096).micro_batch_peak_tokens() == 15_360
    assert _spec(max_completion_tokens=8192).micro_batch_peak_tokens() == 16_384
    assert _spec(max_completion_tokens=20_000).micro_batch_peak_tokens() == 21_024
    assert _spec(max_completion_tokens=8192).micro_batch_peak_tokens(3) == 16_386


def test_logits_and_activations_at_the_cap_seconds_unchanged():
    """The reference's logits under verl's Megatron path (FP32 logits + the BF16 output at the
    cast, 6 B per element, model.rlhf.logits): 6 B × T × 152,064 — at T = 15,360,
    14,014,218,240 B; at the cap, 16,384: 14,948,499,456 B. The actor's update activations scale
    with the micro-batch's tokens, × 16,384 / 15,360, and its update's FP32 logits are
    4 B × 16,384 × 152,064. The scoring and training seconds count the step's tokens, the same
    either way."""
    links = ClusterLinks.from_device(H100)
    mean = RLHFProblem(_spec(), H100, 8, links)
    vary = RLHFProblem(_spec(max_completion_tokens=8192), H100, 8, links)
    ref = RoleOption(Role.REFERENCE, 8, 8, 1, 1)
    logits = "logits + log-prob transient (scoring)"
    assert _term(cost_of(mean, ref), logits) == 6 * 15_360 * 152_064 == 14_014_218_240
    assert _term(cost_of(vary, ref), logits) == 6 * 16_384 * 152_064 == 14_948_499_456
    assert cost_of(mean, ref).scoring_s == cost_of(vary, ref).scoring_s
    actor = RoleOption(Role.ACTOR, 8, 8, 1, 1)
    a_mean, a_vary = cost_of(mean, actor), cost_of(vary, actor)
    acts = "activations (full recompute"
    assert _term(a_vary, acts) == _term(a_mean, acts) * Fraction(16_384, 15_360)
    assert _term(a_vary, "logits (update)") == 4 * 16_384 * 152_064 == 9_965_666_304
    assert _term(a_vary, logits) == 12 * 16_384 * 152_064  # old log-probs with the entropy
    assert (a_vary.scoring_s, a_vary.training_s) == (a_mean.scoring_s, a_mean.training_s)
    assert a_vary.training_bytes > a_mean.training_bytes
