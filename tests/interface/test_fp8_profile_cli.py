"""The FP8 recipe checked against a part's published GEMM profile is the one the framework runs:
the recipe given, or where none is given the framework's own default
(:func:`model.precision.fp8_recipe_of`: torchao's tensorwise under fsdp2, Transformer Engine's
delayed elsewhere) — the recipe the cost model then prices, not delayed for every framework.

Every part profiled today publishes both defaults (Hopper: delayed, tensorwise, blockwise;
Blackwell: delayed, tensorwise, mxfp8), so the difference shows on a part whose profile had
tensorwise only: the CLI runs in a fresh process with ``profile_recipes`` answering that."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cli_runs import refusal, trainplan
from trainplan.interface.scenario import build_problem
from trainplan.model.errors import InputError
from trainplan.model.precision import Fp8Recipe

EVALUATE = (
    "evaluate", "--model", "llama3-8b", "--gpu", "H100-SXM", "--precision", "fp8", "--dp", "8",
    "--seq-len", "8192", "--global-batch", "64",
)  # fmt: skip

TENSORWISE_ONLY = (
    "import sys; import trainplan.model.op_rates as o; from trainplan.model.precision import "
    "Fp8Recipe; o.profile_recipes = lambda name: (Fp8Recipe.TENSORWISE,); "
    "sys.argv = ['trainplan', *sys.argv[1:]]; from trainplan.interface.cli import main; main()"
)


def _tensorwise_only(*args: str) -> subprocess.CompletedProcess[str]:
    """``trainplan ARGS`` in a fresh process, every part's profile publishing tensorwise only."""
    cmd = [sys.executable, "-c", TENSORWISE_ONLY, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_fsdp2_without_a_recipe_is_checked_as_tensorwise():
    done = _tensorwise_only(*EVALUATE, "--framework", "fsdp2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "precision fp8, recipe tensorwise (torchao Float8Linear)" in done.stdout
    # Megatron-Core's default is delayed scaling, which that profile lacks: one line, exit 2
    line = refusal(_tensorwise_only(*EVALUATE, "--framework", "megatron"))
    assert "fp8-recipe: delayed has no published GEMM profile on the H100-SXM" in line


def test_the_real_profiles_take_each_default():
    done = trainplan(*EVALUATE, "--framework", "fsdp2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "precision fp8, recipe tensorwise (torchao Float8Linear)" in done.stdout


def test_a_search_checks_every_framework_it_searches(monkeypatch):
    """The search's cases are checked under each framework of its space, each one's default."""
    monkeypatch.setattr(
        "trainplan.model.op_rates.profile_recipes", lambda name: (Fp8Recipe.TENSORWISE,)
    )
    values = {
        "model": "llama3-8b", "gpu": "H100-SXM", "gpus": "8", "seq_len": 8192,
        "global_batch": 64, "cluster": {"precision": "fp8"},
    }  # fmt: skip
    problem = build_problem({}, {**values, "space": {"framework": ["fsdp2"]}})
    assert problem.jobs[0].case.training.fp8_recipe is None  # the framework's default
    with pytest.raises(InputError, match="^fp8_recipe: delayed has no published GEMM profile"):
        build_problem({}, {**values, "space": {"framework": ["fsdp2", "megatron"]}})
