"""A choice setting equal to what the searched profile runs without it is no choice: it neither
triggers the search without the settings nor is named as costing
(:func:`interface.setting_defaults.same_runs`, read by :mod:`interface.setting_cost`).

Every choice key (:data:`interface.setting_cost.CHOICE_KEYS`) is checked against each profile's
default, each default written here with where the framework sets it; the keys with no value
that restores the default are listed apart with why."""

from __future__ import annotations

import pytest

from trainplan.interface.requests import search_request
from trainplan.interface.scenario import problem_of
from trainplan.interface.setting_cost import CHOICE_KEYS
from trainplan.interface.setting_defaults import same_runs

JOB = {"model": "llama3-8b", "gpu": "H100-SXM", "gpus": "8"}
MOE = {"model": "mixtral-8x7b", "gpu": "H100-SXM", "gpus": "64"}

EVERY = {
    # Megatron-LM arguments.py / Megatron-Core defaults, as the profiles hold them
    "grad_reduce_overlap": True,  # --overlap-grad-reduce, on in Megatron Bridge's recipes
    "p2p_overlap": True,  # overlap_p2p_comm, on with virtual stages since 2023-05
    "p2p_warmup_flush": False,  # --overlap-p2p-communication-warmup-flush, off since core 0.10
    "deepspeed_overlap_comm": False,  # zero_optimization.overlap_comm
    "tp_comm_overlap_cfg": "te",  # Transformer Engine's own userbuffers defaults
    "moe_ep_overlap": "none",  # neither --moe-shared-expert-overlap nor the EP overlap
    "moe_dispatcher": "alltoall",  # --moe-token-dispatcher-type default
    "moe_pad_to_capacity": False,  # --moe-pad-expert-input-to-capacity
    "precision": "bf16",
    "fp8_param_gather": False,  # --fp8-param-gather
    "fp8_activation_storage": "linear_inputs",
    "optimizer_dtype": "fp32",  # --exp-avg-dtype fp32
    "master_weights": True,
    "seq_parallel_communication_data_type": "fp32",  # DeepSpeed's Ulysses default
    "offload_params": False,
    "fsdp_double_buffer": False,
    "memory_efficient_norm": False,
    "cross_entropy_fusion_impl": "none",
    "bias_dropout_fusion": True,
    "offload_optimizer": 0,  # --optimizer-offload-fraction 0
    "offload_activations": [],  # --offload-modules: none
    "cpu_offloading_num_layers": 0,  # --cpu-offloading-num-layers 0
    "recompute_modules": "core_attn",  # --recompute-modules default ["core_attn"]
}
"""The defaults every profile shares."""

OWN = {
    # model.tp_overlap.tp_overlap_for: Megatron-Core's backward collectives beside the wgrad
    # GEMMs (async); torchtitan's plan waits (enable_async_tensor_parallel False)
    "tp_comm_overlap": {"megatron": "async", "deepspeed": "async", "fsdp2": "none"},
    # model.frameworks.GRADIENT_BYTES: Megatron-LM accumulate_allreduce_grads_in_fp32 for bf16,
    # torchtitan mixed_precision_reduce float32, DeepSpeed grad_accum_dtype unset (bf16)
    "gradient_dtype": {"megatron": "fp32", "deepspeed": "bf16", "fsdp2": "fp32"},
    # torchtitan's tensor-parallel plan keeps the gathered block inputs (fsdp2 only)
    "tp_block_inputs": {"fsdp2": "gathered"},
    # torchtitan [training] compile = false (model.elementwise.TORCHTITAN_COMPILE_DEFAULT)
    "compile": {"fsdp2": False},
    # model.precision.fp8_recipe_of: Transformer Engine's delayed scaling, torchao's tensorwise
    "fp8_recipe": {"megatron": "delayed", "deepspeed": "delayed", "fsdp2": "tensorwise"},
}
"""The defaults each profile has of its own (a key a profile refuses is left out)."""

NO_DEFAULT_VALUE = {
    "moe_capacity_factor": "dropless (no capacity) is its absence; any factor drops tokens",
    "moe_node_limit": "no limit is its absence",
    "muon_tp_mode": "a search refuses it today even with --optimizer muon (interface.inputs "
    "checks it against the base case's adam); its default, duplicated, is resolved by "
    "model.muon.muon_tp_gathers in same_runs",
}
"""The choice keys with no value equal to the default in these jobs, and why."""


def _problem(job: dict, framework: str, settings: dict):
    return problem_of(search_request({**job, "framework": framework, "set": settings}))


def test_every_choice_key_is_checked():
    assert set(EVERY) | set(OWN) | set(NO_DEFAULT_VALUE) == set(CHOICE_KEYS)


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "fsdp2"])
def test_a_choice_at_the_profiles_default_runs_the_same(framework):
    base = {"precision": "fp8"}  # fp8_recipe is read under FP8 only
    for key, value in EVERY.items():
        job = MOE if key.startswith("moe_") else JOB
        assert same_runs(_problem(job, framework, {}), _problem(job, framework, {key: value})), key
    for key, defaults in OWN.items():
        if framework not in defaults:
            continue
        given = base if key == "fp8_recipe" else {}
        without = _problem(JOB, framework, given)
        with_it = _problem(JOB, framework, {**given, key: defaults[framework]})
        assert same_runs(without, with_it), (key, framework)


def test_another_value_is_a_choice():
    assert not same_runs(
        _problem(JOB, "megatron", {}), _problem(JOB, "megatron", {"tp_comm_overlap": "none"})
    )
    assert not same_runs(
        _problem(JOB, "fsdp2", {}), _problem(JOB, "fsdp2", {"tp_comm_overlap": "async"})
    )
    assert not same_runs(
        _problem(JOB, "deepspeed", {}), _problem(JOB, "deepspeed", {"gradient_dtype": "fp32"})
    )
    fp8 = {"precision": "fp8"}
    assert not same_runs(
        _problem(JOB, "fsdp2", fp8), _problem(JOB, "fsdp2", {**fp8, "fp8_recipe": "delayed"})
    )
