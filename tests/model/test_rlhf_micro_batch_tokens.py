"""The fullest micro-batch of the RLHF update and log-prob forwards, held to hand-derived bytes:
each framework's packing at the token cap (``ppo_max_token_len_per_gpu``, ``--micro-batch-tokens``;
:mod:`model.rlhf.packing`): verl's balanced micro-batches (megatron, fsdp2), first-fit bins
(deepspeed: OpenRLHF; NeMo-RL); the seconds do not move."""

from __future__ import annotations

from fractions import Fraction

from tests.model._rlhf_specs import qwen_grpo as _spec
from trainplan.model.hardware import ClusterLinks
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import Role
from trainplan.optimizer.rlhf.tables import RLHFProblem, cost_of
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

QWEN = get_model("qwen2.5-7b").model  # V 152,064
H100 = get_accelerator("H100-SXM")


def _term(cost, name: str):
    return next(t.value for t in cost.terms if t.name.startswith(name))


def test_first_fit_by_hand():
    """First-fit packing (OpenRLHF, NeMo-RL): rollouts of 1,024 + 4,096 = 5,120 tokens under a
    16,384-token cap: ⌊16,384 / 5,120⌋ = 3 whole ones, 15,360 tokens, when every rollout has the
    mean. With a longest completion of 8,192, lengths vary and a bin holds up to the cap: 16,384.
    A longest rollout above the cap (1,024 + 20,000 = 21,024) is the least a micro-batch holds."""
    ff = dict(packing="first-fit")
    assert _spec(**ff).micro_batch_peak_tokens() == 3 * 5_120 == 15_360
    assert _spec(**ff, max_completion_tokens=4096).micro_batch_peak_tokens() == 15_360
    assert _spec(**ff, max_completion_tokens=8192).micro_batch_peak_tokens() == 16_384
    assert _spec(**ff, max_completion_tokens=20_000).micro_batch_peak_tokens() == 21_024
    assert _spec(**ff, max_completion_tokens=8192).micro_batch_peak_tokens(3) == 16_386
    assert _spec(framework="deepspeed").micro_batch_peak_tokens() == 15_360  # OpenRLHF's default


def test_balanced_by_hand():
    """verl's balanced packing (rearrange_micro_batches; the megatron and fsdp2 default): one rank's
    256 rollouts of 5,120 tokens at the cap 16,384 make k = ⌈256 × 5,120 / 16,384⌉ = 80
    micro-batches; Karmarkar–Karp of 256 equal items into 80 parts gives parts of 3 or 4 items:
    the fullest holds ⌈256 / 80⌉ = 4 rollouts, 4 × 5,120 = 20,480 tokens (⌈16,384 / 5,120⌉ = 4).
    Lengths that vary (longest 1,024 + 8,192 = 9,216): the mean per micro-batch is at most the cap,
    plus the longest rollout: 16,384 + 9,216 = 25,600; padded to tp 3: 25,602."""
    assert _spec().micro_batch_peak_tokens() == 4 * 5_120 == 20_480
    assert _spec(framework="fsdp2").micro_batch_peak_tokens() == 20_480
    assert _spec(max_completion_tokens=4096).micro_batch_peak_tokens() == 20_480
    assert _spec(max_completion_tokens=8192).micro_batch_peak_tokens() == 16_384 + 9_216 == 25_600
    assert _spec(max_completion_tokens=8192).micro_batch_peak_tokens(3) == 25_602
    # every rollout exactly the cap: one per micro-batch either way
    assert _spec(completion_tokens=15_360).micro_batch_peak_tokens() == 16_384


def test_logits_and_activations_at_the_cap_seconds_unchanged():
    """The reference's logits under verl's Megatron path (FP32 logits + the BF16 output at the
    cast, 6 B per element, model.rlhf.logits): 6 B × T × 152,064 — first-fit at T = 15,360,
    14,014,218,240 B; at the cap, 16,384: 14,948,499,456 B. The actor's update activations scale
    with the micro-batch's tokens, × 16,384 / 15,360, and its update's logits are
    4 B × 16,384 × 152,064. The scoring and training seconds count the step's tokens, the same
    either way."""
    links = ClusterLinks.from_device(H100)
    mean = RLHFProblem(_spec(packing="first-fit"), H100, 8, links)
    vary = RLHFProblem(_spec(packing="first-fit", max_completion_tokens=8192), H100, 8, links)
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


def test_balanced_old_log_probs_at_20480_tokens():
    """verl's Megatron actor (balanced, the default): the old-log-prob pass with the entropy holds
    12 B per element (model.rlhf.logits) over 20,480 tokens × 152,064:
    12 × 3,114,270,720 = 37,371,248,640 B (first-fit's 15,360 tokens: 28,028,436,480 B); the
    reference 6 B × 3,114,270,720 = 18,685,624,320 B."""
    links = ClusterLinks.from_device(H100)
    prob = RLHFProblem(_spec(), H100, 8, links)
    logits = "logits + log-prob transient (scoring)"
    actor = cost_of(prob, RoleOption(Role.ACTOR, 8, 8, 1, 1))
    assert _term(actor, logits) == 12 * 20_480 * 152_064 == 37_371_248_640
    ref = cost_of(prob, RoleOption(Role.REFERENCE, 8, 8, 1, 1))
    assert _term(ref, logits) == 6 * 20_480 * 152_064 == 18_685_624_320


def test_the_activations_row_is_what_the_training_peak_counts():
    """review-o LOW-1: the terms table's activations row is the figure the fit counts — evaluate()'s
    activations × the micro-batch's tokens ÷ its b × s, less (on the last stage) evaluate()'s FP32
    logits and loss working set, which the RLHF loss replaces. PPO on Qwen2.5 7B, tp 2 on 8 H100,
    20,480 tokens: the actor holds 4,604,395,520 B of activations and its update's logits and the
    log-prob transient beside them, 4 B × 20,480 × 152,064 / 2 = 6,228,541,440 B each:
    17,061,478,400 B. The row showed 4,604,395,520 + 6,228,541,440 = 10,832,936,960 B (10.83 GB)
    before, evaluate()'s logits included; the peaks do not move. The critic (a value head, no
    logits: model.value_head) holds its activations and nothing else in its update (its training
    bytes), as evaluate() counts its network: the head's inputs, the final norm's input and
    output, 2 × 2 B × 20,480 × 3,584 / 2 (sequence parallel) = 146,800,640 B, are released with
    the head's backward before the layers' backward, and its loss (4 B × 20,480 × 1) is below
    that phase: 4,604,395,520 − 146,800,640 = 4,457,594,880 B (with the LM head, the RLHF loss
    in place of evaluate()'s kept them beside the layers' backward: the actor's figure)."""
    prob = RLHFProblem(
        _spec(algorithm="ppo", reward="model"), H100, 8, ClusterLinks.from_device(H100)
    )
    assert prob.spec.micro_batch_peak_tokens(2) == 20_480
    logits = 4 * 20_480 * 152_064 // 2
    assert logits == 6_228_541_440
    acts = "activations (full recompute"
    critic = cost_of(prob, RoleOption(Role.CRITIC, 8, 4, 2, 1))
    head_inputs = 2 * 2 * 20_480 * 3_584 // 2
    assert head_inputs == 146_800_640
    assert _term(critic, acts) == critic.training_bytes == 4_604_395_520 - head_inputs
    actor = cost_of(prob, RoleOption(Role.ACTOR, 8, 4, 2, 1))
    assert _term(actor, acts) == 4_604_395_520
    assert _term(actor, "logits (update)") == _term(actor, "log-prob transient") == logits
    assert actor.training_bytes == 4_604_395_520 + 2 * logits == 17_061_478_400
