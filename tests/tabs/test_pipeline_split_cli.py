"""The pipeline tab's split-backward schedules as a user runs them: ``trainplan pipeline`` in a
separate process (text and --json), bad input as one line (the web API: tests/web/test_api.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests import cli_runs
from trainplan.interface.cli.tabs import render_timeline
from trainplan.interface.tabs import pipeline_report


def trainplan(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_runs.trainplan(*args, timeout=120)


def test_zb_h1_text_and_json_in_a_process():
    """Qi et al. 2024 Table 2 at p = 4, T_F = T_B = T_W: ZB-H1's bubble 3 = (p − 1)(T_F + T_B −
    T_W), with its source; the --json carries the same figures."""
    out = trainplan("pipeline", "-p", "4", "-m", "8", "--schedule", "zb-h1")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "bubble          3 time units" in text
    assert "Qi et al. 2024 Table 2" in text
    assert "held per rank   4 4 4 4 chunk micro-batches" in text
    rows = [line for line in text.splitlines() if line.startswith("rank ")]
    assert len(rows) == 4 and all(len(line) <= 120 for line in rows)
    assert all(k in rows[0] for k in ("F0", "I0", "W0"))  # F, I, W told apart
    r = json.loads(
        trainplan("pipeline", "-p", "4", "-m", "8", "--schedule", "zb-h1", "--json").stdout
    )
    assert r["bubble_time_units"] == 3 and r["closed_form"]["value"] == 3
    assert r["chunks_held_per_stage"] == [4, 4, 4, 4] and r["w_pending_per_stage"] == [1, 2, 3, 4]
    assert {s["pass"] for s in r["timeline"][0]["slots"]} == {
        "forward",
        "backward_input",
        "backward_weight",
    }


def test_dualpipe_shows_both_directions_and_overlapped_blocks():
    r = pipeline_report(8, 20, "dualpipe", t_fb=2)
    assert r["bubble_time_units"] == 3 == r["closed_form"]["value"]  # (8/2 − 1)(2 + 2 − 3)
    assert r["chunks_held_per_stage"] == [9] * 8 and r["parameter_copies"] == 2
    lines = render_timeline(r, 120)
    assert len(lines) == 10 and all(len(line) <= 120 for line in lines)
    body = "".join(lines[:-2])
    assert "&" in body  # overlapped F&B blocks
    assert any(c in body for c in "fbiw") and "F" in body  # both directions
    slots = [s for row in r["timeline"] for s in row["slots"]]
    assert {s.get("direction", 0) for s in slots} == {0, 1}
    assert any(s.get("overlapped") for s in slots)


@pytest.mark.parametrize(
    "args, word",
    [
        (
            ["--schedule", "dualpipe", "--framework", "megatron"],
            "dualpipe does not run under framework megatron",
        ),
        (
            ["--schedule", "zb-h2", "--framework", "fsdp2"],
            "zb-h2 does not run under framework fsdp2",
        ),
        (["--schedule", "zb-h1", "--backward-ratio", "2"], "--backward-ratio"),
        (["--schedule", "zb-h1", "--t-fb", "2"], "--t-fb"),
        (["--schedule", "1f1b", "--t-w", "1"], "--t-w"),
        (["--schedule", "dualpipe", "--t-fb", "1"], "--t-fb: 1 must be between"),
        (["--schedule", "zb-v", "-v", "3"], "--virtual-stages: 3 must be 2"),
        (["--schedule", "dualpipe", "-p", "3"], "--stages: 3 must be even"),  # pp as typed
        (["--schedule", "zb-h1", "--framework", "nemo"], "framework: 'nemo'"),
    ],
)
def test_refusals_are_one_line(args, word):
    base = ["pipeline", "-p", "4", "-m", "8"]
    if "-p" in args:
        base = ["pipeline", "-m", "8"]
    out = trainplan(*base, *args)
    assert out.returncode == 2, out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and word in lines[0], lines


def test_frameworks_that_run_it():
    r = pipeline_report(4, 8, "zb-v", framework="fsdp2")
    assert r["frameworks"] == ["fsdp2", "textbook"]
    assert any("ScheduleZBVZeroBubble" in i for i in r["implementations"])
