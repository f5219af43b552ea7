"""A new user's pass over the command line from a fresh clone, each call
run as a user runs it: its own ``trainplan`` process, all of them in parallel once per session
(:func:`tests.cli_runs.run_many`).

* ``trainplan`` alone prints its help, as ``--help`` does (exit 0), not ``Error: Usage: …``;
* ``128K``, ``64k``, ``4M`` are refused as ambiguous with both readings written out to paste;
  a number that is no number gets examples that fit the parameter;
* ``trainplan models`` prints the sources its help promises;
* a ``--set`` key and a price are refused under the flag the user typed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_runs import Done, refusal, run_many

EVAL70 = ["evaluate", "--model", "llama3-70b", "--tp", "4", "--pp", "8"]

CALLS: dict[str, list[str]] = {
    "bare": [],
    "help": ["--help"],
    "seq 128K": [*EVAL70, "--seq-len", "128K"],
    "seq 8K": [*EVAL70, "--seq-len", "8K"],
    "gpus 64k": ["search", "--model", "llama3-70b", "--gpus", "64k"],
    "batch 4M": [*EVAL70, "--global-batch", "4M"],
    "batch 1.5k": [*EVAL70, "--global-batch", "1.5k"],
    "seq abc": [*EVAL70, "--seq-len", "abc"],
    "gpus abc": ["search", "--model", "llama3-70b", "--gpus", "abc"],
    "params abc": ["evaluate", "--params", "abc"],
    "models": ["models"],
    "models json": ["models", "--json"],
    "set compile": [*EVAL70, "--dp", "2", "--gpu", "H100-SXM", "--set", "compile=maybe"],
    "set reserve": [*EVAL70, "--dp", "2", "--set", "memory_reserve_gib=-1"],
    "price abc": ["frontier", "--model", "llama3-70b", "--gpus", "64", "--gpu", "H100-SXM"]
    + ["--against", "price", "--gpu-hour-price", "H100-SXM=abc"],
    "hub id": ["search", "--model", "meta-llama/Meta-Llama-3-70B", "--gpus", "64"],
    "hub id far": ["evaluate", "--model", "org/zzzzqqq"],
    "one point": ["frontier", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM"]
    + ["--against", "gpus", "--png", "one.svg"],
    "epochs abc": ["rlhf", "--algorithm", "ppo", "--model", "llama3-8b", "--epochs", "x"],
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("user-pass")


@pytest.fixture(scope="module")
def runs(folder: Path) -> dict[str, Done]:
    return run_many(CALLS, cwd=folder)


def test_bare_trainplan_prints_the_help_and_exits_0(runs):
    """click 8.2+ raises a group's no-arguments help as a usage error (exit 2, on stderr), which
    the one-line handler printed as "Error: Usage: …"; now it is ``--help``'s text on stdout."""
    bare, helped = runs["bare"], runs["help"]
    assert bare.returncode == 0 and bare.stderr == ""
    assert bare.stdout == helped.stdout and bare.stdout.startswith("Usage: ")
    assert "Error" not in bare.stdout


@pytest.mark.parametrize(
    ("call", "line"),
    [
        # 128 × 1,024 = 131,072; 128 × 1,000 = 128,000
        ("seq 128K", "--seq-len: '128K' is ambiguous: write 131072 (128 × 1,024) or 128000"),
        # 8 × 1,024 = 8,192
        ("seq 8K", "--seq-len: '8K' is ambiguous: write 8192 (8 × 1,024) or 8000"),
        # 64 × 1,024 = 65,536 (a lower-case k is the same suffix)
        ("gpus 64k", "--gpus: '64k' is ambiguous: write 65536 (64 × 1,024) or 64000"),
        # 4 × 1,024² = 4 × 1,048,576 = 4,194,304
        ("batch 4M", "--global-batch: '4M' is ambiguous: write 4194304 (4 × 1,024²) or 4000000"),
        # 1.5 × 1,024 = 1,536
        ("batch 1.5k", "--global-batch: '1.5k' is ambiguous: write 1536 (1.5 × 1,024) or 1500"),
    ],
)
def test_a_k_or_m_suffix_is_refused_with_both_readings(runs, call, line):
    """``--seq-len 128K`` was "not a number (write e.g. … 70B or 1.5T)"; K = 1,000 or 1,024 is
    the user's choice, so both are written out as numbers to paste (one grammar everywhere)."""
    assert refusal(runs[call]) == line


@pytest.mark.parametrize(
    ("call", "line"),
    [
        ("seq abc", "--seq-len: 'abc' is not a number (write a number of tokens, e.g. 8192, "),
        ("gpus abc", "--gpus: 'abc' is not a number (write a number of GPUs, e.g. 8192, "),
        ("params abc", "--params: 'abc' is not a number (write e.g. 4e6, 4000000, 4,000,000, 70B"),
        ("epochs abc", "--epochs: 'x' is not a number (write a number of epochs, e.g. 4 or 16)"),
    ],
)
def test_the_examples_of_a_number_fit_the_parameter(runs, call, line):
    """The examples "70B or 1.5T" were offered for a sequence length and a GPU count: the examples now follow
    the parameter's limit (``model.units.LIMITS``): sizes in billions keep B and T."""
    assert refusal(runs[call]).startswith(line)
    if call != "params abc":
        assert "70B" not in refusal(runs[call])


def test_models_prints_each_row_with_its_source(runs):
    """The help and the README say "each row with its source": the text table had none; now a
    Sources section follows it, one line per model, as ``trainplan gpus`` prints."""
    import json

    rows = json.loads(runs["models json"].stdout)
    text = runs["models"].stdout
    assert runs["models"].returncode == 0 and "\nSources:\n" in text
    for r in rows:
        assert f"  {r['name']}: {r['source']}\n" in text


def test_a_set_key_and_a_price_are_refused_under_the_flag_typed(runs):
    """``compile: …`` and ``gpu_hour_price H100-SXM: …`` named internal keys. The reserve's
    bound is the H100-SXM's memory, its driver total 81,559 MiB / 1,024 = 79.6475 GiB, cut to 79.64 (2 places,
    as the tool prints GiB; cut, so a refused value is never below the bound shown)."""
    assert refusal(runs["set compile"]) == "--set compile: 'maybe' must be true or false"
    assert refusal(runs["set reserve"]) == (
        "--set memory_reserve_gib: -1 must be at least 0 GiB and below the H100-SXM's 79.64 GiB"
    )
    assert refusal(runs["price abc"]).startswith(
        "--gpu-hour-price H100-SXM: 'abc' is not a number (write e.g. 0.5, 4e6"
    )


def test_a_hugging_face_id_gets_the_catalogue_suggestion(runs):
    """``meta-llama/Meta-Llama-3-70B`` said only "looks like a path, but nothing is there"; its
    last part is matched against the catalogue as an unknown plain name is."""
    assert refusal(runs["hub id"]) == (
        "--model: 'meta-llama/Meta-Llama-3-70B' looks like a path, but nothing is there; "
        "catalogue names: trainplan models (did you mean llama3-70b, llama2-70b, llama3-405b?)"
    )
    assert refusal(runs["hub id far"]).endswith(
        "nothing is there; catalogue names: trainplan models"
    )


def test_a_frontier_of_one_point_says_one_point(runs, folder):
    """The chart's title read "(1 points)" where the text says "1 point" (matplotlib writes each
    text of an SVG as a comment before its glyphs)."""
    assert runs["one point"].returncode == 0, runs["one point"].stderr
    assert "1 point of" in runs["one point"].stdout
    svg = (folder / "one.svg").read_text()
    assert "Pareto frontier: step time against gpus (1 point)" in svg and "(1 points)" not in svg
