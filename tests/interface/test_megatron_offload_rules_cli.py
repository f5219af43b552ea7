"""Megatron-LM's optimizer offload runs only where its code lets it (NVIDIA/Megatron-LM d98e8a6,
read in :mod:`trainplan.model.offload_rules`): ``--optimizer-cpu-offload`` needs
``--use-precision-aware-optimizer`` (``validate_args``), which ``get_megatron_optimizer`` runs
only with the distributed optimizer (ZeRO-1, not DDP's ZeRO-0) and ``OptimizerConfig`` only with
Adam; with ``--fp8-param-gather`` the recipe must be delayed. Each call its own process."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import refusal, run_many, trainplan

EVAL = ("evaluate", "--model", "llama3-8b", "--gpu", "H100-SXM", "--framework", "megatron")
EVAL += ("--dp", "8", "--recompute", "full", "--micro-batch", "1", "--offload-optimizer")

REFUSED = {
    "zero 0": (*EVAL, "1", "--zero", "0"),
    "lion": (*EVAL, "0.5", "--zero", "1", "--optimizer", "lion"),
    "tensorwise": (*EVAL, "1", "--zero", "1", "--precision", "fp8", "--fp8-recipe", "tensorwise")
    + ("--set", "fp8_param_gather=true"),
}
RULES = {
    "zero 0": "--offload-optimizer: 1 under framework megatron needs zero_stage 1 (the "
    "distributed optimizer), not 0",
    "lion": "--offload-optimizer: 0.5 under framework megatron needs optimizer adam, not lion",
    "tensorwise": "--offload-optimizer: 1 under framework megatron with fp8_param_gather needs "
    "fp8_recipe delayed, not tensorwise",
}


@pytest.fixture(scope="module")
def runs():
    calls = dict(REFUSED)
    calls["delayed"] = (*EVAL, "1", "--zero", "1", "--precision", "fp8", "--set")
    calls["delayed"] += ("fp8_param_gather=true", "--json")
    return run_many(calls)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_in_one_line_naming_the_rule(runs, name):
    assert refusal(runs[name]).startswith(RULES[name])


def test_delayed_fp8_primary_weights_offload_is_accepted(runs):
    done = runs["delayed"]
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["layout"]["zero_stage"] == 1


def test_search_at_dp_1_answers_the_distributed_optimizer():
    """Llama 3 8B on 2 H100s with the whole optimizer offloaded: dp 1 × tp 2. At dp 1 ZeRO-0 and
    ZeRO-1 time the same step (929.051 s: 929.045 s before the optimizer step zeroed the whole
    FP32 gradient buffer, which stays on the GPU with the step offloaded, 4 B × 4,015,130,624 at
    2.97 TB/s, 5.4 ms; model.terms.optimizer_time.whole_buffer_zeroing_bytes), and ZeRO-0 held 0.51 GB less, so the
    search answered ZeRO-0 — a line Megatron-LM refuses; now it answers ZeRO-1, and its evaluate
    line agrees."""
    args = ("--model", "llama3-8b", "--gpus", "2", "--gpu", "H100-SXM", "--framework", "megatron")
    done = trainplan("search", *args, "--offload-optimizer", "1", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    layout = answer["layout"]
    assert (layout["dp"], layout["tp"], layout["zero_stage"]) == (1, 2, 1)
    assert round(answer["time"]["step_s"], 3) == 929.051
    assert "--zero 1" in answer["evaluate_command"]


SEARCH = ("search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM")
SEARCH += ("--framework", "megatron")


@pytest.mark.parametrize(
    ("name", "flags"),
    [
        ("lion", ("--optimizer", "lion", "--offload-optimizer", "0.5")),
        ("tensorwise", ("--offload-optimizer", "1", "--precision", "fp8", "--fp8-recipe")
         + ("tensorwise", "--set", "fp8_param_gather=true")),
    ],
)  # fmt: skip
def test_a_search_with_no_legal_layout_names_the_rule_every_stage_breaks(name, flags):
    """The search reports the first ZeRO stage's reason when no layout is legal (ZeRO-0 for
    megatron); ZeRO-1 breaks the optimizer's or the recipe's rule, so ZeRO-0 must name that
    rule, not the distributed optimizer that ZeRO-1 would supply."""
    assert refusal(trainplan(*SEARCH, *flags)).startswith(RULES[name])
