"""CLI of the four tabs: bad input is one line and exit code 2; text output fits 120 columns."""

import json

import pytest
from click.testing import CliRunner

import trainplan.interface.cli.tabs  # noqa: F401
from tests import cli_runs
from trainplan.interface.cli import cli
from trainplan.interface.cli.tabs import render_timeline
from trainplan.interface.tabs import pipeline_report
from trainplan.model.errors import InputError

BAD = [
    (["ckpt", "--layers", "9", "--every", "0"], "every"),
    (["ckpt", "--layers", "9", "--every", "3", "--step", "28"], "step"),
    (["ckpt", "--layers", "9", "--every", "3", "--labels", "names"], "labels"),
    (["pipeline", "--stages", "4", "--microbatches", "0"], "microbatches"),
    (["pipeline", "-p", "4", "-m", "6", "--schedule", "interleaved", "-v", "2"], "multiple"),
    (["pipeline", "-p", "4", "-m", "8", "--schedule", "zigzag"], "schedule"),
    (["pipeline", "-p", "4", "-m", "eight"], "microbatches"),
    (
        [
            "mfu",
            "--params",
            "-70e9",
            "--tokens",
            "4e6",
            "--step-seconds",
            "7",
            "--peak-tflops",
            "989",
        ],
        "params",
    ),
    (
        [
            "mfu",
            "--params",
            "70e9",
            "--tokens",
            "4e6",
            "--step-seconds",
            "-7",
            "--peak-tflops",
            "989",
        ],
        "--step-seconds",
    ),
    (["mfu", "--achieved-pflops", "-1", "--peak-tflops", "989"], "--achieved-pflops"),
    (
        [
            "mfu",
            "--params",
            "70e9",
            "--tokens",
            "4e6",
            "--step-seconds",
            "0.7",
            "--peak-tflops",
            "989",
            "--chips",
            "512",
        ],
        "--step-seconds",
    ),
    (["mfu", "--params", "70e9", "--tokens", "4e6", "--step-seconds", "7"], "peak"),
    (
        ["mfu", "--params", "70e9", "--tokens", "4e6", "--step-seconds", "7", "--gpu", "Z999"],
        "Z999",
    ),
    (["rlhf", "--algorithm", "trpo", "--policy-params", "70B"], "algorithm"),
    (["rlhf", "--algorithm", "ppo", "--policy-params", "70B", "--reward", "oracle"], "reward"),
    (
        ["rlhf", "--algorithm", "grpo", "--policy-params", "70B", "--decode-mfu", "4"],
        "--decode-mfu",
    ),
]


@pytest.mark.parametrize("args, word", BAD, ids=[" ".join(a[:3]) + "…" for a, _ in BAD])
def test_bad_input_one_line_exit_2(args, word):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and word in lines[0], lines


def test_mfu_arithmetic_line_as_the_seed_writes_it():
    result = CliRunner().invoke(
        cli,
        [
            "mfu",
            "--params",
            "70e9",
            "--tokens",
            "4,000,000",
            "--step-seconds",
            "7",
            "--peak-tflops",
            "989",
            "--chips",
            "512",
        ],
    )
    assert "6 · 70e9 · 4e6 ÷ (989e12 · 512 · 7 s) = 47.4%" in result.output


def test_mfu_causal_says_so():
    args = [
        "mfu",
        "--params",
        "540.35e9",
        "--tokens-per-second",
        "238.3e3",
        "--gpu",
        "TPUv4",
        "--chips",
        "6144",
        "--attention",
        "--layers",
        "118",
        "--hidden",
        "12288",
        "--seq-len",
        "2048",
        "--json",
    ]
    full = json.loads(CliRunner().invoke(cli, args).output)
    causal = json.loads(CliRunner().invoke(cli, [*args, "--causal"]).output)
    assert causal["attention"]["causal"] is True and "causal" in causal["attention"]["formula"]
    assert causal["attention"]["flops_per_token"] * 2 == full["attention"]["flops_per_token"]


@pytest.mark.parametrize(
    "p, m, schedule, v",
    [
        (4, 8, "1f1b", 1),
        (8, 64, "1f1b", 1),
        (16, 512, "gpipe", 1),
        (4, 8, "interleaved", 2),
        (2, 60, "1f1b", 1),
    ],
)
def test_text_timeline_fits_and_shows_bubble(p, m, schedule, v):
    lines = render_timeline(pipeline_report(p, m, schedule, v), 120)
    rows = [line for line in lines if line.startswith("stage ")]
    assert len(rows) % p == 0 and len(rows) // p <= 4  # one band of rows per stage, or a few
    assert all(len(line) <= 120 for line in lines)
    row = "".join(line.split("|", 1)[1] for line in rows if line.split("|")[0].split()[1] == "0")
    assert "." in row and "F" in row and ("B" in row or "#" in row)
    assert "idle (the bubble)" in " ".join(lines[-2:])  # the legend


def test_interleaved_text_timeline_labels_each_chunk_and_fits_the_width():
    """Interleaved 4 × 8, v = 2 at 80 columns: every pass is labelled with its micro-batch and
    its model chunk's letter (F0a … B7b), the rows wrap into bands headed by their start time,
    no line is wider than 80, and the legend says what a, b mean."""
    lines = render_timeline(pipeline_report(4, 8, "interleaved", 2), 80)
    assert all(len(line) <= 80 for line in lines)
    text = "\n".join(lines)
    for mb in range(8):
        for chunk in "ab":
            assert f"F{mb}{chunk}-" in text and f"B{mb}{chunk}=" in text
    assert [line.strip() for line in lines if "t = " in line][0] == "t = 0"
    assert "chunk c of stage i holds virtual stage c·4 + i" in " ".join(lines)
    one = render_timeline(pipeline_report(4, 8), 120)  # the README's transcript, unchanged
    assert one[0] == (
        "stage 0 |F0-F1-F2-F3-..................B0====F4-B1====F5-B2====F6-B3====F7-B4====...B5===="
        "...B6====...B7===="
    )


def test_pipeline_text_width_defaults_to_the_terminal():
    wide = CliRunner().invoke(cli, ["pipeline", "-p", "4", "-m", "8", "-v", "2",
                                    "--schedule", "interleaved"], env={"COLUMNS": "200"})  # fmt: skip
    narrow = CliRunner().invoke(cli, ["pipeline", "-p", "4", "-m", "8", "-v", "2",
                                      "--schedule", "interleaved"], env={"COLUMNS": "70"})  # fmt: skip
    assert max(map(len, narrow.output.splitlines()[5:])) <= 70
    assert max(map(len, wide.output.splitlines()[5:])) > 120


def test_ckpt_play_falls_back_to_plain_output():
    result = CliRunner().invoke(cli, ["ckpt", "-n", "9", "-k", "3", "--play", "--delay", "0.01"])
    assert result.exit_code == 0
    assert len([ln for ln in result.output.splitlines() if " held (no " in ln]) == 27


def test_ckpt_default_every_is_root_n():
    out = json.loads(CliRunner().invoke(cli, ["ckpt", "-n", "100", "--json"]).output)
    assert out["every"] == 10 and out["peak_held"] == 20


def test_ckpt_labels_by_inputs():
    out = json.loads(
        CliRunner()
        .invoke(cli, ["ckpt", "-n", "9", "-k", "3", "--labels", "inputs", "--step", "12", "--json"])
        .output
    )
    assert out["checkpoints"] == ["in1", "in4", "in7"]
    assert out["steps"][0]["recomputed"] == ["output"]


def test_charts(tmp_path):
    pytest.importorskip("matplotlib")
    png, gif, svg = tmp_path / "p.png", tmp_path / "c.gif", tmp_path / "h.svg"
    r1 = CliRunner().invoke(cli, ["pipeline", "-p", "4", "-m", "8", "--png", str(png)])
    r2 = CliRunner().invoke(
        cli, ["ckpt", "-n", "4", "-k", "2", "--gif", str(gif), "--chart", str(svg)]
    )
    assert r1.exit_code == r2.exit_code == 0
    assert png.stat().st_size > 1000 and gif.stat().st_size > 1000 and svg.stat().st_size > 1000


def test_missing_matplotlib_is_a_clear_error(monkeypatch, tmp_path):
    import builtins

    real = builtins.__import__

    def fake(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    result = CliRunner().invoke(
        cli, ["pipeline", "-p", "2", "-m", "2", "--svg", str(tmp_path / "x.svg")]
    )
    assert result.exit_code == 2 and "pip install -e '.[plot]'" in result.output


def test_pipeline_refuses_more_stages_than_it_draws_in_its_own_process():
    """``trainplan pipeline --stages 4000`` printed 4,007 lines (492 kB: one timeline row per
    stage) after 10 s of simulation. The timeline draws one row per stage, so stages are a
    count under a stated limit (model.units.LIMITS: 256, four times the most a published run
    uses, Megatron-LM's 1T at pp 64): above it one line naming the flag, the value and the
    limit with its reason, exit 2, nothing on stdout; at the limit the drawing is 256 rows."""
    assert cli_runs.refusal(
        cli_runs.trainplan("pipeline", "--stages", "4000", "--microbatches", "8")
    ) == (
        "--stages: 4,000 is above the limit of 256 stages (256; the pipeline timeline draws one "
        "row per stage, and published runs use at most 64, Megatron-LM's 1T (Narayanan et al. "
        "2021 Table 1))"
    )
    with pytest.raises(InputError, match="^stages: 1e9 is above the limit of 256 stages"):
        pipeline_report("1e9", 8)  # the page's /api/pipeline: 422 with this line
    done = cli_runs.trainplan("pipeline", "--stages", "256", "--microbatches", "1", "--width", "80")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("stage ")]
    assert (
        len(rows) == 256
        and rows[0].startswith("stage   0 |")
        and rows[-1].startswith("stage 255 |")
    )
