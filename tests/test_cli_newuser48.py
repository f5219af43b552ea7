"""A new user's leftovers, each ``trainplan`` call its own process (:mod:`tests.cli_runs`): a
refusal of an example's own value that named a flag the user never typed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_runs import refusal, run_many


def test_an_examples_own_value_is_refused_as_the_examples():
    """``trainplan example deepseek-v3-ep64 --set framework=fsdp2`` said "--zero: 1 is not a
    stage of --framework fsdp2" — the user typed no ``--zero``: the example's recipe gives
    zero_stage 1 (scenarios/examples.toml). The line now says the value is the example's own
    and which flag replaces it, text and JSON alike; a value the user gave keeps its own head."""
    base = ["example", "deepseek-v3-ep64", "--set", "framework=fsdp2"]
    runs = run_many(
        {
            "text": base,
            "json": [*base, "--json"],
            "given": [*base, "--zero", "1"],
        }
    )
    expected = (
        "example deepseek-v3-ep64: its own zero_stage 1 is not a stage of --framework fsdp2 "
        "(it models reshard_after_forward=False (2) and True (3)); give --zero to replace it"
    )
    assert refusal(runs["text"]) == expected
    assert refusal(runs["json"]) == expected
    assert refusal(runs["given"]).startswith("--zero: 1 is not a stage of --framework fsdp2")


def test_a_refused_percent_is_echoed_as_typed():
    """``--headroom 100%`` said "headroom: 1 must be in [0, 1)": the value read, not the one
    typed, and a rule in interval notation. The line now quotes the percent as typed beside the
    value it reads as (interface.flags.as_typed: every option's refusal, ``--flag=VALUE`` and
    ``--set KEY=VALUE`` alike), and the headroom's rule in words; a value typed as a number is
    echoed as it was."""
    search = ["search", "--model", "llama3-8b", "--gpus", "8"]
    evaluate = ["evaluate", "--model", "llama3-8b", "--gpu", "H100-SXM", "--dp", "8"]
    runs = run_many(
        {
            "headroom": [*search, "--headroom", "100%"],
            "headroom=": [*search, "--headroom=100%"],
            "plain": [*search, "--headroom", "1"],
            "min mfu": [*search, "--min-mfu", "150%"],
            "set": [*evaluate, "--set", "offload_optimizer=150%"],
        }
    )
    rule = "(a fraction from 0 to 1, or a percent such as 40%)"
    headroom = f"--headroom: 100% (1) must be at least 0 and below 1 (100%) {rule}"
    assert refusal(runs["headroom"]) == headroom
    assert refusal(runs["headroom="]) == headroom
    assert refusal(runs["plain"]) == f"--headroom: 1 must be at least 0 and below 1 (100%) {rule}"
    assert refusal(runs["min mfu"]) == (
        "--min-mfu: 150% (1.5) must be in (0, 1] (a fraction: 0.4 is an MFU of 40%)"
    )
    assert refusal(runs["set"]) == (
        "--set offload_optimizer: 150% (1.5) must be a fraction from 0 to 1, or a percent such "
        "as 40%"
    )


def test_the_time_limit_has_one_json_key():
    """``search --json`` named its limit ``time_limit_s`` and ``rlhf-plan --json``
    ``time_limit_seconds``; both (and the per-stage frontier's) now say ``time_limit_seconds``,
    as their ``tables_seconds`` and ``solve_seconds`` beside it do."""
    runs = run_many(
        {
            "search": "search --model llama3-8b --gpus 8 --time-limit 20 --json".split(),
            "plan": "rlhf-plan --algorithm grpo --reward rule --model qwen2.5-7b --gpus 8 "
            "--time-limit 20 --json".split(),
        }
    )
    for name in ("search", "plan"):
        assert runs[name].returncode == 0, runs[name].stderr
        got = json.loads(runs[name].stdout)
        assert got["time_limit_seconds"] == 20, name
        assert "time_limit_s" not in got and {"tables_seconds", "solve_seconds"} <= got.keys()


def test_an_absurd_measured_step_is_refused_before_any_table(tmp_path):
    """``step_seconds = 1e9`` in a measurements file printed a residual table with an unaligned
    ``1000000000.000`` before the poor fit's refusal; ``step_seconds = true`` was echoed as
    Python's ``True``. Each is now refused before anything is printed, in one line naming the
    run and the value as the file writes it (a step above a day: interface.measurements_file
    STEP_LIMIT); the shipped file still calibrates."""
    shipped = Path(__file__).parent.parent / "scenarios" / "measurements-megatron-2021.toml"
    text = shipped.read_text()
    assert "step_seconds = 3.696" in text
    cases = (("huge", "1e9"), ("text", '"1e9"'), ("inf", "inf"), ("bool", "true"))
    for name, value in cases:
        (tmp_path / f"{name}.toml").write_text(
            text.replace("step_seconds = 3.696", f"step_seconds = {value}")
        )
    runs = run_many(
        {name: ["calibrate", str(tmp_path / f"{name}.toml")] for name, _ in cases}
        | {"shipped": ["calibrate", str(shipped)]}
    )
    limit = (
        "is above the limit of 86,400 seconds (a day; published steps take seconds (Megatron-LM "
        "2021, arXiv 2104.04473, Table 1: 3.7-14.5 s per step by its Eq. 3): a longer one is a "
        "misread measurement, not a step)"
    )
    where = f"measurements {tmp_path}"
    assert refusal(runs["huge"]) == f"{where}/huge.toml: run 1: step_seconds: 1,000,000,000 {limit}"
    assert refusal(runs["text"]) == f"{where}/text.toml: run 1: step_seconds: 1e9 {limit}"
    assert refusal(runs["inf"]) == f"{where}/inf.toml: run 1: step_seconds: inf {limit}"
    assert refusal(runs["bool"]) == (
        f"{where}/bool.toml: run 1: step_seconds true must be a positive number"
    )
    assert runs["shipped"].returncode == 0, runs["shipped"].stderr
    assert "7.5B on 128 GPUs        3.696" in runs["shipped"].stdout


def test_an_absurd_link_bandwidth_is_refused():
    """``--set scaleout_gbps=1e9`` (a petabyte per second per GPU) was taken, and the step came
    out with no communication time. A link or host bandwidth above 100× the fastest one of any
    part in the accelerator table (the MI355X's HBM, 8,000 GB/s: 800,000 GB/s) is refused in one
    line naming the key, the value and the bound (interface.cluster_inputs.max_gbps), evaluate
    and search alike; a real one still runs."""
    evaluate = ["evaluate", "--model", "llama3-8b", "--gpu", "H100-SXM", "--dp", "8"]
    runs = run_many(
        {
            "scaleout": [*evaluate, "--set", "scaleout_gbps=1e9"],
            "nvlink": [*evaluate, "--set", "nvlink_gbps=4,000,000"],
            "search": [
                "search",
                "--model",
                "llama3-8b",
                "--gpus",
                "8",
                "--set",
                "host_link_gbps=1e6",
            ],
            "real": [*evaluate, "--set", "scaleout_gbps=50"],
        }
    )
    bound = (
        "must be a bandwidth of at most 800,000 GB/s per GPU per direction (100× the fastest "
        "bandwidth in the accelerator table, the MI355X's 8,000 GB/s)"
    )
    assert refusal(runs["scaleout"]) == f"--set scaleout_gbps: 1,000,000,000 {bound}"
    assert refusal(runs["nvlink"]) == f"--set nvlink_gbps: 4,000,000 {bound}"
    assert refusal(runs["search"]) == f"--set host_link_gbps: 1,000,000 {bound}"
    assert runs["real"].returncode == 0, runs["real"].stderr
