"""The evaluate object's ``layout`` holds the same keys for every run, and a setting the run does
not read is null (docs/reference/json.md): fsdp2 has no Megatron distributed optimizer and no
``--recompute-modules``; recompute none recomputes no modules; the pipeline's memory settings
are fsdp2's with pp > 1."""

from __future__ import annotations

import json

from click.testing import CliRunner

from trainplan.interface.cli import cli

BASE = ["evaluate", "--model", "llama3-8b", "--gpu", "H100-SXM", "--gpus", "8", "--json"]
FRAMEWORK_KEYS = (
    "recompute_modules",
    "distributed_optimizer",
    "fp8_param_gather",
    "fp8_activation_storage",
    "pipeline_frees_stage_tensors",
    "pipeline_keeps_outputs",
)


def _layout(*args: str) -> dict:
    done = CliRunner().invoke(cli, [*BASE, *args])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)["layout"]


def test_settings_that_do_not_apply_are_null() -> None:
    fsdp2 = _layout("--framework", "fsdp2", "--zero", "3", "--pp", "2")
    assert {k: fsdp2[k] for k in FRAMEWORK_KEYS} == {
        "recompute_modules": None,
        "distributed_optimizer": None,
        "fp8_param_gather": None,
        "fp8_activation_storage": None,
        "pipeline_frees_stage_tensors": False,
        "pipeline_keeps_outputs": False,
    }
    megatron = _layout("--recompute", "selective", "--precision", "fp8")
    assert {k: megatron[k] for k in FRAMEWORK_KEYS} == {
        "recompute_modules": ["core_attn"],
        "distributed_optimizer": "mcore_distributed_optim",
        "fp8_param_gather": False,
        "fp8_activation_storage": "linear_inputs",
        "pipeline_frees_stage_tensors": None,
        "pipeline_keeps_outputs": None,
    }
    assert fsdp2.keys() == megatron.keys()
