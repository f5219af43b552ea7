"""Numbers that the one grammar (:func:`model.units.parse_number`) used to read wrong without a
word, each ``trainplan`` call its own process (:mod:`tests.cli_runs`) and the web API where it
takes the same parameter: a count's suffix on a parameter whose name gives its unit (``2T`` was
2e12 GB), bits read as bytes (``8Gb``), a byte unit on a count, a rate in lower case, a time's
unit in another case (``7MS`` was 7 ms), and the refusals of fractions that named no way to
write them (docs/guides/cli.md "Numbers")."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from tests.cli_runs import refusal, run_many
from tests.test_cli_first_hour46 import _api
from trainplan.model.units import parse_count, parse_number

FAITHFUL = "rlhf --algorithm ppo --model llama3-8b --json"
MFU = "mfu --params 70e9 --tokens 4e6 --gpu H100-SXM --chips 512 --step-seconds"
EVAL = "evaluate --model llama3-8b --gpus 16 --tp 8"
SHARE = "(a fraction, or a percent such as 40%)"


def test_a_count_suffix_on_a_parameter_with_a_unit_is_refused():
    """``--host-memory-gb 2T`` was 2·10^12 GB (the count suffix T multiplied the value given in
    GB); ``--step-seconds 7T`` 7·10^12 s. Each is refused naming what to write: 2TB is
    2 × 1,000 GB = 2,000 GB; 1T on TFLOP/s names 1TFLOP/s = 1 TFLOP/s."""
    runs = run_many(
        {
            "2T": f"{FAITHFUL} --host-memory-gb 2T".split(),
            "7T": f"{MFU} 7T".split(),
            "7B": f"{MFU} 7B".split(),
            "1T": "mfu --achieved-tflops-per-gpu 400 --peak-tflops 1T".split(),
            "50B": f"{EVAL} --set scaleout_gbps=50B".split(),
        }
    )
    assert refusal(runs["2T"]) == (
        "--host-memory-gb: '2T' is a count suffix, not a unit: write 2TB (2,000 GB) or 2000"
    )
    seconds = "write e.g. 2.5, 2.5s or 2500ms (the value is in s)"
    assert refusal(runs["7T"]) == f"--step-seconds: '7T' is a count suffix, not a unit: {seconds}"
    assert refusal(runs["7B"]) == f"--step-seconds: '7B' is a count suffix, not a unit: {seconds}"
    assert refusal(runs["1T"]) == (
        "--peak-tflops: '1T' is a count suffix, not a unit: write 1TFLOP/s (1 TFLOP/s) or 1"
    )
    assert refusal(runs["50B"]) == (
        "--set scaleout_gbps: '50B' is a count suffix, not a unit: write e.g. 400, 400GB/s or "
        "400Gb/s (bits: 50 GB/s) (the value is in GB/s)"
    )
    ((bad, line),) = _api("/api/mfu?params=70e9&tokens=4e6&gpu=H100-SXM&chips=512&step-seconds=7T")
    assert bad == 422 and line["error"].startswith(
        "step-seconds: '7T' is a count suffix, not a unit"
    )


def test_bits_on_a_size_and_bytes_on_a_count_are_refused():
    """``--set memory_reserve_gib=8Gb`` was read as 8 GiB (case folded): a capital prefix then
    a lowercase b is gigabits, refused on a size in bytes; ``400Gb/s`` on a bandwidth stays
    50 GB/s (400 / 8). ``--gpus 8GB`` was "ambiguous: write 8589934592" (B stripped as a
    count suffix, then G): it is a size in bytes, not a count."""
    runs = run_many(
        {
            "8Gb": f"{EVAL} --set memory_reserve_gib=8Gb".split(),
            "2Tb": f"{FAITHFUL} --host-memory-gb 2Tb".split(),
            "gpus": "evaluate --model llama3-8b --gpus 8GB".split(),
            "seq": "evaluate --model llama3-8b --gpus 8 --seq-len 8KB".split(),
            "batch": "evaluate --model llama3-8b --gpus 8 --global-batch 1MB".split(),
        }
    )
    assert refusal(runs["8Gb"]) == (
        "--set memory_reserve_gib: '8Gb' is bits (a lowercase b is a bit): write bytes, 8GB or "
        "8GiB, the value is in GiB"
    )
    assert refusal(runs["2Tb"]) == (
        "--host-memory-gb: '2Tb' is bits (a lowercase b is a bit): write bytes, 2TB or 2TiB, "
        "the value is in GB"
    )
    for key, flag, text in (
        ("gpus", "--gpus", "8GB"),
        ("seq", "--seq-len", "8KB"),
        ("batch", "--global-batch", "1MB"),
    ):
        assert refusal(runs[key]) == (
            f"{flag}: '{text}' is a size in bytes, not a count: write the number alone"
        )
    assert parse_number("400Gb/s", "nvlink_gbps") == 50


def test_a_rate_in_lower_case_and_a_time_in_another_case():
    """``400gb/s`` said "'gb/s' is no unit": it is bits or bytes, refused naming both.
    ``7MS`` and ``7Ms`` were 7 ms (case folded; Ms would be megaseconds): a time's unit is read
    only as written; µ (U+00B5) and μ (U+03BC) both write microseconds."""
    runs = run_many(
        {
            "gb/s": f"{EVAL} --set nvlink_gbps=400gb/s".split(),
            "MS": f"{MFU} 7MS".split(),
            "Ms": f"{MFU} 7Ms".split(),
        }
    )
    assert refusal(runs["gb/s"]) == (
        "--set nvlink_gbps: '400gb/s' is ambiguous: write 400Gb/s (bits) or 400GB/s (bytes); "
        "the value is in GB/s"
    )
    for text in ("MS", "Ms"):
        assert refusal(runs[text]) == (
            f"--step-seconds: '7{text}': a time's unit is written in its own case (s, ms, us or "
            "µs, min, h): write 7ms"
        )
    micro = Fraction(7, 10**6)
    assert parse_number("7µs", "step_seconds") == parse_number("7μs", "step_seconds") == micro
    assert parse_number("7us", "step_seconds") == micro


@pytest.mark.parametrize(
    ("text", "name", "value"),
    [("70B", "--params", 70 * 10**9), ("1.5T", "--tokens", 1_500_000_000_000)],
)
def test_count_suffixes_still_read_on_counts(text, name, value):
    """A count keeps its B and T suffixes (70B parameters, 1.5T tokens)."""
    assert parse_count(text, name) == value


def test_a_fractions_refusal_names_how_to_write_one():
    """``--engine-memory-fraction 100%`` said "must be in (0, 1): … a fraction from 0 to 1"
    (contradicting itself); ``--headroom 100%`` named no way to write a fraction;
    ``bandwidth_efficiency`` echoed 0% as "0.0"."""
    runs = run_many(
        {
            "engine": "rlhf --algorithm grpo --model qwen2.5-7b --engine-memory-fraction "
            "100%".split(),
            "headroom": "search --model llama3-8b --gpus 8 --headroom 100%".split(),
            "bandwidth": f"{FAITHFUL} --bandwidth-efficiency 0%".split(),
        }
    )
    assert refusal(runs["engine"]).startswith(
        f"--engine-memory-fraction: 100% (1) must be above 0 and below 1 {SHARE}: the share of each "
        "GPU's memory the rollout engine takes"
    )
    assert refusal(runs["headroom"]) == (
        "--headroom: 100% (1) must be at least 0 and below 1 (100%) (a fraction from 0 to 1, or a percent "
        "such as 40%)"
    )
    assert refusal(runs["bandwidth"]) == (
        "--bandwidth-efficiency: 0% (0) must be in (0, 1]: a fraction from 0 to 1, or a percent such "
        "as 40%"
    )


def test_the_help_of_a_pct_parameter_says_what_it_takes():
    """A ``_pct`` parameter is a percentage: 25 and 25% are a quarter, 0.25 is 0.25 %."""
    runs = run_many({"help": "mfu --help".split()})
    text = " ".join(runs["help"].stdout.split())
    assert "25 or 25% is a quarter; 0.25 is 0.25 %." in text
    assert parse_number("25%", "recomputed_flops_pct") == parse_number("25", "x") == 25


ROW = """[[accelerator]]
name = "X1"
like = "H100-SXM"
memory_gb = {memory}
memory_unit = "GB"
bf16_tflops = 989
dense = true
source = "a test's part"
status = "vendor"
nvlink_gbps = 450
nvlink_domain = 8
scaleout_gbps = {scaleout}
"""


def test_an_accelerator_file_reads_numbers_with_the_same_grammar(tmp_path):
    """``--gpu ./x.toml`` refused ``scaleout_gbps = "400Gb/s"`` ("must be a number"): a text
    value is read by the one grammar, so 400 Gb/s is 400 / 8 = 50 GB/s and "80GB" is 80 GB —
    the run equals the one with the plain numbers; ``400gbps`` is refused as ambiguous."""
    dirs = {}
    for key, memory, scaleout in (
        ("text", '"80GB"', '"400Gb/s"'),
        ("plain", "80", "50"),
        ("bad", "80", '"400gbps"'),
    ):
        dirs[key] = tmp_path / key
        dirs[key].mkdir()
        (dirs[key] / "x.toml").write_text(ROW.format(memory=memory, scaleout=scaleout))
    args = "evaluate --model llama3-8b --gpu ./x.toml --gpus 16 --tp 8 --json".split()
    runs = {key: run_many({key: args}, cwd=path)[key] for key, path in dirs.items()}
    assert runs["text"].returncode == 0, runs["text"].stderr
    assert json.loads(runs["text"].stdout) == json.loads(runs["plain"].stdout)
    assert refusal(runs["bad"]) == (
        "--gpu: './x.toml': scaleout_gbps: '400gbps' is ambiguous: write 400Gb/s (bits) or "
        "400GB/s (bytes); the value is in GB/s"
    )
