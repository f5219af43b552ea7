"""verl's FSDP workers have no tensor parallelism (device mesh FSDP × DDP and Ulysses only,
verl/workers/fsdp_workers.py create_device_mesh): under the fsdp2 profile an RLHF training or
scoring role is never offered tp > 1, and one given is refused in one line
(model.rlhf.roles.training_tp_limit / check_training_tp)."""

from __future__ import annotations

import pytest

from trainplan.model.errors import LayoutError
from trainplan.model.hardware import ClusterLinks
from trainplan.model.rlhf.roles import (
    RoleOption,
    check_training_tp,
    training_pp_limit,
    training_tp_limit,
)
from trainplan.model.rlhf.spec import RLHFSpec, Role
from trainplan.optimizer.rlhf.tables import RLHFProblem, _training_options, cost_of
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

H100 = get_accelerator("H100-SXM")


def _problem(framework: str) -> RLHFProblem:
    spec = RLHFSpec(
        algorithm="grpo", policy=get_model("qwen2.5-7b").model, reward="rule", prompts=4,
        samples_per_prompt=16, prompt_tokens=1024, completion_tokens=4096, framework=framework,
    )  # fmt: skip
    return RLHFProblem(spec, H100, 8, ClusterLinks.from_device(H100))


def test_the_limit_by_profile():
    assert training_tp_limit("fsdp2", 8) == 1
    assert training_tp_limit("megatron", 8) == 8
    # OpenRLHF's AutoTP (one tp for every model, whole micro-batches on each tp rank) is not
    # counted: deepspeed roles are planned at tp 1, and no profile but megatron has pp
    assert training_tp_limit("deepspeed", 4) == 1
    assert training_pp_limit("deepspeed", 4) == training_pp_limit("fsdp2", 4) == 1
    assert training_pp_limit("megatron", 4) == 4
    with pytest.raises(
        LayoutError, match=r"^train_pp: 2 — under deepspeed OpenRLHF has no pipeline"
    ):
        check_training_tp("deepspeed", 1, "train_tp", 2)
    check_training_tp("fsdp2", 1)
    with pytest.raises(LayoutError, match=r"^train_tp: 2 — under fsdp2 verl's FSDP workers"):
        check_training_tp("fsdp2", 2)


def test_the_search_offers_fsdp2_roles_tp_1_only():
    """8 GPUs: megatron offers tp 1, 2, 4, 8 to the actor; fsdp2 only tp 1 (dp 8, or pp)."""
    meg = {o.tp for o in _training_options(_problem("megatron"), Role.ACTOR, 8, True)}
    assert meg == {1, 2, 4, 8}
    fsdp = {o.tp for o in _training_options(_problem("fsdp2"), Role.ACTOR, 8, True)}
    assert fsdp == {1}


def test_a_role_cost_at_tp_2_is_refused_under_fsdp2():
    with pytest.raises(LayoutError, match="actor tp: 2"):
        cost_of(_problem("fsdp2"), RoleOption(Role.ACTOR, 8, 4, 2, 1))
    assert cost_of(_problem("megatron"), RoleOption(Role.ACTOR, 8, 4, 2, 1)).option.tp == 2
