"""What a new user compares across commands, each run in a fresh process: the pipeline bubble of
evaluate beside ``trainplan pipeline``'s equal-stage closed form, and the memory ``trainplan
gpus`` lists beside the capacity evaluate prints."""

from __future__ import annotations

import json

from tests.cli_runs import run_many

LLAMA70 = ["--model", "llama3-70b", "--gpu", "H100-SXM", "--dp", "2", "--tp", "4", "--pp", "8",
           "--seq-len", "8192", "--global-batch", "2048"]  # fmt: skip


def test_evaluate_bubble_says_why_it_is_not_the_closed_form():
    """Llama 3 70B at dp 2 × tp 4 × pp 8, b 1, B 2048: m = 2048 / 2 = 1024. Equal stages give
    (p − 1)/(m + p − 1) = 7/1031 = 0.68 % (``trainplan pipeline -p 8 -m 1024``); evaluate's
    bubble is the order run on each stage's own time (the last stage also holds the output layer:
    90.3 ms + 180.7 ms a micro-batch against 81.0 + 162.0 ms), 0.6 %, and says so beside the
    closed form; ``pipeline`` says it assumes equal stages."""
    done = run_many(
        {"e": ["evaluate", *LLAMA70], "p": ["pipeline", "-p", "8", "-m", "1024", "--width", "60"]}
    )
    assert done["e"].returncode == 0 and done["p"].returncode == 0
    lines = done["e"].stdout.splitlines()
    i = next(k for k, x in enumerate(lines) if x.startswith("Pipeline: bubble_fraction 0.6%"))
    assert lines[i + 1] == (
        "  the bubble is the schedule's order run on each stage's own time (the end stages also "
        "hold the embedding and the output layer); with equal stages, as trainplan pipeline "
        "assumes, (p − 1)/(v·m + p − 1) = 7/1,031 = 0.7%"
    )
    assert round(100 * 7 / 1031, 1) == 0.7
    assert "every stage the same time" in done["p"].stdout.splitlines()[0]
    assert "bubble_fraction 7/1031 = 0.7%" in done["p"].stdout


def test_gpus_lists_what_evaluate_starts_from_and_uses():
    """GB200: the vendor's nominal 186 GB; the driver's report 189,471 MiB = 189,471 × 2^20 =
    198,674,743,296 B = 198.67 GB; less the runtime reserve 2,585,527,296 B, 196,089,216,000 B
    = 196.09 GB, evaluate's "capacity (GB200, usable)". TPU v4 (the vendor's 32 GiB) in the same
    GB: 34.36 GB."""
    done = run_many(
        {
            "text": ["gpus"],
            "json": ["gpus", "--json"],
            "e": ["evaluate", "--model", "llama3-8b", "--gpu", "GB200", "--gpus", "8"],
        }
    )
    rows = {r["name"]: r for r in json.loads(done["json"].stdout)}
    gb200 = rows["GB200"]
    assert gb200["device_bytes"] == 189_471 * 2**20 == 198_674_743_296
    assert gb200["usable_bytes"] == 198_674_743_296 - gb200["runtime_reserve_bytes"]
    assert gb200["usable_bytes"] == 196_089_216_000
    row = next(x for x in done["text"].stdout.splitlines() if x.startswith("GB200 "))
    assert row.split()[1:5] == ["186", "GB", "198.67", "196.09"]
    tpu = next(x for x in done["text"].stdout.splitlines() if x.startswith("TPUv4 "))
    assert tpu.split()[1:5] == ["32", "GiB", "34.36", "31.67"]
    cap = next(x for x in done["e"].stdout.splitlines() if "capacity (GB200, usable)" in x)
    assert cap.split()[-2:] == ["196.09", "GB"]
