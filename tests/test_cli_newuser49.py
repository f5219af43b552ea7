"""A new user's leftovers, each ``trainplan`` call its own process (:mod:`tests.cli_runs`): an
absurd rate in a GPU file or ``--peak-tflops``, a per-stage frontier past its time limit with no
note, a framework echoed lowercased, a per-stage search cut before any base layout."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import refusal, run_many, trainplan

FLOPS_WHY = "100× the fastest FLOP rate in the accelerator table, the MI355X's 5,032 TFLOP/s"
"""The FLOP-rate bound's reason: 100 × the MI355X's 5,032 TFLOP/s dense FP8
(topology/accelerators.toml, AMD Instinct MI355X datasheet), the table's fastest rate."""
LINK_WHY = "100× the fastest bandwidth in the accelerator table, the MI355X's 8,000 GB/s"
"""The bandwidth bound's reason: 100 × the MI355X's 8 TB/s HBM, the table's fastest."""


def _part(tmp_path, name: str, lines: str) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'[[accelerator]]\nbase = "H100-SXM"\nname = "H100-{name}"\nsource = "typo"\n{lines}\n'
    )
    return path.name  # run in tmp_path: the line quotes the name whole


def test_an_absurd_rate_in_a_gpu_file_or_override_is_refused(tmp_path):
    """``bf16_tflops = 1e9`` in a ``--gpu`` file gave an MFU of 0.0 % and a step with no
    computation; ``nvlink_gbps = 1e7`` there was taken though ``--set nvlink_gbps=1e7`` is
    refused; ``--peak-tflops 1e9`` gave an MFU of 0.0 %. One bound now holds every rate a user
    writes (topology.rate_bounds): 100 × the table's fastest bandwidth, 100 × 8,000 GB/s =
    800,000 GB/s (800 TB/s for ``hbm_tbps``), and 100 × its fastest FLOP rate, 100 × 5,032 =
    503,200 TFLOP/s; a refusal names the key, the value as written and the bound. A real part
    file and a real peak still run."""
    big = _part(tmp_path, "big", "bf16_tflops = 1e9")
    fp8 = _part(tmp_path, "fp8", "fp8_tflops = 6e5")
    nv = _part(tmp_path, "nv", "nvlink_gbps = 1e7")
    hbm = _part(tmp_path, "hbm", 'hbm_tbps = 900\nbandwidth_source = "typo"')
    ok = _part(tmp_path, "ok", "bf16_tflops = 900")
    evaluate = ["evaluate", "--model", "llama3-8b", "--dp", "8"]
    mfu = ["mfu", "--params", "70B", "--tokens", "4M", "--step-seconds", "7", "--chips", "256"]
    runs = run_many(
        {
            "big": [*evaluate, "--gpu", big],
            "fp8": [*evaluate, "--gpu", fp8],
            "nv": [*evaluate, "--gpu", nv],
            "hbm": ["gpus", "--file", hbm],
            "ok": [*evaluate, "--gpu", ok, "--json"],
            "peak": [*mfu, "--peak-tflops", "1e9"],
            "peak json": [*mfu, "--peak-tflops", "1,000,000", "--json"],
            "mfu file": [*mfu, "--gpu", big],
            "real peak": [*mfu, "--peak-tflops", "2000"],
        },
        cwd=tmp_path,
    )
    # the value echoed as every refused number is (model.units.shown_number): TOML reads 1e9 as
    # the float 1000000000.0, which was echoed as Python writes it
    assert refusal(runs["big"]) == (
        f"--gpu: '{big}': key 'bf16_tflops' must be at most 503,200 TFLOP/s ({FLOPS_WHY}), "
        "got 1,000,000,000"
    )
    assert refusal(runs["fp8"]) == (
        f"--gpu: '{fp8}': key 'fp8_tflops' must be at most 503,200 TFLOP/s ({FLOPS_WHY}), "
        "got 600,000"
    )
    assert refusal(runs["nv"]) == (
        f"--gpu: '{nv}': key 'nvlink_gbps' must be at most 800,000 GB/s ({LINK_WHY}), "
        "got 10,000,000"
    )
    assert refusal(runs["hbm"]) == (
        f"--file: '{hbm}': key 'hbm_tbps' must be at most 800 TB/s ({LINK_WHY}), got 900"
    )
    assert runs["ok"].returncode == 0, runs["ok"].stderr
    assert json.loads(runs["ok"].stdout)["gpu"]["name"] == "H100-ok"
    peak = f"must be at most 503,200 TFLOP/s per chip ({FLOPS_WHY})"
    assert refusal(runs["peak"]) == f"--peak-tflops: 1e9 {peak}"
    assert refusal(runs["peak json"]) == f"--peak-tflops: 1,000,000 {peak}"
    assert refusal(runs["mfu file"]).startswith(f"--gpu: '{big}': key 'bf16_tflops' must be")
    # 6 · 70e9 · 4e6 / (2,000e12 · 256 · 7 s) = 1.68e18 / 3.584e18 = 46.9 %
    assert runs["real peak"].returncode == 0, runs["real peak"].stderr
    assert "= 46.9%" in runs["real peak"].stdout


def test_the_per_stage_frontier_says_its_time_limit_was_passed():
    """``frontier --per-stage --time-limit 1`` ran some seconds (its first per-stage search is
    given at least 1 s, optimizer.per_stage_frontier.Budget.time_limit) and said nothing of the
    limit it passed, where ``search`` and ``frontier`` print a note. It now says the limit was
    passed and why (interface.search_notes.per_stage_limit_notes), text and JSON alike, naming
    the start-up the limit counted (``startup_seconds``) beside the frontier's own seconds."""
    args = ["frontier", "--per-stage", "--model", "llama3-70b", "--gpus", "64", "--time-limit"]
    # one at a time: two CP-SAT runs side by side on a small machine may read no answer in 1 s
    runs = {"text": trainplan(*args, "1"), "json": trainplan(*args, "1", "--json")}
    for done in runs.values():
        if done.returncode == 1 and "time limit" in done.stdout + done.stderr:
            # a machine busy with other tests: CP-SAT read no point within the limit
            pytest.skip("CP-SAT read no answer within 1 s on this loaded machine")
    assert runs["text"].returncode == 0, runs["text"].stderr
    assert runs["json"].returncode == 0, runs["json"].stderr
    got = json.loads(runs["json"].stdout)
    notes = [n for n in got["notes"] if "time limit" in n]
    assert len(notes) == 1, got["notes"]
    # the limit counts the command's start-up (startup_seconds) and the frontier's own seconds
    if notes[0].startswith("the time limit of 1 s was passed ("):
        assert got["startup_seconds"] + got["seconds"] > 1, got
        spent = f"({got['startup_seconds']:.2f} s of start-up + {got['seconds']:.2f} s of the "
        assert spent in notes[0], notes[0]
    else:
        assert notes[0].startswith("the time limit cut the cost tables"), notes[0]
    assert "Note: the time limit " in runs["text"].stdout


def test_a_name_is_echoed_as_typed():
    """``pipeline --framework Bogus``, ``mfu --recompute Bogus`` and ``ckpt --labels Bogus``
    said ``'bogus' …``: the value lowercased. Each is now echoed as typed
    (interface.tab_values.choice_word); a name in another case still runs."""
    base = ["pipeline", "--stages", "4", "--microbatches", "8", "--framework"]
    mfu = ["mfu", "--params", "70B", "--tokens", "4M", "--step-seconds", "7", "--chips", "512"]
    ckpt = ["ckpt", "--layers", "9", "--every", "3", "--labels"]
    runs = run_many(
        {
            "bogus": [*base, "Bogus"],
            "case": [*base, "FSDP2"],
            "recompute": [*mfu, "--gpu", "H100-SXM", "--recompute", "Bogus"],
            "labels": [*ckpt, "Bogus"],
            "labels case": [*ckpt, "Inputs"],
        }
    )
    assert refusal(runs["bogus"]) == (
        "--framework: 'Bogus' is not one of megatron, deepspeed, fsdp2, textbook"
    )
    assert runs["case"].returncode == 0, runs["case"].stderr
    assert refusal(runs["recompute"]) == (
        "--recompute: 'Bogus' must be one of none, selective, full"
    )
    assert refusal(runs["labels"]) == "--labels: 'Bogus' must be one of outputs, inputs"
    assert "(checkpoints: in1, in4, in7)" in runs["labels case"].stdout


def test_a_per_stage_search_cut_before_any_base_layout_says_so():
    """``search --per-stage --time-limit 0.01`` on Llama 3 70B and 256 H100s spends the limit on
    the uniform search and searches no base layout per stage; it printed "CP-SAT 0.00 s over 0
    base layout(s)", "no split is faster by more than 0 ns" and "no per-stage plan is faster
    than the uniform one", none of which it searched. It now says the time limit ended the
    search before any base layout, and ``gap_s`` is null (no bound), text and JSON alike."""
    args = "search --per-stage --model llama3-70b --gpus 256 --time-limit 0.01".split()
    runs = run_many({"text": args, "json": [*args, "--json"]})
    text = runs["text"].stdout
    assert runs["text"].returncode == 0, runs["text"].stderr
    ps = json.loads(runs["json"].stdout)["per_stage"]
    assert (ps["shapes"], ps["gap_s"], ps["status"]) == ([], None, "feasible")
    assert "the time limit ended the search before any base layout was searched" in text
    assert "over 0 base layout(s)" not in text and "more than 0 ns" not in text
    assert "no base layout was searched per stage before the time limit" in text


def test_a_sweeps_absurd_what_if_rate_is_refused(tmp_path):
    """``[what_if] peak_flops = [1e6]`` made an H100 of 989,400,000 TFLOP/s and swept it (MFU
    0.0 %); ``nvlink_bandwidth = [1e6]`` likewise. Such a point is now refused by the rule a
    part file is held to (topology.rate_bounds.rate_over_bound: 100 × the MI355X's 5,032
    TFLOP/s and 8,000 GB/s), in the sweep's table of refusals; a real what-if still runs."""
    grid = (
        'description = "x"\nobjective = "step-time"\n[sweep]\nmodel = ["llama3-8b"]\n'
        'gpu = ["H100-SXM"]\ngpus = [8]\n[what_if]\n'
    )
    for name, what in (("flops", "peak_flops = [1e6]"), ("nvlink", "nvlink_bandwidth = [1e6]")):
        (tmp_path / f"{name}.toml").write_text(grid + what + "\n")
    (tmp_path / "real.toml").write_text(grid + "peak_flops = [2]\n")
    runs = run_many(
        {
            name: ["sweep", f"{name}.toml", "--out", f"{name}.parquet", "--json"]
            for name in ("flops", "nvlink", "real")
        },
        cwd=tmp_path,
    )
    # 989.4 TFLOP/s × 1e6 = 989,400,000 TFLOP/s; NVLink 450 GB/s × 1e6 = 450,000,000 GB/s
    expected = {
        "flops": "what_if peak_flops: ×1e+06 of the H100-SXM: 989,400,000 TFLOP/s is above "
        f"503,200 TFLOP/s ({FLOPS_WHY})",
        "nvlink": "what_if nvlink_bandwidth: ×1e+06 of the H100-SXM: 450,000,000 GB/s is above "
        f"800,000 GB/s ({LINK_WHY})",
    }
    for name, line in expected.items():
        got = json.loads(runs[name].stdout)
        assert got["statuses"] == {"error": 1}, name
        assert got["errors"][0]["example"] == line
    real = json.loads(runs["real"].stdout)
    assert real["statuses"] == {"optimal": 1}, real
