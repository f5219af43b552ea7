"""Expert load imbalance in memory as a user meets it: DeepSeek-V3 on 1,024 B200 in FP8, the search's
winner without imbalance (dp 128 × pp 8 × ep 8, no recomputation, 188.60 of 189.69 GB) no longer
fits when the busiest expert-parallel rank receives 1.3 times the mean, and the search, reading
the same memory term, picks a layout whose figures ``evaluate`` repeats. Each call its own
process; figures derived by hand here (model.moe_run.row_factors)."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.cli_runs import run_many, trainplan

V3_LAYOUT = [
    *("evaluate", "--model", "deepseek-v3", "--gpu", "B200", "--framework", "megatron"),
    *("--dp", "128", "--tp", "1", "--pp", "8", "--cp", "1", "--ep", "8", "--etp", "1"),
    *("--zero", "1", "--recompute", "none", "--micro-batch", "1", "--global-batch", "15360"),
    *("--seq-len", "4096", "--precision", "fp8", "--json"),
]
"""The search's winner for DeepSeek-V3 on 1,024 B200 in FP8 when experts are balanced."""

SEARCH = [
    *("search", "--model", "deepseek-v3", "--gpus", "1024", "--gpu", "B200"),
    *("--precision", "fp8"),
]

ROUTED_ROWS = 8 * 4096 * 7168 + 2 * 2 * 8 * 4096 * 2048 + 8 * 4096 * 2048 + 4 * 8 * 4096
"""Saved bytes of what one DeepSeek-V3 MoE layer's experts receive, one micro-batch (k 8,
S 4,096, h 7,168, f_e 2,048; megatron, FP8 linear inputs at a byte): FC1's FP8 input k·S·h =
234,881,024, the SwiGLU input in BF16 2·β·k·S·f_e = 268,435,456, FC2's FP8 input k·S·f_e =
67,108,864 and the FP32 routing weights the weighted activation keeps 4·k·S = 131,072:
570,556,416 bytes."""


@pytest.fixture(scope="module")
def runs():
    return run_many(
        {
            "balanced": V3_LAYOUT,
            "imbalanced": [*V3_LAYOUT, "--set", "moe_imbalance=1.3"],
            "search": [*SEARCH, "--set", "moe_imbalance=1.3", "--json"],
        }
    )


def test_the_balanced_winner_no_longer_fits(runs):
    """Stage 2 of 8 holds 8 MoE layers of 6 micro-batches in flight (1F1B: pp − 2): the busiest
    rank's experts receive 0.3·k·S more rows each, 0.3 × 48 × 570,556,416 = 8,216,012,390.4 bytes
    more saved; the layout's 188.60 GB rises past the B200's 189.69 GB. With the scaling off
    (imbalance 1) the balanced figure is back."""
    balanced, heavy = (json.loads(runs[k].stdout) for k in ("balanced", "imbalanced"))
    assert ROUTED_ROWS == 570_556_416
    assert heavy["pipeline"]["microbatches_in_flight"] == 6
    more = heavy["memory"]["activations_bytes"] - balanced["memory"]["activations_bytes"]
    assert more == pytest.approx(0.3 * 8 * 6 * ROUTED_ROWS, abs=1)
    assert balanced["memory"]["fits"] and not heavy["memory"]["fits"]
    assert round(balanced["memory"]["total_bytes"] / 1e9, 2) == 188.60
    assert round(heavy["memory"]["total_bytes"] / 1e9, 2) == 197.56


def test_the_search_reads_the_evaluators_memory(runs):
    """The search under imbalance 1.3 picks a layout that fits, other than the balanced winner,
    and ``evaluate`` of its command gives the same memory, line by line."""
    found = json.loads(runs["search"].stdout)
    layout = found["layout"]
    assert (layout["dp"], layout["pp"], layout["recompute"]) != (128, 8, "none")
    assert found["memory"]["fits"]
    command = shlex.split(found["evaluate_command"])
    assert command[:2] == ["trainplan", "evaluate"]
    again = trainplan(*command[1:], "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["memory"] == found["memory"]
