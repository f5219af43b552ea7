"""All 20 named examples as a user runs them: a fresh ``trainplan example NAME`` process each, in
text and with ``--json`` (42 processes, run in parallel once per test session).

The JSON must hold every figure the example's ``expect`` table states (``scenarios/examples.toml``,
the rule of :mod:`tests.examples_check`), and the text must print the figures the example's line
promises — written out below as the terminal shows them. Commands load on lookup
(:class:`trainplan.interface.cli.LazyGroup`), so a tab's command must be looked up, not read from
``cli.commands``: 14 examples once crashed in text mode (KeyError 'pipeline').
"""

from __future__ import annotations

import json
from functools import cache

import pytest

from tests.cli_runs import Done, run_many
from tests.examples_check import check_expect
from trainplan import scenarios

EXAMPLES = {e["name"]: e for e in scenarios.data("examples")["example"]}

TEXT: dict[str, list[str]] = {
    # 70B × 16 B = 1,120 GB on one GPU
    "one-gpu-70b": [
        "70,000,000,000 parameters",
        "= model state                                   1,120.00 GB",
    ],
    # model state per GPU of ZeRO-0…3 over dp 64: 1,120 / 293.125 / 155.3125 / 17.5 GB, the DP
    # ring 2·(63/64)·2·70e9 = 275.625 GB, ×1.5 with ZeRO-3
    "fsdp-70b-64": [
        "0       1,120.00 GB    1.00×        275.62 GB",
        "1       293.12 GB      3.82×        275.62 GB",
        "2       155.31 GB      7.21×        275.62 GB",
        "3       17.50 GB       64.00×       413.44 GB",
    ],
    # the ZeRO paper's Figure 1: 120 → 31.4 / 16.6 / 1.9 GB
    "zero-paper-7.5b": [
        "0       120.00 GB",
        "1       31.41 GB",
        "2       16.64 GB",
        "3       1.88 GB",
    ],
    "llama3-405b": ["on 16,384 × H100-SXM", "dp 128 × tp 8 × pp 16", "m 16,"],
    "llama3-405b-128k": ["on 16,384 × H100-SXM", "cp 16 all-gather", "s 131,072"],
    "megatron-1t": ["on 3,072 × A100-80GB", "dp 6 × tp 8 × pp 64", "m 512,"],
    # DeepSeek trained this layout: with its published recipe (DualPipe, FP8, the report's
    # recomputation) it fits the H800; BF16 with recompute none and 1F1B needed 141.72 GB
    "deepseek-v3-ep64": [
        "682,636,487,424 parameters",
        "on 2,048 × H800",
        "(ep 64), textbook ZeRO-1, recompute selective, dualpipe",
        "verdict: fits",
        "Profile: textbook — standing for DeepSeek's HAI-LLM",
    ],
    # (p − 1)/(m + p − 1) = 3/11; 1F1B holds p − i micro-batches on stage i, GPipe all m
    "1f1b-4x8": ["bubble_fraction 3/11 = 27.3%", "held per stage  4 3 2 1 "],
    "gpipe-4x8": ["bubble_fraction 3/11 = 27.3%", "held per stage  8 8 8 8 "],
    "1f1b-8x64": ["bubble_fraction 7/71 = 9.9%"],
    # 6 · 70e9 · 4e6 / (989e12 · 512 · 7) = 0.47396
    "mfu-70b-512": ["= 47.4%"],
    # Eq. 3's 5.139e19 FLOPs (recomputed forward and attention included) ÷ 502e15 FLOP/s = a
    # 102.37 s step; 6·N·tokens = 6 · 1.00804e12 · 6,291,456 over it: 3.8051e19 ÷ (312e12 ·
    # 3072 · 102.37) = 0.3878; with the non-causal attention 12 · 128 · 25600 · 2048 = 80.53e9
    # a token (6.1288e12 a token) 0.3930; full recomputation's forward, 2 · 128 · 12 · 25600² +
    # 80.53e9 / 3 = 2.04e12 a token, makes the HFU 0.3930 × (1 + 2.04e12 / 6.1288e12) = 0.5238,
    # the paper's 52.4%
    "megatron-502pf": ["without attention FLOPs: 38.8%", "= 39.3%", "(full)) = 52.4%"],
    "palm-540b": ["= 46.2%", "without attention FLOPs: 45.7%", "= 57.8%"],
    # √n checkpoints: n/k + k = 9/3 + 3 = 6 held against n + 1 = 10; one extra forward = 1/3
    "ckpt-9-every-3": ["peak held 6 (n/k + k = 9/3 + 3) vs 10 without checkpointing", "+33.3%"],
    "ckpt-9-every-3-inputs": ["peak held 6", "vs 10 without", "checkpoints: in1, in4, in7"],
    "ckpt-100-every-10": ["peak held 20 (n/k + k = 100/10 + 10) vs 101 without checkpointing"],
    # 16 + 16 + 2 + 2 = 36 B per policy parameter; GRPO 16 + 2 + 2 = 20 (44.4% fewer); rule 18
    "ppo-70b": ["4 networks", "resident 2.520 TB; 36 bytes per policy parameter"],
    "grpo-70b": ["3 networks", "resident 1.400 TB; 20 bytes per policy parameter; 44.4% fewer"],
    # 2N rollout + 4N scoring (the reference and the actor's old log-probs) + 6N training: the
    # rollout a sixth of the FLOPs; at MFU 0.04 against 0.4 it takes 2/0.04 ÷ (2/0.04 + 10/0.4)
    # = 50/75 = 66.7% of the time; 2 · 70e9 · 83,886,080 tokens ÷ (0.04 · 989.4e12) = 296,746.8 s
    "grpo-rule-70b": [
        "2 networks",
        "resident 1.260 TB; 18 bytes per policy parameter",
        "rollout    1.174e+19       16.7%   296,746.8 s       66.7%",
        "scoring    2.349e+19       33.3%    59,349.4 s       13.3%",
    ],
    "dpo-70b": ["2 networks", "rollout    0.000e+00        0.0%"],
}
"""What each example's text shows, as printed (the derivations in the comments)."""


@cache
def _runs() -> dict[str, Done]:
    """Every example in text and JSON, each its own process, a few at a time."""
    return run_many(
        {f"{n}{j}": ["example", n, *j.split()] for n in EXAMPLES for j in ("", " --json")}
    )


def test_the_table_covers_the_21_examples():
    assert len(EXAMPLES) == 20 and set(TEXT) == set(EXAMPLES)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_json_holds_its_figures(name):
    done = _runs()[f"{name} --json"]
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["example"] == name and out["tab"] == EXAMPLES[name]["tab"]
    check_expect(out, EXAMPLES[name]["expect"], name)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_text_shows_its_figures(name):
    done = _runs()[name]
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    assert done.stdout.startswith(f"Example {name}: {EXAMPLES[name]['says']}")
    for fragment in TEXT[name]:
        assert fragment in done.stdout, f"{name}: {fragment!r} not in its text"


def test_the_deepseek_examples_megatron_run_is_the_one_its_profile_line_gives():
    """The DeepSeek-V3 example's profile line names the flags of Megatron-Core's run of the same
    recipe (Megatron-Core has no DualPipe and saves its linears' own inputs): they run, and fit
    the H800."""
    from tests.cli_runs import trainplan

    line = _runs()["deepseek-v3-ep64"].stdout.splitlines()[1]
    flags = line.split("Megatron-Core's run of the recipe: ")[1].split()
    done = trainplan("example", "deepseek-v3-ep64", *flags, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert (out["framework"], out["layout"]["schedule"]) == ("megatron", "1f1b")
    assert out["memory"]["fits"]
