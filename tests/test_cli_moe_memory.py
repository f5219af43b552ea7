"""Expert load imbalance in memory as a user meets it: DeepSeek-V3 on 1,024 B200 in FP8, the search's
winner without imbalance (dp 128 × pp 8 × ep 8, no recomputation, 188.60 of 189.69 GB) no longer
fits when the busiest expert-parallel rank receives 1.3 times the mean, and the search, reading
the same memory term, picks a layout whose figures ``evaluate`` repeats. Each call its own
process; figures derived by hand here (model.moe_rows.row_factors)."""

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


MIXTRAL = [
    *("evaluate", "--model", "mixtral-8x7b", "--gpu", "H100-SXM"),
    *("--dp", "8", "--tp", "1", "--pp", "1", "--zero", "1", "--micro-batch", "1"),
    *("--global-batch", "64", "--seq-len", "4096", "--json"),
]
"""Mixtral 8x7B on 8 H100, data parallel; ``--framework`` and ``--ep`` added per call."""

ROW_BYTES = ROUTED_ROWS // (8 * 4096)
"""Saved bytes per routed row of DeepSeek-V3's experts' side: 570,556,416 / 32,768 = 17,412."""


@pytest.fixture(scope="module")
def runs():
    return run_many(
        {
            "balanced": V3_LAYOUT,
            "imbalanced": [*V3_LAYOUT, "--set", "moe_imbalance=1.3"],
            "search": [*SEARCH, "--set", "moe_imbalance=1.3", "--json"],
            **{
                f"mixtral ep {ep} imbalance {imb}": [
                    *MIXTRAL,
                    "--framework",
                    "megatron",
                    "--ep",
                    str(ep),
                    "--set",
                    f"moe_imbalance={imb}",
                ]  # fmt: skip
                for ep in (1, 8)
                for imb in ("1", "1.3")
            },
            **{
                f"{fw} capacity {pad}": [
                    *MIXTRAL,
                    "--ep",
                    "8",
                    "--framework",
                    fw,
                    "--set",
                    "moe_capacity_factor=1.5",
                    *(["--set", "moe_pad_to_capacity=true"] if pad == "padded" else []),
                ]  # fmt: skip
                for fw in ("deepspeed", "megatron")
                for pad in ("padded", "unpadded")
            },
        }
    )


def test_the_balanced_winner_no_longer_fits(runs):
    """Stage 2 of 8 holds 8 MoE layers of 6 micro-batches in flight (1F1B: pp − 2): the busiest
    rank's experts receive 1.3 × 32,768 = 42,598.4 rows, whole 42,599 (the all-to-all returns
    whole rows), 9,831 more than k·S, at 17,412 saved bytes a row: 9,831 × 17,412 × 48 =
    8,216,513,856 bytes more saved (8,216,012,390.4 with fractional rows); the layout's 188.60 GB
    rises past the B200's 189.69 GB. With the scaling off (imbalance 1) the balanced figure is
    back. Both hold Transformer Engine's placeholder weight gradients (model/terms/
    dummy_wgrads.py; at tp 1, MLA's five weight shapes and the experts' FC1 and FC2, BF16):
    462,290,944 B more: 188.60 → 189.06 GB balanced (still within 189.69), 197.56 → 198.02 GB
    imbalanced."""
    balanced, heavy = (json.loads(runs[k].stdout) for k in ("balanced", "imbalanced"))
    assert ROUTED_ROWS == 570_556_416 and ROW_BYTES == 17_412
    assert heavy["pipeline"]["microbatches_in_flight"] == 6
    more = heavy["memory"]["activations_bytes"] - balanced["memory"]["activations_bytes"]
    assert more == (42_599 - 32_768) * ROW_BYTES * 8 * 6 == 8_216_513_856
    assert balanced["memory"]["fits"] and not heavy["memory"]["fits"]
    attention = 1536 * 7168 + 24576 * 1536 + 576 * 7168 + 32768 * 512 + 7168 * 16384
    dummies = 2 * (attention + 4096 * 7168 + 7168 * 2048)
    assert dummies == 462_290_944
    assert round((balanced["memory"]["total_bytes"] - dummies) / 1e9, 2) == 188.60
    assert round((heavy["memory"]["total_bytes"] - dummies) / 1e9, 2) == 197.56
    assert round(balanced["memory"]["total_bytes"] / 1e9, 2) == 189.06
    assert round(heavy["memory"]["total_bytes"] / 1e9, 2) == 198.02


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


def _byte_figures(tree, path=""):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _byte_figures(value, f"{path}.{key}")
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from _byte_figures(value, f"{path}[{i}]")
    elif "bytes" in path and isinstance(tree, int | float) and not isinstance(tree, bool):
        yield path, tree


def test_bytes_are_whole_under_a_fractional_imbalance(runs):
    """Imbalance 1.3 of 32,768 routed rows is 42,598.4: every byte figure of ``--json`` is a whole
    number, the rows rounded up as the dispatcher allocates them (moe_forward_transient_bytes,
    activations_bytes, total_bytes ... came out with .4 and .8 before)."""
    heavy = json.loads(runs["imbalanced"].stdout)
    figures = dict(_byte_figures(heavy))
    assert "memory.total_bytes" in {p.lstrip(".") for p in figures}
    assert [p for p, v in figures.items() if v != int(v)] == []


def test_imbalance_times_the_busiest_rank_only_across_ranks(runs):
    """At ep 1 one rank holds all 8 experts and computes its own k·T rows whatever the routing:
    the step time at imbalance 1.3 is the balanced one, to the bit (it was 7.36 s against 5.86 s
    when the clock scaled the rows at ep 1 too). At ep 8 the busiest rank's experts compute 1.3
    times the rows and its all-to-all receives them: the step is slower and the memory larger."""
    got = {k: json.loads(v.stdout) for k, v in runs.items() if k.startswith("mixtral")}
    one, one_heavy = got["mixtral ep 1 imbalance 1"], got["mixtral ep 1 imbalance 1.3"]
    assert one_heavy["time"] == one["time"] and one_heavy["memory"] == one["memory"]
    eight, eight_heavy = got["mixtral ep 8 imbalance 1"], got["mixtral ep 8 imbalance 1.3"]
    assert eight_heavy["time"]["compute_s"] > eight["time"]["compute_s"]
    assert eight_heavy["time"]["exposed_comm_s"] > eight["time"]["exposed_comm_s"]
    assert eight_heavy["memory"]["total_bytes"] > eight["memory"]["total_bytes"]


def test_deepspeed_pads_to_capacity_unasked(runs):
    """DeepSpeed's native MoE fills an [E, C, h] buffer on every rank whatever the routing
    (deepspeed/moe/sharded_moe.py MOELayer.forward, _sparse_encode): at capacity factor 1.5 the
    layout's step time, memory and traffic are the padded ones without moe_pad_to_capacity.
    Megatron-Core drops instead (its unpadded rows are min(k·T, E·C) = k·T): padding costs it
    time and memory."""
    got = {k: json.loads(v.stdout) for k, v in runs.items() if " capacity " in k}
    ds, ds_padded = got["deepspeed capacity unpadded"], got["deepspeed capacity padded"]
    for key in ("time", "memory", "traffic"):
        assert ds[key] == ds_padded[key], key
    mg, mg_padded = got["megatron capacity unpadded"], got["megatron capacity padded"]
    assert mg_padded["time"]["step_s"] > mg["time"]["step_s"]
    assert mg_padded["memory"]["total_bytes"] > mg["memory"]["total_bytes"]
