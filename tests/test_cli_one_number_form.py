"""Whole numbers in the one form the tool prints everywhere (``16,384``, ``4,000,000``), found
where a user's first hour met them without it, and help texts that said what the commands do
not do; each command its own process, as a user runs it."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli_runs import run_many

CALLS = {
    "evaluate": ["evaluate", "--model", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "128"],
    "models": ["models"],
    "gpus": ["gpus"],
    "gpus json": ["gpus", "--json"],
    "too small": ["search", "--model", "llama3-70b", "--gpus", "1", "--gpu", "H100-SXM"],
    "top": ["search", "--model", "llama3-8b", "--gpus", "1024", "--gpu", "H100-SXM", "--tp", "8",
            "--pp", "1", "--top", "2", "--json"],
    "search help": ["search", "--help"],
    "frontier help": ["frontier", "--help"],
    "models help": ["models", "--help"],
}  # fmt: skip
"""Each a second or two."""


@pytest.fixture(scope="module")
def runs():
    return run_many(CALLS)


def test_defaults_used_writes_its_numbers_as_the_layout_line_does(runs):
    """``Defaults used: … seq_len = 8192, global_batch_size = 2048`` under a layout line that
    says ``B 2,048, … s 8,192``: the catalogue's Llama 3 405B trains 8,192-token sequences in
    batches of 2,048 (Llama 3 paper, Table 4), printed once in the one form."""
    text = runs["evaluate"].stdout
    assert "B 2,048, m 16, s 8,192" in text
    line = next(x for x in text.splitlines() if x.startswith("Defaults used: "))
    assert "seq_len = 8,192" in line and "global_batch_size = 2,048" in line
    assert "micro_batch_size = 1" in line and "8192" not in line


def test_the_catalogue_tables_write_numbers_with_thousands(runs):
    """``trainplan models`` printed DeepSeek-V3's global batch 15360 and Llama 4 Scout's context
    262144; ``trainplan gpus`` the H100's dense FP8 1978.9 TFLOP/s where its source line says
    1,978.9, and TPU v5p's 6144-chip domain."""
    models = runs["models"].stdout
    assert "4,096      15,360" in next(
        x for x in models.splitlines() if x.startswith("deepseek-v3")
    )
    assert "262,144" in next(x for x in models.splitlines() if x.startswith("llama4-scout"))
    rows = {r["name"]: r for r in json.loads(runs["gpus json"].stdout)}
    assert (rows["H100-SXM"]["fp8_tflops"], rows["TPUv5p"]["nvlink_domain"]) == (1978.9, 6144)
    gpus = runs["gpus"].stdout.splitlines()
    h100 = next(x for x in gpus if x.startswith("H100-SXM ")).split()
    assert h100[:8] == ["H100-SXM", "80", "GB", "85.52", "83.21", "989.4", "1,978.9", "450"]
    assert "6,144" in next(x for x in gpus if x.startswith("TPUv5p ")).split()


def test_a_search_says_its_jobs_and_memory_in_the_one_form(runs):
    """Llama 3 70B on one H100: its least layout (ZeRO-0, full recomputation) needs
    1,291.09 GB, printed ``1291.09 GB`` (1,287.28 GB and Transformer Engine's placeholder weight
    gradients at tp 1, 3,812,622,336 B: model/terms/dummy_wgrads.py); a job's label read ``llama3-8b on 1024 × H100-SXM,
    B 2048`` in ``--json``'s ``job`` and above each of ``--top``'s answers."""
    done = runs["too small"]
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "the least any candidate needs is 1,291.09 GB (dp 1, tp 1, pp 1" in done.stderr
    answers = json.loads(runs["top"].stdout)["answers"]
    assert [a["job"] for a in answers] == ["llama3-8b on 1,024 × H100-SXM, B 2,048"] * 2


def test_help_texts_say_what_the_commands_do(runs):
    """search's and frontier's ``--cp-kind`` said the search tries ring, all-gather and ulysses
    by default; it tries PyTorch's two flavours too (model.context_parallel
    DEFAULT_SEARCHED_CP_KINDS), each under fsdp2. ``--time-limit`` said ``frontier --per-stage:
    120 unless given``, a default the per-stage frontier no longer has (it runs a count of
    searches, --per-stage-searches). ``models --help`` showed reStructuredText's double
    backticks."""
    for name in ("search help", "frontier help"):  # click wraps a line after a hyphen
        text = re.sub(r"-\s+", "-", " ".join(runs[name].stdout.split()))
        assert "default ring, all-gather, ulysses, pytorch-allgather and pytorch-alltoall" in text
        assert "120 unless given" not in text and "(default: no limit)" in text
    assert "``" not in runs["models help"].stdout
