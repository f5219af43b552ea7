"""The largest dp of a training-side role (model.rlhf.dp_batch): one rule that the search's
tables and the evaluator's placement both read."""

from __future__ import annotations

import pytest

from trainplan.interface.rlhf.faithful import RLHFInputs, _check_train_dp
from trainplan.model.errors import LayoutError
from trainplan.model.hardware import ClusterLinks
from trainplan.model.rlhf.dp_batch import dp_refusal, pass_sequences
from trainplan.model.rlhf.spec import RLHFSpec, Role
from trainplan.optimizer.rlhf.tables import RLHFProblem, _training_options
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

H100 = get_accelerator("H100-SXM")
# 8 prompts × 4 samples = 32 sequences a step; one optimizer update per 8 of them
SPEC = RLHFSpec(
    algorithm="grpo", policy=get_model("qwen2.5-7b").model, reward="rule", prompts=8,
    samples_per_prompt=4, prompt_tokens=1024, completion_tokens=1024, framework="megatron",
    train_batch=8,
)  # fmt: skip


def test_a_trainable_role_is_bounded_by_the_update_a_frozen_one_by_the_step():
    # verl: ppo_mini_batch_size × n // dp must stay above 0 (8 // 16 = 0); a frozen role
    # scores all 32 sequences of the step, one chunk a dp rank (16 ranks: 2 each)
    assert (pass_sequences(SPEC, True), pass_sequences(SPEC, False)) == (8, 32)
    assert dp_refusal(SPEC, True, 8) is None
    assert dp_refusal(SPEC, True, 16) == (
        "dp 16, above the 8 sequences an update trains on: a data-parallel rank would have no "
        "rollout"
    )
    assert dp_refusal(SPEC, False, 32) is None
    assert dp_refusal(SPEC, False, 64).startswith("dp 64, above the 32 sequences a step scores")


def test_the_tables_offer_what_the_rule_allows():
    """16 GPUs, megatron (tp and pp up to the 8-GPU node): the actor is offered dp 8 and below
    (tp × pp ≥ 2), the reference dp 16 too (tp 1, pp 1)."""
    problem = RLHFProblem(SPEC, H100, 16, ClusterLinks.from_device(H100))
    actor = {o.dp for o in _training_options(problem, Role.ACTOR, 16, True)}
    reference = {o.dp for o in _training_options(problem, Role.REFERENCE, 16, False)}
    assert actor == {1, 2, 4, 8}
    assert reference == {1, 2, 4, 8, 16}


def test_the_evaluator_refuses_the_pool_the_actor_cannot_run_on():
    """The placement's training pool holds the actor and the reference at one dp: the actor's
    bound (8) refuses dp 16 although the reference alone could run there."""
    inp = RLHFInputs(SPEC, H100, 16, ClusterLinks.from_device(H100))
    _check_train_dp(inp, 16, 2)  # dp 8
    with pytest.raises(LayoutError) as err:
        _check_train_dp(inp, 16, 1)
    assert str(err.value) == (
        "gpus: the training roles' 16 GPUs at `train_tp` × `train_pp` = 1 are dp 16, above the "
        "8 sequences an update trains on: a data-parallel rank would have no rollout (fewer "
        "--gpus, more --rollout-gpus, a larger --train-tp or --train-pp, or more --prompts)"
    )
