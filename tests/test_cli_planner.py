"""The planner CLI, ``trainplan evaluate`` (issue 2 items 7 and 10).

Happy paths run in-process through click's CliRunner. Bad inputs run through the console-script
entry point ``interface.cli.main`` (in-process, with ``sys.argv`` set), because that is where a
PlannerError becomes one line and exit code 2 (``run_guarded``); CliRunner calls the click group
directly and would see the exception instead. A few cases also run the installed ``trainplan``
script in a subprocess.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

import trainplan.interface.cli as cli_module
from trainplan.interface.cli import cli, main

cli_module.register_commands()

LLAMA = [
    "--model",
    "llama3-405b",
    "--gpu",
    "H100-SXM",
    "--tp",
    "8",
    "--pp",
    "16",
    "--dp",
    "128",
    "--seq-len",
    "8192",
    "--micro-batch",
    "1",
    "--global-batch",
    "2048",
]


def llama_with(flag: str, value: str) -> list[str]:
    """LLAMA with one option's value replaced."""
    args = list(LLAMA)
    args[args.index(flag) + 1] = value
    return args


def invoke(*args: str):
    result = CliRunner().invoke(cli, ["evaluate", *args], catch_exceptions=False)
    return result


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """Run the console-script entry point; (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["trainplan", "evaluate", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    code = exc.value.code
    return (0 if code is None else code), out, err


# ---------------------------------------------------------------------------------------------
# The plan


def test_evaluate_prints_a_full_plan():
    result = invoke(*LLAMA)
    assert result.exit_code == 0, result.output
    text = result.stdout
    for needle in (
        "llama3-405b",
        "16,384",
        "Memory per GPU",
        "weights",
        "gradients",
        "optimizer states",
        "model state",
        "activations",
        "recompute transient",
        "total",
        "capacity",
        "verdict: DOES NOT FIT",  # Megatron's fp32 main_grad on plain 1F1B (Meta interleaved)
        "peak: forward-backward",
        "framework megatron",
        "ZeRO stages",
        "Traffic per axis",
        "reduce-scatter",
        "nvlink",
        "scale-out",
        "bubble_fraction",
        "bubble_ratio",
        "Step:",
        "MFU",
        "HFU",
        "Assumptions:",
        "Defaults used",
    ):
        assert needle in text, needle
    # every axis of the traffic table
    for axis in ("dp", "tp", "pp", "cp", "ep"):
        assert any(line.startswith(axis + " ") for line in text.splitlines()), axis
    # ZeRO table: the stages Megatron-Core has (DDP and the distributed optimizer)
    for stage in "01":
        assert any(line.startswith(stage + " ") for line in text.splitlines()), stage


JSON_KEYS = {
    "model": ["name", "num_params", "num_active_params"],
    "layout": [
        "dp",
        "tp",
        "pp",
        "cp",
        "ep",
        "etp",
        "framework",
        "zero_stage",
        "recompute",
        "micro_batch_size",
        "global_batch_size",
        "num_microbatches",
        "schedule",
        "virtual_stages",
        "seq_len",
    ],
    "memory": [
        "weights_bytes",
        "gradients_bytes",
        "optimizer_bytes",
        "model_state_bytes",
        "activations_bytes",
        "embedding_activations_bytes",
        "recompute_transient_bytes",
        "buffers_bytes",
        "optimizer_step_bytes",
        "total_bytes",
        "steady_bytes",
        "capacity_bytes",
        "fits",
        "peak_phase",
    ],
    "pipeline": ["bubble_fraction", "bubble_ratio", "microbatches_in_flight"],
    "time": ["step_s", "mfu", "hfu"],
}
ZERO_ROW_KEYS = ["zero_stage", "model_state_bytes", "reduction", "dp_bytes_per_step"]
TRAFFIC_ROW_KEYS = ["axis", "collective", "group_size", "bytes_per_step", "link", "seconds"]


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def test_evaluate_json_has_every_key_of_issue_2():
    result = invoke(*LLAMA, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["num_gpus"] == 16384
    for group, keys in JSON_KEYS.items():
        for key in keys:
            assert key in out[group], f"{group}.{key}"
    assert [r["zero_stage"] for r in out["zero_table"]] == [0, 1]  # Megatron-Core's stages
    for row in out["zero_table"]:
        assert set(ZERO_ROW_KEYS) <= set(row)
    assert {r["axis"] for r in out["traffic"]} == {"dp", "tp", "pp", "cp", "ep"}
    for row in out["traffic"]:
        assert set(TRAFFIC_ROW_KEYS) <= set(row)
        assert _number(row["bytes_per_step"]) and _number(row["seconds"])


def test_evaluate_json_values():
    out = json.loads(invoke(*LLAMA, "--json").stdout)
    lay = out["layout"]
    assert (lay["dp"], lay["tp"], lay["pp"], lay["cp"], lay["ep"]) == (128, 8, 16, 1, 1)
    assert (lay["micro_batch_size"], lay["global_batch_size"], lay["seq_len"]) == (1, 2048, 8192)
    assert (
        lay["num_microbatches"] == 16 and lay["schedule"] == "1f1b" and lay["virtual_stages"] == 1
    )
    assert lay["zero_stage"] == 1 and lay["recompute"] == "none"  # the printed defaults
    assert out["model"]["name"] == "llama3-405b"
    assert out["model"]["num_params"] == out["model"]["num_active_params"] > 400e9
    mem = out["memory"]
    for key in JSON_KEYS["memory"][:-2]:
        assert _number(mem[key]) and mem[key] >= 0, key
    # an "80 GB" H100's driver reports 81,559 MiB (nvidia-smi -q, qx-h100.xml); Megatron's
    # profile keeps a 2,310,800,384 B runtime reserve (the driver's 480 MiB Reserved, CUDA
    # context 666,632,192 B, cuBLAS workspaces 67,109,888 B, the 1 GiB fragmentation allowance)
    reserve = 480 * 2**20 + 666_632_192 + 67_109_888 + 2**30
    assert reserve == 2_310_800_384
    assert mem["capacity_bytes"] == 81_559 * 2**20 - reserve and isinstance(mem["fits"], bool)
    assert mem["runtime_reserve_bytes"] == reserve
    # Megatron-Core's distributed optimizer: 2 B weights + 4 B fp32 main_grad whole, 12 B ÷ dp
    assert mem["weights_bytes"] * 2 == mem["gradients_bytes"]
    assert lay["framework"] == "megatron" and out["defaults_used"]["framework"] == "megatron"
    assert mem["fits"] == (mem["total_bytes"] <= mem["capacity_bytes"])
    # 1F1B on 16 stages of 7, 8 … 8, 7 layers, the embedding on the first and the output layer
    # on the last: the order's own bubble (model.pipeline_onef), under the closed form's 15/31
    # of the step and 15/16 of the micro-batches' time (stages alike; 5.253 → 5.177 s)
    ratio = out["pipeline"]["bubble_ratio"]
    assert ratio == pytest.approx(0.92405, abs=1e-5) and ratio < 15 / 16
    assert out["pipeline"]["bubble_fraction"] == pytest.approx(ratio / (1 + ratio), abs=1e-6)
    t = out["time"]
    assert t["step_s"] > 0 and 0 < t["mfu"] <= t["hfu"] <= 1
    assert out["defaults_used"]["zero_stage"] == 1


def test_gpus_matching_the_product_is_accepted():
    assert invoke(*LLAMA, "--gpus", "16384").exit_code == 0
    assert invoke(*LLAMA, "--gpus", "16,384").exit_code == 0


# ---------------------------------------------------------------------------------------------
# Numbers


@pytest.mark.parametrize(
    "text", ["70B", "7e10", "7e+10", "7e 10", "70,000,000,000", "70000000000", "0.07T"]
)
def test_params_number_forms(text):
    result = invoke(
        "--params", text, "--dp", "64", "--zero", "3", "--framework", "textbook", "--json"
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["model"]["num_params"] == 70 * 10**9
    assert out["zero_table"][3]["model_state_bytes"] == 16 * 70 * 10**9 // 64


def test_params_1_5T():
    out = json.loads(invoke("--params", "1.5T", "--framework", "textbook", "--json").stdout)
    assert out["model"]["num_params"] == 1_500_000_000_000
    assert out["memory"]["model_state_bytes"] == 16 * 1_500_000_000_000
    assert out["memory"]["activations_bytes"] is None  # size only: activations unavailable
    assert out["memory"]["activations_unavailable"]


@pytest.mark.parametrize("text", ["4e6", "4,000,000", "4e 6", "4e+6", "4000000"])
def test_global_batch_number_forms(text):
    result = invoke("--params", "70B", "--dp", "8", "--global-batch", text, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["layout"]["global_batch_size"] == 4_000_000
    assert out["layout"]["num_microbatches"] == 500_000


@pytest.mark.parametrize("text", ["8K", "8k", "4M"])
def test_k_and_m_suffixes_are_refused(monkeypatch, capsys, text):
    """The conventions name the suffixes B and T; "8K" would silently be 8000 tokens, not 8192:
    the refusal names both readings (8 × 1,024 = 8192 or 8000; 4 × 1,024² = 4194304)."""
    code, out, err = run_main(monkeypatch, capsys, "--params", "70B", "--seq-len", text)
    assert code == 2
    both = {"8K": "8192 (8 × 1,024) or 8000", "4M": "4194304 (4 × 1,024²) or 4000000"}
    assert f"is ambiguous: write {both.get(text, both['8K'])}" in err
    assert "Traceback" not in out + err


# ---------------------------------------------------------------------------------------------
# Bad input: exit code 2, one line naming the parameter, the value and the rule, no traceback


def _one_error_line(out: str, err: str) -> str:
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.startswith("Error")]
    assert len(lines) == 1, err
    return lines[0]


PLANNER_ERRORS = [
    # (case, extra args, substrings of the one line)
    ("product-not-gpus", [*LLAMA, "--gpus", "1000"], ["gpus", "16,384", "1,000"]),
    ("tp-not-dividing-heads", llama_with("--tp", "3"), ["tp", "3", "num_attention_heads", "128"]),
    ("tp-not-dividing-kv-heads", llama_with("--tp", "16"), ["tp", "16", "num_kv_heads", "8"]),
    (
        "tp-not-dividing-kv-heads-8b",
        ["--model", "llama3-8b", "--tp", "16"],
        ["tp", "16", "num_kv_heads", "8"],
    ),
    (
        "ep-not-dividing-experts",
        ["--model", "mixtral-8x7b", "--ep", "3", "--dp", "3", "--global-batch", "3"],
        ["ep", "3", "num_experts", "8"],
    ),
    (
        "ep-not-dividing-dp-cp",
        ["--model", "mixtral-8x7b", "--ep", "4", "--dp", "2", "--global-batch", "2"],
        ["ep", "4", "dp", "2"],
    ),
    (
        "batch-not-divisible",
        ["--model", "llama3-8b", "--dp", "3", "--global-batch", "100"],
        ["--global-batch", "100", "3"],
    ),
    (
        "batch-not-divisible-micro",
        ["--model", "llama3-8b", "--dp", "4", "--micro-batch", "3", "--global-batch", "16"],
        ["--global-batch", "16", "12"],
    ),
    ("unknown-model", ["--model", "llama3-8B-x"], ["llama3-8B-x", "did you mean", "llama3-8b"]),
    (
        "unknown-gpu",
        ["--model", "llama3-8b", "--gpu", "H1000"],
        ["H1000", "did you mean", "H100-SXM"],
    ),
    ("model-and-params", ["--model", "llama3-8b", "--params", "8B"], ["params", "model"]),
]


@pytest.mark.parametrize(
    ("case", "args", "needles"), PLANNER_ERRORS, ids=[c[0] for c in PLANNER_ERRORS]
)
def test_impossible_layouts_and_unknown_names(monkeypatch, capsys, case, args, needles):
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code == 2, (out, err)
    line = _one_error_line(out, err)
    assert err.strip() == line  # the whole of stderr is that one line
    assert out == ""
    for needle in needles:
        assert needle in line, (needle, line)


CLICK_ERRORS = [
    ("dp-zero", ["--model", "llama3-8b", "--dp", "0"], ["--dp", "0"]),
    ("seq-len-negative", ["--model", "llama3-8b", "--seq-len", "-5"], ["--seq-len", "-5"]),
    ("tp-negative", ["--model", "llama3-8b", "--tp", "-1"], ["--tp", "-1"]),
    ("micro-batch-zero", ["--model", "llama3-8b", "--micro-batch", "0"], ["--micro-batch", "0"]),
    ("global-batch-zero", ["--model", "llama3-8b", "--global-batch", "0"], ["--global-batch", "0"]),
    ("gpus-zero", ["--model", "llama3-8b", "--gpus", "0"], ["--gpus", "0"]),
    ("params-negative", ["--params", "-70B"], ["params", "-70,000,000,000"]),
    ("params-not-a-number", ["--params", "70Q"], ["--params", "70Q"]),
    (
        "global-batch-not-a-number",
        ["--params", "70B", "--global-batch", "4x6"],
        ["--global-batch", "4x6"],
    ),
    (
        "global-batch-not-whole",
        ["--params", "70B", "--global-batch", "2.5"],
        ["--global-batch", "2.5"],
    ),
    ("zero-stage-out-of-range", ["--model", "llama3-8b", "--zero", "5"], ["--zero", "5"]),
    ("recompute-unknown", ["--model", "llama3-8b", "--recompute", "some"], ["--recompute", "some"]),
]


@pytest.mark.parametrize(
    ("case", "args", "needles"), CLICK_ERRORS, ids=[c[0] for c in CLICK_ERRORS]
)
def test_unreadable_and_non_positive_values(monkeypatch, capsys, case, args, needles):
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code == 2, (out, err)
    line = _one_error_line(out, err)
    for needle in needles:
        assert needle in line, (needle, line)


def test_no_model_at_all(monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "--dp", "2")
    assert code == 2
    assert "model" in _one_error_line(out, err)


@pytest.mark.skipif(shutil.which("trainplan") is None, reason="console script not installed")
def test_console_script_subprocess():
    ok = subprocess.run(
        ["trainplan", "evaluate", *LLAMA], capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0 and "Memory per GPU" in ok.stdout
    for args in ([*LLAMA, "--gpus", "1000"], llama_with("--tp", "16"), ["--model", "nope-7b"]):
        bad = subprocess.run(
            ["trainplan", "evaluate", *args], capture_output=True, text=True, timeout=60
        )
        assert bad.returncode == 2, bad
        assert "Traceback" not in bad.stderr + bad.stdout
        assert len(bad.stderr.strip().splitlines()) == 1 and bad.stderr.startswith("Error")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--framework", "textbook", "--set", "time_model=roofline"], "time_model: roofline"),
        (["--schedule", "interleaved", "--pp", "1"], "schedule: interleaved needs pp ≥ 2"),
        (["--sequence-parallel", "--tp", "1"], "--sequence-parallel: "),
    ],
)
def test_an_option_that_would_do_nothing_is_refused(monkeypatch, capsys, args, message):
    """Options never silently ignored: the textbook profile keeps the single time model, a
    one-stage pipeline cannot interleave, sequence parallelism splits a tp group of at least 2.
    One line naming the parameter, exit 2."""
    code, out, err = run_main(monkeypatch, capsys, "--model", "llama3-8b", *args)
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and message in err, err
