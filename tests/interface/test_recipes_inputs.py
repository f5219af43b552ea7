"""The training recipe's refusals that the interface makes (:func:`interface.inputs.build_case`),
beside the model's own in tests/model/test_recipes.py."""

from __future__ import annotations

import pytest

from trainplan.interface.inputs import build_case
from trainplan.model.errors import InputError


def test_muon_tp_mode_is_refused_without_muon():
    """``muon_tp_mode`` applies to Muon only: refused with Adam, one line."""
    base = {"model": "llama3-8b", "dp": 8, "muon_tp_mode": "duplicated"}
    with pytest.raises(InputError, match="^muon_tp_mode: applies to optimizer muon, not adam"):
        build_case(base)
    with pytest.raises(InputError, match="^muon_tp_mode: 'distributed' .* is not modelled"):
        build_case({**base, "optimizer": "muon", "muon_tp_mode": "distributed"})


def test_muon_tp_mode_reaches_a_search_that_chooses_muon():
    """A search among Adam and Muon reads ``muon_tp_mode`` for its Muon candidates: the base case
    is built with Adam (the layout's default), so the rule checks the optimizers searched, not
    the base case's; without Muon among them it is still refused. Run as a user runs it, in its
    own process: the answer is a Muon layout that carries the mode."""
    import json
    import subprocess
    import sys

    from trainplan.model.optimizers import OptimizerKind

    base = {"model": "llama3-8b", "dp": 8, "muon_tp_mode": "blockwise"}
    build_case(base, optimizers=(OptimizerKind.ADAM, OptimizerKind.MUON))
    with pytest.raises(InputError, match="^muon_tp_mode: applies to optimizer muon, not adam"):
        build_case(base, optimizers=(OptimizerKind.ADAM,))
    argv = ["search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM"]
    argv += ["--optimizer", "muon", "--set", "muon_tp_mode=blockwise", "--json"]
    run = subprocess.run(
        [sys.executable, "-m", "trainplan", *argv], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    layout = json.loads(run.stdout)["layout"]
    assert (layout["optimizer"], layout["muon_tp_mode"]) == ("muon", "blockwise")
    refused = subprocess.run(
        [sys.executable, "-m", "trainplan", *argv[:7], "--set", "muon_tp_mode=blockwise"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "Error: --set muon_tp_mode: applies to optimizer muon, not adam"
    ]


def test_muon_default_is_duplicated_and_the_launch_line_says_it():
    """Llama 3 70B on 64 GPUs, dp 4 tp 4 pp 4, Muon: the default counts what
    ``--muon-tp-mode duplicated`` counts (the gathered whole matrices), more step memory than
    ``blockwise``; Megatron-LM's launch line writes the mode either way."""
    from trainplan.interface.launch import megatron_flags
    from trainplan.model.layout import Layout
    from trainplan.optimizer.case import Case
    from trainplan.scenarios.catalogue import get_model

    def est(mode):
        extra = {} if mode is None else {"muon_tp_mode": mode}
        return Case.of("llama3-70b", dp=4, tp=4, pp=4, optimizer="muon", **extra).evaluate()

    default, dup, block = est(None), est("duplicated"), est("blockwise")
    assert [s.total_bytes for s in default.stages] == [s.total_bytes for s in dup.stages]
    assert max(s.state.step_bytes for s in dup.stages) > max(
        s.state.step_bytes for s in block.stages
    )
    arch = get_model("llama3-70b").model.arch
    lay = Layout.of(dp=4, tp=4, pp=4, optimizer="muon")
    flags = megatron_flags(arch, lay, 128, default.training).flags
    assert flags[flags.index("--muon-tp-mode") + 1] == "duplicated"
    flags = megatron_flags(arch, lay, 128, block.training).flags
    assert flags[flags.index("--muon-tp-mode") + 1] == "blockwise"
    assert (
        "--muon-tp-mode" not in megatron_flags(arch, Layout.of(dp=4, tp=4, pp=4), 128, None).flags
    )
