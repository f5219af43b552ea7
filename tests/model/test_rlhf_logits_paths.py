"""The bytes RLHF log-prob passes hold over the logits, by framework path and pass
(model.rlhf.logits), held to hand-derived figures, and read by every role's cost."""

from __future__ import annotations

import pytest

from trainplan.model.errors import InputError
from trainplan.model.hardware import ClusterLinks
from trainplan.model.rlhf.logits import logits_bytes, logits_element_bytes, old_log_prob_pass
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import RLHFSpec
from trainplan.optimizer.rlhf.tables import RLHFProblem, cost_of
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

QWEN = get_model("qwen2.5-7b").model  # V = 152,064
H100 = get_accelerator("H100-SXM")
# one micro-batch at the defaults: ⌊16,384 / 5,120⌋ = 3 sequences × 5,120 = 15,360 tokens
ELEMENTS = 15_360 * 152_064
assert ELEMENTS == 2_335_703_040


@pytest.mark.parametrize(
    ("framework", "pass_", "held", "temp"),
    [
        # verl Megatron: FP32 logits (Float16Module's cast) + the BF16 output at the cast
        ("megatron", "reference", 4, 2),
        # … + logits.clone() (megatron_actor.py forward_backward_batch) + the normalized copy of
        # vocab_parallel_entropy (_VocabParallelEntropy.forward)
        ("megatron", "old_log_prob_entropy", 4, 8),
        # … the update: the in-place CE gradient (the logits' storage) and DivBackward's new FP32
        # gradient of logits.div_(temperature) at once (torch derivatives.yaml div_)
        ("megatron", "update", 4, 4),
        # verl FSDP: BF16 logits, flash-attn cross-entropy (no [T, V] temporary)
        ("fsdp2", "reference", 2, 0),
        # … + entropy_from_logits under autocast: FP32 softmax input copy and output (eager)
        ("fsdp2", "old_log_prob_entropy", 2, 8),
        # … the update: the in-place gradient and DivBackward's new BF16 gradient (derivatives.yaml div_)
        ("fsdp2", "update", 2, 2),
        # OpenRLHF: logits.to(float32) beside the BF16 output; the update's FP32 gradient
        ("deepspeed", "reference", 4, 2),
        ("deepspeed", "old_log_prob", 4, 2),
        ("deepspeed", "update", 4, 4),
    ],
)
def test_bytes_per_logit_element_by_path(framework, pass_, held, temp):
    assert logits_element_bytes(framework, pass_) == (held, temp)


def test_a_7b_micro_batch_by_path():
    """15,360 tokens × 152,064 = 2,335,703,040 elements at tp 1, and ÷ 4 at tp 4."""
    assert logits_bytes(15_360, 152_064, 1, "full", framework="megatron", pass_="reference") == (
        9_342_812_160,
        4_671_406_080,
    )
    meg = logits_bytes(
        15_360, 152_064, 1, "full", framework="megatron", pass_=old_log_prob_pass("megatron")
    )
    assert sum(meg) == 12 * ELEMENTS == 28_028_436_480
    fsdp = logits_bytes(
        15_360, 152_064, 1, "full", framework="fsdp2", pass_=old_log_prob_pass("fsdp2")
    )
    assert sum(fsdp) == 10 * ELEMENTS == 23_357_030_400
    ds = logits_bytes(15_360, 152_064, 1, "full", framework="deepspeed", pass_="update")
    assert sum(ds) == 8 * ELEMENTS == 18_685_624_320
    tp4 = logits_bytes(15_360, 152_064, 4, "full", framework="fsdp2", pass_="reference")
    assert tp4 == (4_671_406_080 // 4, 0)
    # chunked and fused keep their own rule, whatever the framework
    chunked = logits_bytes(15_360, 152_064, 1, "chunked", framework="fsdp2", pass_="update")
    assert chunked == (4 * ELEMENTS, 4 * 2048 * 152_064)
    with pytest.raises(InputError):
        logits_element_bytes("textbook", "update")


def _cost(role, framework, logits="full"):
    spec = RLHFSpec(
        algorithm="grpo", policy=QWEN, reward="rule", prompts=4, samples_per_prompt=16,
        prompt_tokens=1024, completion_tokens=4096, framework=framework, logits=logits,
        packing="first-fit",  # 3 whole rollouts, 15,360 tokens: the bytes per element are the point
    )  # fmt: skip
    problem = RLHFProblem(spec, H100, 8, ClusterLinks.from_device(H100))
    return cost_of(problem, RoleOption(role, 8, 8, 1, 1))


def test_every_role_cost_reads_its_pass():
    """The actor's scoring and update terms and the reference's scoring term are the path's
    bytes of 15,360 tokens; the reference's scoring peak moves by full − chunked exactly:
    megatron 6 B − (4 B + 4·2,048·V) = 14,014,218,240 − 10,588,520,448 = 3,425,697,792 B."""
    actor = {t.name: t.value for t in _cost("actor", "megatron").terms}
    assert actor["logits + log-prob transient (scoring)"] == 28_028_436_480
    assert actor["logits (update)"] == 9_342_812_160
    # DivBackward's FP32 gradient beside the in-place one: 4 B × 2,335,703,040 (was 2 B)
    assert actor["log-prob transient beside them (update)"] == 9_342_812_160
    ref = _cost("reference", "megatron")
    terms = {t.name: t.value for t in ref.terms}
    assert terms["logits + log-prob transient (scoring)"] == 6 * ELEMENTS == 14_014_218_240
    chunked = _cost("reference", "megatron", "chunked")
    assert 4 * ELEMENTS + 4 * 2048 * 152_064 == 10_588_520_448
    assert ref.scoring_bytes - chunked.scoring_bytes == 3_425_697_792
    fsdp_actor = {t.name: t.value for t in _cost("actor", "fsdp2").terms}
    assert fsdp_actor["logits + log-prob transient (scoring)"] == 23_357_030_400
    assert fsdp_actor["logits (update)"] == 2 * ELEMENTS
    # DivBackward's BF16 gradient: 2 B × 2,335,703,040 (was 0)
    assert fsdp_actor["log-prob transient beside them (update)"] == 4_671_406_080


def test_the_temperature_division_adds_a_gradient_on_the_update():
    """verl divides the logits by the temperature in place before the log-prob (dp_actor
    ``logits_rmpad.div_(temperature)``, megatron_actor ``logits_processor``
    ``logits.div_(temperature)``), even at temperature 1. On the update's backward the
    cross-entropy writes its gradient into the logits' storage, and DivBackward (grad / t)
    returns a new tensor of the same shape while that one is live. One 15,360-token micro-batch
    over V = 152,064 (2,335,703,040 elements), tp 1: Megatron FP32 4 + 4 = 8 B per element,
    18,685,624,320 B; FSDP BF16 2 + 2 = 4 B, 9,342,812,160 B; OpenRLHF divides only at a
    temperature other than 1, and its 4 + 4 B (the FP32 gradient beside the saved logits) is
    unchanged."""
    meg = logits_bytes(15_360, 152_064, 1, "full", framework="megatron", pass_="update")
    assert meg == (9_342_812_160, 9_342_812_160) and sum(meg) == 18_685_624_320
    fsdp = logits_bytes(15_360, 152_064, 1, "full", framework="fsdp2", pass_="update")
    assert fsdp == (4_671_406_080, 4_671_406_080) and sum(fsdp) == 9_342_812_160
    assert logits_element_bytes("deepspeed", "update") == (4, 4)
