"""What a new user met in the first hour, command by command, each run as a user runs it: its own
``trainplan`` process (text and ``--json`` where both apply), all of them in parallel once per
session (:func:`tests.cli_runs.run_many`).

* one grammar for numbers and lists: a comma only groups thousands (``16,384`` is one number;
  ``4,0``, ``1,00``, ``16,38``, ``2048,4096`` are refused); several values are given by repeating
  the option, a TOML array, or ``;`` (``64;128``); a range ``lo..hi``;
* a folder named like a catalogue model does not replace it (``./name`` reads it);
* bad input and broken output are one line, never a traceback;
* options are taken, refused or said — never dropped (a second ``--gpu``, ``--tokens`` beside
  step time, a price given twice, MTP counted twice, a batch of one micro-batch);
* contradictions are named as such (exit 2), not reported as "no layout" (exit 1);
* output people can read (bounded echoes, dollars, "Did you mean").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.cli_runs import Done, refusal, run_many

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "tests" / "data" / "hf"
LLAMA8 = ["--model", "llama3-8b"]
SEARCH8 = ["search", *LLAMA8, "--gpu", "H100-SXM"]


def _files(where: Path) -> None:
    """The inputs the calls below read, written into ``where`` (the processes' working folder)."""
    folder = where / "llama3-8b"  # as `huggingface-cli download … --local-dir llama3-8b` leaves it
    folder.mkdir()
    config = json.loads((HF / "llama3-8b" / "config.json").read_text())
    shutil.copy(HF / "llama3-8b" / "config.json", folder / "config.json")
    (where / "utf16.json").write_text(json.dumps(config), encoding="utf-16")
    (where / "latin1.json").write_bytes(b'{"model_type": "llama", "name": "caf\xe9"}')
    (where / "deep.json").write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    (where / "twice.json").write_text(
        json.dumps(config)[:-1] + ', "hidden_size": 8192}'  # hidden_size given twice
    )
    (where / "huge.json").write_text(json.dumps({**config, "vision_blob": "x" * 30_000_000}))
    (where / "devnull").mkdir()
    (where / "devnull" / "config.json").symlink_to("/dev/null")
    (where / "folder").mkdir()
    (where / "folder" / "config.json").mkdir()
    (where / "deep.toml").write_text(
        'model = "llama3-8b"\ngpus = 8\nx = ' + "[" * 100_000 + "1" + "]" * 100_000 + "\n"
    )
    for name, body in {
        "thousands.toml": 'model = "llama3-70b"\ngpu = "H100-SXM"\ngpus = "16,384"\n',
        "list.toml": 'model = "llama3-8b"\ngpus = [8, 16]\nglobal_batch = 48\n',
        "empty.toml": 'model = "llama3-8b"\ngpus = 8\n[space]\ntp = []\n',
        "ambiguous.toml": 'model = "llama3-8b"\ngpus = 8\n[space]\ntp = ["4,0"]\n',
        "twice.toml": 'model = "llama3-8b"\ngpus = 8\nframework = ["megatron", "megatron"]\n',
        "once.toml": 'model = "llama3-8b"\ngpus = 8\nframework = ["megatron"]\n',
    }.items():
        (where / name).write_text(body)


CALLS: dict[str, list[str]] = {
    # --- one grammar for numbers and lists
    # the degrees fixed: the grammar is under test, not the search (a free one is minutes)
    "gpus 16,384": ["search", "--model", "llama3-70b", "--gpus", "16,384", "--gpu", "H100-SXM"]
    + ["--tp", "8", "--pp", "8", "--micro-batch", "1"],
    "dp 4,0": ["evaluate", *LLAMA8, "--dp", "4,0"],
    "seq 1,00": ["evaluate", *LLAMA8, "--seq-len", "1,00"],
    "dp 16,38": ["evaluate", *LLAMA8, "--dp", "16,38"],
    "gpus 2048,4096": [*SEARCH8, "--gpus", "2048,4096"],
    "batch 4,096": ["evaluate", *LLAMA8, "--dp", "8", "--global-batch", "4,096", "--json"],
    "gpus repeated": [*SEARCH8, "--gpus", "8", "--gpus", "16", "--global-batch", "48"],
    "gpus ;": [*SEARCH8, "--gpus", "8;16", "--global-batch", "48", "--json"],
    "gpus range": [*SEARCH8, "--gpus", "8..16", "--global-batch", "48", "--json"],
    "toml 16,384": ["search", "--scenario", "thousands.toml", "--json"],
    "toml list": ["search", "--scenario", "list.toml", "--json"],
    "toml []": ["search", "--scenario", "empty.toml"],
    "toml 4,0": ["search", "--scenario", "ambiguous.toml"],
    "search help": ["search", "--help"],
    # --- a folder named like a catalogue model
    "shadowed": ["evaluate", *LLAMA8, "--dp", "8"],
    "shadowed json": ["evaluate", *LLAMA8, "--dp", "8", "--json"],
    "folder json": ["evaluate", "--model", "./llama3-8b", "--dp", "8", "--json"],
    # --- one line, never a traceback
    "csv 300": ["frontier", *LLAMA8, "--gpus", "8", "--csv", "a" * 300 + ".csv"],
    "deep config": ["evaluate", "--model", "deep.json"],
    "deep scenario": ["search", "--scenario", "deep.toml"],
    "utf-16 config": ["evaluate", "--model", "utf16.json", "--json"],
    "utf-8 config": ["evaluate", "--model", "llama3-8b/config.json", "--json"],
    "latin-1 config": ["evaluate", "--model", "latin1.json"],
    "model 100,000": ["evaluate", "--model", "x" * 100_000],
    "evaluat": ["evaluat", *LLAMA8],
    "memory": ["memory", *LLAMA8],
    "device config": ["evaluate", "--model", "devnull"],
    "folder config": ["evaluate", "--model", "folder"],
    # --- taken, refused or said; never dropped
    "gpu twice": [*SEARCH8, "--gpus", "8", "--gpu", "B200", "--json"],
    "gpu same twice": [*SEARCH8, "--gpus", "8", "--gpu", "H100-SXM,H100-SXM", "--json"],
    "gpu once": [*SEARCH8, "--gpus", "8", "--json"],
    "evaluate gpu twice": ["evaluate", *LLAMA8, "--gpu", "H100-SXM", "--gpu", "B200"],
    "evaluate flash both": ["evaluate", *LLAMA8, "--flash", "--no-flash"],
    "tokens step-time": [*SEARCH8, "--gpus", "8", "--tokens", "15e12"],
    "price twice": [*SEARCH8, "--gpus", "8", "--objective", "cost", "--tokens", "1e12"]
    + ["--gpu-hour-price", "H100-SXM=2.5,H100-SXM=3"],
    "mtp dense": ["evaluate", *LLAMA8, "--mtp-layers", "3", "--json"],
    "no mtp": ["evaluate", *LLAMA8, "--json"],
    "config batch": ["evaluate", "--model", str(HF / "deepseek-v3" / "config.json")]
    + ["--dp", "8", "--pp", "16", "--ep", "8", "--json"],
    "config search": ["search", "--model", "./llama3-8b", "--gpus", "64"],
    "rank order twice": [*SEARCH8, "--gpus", "8", "--rank-order", "tp-cp-ep-dp-pp"]
    + ["--rank-order", "tp-cp-ep-dp-pp", "--json"],
    "framework twice": ["search", "--scenario", "twice.toml", "--json"],
    "framework once": ["search", "--scenario", "once.toml", "--json"],
    # --- contradictions named, exit 2
    "tp above max-tp": [*SEARCH8, "--gpus", "64", "--tp", "8", "--max-tp", "4"],
    "mb above max-mb": [*SEARCH8, "--gpus", "64", "--micro-batch", "4", "--max-micro-batch", "2"],
    "ep above experts": ["search", "--model", "mixtral-8x7b", "--gpus", "64", "--ep", "16"],
    "oversubscription": ["evaluate", *LLAMA8, "--dp", "64", "--set", "fabric=fat-tree"]
    + ["--set", "pod_size=16", "--set", "oversubscription=1000000"],
    "time limit": [*SEARCH8, "--gpus", "8", "--time-limit", "0.001"],
    "time limit json": [*SEARCH8, "--gpus", "8", "--time-limit", "0.001", "--json"],
    # --- output people can read
    "huge note": ["evaluate", "--model", "huge.json"],
    "duplicate key": ["evaluate", "--model", "twice.json"],
    "price text": ["frontier", *LLAMA8, "--gpus", "8", "--gpus", "16", "--global-batch", "64"]
    + ["--against", "price", "--gpu-hour-price", "2.5"],
    # --- a refusal names what the user gave and the real rule
    "rlhf prompts": ["rlhf", "--algorithm", "grpo", *LLAMA8, "--prompts", "4,000,000"],
    "rlhf prompts json": ["rlhf", "--algorithm", "grpo", *LLAMA8, "--prompts", "4,000,000"]
    + ["--json"],
    "pipeline p -4": ["pipeline", "-p", "-4", "-m", "8"],
    "pipeline p 0 json": ["pipeline", "-p", "0", "-m", "8", "--json"],
    "ckpt n -3": ["ckpt", "-n", "-3"],
    "ckpt n 0 json": ["ckpt", "-n", "0", "--json"],
    "apex zero 0": [*SEARCH8, "--gpus", "8", "--zero", "0"]
    + ["--set", "distributed_optimizer=distributed_fused_adam"],
    "apex zero 0 json": [*SEARCH8, "--gpus", "8", "--zero", "0", "--json"]
    + ["--set", "distributed_optimizer=distributed_fused_adam"],
    "blockwise b200": ["evaluate", *LLAMA8, "--gpu", "B200", "--precision", "fp8"]
    + ["--fp8-recipe", "blockwise"],
    "blockwise b200 json": ["evaluate", *LLAMA8, "--gpu", "B200", "--precision", "fp8"]
    + ["--fp8-recipe", "blockwise", "--json"],
    "deepspeed cp": ["evaluate", *LLAMA8, "--dp", "4", "--cp", "2", "--framework", "deepspeed"]
    + ["--cp-kind", "pytorch-allgather"],
}


SLOW_CALLS = {
    name: CALLS.pop(name)
    for name in (
        *("gpu twice", "gpu same twice", "gpu once", "rank order twice", "framework twice"),
        *("framework once", "time limit", "time limit json", "price text"),
    )
}
"""The calls that search (about 2 s of CPU each), run by the slow tests only."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("new-user")
    _files(where)
    return where


@pytest.fixture(scope="module")
def runs(folder: Path) -> dict[str, Done]:
    return run_many(CALLS, cwd=folder)


@pytest.fixture(scope="module")
def slow_runs(folder: Path) -> dict[str, Done]:
    return run_many(SLOW_CALLS, cwd=folder)


def _json(done: Done) -> Any:
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


# ---------------------------------------------------------------------------------------------
# One grammar for numbers and lists


def test_a_thousands_separator_is_never_a_list_separator(runs):
    """16,384 GPUs searched one job of 16 and one of 384: now one job of 16,384."""
    text = runs["gpus 16,384"].stdout
    assert runs["gpus 16,384"].returncode == 0, runs["gpus 16,384"].stderr
    assert " 1 job(s))" in text and "on 16,384 × H100-SXM" in text
    assert _json(runs["batch 4,096"])["layout"]["global_batch_size"] == 4096
    scenario = _json(runs["toml 16,384"])
    assert scenario["jobs"] == 1 and scenario["num_gpus"] == 16384


@pytest.mark.parametrize(
    ("call", "flag", "value"),
    [("dp 4,0", "--dp", "4,0"), ("seq 1,00", "--seq-len", "1,00"), ("dp 16,38", "--dp", "16,38")],
)
def test_an_ambiguous_comma_is_refused(runs, call, flag, value):
    """4,0 was read as 40: a comma that does not group thousands in threes is refused."""
    assert refusal(runs[call]) == (
        f"{flag}: {value!r} is not a number: a comma only separates thousands, in groups of "
        "three digits (16,384 or 4,000,000); the decimal point is '.'"
    )


def test_an_old_comma_list_is_refused_with_the_list_forms(runs):
    line = refusal(runs["gpus 2048,4096"])
    assert line.startswith("--gpus: '2048,4096' is not a number")
    assert line.endswith("for several values repeat the option, or put ';' between them (64;128)")
    assert "gpus: '4,0' is not a number" in refusal(runs["toml 4,0"]).replace("tp:", "gpus:")


def test_lists_are_the_option_repeated_a_semicolon_a_range_or_a_toml_array(runs):
    assert " 2 job(s))" in runs["gpus repeated"].stdout  # 8 and 16 GPUs
    assert _json(runs["gpus ;"])["jobs"] == 2
    assert _json(runs["gpus range"])["jobs"] == 3  # 8, 12 (1.5 × 8), 16
    assert _json(runs["toml list"])["jobs"] == 2
    assert "tp: [] is an empty list" in refusal(runs["toml []"])
    help_text = " ".join(runs["search help"].stdout.split())
    assert "16,384" in help_text and "repeat for several (--gpus 2048 --gpus 4096)" in help_text


# ---------------------------------------------------------------------------------------------
# A folder named like a catalogue model


def test_a_catalogue_name_is_the_catalogue_model_and_says_a_folder_was_not_read(runs):
    out = _json(runs["shadowed json"])
    assert out["model"]["source"].startswith("Llama Team, The Llama 3 Herd of Models")
    assert out["layout"]["seq_len"] == 8192 and out["layout"]["global_batch_size"] == 2048
    note = (
        "model: 'llama3-8b' is the catalogue's model (its published dimensions and training "
        "setup); the folder 'llama3-8b' here was not read: give ./llama3-8b to use it instead"
    )
    assert note in out["notes"] and f"Note: {note}" in runs["shadowed"].stdout
    folder = _json(runs["folder json"])  # the explicit path form reads the folder's config.json
    assert folder["model"]["source"] == "Hugging Face config llama3-8b/config.json"
    assert not any("was not read" in n for n in folder["notes"])
    # the config's own defaults: s = 4096, and B = dp·b·4·pp = 8·1·4 = 32 with a note
    assert (folder["layout"]["seq_len"], folder["layout"]["global_batch_size"]) == (4096, 32)


# ---------------------------------------------------------------------------------------------
# One line, never a traceback


def test_bad_files_and_names_are_one_line(runs):
    # a path is echoed whole up to 400 characters (the user needs it to act on): the 304-character
    # name in quotes, then the file system's reason
    assert refusal(runs["csv 300"]) == (
        "--csv: '" + "a" * 300 + ".csv' cannot be written: File name too long"
    )
    assert refusal(runs["deep config"]) == (
        "--model: 'deep.json': objects or lists nest too deeply to read (a Hugging Face config "
        "nests a few levels)"
    )
    assert refusal(runs["deep scenario"]) == (
        "scenario deep.toml: tables or lists nest too deeply to read (a scenario nests two levels)"
    )
    assert refusal(runs["latin-1 config"]).startswith(
        "--model: 'latin1.json': is not UTF-8 (or UTF-16/32) text: invalid continuation byte"
    )
    line = refusal(runs["model 100,000"])
    assert line.startswith("--model: unknown model 'xxxx") and "(100,002 characters)" in line
    assert len(line) < 1000  # the name is cut, not echoed whole


def test_a_utf16_config_reads_as_its_utf8_twin(runs):
    utf16, utf8 = _json(runs["utf-16 config"]), _json(runs["utf-8 config"])
    assert utf16["model"]["num_params"] == utf8["model"]["num_params"] == 8_030_261_248


def test_a_config_path_that_is_no_file_says_what_it_is(runs):
    assert refusal(runs["device config"]) == (
        "--model: 'devnull/config.json' (a symbolic link to '/dev/null') is a character device, "
        "not a file; give a Hugging Face config.json"
    )
    assert refusal(runs["folder config"]) == (
        "--model: 'folder/config.json' is a folder, not a config.json file"
    )


def test_a_mistyped_command_suggests_the_command(runs):
    assert refusal(runs["evaluat"]) == "No such command 'evaluat'. Did you mean 'evaluate'?"
    assert refusal(runs["memory"]) == (  # no command is spelled close: the one that reports it
        "No such command 'memory'. Did you mean 'evaluate' (memory per GPU, traffic, bubble, "
        "step time and MFU of a layout)?"
    )


def test_output_that_cannot_be_written_is_one_line(tmp_path):
    """``trainplan evaluate … > /dev/full``: a write error, one line on stderr, exit 1."""
    import subprocess
    import sys

    for args in (LLAMA8, [*LLAMA8, "--json"]):
        with open("/dev/full", "w") as full:
            done = subprocess.run(
                [sys.executable, "-m", "trainplan", "evaluate", *args],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        assert done.returncode == 1
        assert done.stderr == "Error: the output could not be written: No space left on device\n"


# ---------------------------------------------------------------------------------------------
# Taken, refused or said


@pytest.mark.slow
def test_every_accelerator_given_is_searched_once(slow_runs):
    assert _json(slow_runs["gpu twice"])["jobs"] == 2  # H100-SXM and B200, not B200 alone
    once, twice = _json(slow_runs["gpu once"]), _json(slow_runs["gpu same twice"])
    assert twice["jobs"] == once["jobs"] == 1 and twice["candidates"] == once["candidates"]
    for name in ("rank order", "framework"):
        assert (
            _json(slow_runs[f"{name} twice"])["candidates"]
            == _json(slow_runs[f"{'gpu' if name == 'rank order' else name} once"])["candidates"]
        )


def test_a_single_value_option_given_twice_is_refused(runs):
    assert refusal(runs["evaluate gpu twice"]) == (
        "--gpu: given twice (H100-SXM, B200); it takes one value, so give it once"
    )
    assert refusal(runs["evaluate flash both"]) == (
        "--flash: --flash and --no-flash are both given; give one"
    )


def test_a_token_budget_the_objective_does_not_use_is_refused(runs):
    assert refusal(runs["tokens step-time"]) == (
        "--tokens: '15e12' does not apply: it is the token budget of --objective time-to-train or "
        "cost, and the objective is step-time (add --objective time-to-train)"
    )


def test_a_price_given_twice_is_refused(runs):
    assert refusal(runs["price twice"]) == (
        "--gpu-hour-price: H100-SXM is priced twice (2.5 and 3); give each accelerator one price"
    )


def test_mtp_modules_are_counted_once_in_both_totals(runs):
    """Three MTP modules on Llama 3 8B (DeepSeek-V3 §2.2: a transformer block, a 2h → h
    projection and three RMSNorms each; the embedding and output head shared with the model).
    Per module: block 4096·(4096 + 1024 + 1024 + 4096) + 3·4096·14336 + 2·4096 = 218,112,000,
    projection 2·4096² = 33,554,432, norms 3·4096 = 12,288 → 251,678,720; three: 755,036,160.
    A dense model uses every parameter: active = total = 8,030,261,248 + 755,036,160. The shared
    head was counted again per module as "active" (10.36B active of 8.79B), and the 6n MFU rose
    from 44.4% to 52.7%; counted once, 6n grows by 9.4% as the step time does (+8.7%)."""
    mtp, plain = _json(runs["mtp dense"]), _json(runs["no mtp"])
    assert mtp["model"]["num_params"] == mtp["model"]["num_active_params"] == 8_785_297_408
    ratio = mtp["time"]["mfu"] / plain["time"]["mfu"]
    steps = mtp["time"]["step_s"] / plain["time"]["step_s"]
    assert ratio == pytest.approx((8_785_297_408 / 8_030_261_248) / steps, rel=1e-9)
    assert 0.98 < ratio < 1.02


def test_a_config_model_gets_a_sensible_batch_with_a_note(runs):
    """DeepSeek-V3's config.json at pp 16: B = dp was one micro-batch per step, 15/16 of it
    bubble (1.1% MFU, no word). Now B = dp·b·4·pp = 8·1·64 = 512, m = 64: the 1F1B bubble is
    14.7 % of the step — the order's own (model.pipeline_onef), its fill and drain through stages
    faster than the slowest, under the closed form's 15/79 = 19 % — and a note says where B came
    from."""
    out = _json(runs["config batch"])
    assert out["layout"]["global_batch_size"] == 512 and out["layout"]["num_microbatches"] == 64
    fraction = out["pipeline"]["bubble_fraction"]
    assert fraction == pytest.approx(0.146932, abs=1e-6) and fraction < 15 / 79
    assert out["defaults_used"]["global_batch_size"] == 512
    (note,) = [n for n in out["notes"] if n.startswith("global_batch_size:")]
    assert "has no published batch size, so B = dp·b·m = 8·1·64 = 512 sequences" in note
    assert out["time"]["mfu"] > 0.15
    assert refusal(runs["config search"]).startswith(
        "--global-batch: ./llama3-8b has no published batch size; give --global-batch"
    )


# ---------------------------------------------------------------------------------------------
# Contradictions are named, exit 2 (not "no layout", exit 1)


def test_contradicting_options_are_named(runs):
    assert refusal(runs["tp above max-tp"]) == (
        "--tp: 8 is above max_tp 4: the two contradict each other; drop one or raise max_tp"
    )
    assert refusal(runs["mb above max-mb"]) == (
        "--micro-batch: 4 is above max_micro_batch 2: the two contradict each other; drop one or "
        "raise max_micro_batch"
    )
    assert refusal(runs["ep above experts"]) == "--ep: 16 does not divide num_experts = 8"


def test_an_oversubscription_no_fabric_has_is_refused(runs):
    line = refusal(runs["oversubscription"])
    assert line.startswith(
        "--set oversubscription: 1,000,000 must be between 1 (non-blocking) and 255"
    )
    assert "Warning" not in runs["oversubscription"].stderr


@pytest.mark.slow
def test_the_time_limit_says_what_it_did(slow_runs):
    """0.001 s cannot hold: the limit counts from the command's start, the tables' first block
    (64 of the 156 shapes on 8 GPUs) is filled before the limit is looked at, and CP-SAT has a
    1 s floor. The answer is the best of the shapes costed, said not proven, and the note says
    what the limit cut, the start-up it counted and what to do — or, on a machine too busy for
    CP-SAT to answer within its floor, it says the solver stopped (status unknown), never that
    no layout exists."""
    text, out = slow_runs["time limit"], slow_runs["time limit json"]
    if text.returncode == 1:  # no answer within the floor: said so, not "infeasible"
        assert text.stderr.startswith("No layout found before the solver stopped (")
    else:
        assert "best found within the time limit (not proven)" in text.stdout
        note = "Note: the time limit cut the cost tables at 64 of 156 shapes, the first in "
        assert note in text.stdout
        assert "s of start-up + " in text.stdout
        assert "a longer --time-limit searches the rest" in text.stdout
    got = json.loads(out.stdout)
    if out.returncode == 1:
        assert got["status"] == "unknown"
    else:
        assert got["time_limit_seconds"] == 0.001 and got["interrupted"] is False
        assert got["time_limit_note"].startswith("the time limit cut the cost tables at 64 of 156")


# ---------------------------------------------------------------------------------------------
# Output people can read


def test_a_huge_unknown_config_value_is_echoed_as_a_prefix(runs):
    done = runs["huge note"]
    assert done.returncode == 0, done.stderr[-2000:]
    (note,) = [line for line in done.stdout.splitlines() if "vision_blob" in line]
    assert "(30,000,002 characters) is not understood and was not used" in note
    assert len(note) < 400


def test_a_key_given_twice_in_a_config_is_refused(runs):
    assert refusal(runs["duplicate key"]) == (
        "--model: 'twice.json': key 'hidden_size' is given twice (4096, then 8192); keep one"
    )


@pytest.mark.slow
def test_prices_read_as_dollars(slow_runs):
    """2.5 $/GPU-hour × 16 GPUs = $40.00/hour; × 8 = $20.00/hour."""
    text = slow_runs["price text"].stdout
    assert slow_runs["price text"].returncode == 0, slow_runs["price text"].stderr
    assert "$40.00/hour" in text and "$20.00/hour" in text and "$/hour" not in text


# ---------------------------------------------------------------------------------------------
# A refusal names what the user gave and the real rule


def test_rlhf_prompts_above_the_limit_name_prompts(runs):
    """GRPO's 4,000,000 prompts × 16 rollouts = 64,000,000 sequences > 2^24 = 16,777,216: named
    as --prompts (it was training.global_batch_size 64,000,008: the training batch rounded up
    to whole micro-batches of b 3 on dp 8, 24 · ⌈64,000,000 / 24⌉)."""
    line = (
        "--prompts: 4,000,000 × 16 rollouts per prompt (--samples-per-prompt) = 64,000,000 "
        "sequences per step, above the limit of 16,777,216 sequences a step trains on (2^24; "
        "published global batches are ~10^3, Llama 3 2,048)"
    )
    assert refusal(runs["rlhf prompts"]) == refusal(runs["rlhf prompts json"]) == line


@pytest.mark.parametrize(
    ("call", "line"),
    [
        ("pipeline p -4", "--stages: '-4' must be at least 1"),
        ("pipeline p 0 json", "--stages: '0' must be at least 1"),
        ("ckpt n -3", "--layers: '-3' must be at least 1"),
        ("ckpt n 0 json", "--layers: '0' must be at least 1"),
    ],
)
def test_a_count_below_one_is_one_rule(runs, call, line):
    """A negative count was 'at least 0' and 0 then 'at least 1' (pp: 0 for the stages)."""
    assert refusal(runs[call]) == line


def test_a_search_the_recipe_forbids_says_the_rule(runs):
    """Apex's distributed_fused_adam is Megatron's ZeRO-1: with --zero 0 every shape is illegal
    at every ZeRO stage searched; the legality rule's own line, not a traceback."""
    line = (
        "--set distributed_optimizer: distributed_fused_adam is Apex's optimizer under NeMo's "
        "Megatron-Core models; it needs --framework megatron with --zero 1, not megatron ZeRO-0"
    )
    assert refusal(runs["apex zero 0"]) == refusal(runs["apex zero 0 json"]) == line


def test_a_recipe_the_part_has_no_profile_for_is_one_line(runs):
    line = (
        "--fp8-recipe: blockwise has no published GEMM profile on the B200; Transformer Engine's "
        "profile of its family (measured on the B300) has delayed, tensorwise, mxfp8: give one "
        "of those"
    )
    assert refusal(runs["blockwise b200"]) == refusal(runs["blockwise b200 json"]) == line


def test_the_deepspeed_cp_refusal_names_its_own_flavour(runs):
    line = refusal(runs["deepspeed cp"])
    assert "deepspeed runs its own DeepSpeed-Ulysses" in line and "--cp-kind ulysses" in line
    assert "Transformer Engine" not in line
