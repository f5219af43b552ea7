"""OpenRLHF's scoring micro-batches (``RemoteExperienceMaker.split_rollout_samples``,
``openrlhf/trainer/ppo_utils/experience_maker.py``, OpenRLHF 3c3be6234): the step's rollouts cut
into first-fit-at-the-cap micro-batches, their count rounded *down* to a multiple of the actor's
dp, then balanced — so a scoring forward may hold more than the cap, where the update's
first-fit micro-batches never do (``model/rlhf/packing.py``). Held to hand-derived tokens, then
bytes. The placement rule that keeps every scoring role on the actor's split is tested with the
search (tests/optimizer/test_rlhf_search.py)."""

from __future__ import annotations

import pytest

from trainplan.model.errors import LayoutError
from trainplan.model.hardware import ClusterLinks
from trainplan.model.rlhf.packing import split_peak_tokens
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import RLHFSpec, Role
from trainplan.optimizer.rlhf.tables import RLHFProblem, cost_of
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

QWEN = get_model("qwen2.5-7b").model  # V 152,064
H100 = get_accelerator("H100-SXM")
LOGITS = "logits + log-prob transient (scoring)"
SPLIT = "scoring micro-batch tokens"


def _spec(**kw) -> RLHFSpec:
    """GRPO, 1,024 prompts × 16 = 16,384 rollouts of 1,024 + 4,096 = 5,120 tokens, OpenRLHF."""
    base = dict(
        algorithm="grpo", policy=QWEN, reward="rule", prompts=1024, samples_per_prompt=16,
        prompt_tokens=1024, completion_tokens=4096, framework="deepspeed",
    )  # fmt: skip
    return RLHFSpec(**{**base, **kw})


def _term(cost, name: str):
    return next(t.value for t in cost.terms if t.name.startswith(name))


def test_split_tokens_by_hand():
    """Every rollout 5,120 tokens, cap 16,384: first fit puts ⌊16,384 / 5,120⌋ = 3 in a
    micro-batch, k = ⌈16,384 / 3⌉ = 5,462 micro-batches. At the actor's dp 64 the count is
    rounded down to ⌊5,462 / 64⌋ × 64 = 85 × 64 = 5,440, and Karmarkar–Karp of 16,384 equal
    rollouts into 5,440 parts gives parts of 3 or 4: the fullest ⌈16,384 / 5,440⌉ = 4 rollouts,
    20,480 tokens, above the cap. At dp 2, 5,462 is already a multiple: 3 rollouts, 15,360 (the
    update's first-fit figure). At dp 3: ⌊5,462 / 3⌋ × 3 = 5,460, ⌈16,384 / 5,460⌉ = 4."""
    assert split_peak_tokens(16_384, 16_384, 5_120, None, 64) == 4 * 5_120 == 20_480
    assert split_peak_tokens(16_384, 16_384, 5_120, None, 2) == 3 * 5_120 == 15_360
    assert split_peak_tokens(16_384, 16_384, 5_120, None, 3) == 20_480
    # fewer micro-batches than dp: at least dp of them (64 rollouts, k = 22, dp 32: 2 each)
    assert split_peak_tokens(64, 16_384, 5_120, None, 32) == 2 * 5_120
    # a rollout longer than the cap is a micro-batch of its own, k = n: 2,048 at dp 8, one each
    assert split_peak_tokens(2_048, 16_384, 20_000, None, 8) == 20_000
    # padded to tp 3: 5,121 a rollout
    assert split_peak_tokens(16_384, 16_384, 5_120, None, 64, 3) == 4 * 5_121


def test_split_tokens_when_lengths_vary():
    """Mean 5,120, the longest 1,024 + 8,192 = 9,216: first fit makes at least the step's tokens
    over the larger of the cap and the longest, ⌈16,384 × 5,120 / 16,384⌉ = 5,120 micro-batches
    (80 × 64: none rounded away at dp 64), so the mean holds 16,384 and the fullest at most that
    plus the longest rollout: 25,600. At dp 96: ⌊5,120 / 96⌋ × 96 = 5,088, the mean
    ⌈83,886,080 / 5,088⌉ = 16,488, + 9,216 = 25,704."""
    assert split_peak_tokens(16_384, 16_384, 5_120, 9_216, 64) == 16_384 + 9_216 == 25_600
    assert split_peak_tokens(16_384, 16_384, 5_120, 9_216, 96) == 16_488 + 9_216 == 25_704
    assert _spec(max_completion_tokens=8192).scoring_peak_tokens(64) == 25_600


def test_only_openrlhf_splits_the_step():
    """verl (megatron, fsdp2) and ``--packing balanced`` pack each rank's log-prob forwards like
    the update: no split figure, the scoring tokens are the update's (balanced: ⌈16,384 / 5,120⌉
    = 4 rollouts at every dp)."""
    for kw in (dict(framework="megatron"), dict(framework="fsdp2"), dict(packing="balanced")):
        spec = _spec(**kw)
        assert spec.split_tokens(64) == 0
        assert spec.scoring_peak_tokens(64) == spec.micro_batch_peak_tokens() == 20_480
    ff = _spec(framework="megatron", packing="first-fit")  # NeMo-RL's packers: at most the cap
    assert ff.split_tokens(64) == 0 and ff.scoring_peak_tokens(64) == 15_360
    assert _spec().micro_batch_peak_tokens() == 15_360  # OpenRLHF's update: first fit


def test_scoring_bytes_at_the_split():
    """The reference's and the actor's old-log-prob logits under OpenRLHF (``Actor.forward``:
    FP32 logits beside the BF16 output, 6 B an element, model.rlhf.logits) at 20,480 tokens on
    64 GPUs: 6 × 20,480 × 152,064 = 18,685,624,320 B, not 6 × 15,360 × 152,064 =
    14,014,218,240 B — 4,671,406,080 B more at the scoring peak; the forward working set grows
    by 20,480 / 15,360 too. The seconds count the step's tokens: unchanged by the split."""
    problem = RLHFProblem(_spec(), H100, 64, ClusterLinks.from_device(H100))
    for role in (Role.REFERENCE, Role.ACTOR):
        cost = cost_of(problem, RoleOption(role, 64, 64, 1, 1))
        assert _term(cost, LOGITS) == 6 * 20_480 * 152_064 == 18_685_624_320
        assert _term(cost, SPLIT) == 20_480 and cost.split_tokens == 20_480
        assert 18_685_624_320 - 14_014_218_240 == 4_671_406_080
    megatron = RLHFProblem(_spec(framework="megatron", packing="first-fit"), H100, 64,
                           ClusterLinks.from_device(H100))  # fmt: skip
    ref = cost_of(megatron, RoleOption(Role.REFERENCE, 64, 64, 1, 1))
    assert _term(ref, LOGITS) == 14_014_218_240 and ref.split_tokens == 0
    assert not any(t.name.startswith(SPLIT) for t in ref.terms)


def test_the_cap_is_not_scaled_by_ring_or_tp_because_the_profile_has_neither():
    """OpenRLHF's ``get_minimum_num_micro_batch_size`` multiplies the cap by ring × tp and
    ``effective_actor_num`` divides the actor's GPUs by them. The ``deepspeed`` profile refuses a
    role's tp above 1 (naming that function) and a role option has no ring degree, so both
    factors are 1: on 64 GPUs the actor's dp is 64 and the cap 16,384 as given — first fit
    ⌈16,384 / ⌊16,384 / 5,120⌋⌉ = 5,462, rounded down to 85 × 64 = 5,440, the fullest
    ⌈16,384 / 5,440⌉ = 4 rollouts, 20,480 tokens. At tp 2 the cap would be 32,768: 6 rollouts a
    first-fit micro-batch, ⌈16,384 / 6⌉ = 2,731 → 42 × 64 = 2,688, the fullest ⌈16,384 / 2,688⌉
    = 7 rollouts — not a layout this profile can run."""
    problem = RLHFProblem(_spec(), H100, 64, ClusterLinks.from_device(H100))
    with pytest.raises(LayoutError, match="get_minimum_num_micro_batch_size"):
        cost_of(problem, RoleOption(Role.ACTOR, 64, 32, 2, 1))
    assert set(RoleOption.__dataclass_fields__) == {
        "role",
        "gpus",
        "dp",
        "tp",
        "pp",
        "offload",
        "fraction",
    }
    assert _spec().split_tokens(64) == split_peak_tokens(16_384, 16_384, 5_120, None, 64) == 20_480
    assert split_peak_tokens(16_384, 2 * 16_384, 5_120, None, 64) == 7 * 5_120
