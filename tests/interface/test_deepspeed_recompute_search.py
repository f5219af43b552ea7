"""A search under ``--framework deepspeed`` whose answer reads DeepSpeed ZeRO-3's walk of its
own recompute mode (tests/model/test_deepspeed_recompute_dp.py: the dp term and the gathered
weights per mode), checked term by term with ``evaluate --json``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from trainplan.interface.cli import cli


def _json(*args: str) -> dict:
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_search_answer_checked_term_by_term_with_evaluate():
    """Llama 3 70B on 16 H100s, s 4,096, B 64, ``--framework deepspeed --zero 3``: the search
    picks dp 8, tp 2, b 1 under full recomputation; ``evaluate --json`` of that layout gives the
    same figures term by term. Before the tables were keyed by recompute mode the answer was the
    same layout at 21.5929 s with 2,772,434,944 gathered bytes (the √n walk's, the most of the
    three walks); its own walk gives 2,409,627,648 and its launches 6.4 ms more: 21.5992 s;
    21.6271 s since each micro-batch's last reduce bucket, run after the backward's computation,
    waits whole instead of φ of it (model.dp_exposure.microbatch_exposed_seconds); 21.6746 s
    since the optimizer step charges DeepSpeed ZeRO-3's own passes (model.step_passes
    step_pass_bytes: the .double() norm, flatten and cast, the clip's scaling, the master's
    copy-back; 38 → 70 B an element): +32 B × 4.41 G owned elements (70 B / (tp 2 × dp 8)) /
    (3.35 TB/s × 0.887) = +47.5 ms."""
    case = ["--model", "llama3-70b", "--gpus", "16", "--gpu", "H100-SXM", "--seq-len", "4096"]
    case += ["--global-batch", "64", "--framework", "deepspeed"]
    found = _json("search", *case, "--zero", "3")
    lay = found["layout"]
    assert (lay["dp"], lay["tp"], lay["zero_stage"], lay["recompute"]) == (8, 2, 3, "full")
    assert lay["micro_batch_size"] == 1
    flags = ["--dp", "8", "--tp", "2", "--zero", "3", "--recompute", "full", "--micro-batch", "1"]
    est = _json("evaluate", *case, *flags)
    assert est["memory"] == found["memory"]
    assert est["time"] == found["time"]
    assert est["traffic"] == found["traffic"]
    assert found["memory"]["zero3_gathered_bytes"] == 2_409_627_648
    assert found["objective_s"] == pytest.approx(21.6746, abs=5e-5)
