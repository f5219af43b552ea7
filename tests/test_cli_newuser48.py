"""A new user's first two hours, a further pass, each ``trainplan`` call its own process
(:mod:`tests.cli_runs`): the options in seconds whose name does not say so (``--time-limit``,
``ckpt --delay``) read a time's units as ``--step-seconds`` does; the tabs' names of a fixed set
(``pipeline --framework``, ``mfu --recompute``, ``ckpt --labels``, ``rlhf --reward``) are read in
any case, as evaluate's choices and the pipeline's schedule are; an offload refusal shows the
fraction as a number, not ``1/2``."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many

SEARCH = "search --model llama3-8b --gpus 8 --gpu H100-SXM --tp 1 --pp 1 --zero 1 --json".split()
"""A small search (one shape family: tp 1, pp 1, ZeRO-1), to read its time limit back."""


def test_a_time_limit_reads_the_units_of_a_time():
    """``--time-limit 20s`` and ``--time-limit 20000ms`` were refused ("is a time, not a plain
    number") although the option is seconds and ``--step-seconds 7000ms`` is read; they are 20 s
    now, as the JSON's ``time_limit_s`` says; ``2min`` is 120 s, and ``ckpt --delay 100ms`` is
    read. A unit of another kind, a percent and a count's suffix stay refused, naming the
    option's unit."""
    runs = run_many(
        {
            "s": [*SEARCH, "--time-limit", "20s"],
            "ms": [*SEARCH, "--time-limit", "20000ms"],
            "min": [*SEARCH, "--time-limit", "2min"],
            "delay": ["ckpt", "-n", "4", "--delay", "100ms", "--json"],
            "bytes": [*SEARCH, "--time-limit", "20GB"],
            "percent": [*SEARCH, "--time-limit", "20%"],
            "suffix": ["ckpt", "-n", "4", "--delay", "2T"],
        }
    )
    for name, seconds in (("s", 20), ("ms", 20), ("min", 120)):
        assert runs[name].returncode == 0, runs[name].stderr
        assert json.loads(runs[name].stdout)["time_limit_s"] == seconds
    assert runs["delay"].returncode == 0, runs["delay"].stderr
    assert refusal(runs["bytes"]) == (
        "--time-limit: '20GB' is a size in bytes, not a time (given in s): write e.g. 2.5, 2.5s "
        "or 2500ms"
    )
    assert refusal(runs["percent"]) == (
        "--time-limit: '20%' is a percent, and the value is no fraction (0 to 1); write a number "
        "in s"
    )
    assert refusal(runs["suffix"]) == (
        "--delay: '2T' is a count suffix, not a unit: write e.g. 2.5, 2.5s or 2500ms (the value "
        "is in s)"
    )


def test_the_tabs_names_are_read_in_any_case():
    """``pipeline --framework Megatron`` was refused ("'Megatron' is not one of megatron, …")
    where ``evaluate --framework Megatron`` and ``pipeline --schedule 1F1B`` are read; so were
    ``mfu --recompute Full`` and ``ckpt --labels Inputs``; ``rlhf --reward Rule`` was read but
    echoed as typed. Each is now the lowercase name's own answer, figure for figure: 1F1B's bubble
    on 8 stages × 32 micro-batches is (p − 1)/(m + p − 1) = 7/39; Llama 3 70B's full
    recomputation re-runs the forward, HFU = MFU × (1 + recomputed/model FLOPs)."""
    mfu = "mfu --model llama3-70b --tokens 4M --step-seconds 7 --gpu H100-SXM --chips 1024 --json"
    rlhf = "rlhf --algorithm grpo --policy-params 7B --json --reward".split()
    runs = run_many(
        {
            "pipe": [*"pipeline -p 8 -m 32 --json --framework".split(), "Megatron"],
            "pipe lower": [*"pipeline -p 8 -m 32 --json --framework".split(), "megatron"],
            "mfu": [*mfu.split(), "--recompute", "Full"],
            "mfu lower": [*mfu.split(), "--recompute", "full"],
            "ckpt": ["ckpt", "-n", "9", "--labels", "Inputs", "--json"],
            "ckpt lower": ["ckpt", "-n", "9", "--labels", "inputs", "--json"],
            "rlhf": [*rlhf, "Rule"],
        }
    )
    for name in ("pipe", "mfu", "ckpt"):
        assert runs[name].returncode == 0, runs[name].stderr
        assert json.loads(runs[name].stdout) == json.loads(runs[f"{name} lower"].stdout)
    assert json.loads(runs["pipe"].stdout)["bubble_fraction"] == 7 / 39
    out = json.loads(runs["rlhf"].stdout)
    assert (out["reward"], out["networks"]) == ("rule", 2)  # no reward network


def test_an_offload_refusal_shows_the_fraction_as_a_number():
    """DeepSpeed's ZeRO-1 offloads the whole optimizer (``offload_optimizer`` 1.0 in
    DeepSpeed's ZeRO config); ``--offload-optimizer 50%`` there is refused, and the refusal
    wrote the value as the fraction ``1/2``: it writes 0.5."""
    runs = run_many(
        {
            "half": [
                *"evaluate --model llama3-70b --gpus 256 --gpu H100-SXM --tp 4 --pp 4".split(),
                *"--framework deepspeed --zero 1 --offload-optimizer 50%".split(),
            ]
        }
    )
    assert refusal(runs["half"]) == (
        "--offload-optimizer: 0.5 — DeepSpeed ZeRO-1 offloads the whole optimizer (1); a partial "
        "ratio is ZeRO-3's"
    )
