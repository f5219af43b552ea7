"""Transformer Engine's userbuffers (``tp_comm_overlap = full``) as the command line and the
launch line see them: the search answer they moved and ``--tp-comm-overlap``
(model/terms/userbuffers.py; the figures derived in tests/model/test_userbuffers.py)."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.cli_runs import run_many
from trainplan.interface.launch import megatron_flags
from trainplan.model.layout import Layout, Recompute
from trainplan.model.op_time import TpOverlap
from trainplan.model.timing import CostOptions
from trainplan.scenarios.catalogue import get_model

LLAMA_70B = get_model("llama3-70b").model
FULL = CostOptions(tp_comm_overlap=TpOverlap.FULL)
BASE = Layout(
    dp=1, tp=8, pp=2, cp=1, micro_batch_size=1, zero_stage=1, recompute=Recompute.FULL,
    sequence_parallel=True, framework="megatron",
)  # fmt: skip


def test_the_launch_line_turns_userbuffers_on():
    arch = LLAMA_70B.arch
    flags = megatron_flags(arch, BASE, 64, options=FULL).flags
    assert "--tp-comm-overlap" in flags and "--sequence-parallel" in flags
    assert "--tp-comm-overlap" not in megatron_flags(arch, BASE, 64).flags
    assert (
        "--tp-comm-overlap" not in megatron_flags(arch, replace(BASE, tp=1), 64, options=FULL).flags
    )
    no_sp = megatron_flags(arch, replace(BASE, sequence_parallel=False), 64, options=FULL)
    assert "--tp-comm-overlap" not in no_sp.flags
    assert any("sequence parallelism" in n for n in no_sp.notes)


def test_search_answers_a_layout_that_fits_with_them():
    """The same search now answers dp 2 × tp 8 × pp 2 interleaved v 3 (the same degrees, one
    more chunk per stage, so fewer micro-batches' activations in flight on stage 0): its fit
    figure, userbuffers included (1,650,871,296 B, in ``communicator_bytes``), is within the
    usable 83,210,009,600 B."""
    args = ("search", "--model", "llama3-70b", "--gpus", "32", "--gpu", "H100-SXM",
            "--set", "tp_comm_overlap=full", "--json")  # fmt: skip
    run = run_many({"full": args})["full"]
    assert run.returncode == 0, run.stderr[-2000:]
    d = json.loads(run.stdout)
    lay, m = d["layout"], d["memory"]
    assert (lay["dp"], lay["tp"], lay["pp"], lay["schedule"], lay["virtual_stages"]) == (
        2, 8, 2, "interleaved", 3,
    )  # fmt: skip
    assert (lay["recompute"], lay["micro_batch_size"]) == ("none", 1)
    assert m["userbuffer_bytes"] == 1_650_871_296
    assert m["fit_bytes"] <= m["capacity_bytes"] == 83_210_009_600
