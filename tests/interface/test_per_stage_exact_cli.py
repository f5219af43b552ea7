"""`trainplan search --per-stage` under 1F1B answers the fastest split under the order's own step
(optimizer.stage_exact), and `trainplan evaluate` on its --stage-layers prints the same step:
Llama 3 8B on 4 H100, tp 1 × pp 4, 8 micro-batches of 4,096 tokens, where the closed form
(m + pp − 1)·t_max ranks another split first (tests/optimizer/test_stage_exact.py)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from trainplan.interface.cli import cli

CASE = ["--model", "llama3-8b", "--gpus", "4", "--gpu", "H100-SXM", "--tp", "1", "--pp", "4",
        "--global-batch", "8", "--seq-len", "4096", "--schedule", "1f1b"]  # fmt: skip


def _run(*args: str) -> dict:
    return json.loads(CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False).output)


def test_search_answer_is_what_evaluate_prints():
    """The per-stage answer (ZeRO-0 and b 1, the search's: 9, 9, 9, 5 layers, 1.176 s against the
    uniform 8 a stage's 1.326 s), proven with no gap; `trainplan evaluate` on its layout and
    --stage-layers prints its step to the ns. (1.166 and 1.317 s before Megatron-Core's own
    optimizer-step passes, model.step_passes: 12 B more an element of the busiest stage, 9 ×
    218,103,808 + 525,336,576 = 2,488,270,848 elements at 2.97 TB/s, 10.1 ms; uniform 8 ×
    218,103,808 + 525,336,576, 9.2 ms.)"""
    out = _run("search", *CASE, "--per-stage")
    ps, lay = out["per_stage"], out["layout"]
    assert ps["status"] == "optimal" and round(ps["gap_s"] * 1e9) <= 2
    assert ps["stage_layers"] == [9, 9, 9, 5] and ps["recompute_layers"] == [0, 0, 0, 0]
    assert round(ps["step_s"], 3) == 1.176 and round(ps["uniform"]["step_s"], 3) == 1.326
    layers = ",".join(str(n) for n in ps["stage_layers"])
    again = _run("evaluate", *CASE, "--zero", str(lay["zero_stage"]), "--micro-batch",
                 str(lay["micro_batch_size"]), "--stage-layers", layers)  # fmt: skip
    assert round(again["time"]["step_s"] * 1e9) == round(ps["step_s"] * 1e9)
