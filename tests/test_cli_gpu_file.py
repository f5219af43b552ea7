"""``--gpu PATH.toml`` as a user runs it, each command its own process: a part the table lacks,
described in a file (:mod:`topology.accelerator_file`), planned with wherever ``--gpu`` is
taken, shown by ``trainplan gpus --file``, its figures' file and source printed; bad files
refused in one line naming ``--gpu``, the value and the rule (exit 2, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runs import refusal, run_many
from trainplan.api import evaluate

ROOT = Path(__file__).resolve().parents[1]
A3 = str(ROOT / "scenarios" / "gpus" / "h100-a3-high.toml")
GOOD = '[[accelerator]]\nbase = "H100-SXM"\nname = "H100-600W"\nbf16_tflops = 900\nsource = "our measurement"\n'  # fmt: skip
BAD = {
    "missing": (None, "' names a file describing an accelerator; nothing is there"),
    "syntax": (
        "[[accelerator]\nbase = 1\n",
        "': not valid TOML (Expected ']]' at the end of an array declaration (at line 1, column 14))",
    ),  # fmt: skip
    "unknown key": (GOOD + "tflops = 3\n", "': unknown key 'tflops' (allowed: name, memory_gb,"),
    "not positive": (
        GOOD.replace("900", "-900"),
        "': key 'bf16_tflops' must be positive, got -900",
    ),  # fmt: skip
    "zero": (
        GOOD + "nvlink_domain = 0\n",
        "': key 'nvlink_domain' must be a positive whole number, got 0",
    ),  # fmt: skip
    "base unknown": (
        GOOD.replace('"H100-SXM"', '"H100-SXMM"'),
        "': base 'H100-SXMM' is not in the accelerator table; did you mean H100-SXM",
    ),  # fmt: skip
    "two": (
        GOOD + GOOD.replace("600W", "700W"),
        "' holds 2 [[accelerator]] tables; a file describes one part (give each its own file)",
    ),  # fmt: skip
    "no source": (
        GOOD.replace('source = "our measurement"\n', ""),
        "': missing required key 'source' (where its figures come from)",
    ),  # fmt: skip
    "no like": (
        '[[accelerator]]\nname = "Z"\nmemory_gb = 9\nmemory_unit = "GB"\nbf16_tflops = 9\n'
        'dense = true\nsource = "s"\nstatus = "vendor"\n',
        "': missing key 'like' (or 'base'): the catalogue part whose generation's calibrated efficiencies",
    ),  # fmt: skip
    "derating dropped": (
        '[[accelerator]]\nbase = "H100-96GB-500W"\nlike = "H100-SXM"\nname = "U"\nsource = "s"\n',
        "': base H100-96GB-500W runs its tensor cores at 0.896 of its rated peak under its power limit",
    ),  # fmt: skip
    "power only": (
        GOOD.replace("bf16_tflops = 900\n", 'power_w = 500\npower_source = "cap"\n'),
        "': power_w 500 is shown, not read by the time model (it runs at the rated bf16_tflops)",
    ),  # fmt: skip
    "too large": (
        GOOD.replace("900", "1e300"),
        "': key 'bf16_tflops' must be at most 1e+09 in its unit (no accelerator comes near it), got 1e+300",
    ),  # fmt: skip
    # 2 GB = 1.86 GiB is below the 2.50 GiB runtime reserve (2,689,336,320 B: the driver's
    # 841 MiB + CUDA context + cuBLAS workspaces + fragmentation allowance,
    # model.frameworks.DEFAULT_RUNTIME_RESERVE_BYTES): the line names memory_gb, the key written,
    # not memory_reserve (DeviceSpec's own check, which a user never wrote)
    "tiny memory": (
        GOOD + "memory_gb = 2\n",
        "': memory_gb 2 (GB) must be above the 2.50 GiB every process holds before the model "
        "(driver, CUDA context, cuBLAS workspaces, fragmentation allowance: "
        "model.hardware.runtime_reserve_for)",
    ),  # fmt: skip
}
"""Each bad file's text (None: no file) and the end of the line refusing it, after
``--gpu: 'PATH``."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every command of this file, each its own process, run together."""
    tmp = tmp_path_factory.mktemp("gpu-file")
    paths = {}
    for name, (text, _) in BAD.items():
        paths[name] = tmp / f"{name.replace(' ', '-')}.toml"
        if text is not None:
            paths[name].write_text(text)
    good = tmp / "h100-600w.toml"
    good.write_text(GOOD)
    grid = tmp / "grid.toml"
    grid.write_text(
        f'model = "llama3-8b"\ncommand = "evaluate"\n[layout]\ndp = 8\nzero_stage = 3\n'
        f'recompute = "full"\n'
        f'[sweep]\ngpu = ["H100-SXM", "{A3}"]\ngpus = [8]\n'
    )
    calls = {f"bad {name}": ("evaluate", "--model", "llama3-8b", "--gpu", str(p)) for name, p in paths.items()}  # fmt: skip
    part = f"--gpu {good}"
    said = {
        "gpus file": f"gpus --file {A3}",
        "gpus file json": f"gpus --file {A3} --json",
        "gpus bad file": f"gpus --file {paths['unknown key']}",
        "evaluate": f"evaluate --model llama3-8b {part} --dp 8",
        "evaluate json": f"evaluate --model llama3-8b --gpu {A3} --dp 8 --json",
        "mfu": f"mfu --params 70e9 --tokens 4e6 --step-seconds 7 --chips 512 {part}",
        "search": f"search --model llama3-8b --gpus 8 --gpu {A3} --gpu H100-SXM --objective cost "
        "--tokens 1e9 --gpu-hour-price H100-A3-High=2,H100-SXM=3 --json",
        "frontier": f"frontier --model llama3-8b --gpus 8 {part} --json",
        "rlhf": f"rlhf --algorithm grpo --policy-params 7e9 --reward rule {part} --json",
        "sweep": f"sweep {grid}",
    }  # the paths hold no spaces (pytest's tmp_path)
    calls |= {name: tuple(line.split()) for name, line in said.items()}
    return run_many(calls, cwd=tmp), paths, tmp


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_file_is_one_line_naming_gpu_the_value_and_the_rule(runs, name):
    done, paths, _ = runs
    line = refusal(done[f"bad {name}"])
    assert line.startswith(f"--gpu: '{paths[name]}" + BAD[name][1]), line


def test_gpus_file_shows_the_part_with_its_sources(runs):
    """The table's row of the part, the file and base it comes from, the keys the file gives,
    the catalogue part whose per-part rates it takes, and every source."""
    done = runs[0]
    text = done["gpus file"].stdout
    assert done["gpus file"].returncode == 0, done["gpus file"].stderr
    row = next(line for line in text.splitlines() if line.startswith("H100-A3-High"))
    # the vendor's 80 GB, the H100's driver report 81,559 MiB = 85.52 GB, usable 83.21 GB
    assert row.split()[:10] == ["H100-A3-High", "80", "GB", "85.52", "83.21", "989.4", "1,978.9",
                                "450", "8", "12.5"]  # fmt: skip
    assert (
        f"figures from: {A3} (base H100-SXM; the file gives name, scaleout_gbps, source, status)"
        in text
    )
    assert "curves): the H100-SXM's: H100 generation" in text
    assert "  H100-A3-High: scaleout_gbps: Google Cloud, Compute Engine" in text
    (row,) = json.loads(done["gpus file json"].stdout)
    assert (row["scaleout_gbps"], row["file"], row["like"]) == (12.5, A3, "H100-SXM")
    line = refusal(done["gpus bad file"])
    assert line.startswith(f"--file: '{runs[1]['unknown key']}': unknown key 'tflops'")


def test_evaluate_prints_where_the_figures_come_from(runs):
    done, _, tmp = runs
    text = done["evaluate"].stdout
    assert done["evaluate"].returncode == 0, done["evaluate"].stderr
    assert "on 8 × H100-600W" in text
    assert (
        f"  - accelerator H100-600W: figures from: {tmp / 'h100-600w.toml'} (bf16_tflops: our "
        "measurement; the other figures the H100-SXM's: NVIDIA H100" in text
    )
    d = json.loads(done["evaluate json"].stdout)
    assert (d["gpu"]["name"], d["gpu"]["file"], d["gpu"]["part"]) == (
        "H100-A3-High",
        A3,
        "H100-SXM",
    )


def test_every_command_taking_gpu_takes_a_file(runs):
    """mfu divides by the file's peak (6 · 70e9 · 4e6 / (900e12 · 512 · 7) = 52.1 %); search
    prices the part by its own name (8 GPUs in one node never use the NIC, so both parts take
    the same step, and $2 an hour beats $3); frontier, rlhf and a sweep name the part."""
    done = runs[0]
    for name in ("mfu", "search", "frontier", "rlhf", "sweep"):
        assert done[name].returncode == 0, (name, done[name].stderr[-2000:])
    assert "6 · 70e9 · 4e6 ÷ (900e12 · 512 · 7 s) = 52.1%" in done["mfu"].stdout
    assert 6 * 70e9 * 4e6 / (900e12 * 512 * 7) == pytest.approx(0.5208, abs=1e-4)
    s = json.loads(done["search"].stdout)
    assert s["gpu"]["name"] == "H100-A3-High" and s["price_per_hour"] == 8 * 2.0
    f = json.loads(done["frontier"].stdout)
    assert {p["gpu"] for p in f["points"]} == {"H100-600W"}
    r = json.loads(done["rlhf"].stdout)
    assert "H100-600W" in json.dumps(r)
    import pandas as pd

    rows = pd.read_parquet(runs[2] / "grid.parquet")
    assert list(rows["part"]) == ["H100-SXM", "H100-A3-High"] and list(rows["gpu"])[1] == A3
    assert rows["step_s"][0] == rows["step_s"][1]  # one node: the NIC carries nothing


def test_a_calibration_on_a_file_part_applies_to_it(tmp_path):
    """A calibration fitted on the part a file describes names it by its path (``gpu`` as the
    measurements gave it) and applies to that part: the GEMM efficiency is the file's."""
    cal = tmp_path / "cal.toml"
    cal.write_text(f'gpu = "{A3}"\n[cluster]\ngemm_efficiency = 0.61\n')
    est = evaluate(model="llama3-8b", gpu=A3, dp=8, global_batch_size=64, calibration=str(cal))
    assert est.options.roofline is not None and est.options.roofline.gemm_efficiency == 0.61
