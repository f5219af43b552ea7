"""What a new user met from a clean clone, each command its own ``trainplan`` process as the
user ran it (:func:`tests.cli_runs.run_many`):

* ``search --headroom 0.5`` answered a different layout than without it and said nowhere that
  the headroom was applied: its memory verdict compared the peak with the whole 83.21 GB. The
  answer's notes (text and JSON) now say what the search held every layout to, and a search
  with no layout says it beside its memory line;
* ``--global-batch-tokens 16e6 --global-batch 2048`` was refused as ``('16e6',) does not apply``
  (a Python tuple) and named ``global_batch`` where the flag is ``--global-batch``; the same in a
  scenario file named the key as a flag and the value as ``1.6e+07``; a file's
  ``[constraints] headroom = 1.5`` was refused as ``--headroom: 1.5 …``, a flag not typed;
* ``mfu`` with two measurements (or none) said ``mfu inputs: give exactly one of
  params+tokens+step_seconds, …``: no flag, no value; it now names what was given, by flag.
  ``--params`` beside a reported FLOP rate was dropped silently (``--model`` there is refused);
* ``evaluate --gpu H100-SXM,H200`` (the list ``search`` takes) was an "unknown gpu" with
  ``H100-SXM`` among the suggestions: it now says the command takes one accelerator;
* ``search --framework deepspeed`` on a QK-norm model said ``search: framework: deepspeed runs
  …`` where ``evaluate`` says ``--framework: deepspeed runs …``, and the note of a framework no
  layout uses named it ``framework:``, where a degree's names ``--tp:``;
* ``sweep-plot`` of a one-model grid drew its legend wider than the figure, cutting the first
  and last parts off at its edges;
* ``frontier --headroom 0.5`` said nowhere that its points were held to half the GPU (``search``
  says it in its notes): it now says it in the same words, in text and JSON;
* ``evaluate --model /etc/passwd`` said ``/etc/passwd: is not JSON: …``, naming no flag and no
  rule (``rlhf --critic-model`` the same; its missing path was refused as ``--model``); ``mfu``
  refused an MFU of ``331640.4%`` (no thousands grouped) and ``--recomputed-flops-pct -5`` as
  ``-5.0``, not as typed;
* ``models`` showed gpt-oss-120b with 5.7B active parameters beside its card's 5.13B, saying
  nowhere that the count holds the input embedding (201,088 × 2,880 = 0.58B) the card leaves out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runs import Done, refusal, run_many

SEARCH8 = ["search", "--model", "llama3-8b", "--gpus", "8"]
MFU = ["mfu", "--params", "70B", "--gpu", "H100-SXM", "--chips", "512"]
MFU_STEP = [*MFU, "--tokens", "4e6", "--step-seconds", "7"]
FRONTIER8 = ["frontier", "--model", "llama3-8b", "--gpus", "8", "--pp", "1", "--headroom", "0.5"]
BOTH_BATCHES = ["--global-batch-tokens", "16e6", "--global-batch", "2048"]

QWEN_DEEPSPEED = ["search", "--model", "qwen3-8b", "--gpus", "8", "--framework", "deepspeed"]

CALLS: dict[str, list[str]] = {
    "headroom": [*SEARCH8, "--headroom", "0.5"],
    "headroom json": [*SEARCH8, "--headroom", "0.5", "--json"],
    "no headroom json": [*SEARCH8, "--json"],
    "headroom none fits": ["search", "--model", "llama3-8b", "--gpus", "1", "--headroom", "0.5"],
    "both batches": [*SEARCH8, *BOTH_BATCHES],
    "both batches file": ["search", "--scenario", "both.toml"],
    "headroom file": ["search", "--scenario", "headroom.toml"],
    "mfu two": [*MFU, "--tokens", "4e6", "--step-seconds", "7", "--tokens-per-second", "5e5"],
    "mfu none": MFU,
    "mfu step alone": [*MFU, "--tokens", "4e6"],
    "mfu rate params": [*MFU, "--achieved-pflops", "200"],
    "evaluate two gpus": ["evaluate", "--model", "llama3-70b", "--gpu", "H100-SXM,H200"],
    "deepspeed qk-norm": QWEN_DEEPSPEED,
    "deepspeed or fsdp2": [*QWEN_DEEPSPEED, "--framework", "fsdp2", "--tp", "1", "--pp", "1"]
    + ["--max-micro-batch", "1", "--json"],
    "frontier headroom": FRONTIER8,
    "frontier headroom json": [*FRONTIER8, "--json"],
    "model not json": ["evaluate", "--model", "/etc/passwd"],
    "critic not json": ["rlhf", "--algorithm", "ppo", "--model", "llama3-8b"]
    + ["--critic-model", "/etc/passwd"],
    "mfu above 100%": [*MFU, "--tokens", "4e6", "--step-seconds", "0.001"],
    "mfu negative recompute": [*MFU_STEP, "--recomputed-flops-pct", "-5"],
    "mfu negative recompute e": [*MFU_STEP, "--recomputed-flops-pct", "-5e0"],
    "models": ["models"],
    "rlhf two gpus": [
        "rlhf",
        "--algorithm",
        "ppo",
        "--model",
        "llama3-8b",
        "--gpu",
        "H100-SXM;B200",
    ],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Done]:
    folder = tmp_path_factory.mktemp("newcomer")
    (folder / "both.toml").write_text(
        'model = "llama3-8b"\ngpus = 8\nglobal_batch = 2048\nglobal_batch_tokens = 16e6\n'
    )
    (folder / "headroom.toml").write_text(
        'model = "llama3-8b"\ngpus = 8\n[constraints]\nheadroom = 1.5\n'
    )
    return run_many(CALLS, cwd=folder)


def test_a_search_says_the_headroom_it_held_every_layout_to(runs):
    """The H100's usable bytes (the answer's ``capacity_bytes``) × (1 − 0.5) = 41.61 GB: the
    answer fits that, the search without the headroom answers a layout above it, and only the
    search with it says so."""
    held = runs["headroom json"]
    assert held.returncode == 0, held.stderr[-2000:]
    answer = json.loads(held.stdout)
    capacity = answer["memory"]["capacity_bytes"]
    assert (round(capacity / 1e9, 2), round(int(capacity * 0.5) / 1e9, 2)) == (83.21, 41.61)
    note = (
        "--headroom 0.5: only layouts that fit 41.61 GB per GPU were searched, 50% of the "
        "83.21 GB usable (50% kept free); the verdict compares the peak with the whole 83.21 GB"
    )
    assert note in answer["notes"]
    assert answer["memory"]["total_bytes"] <= int(capacity * 0.5)
    free = json.loads(runs["no headroom json"].stdout)
    assert free["memory"]["total_bytes"] > int(capacity * 0.5)
    assert not any("--headroom" in n for n in free["notes"])
    assert runs["headroom"].returncode == 0
    assert f"Note: {note}\n" in runs["headroom"].stdout


def test_a_search_with_no_layout_says_its_memory_line_is_less_the_headroom(runs):
    done = runs["headroom none fits"]
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines[1].startswith("  - memory: no layout fits 41.61 GB per GPU;")
    assert lines[2] == (
        "  - --headroom 0.5: that memory is 50% of the GPU's usable bytes (50% kept free)"
    )


def test_a_frontier_says_the_headroom_it_held_every_point_to(runs):
    """The search's note, word for word (:func:`test_a_search_says_the_headroom_it_held_every_
    layout_to`): 50% of the H100's 83.21 GB usable, 41.61 GB; every point's peak within it."""
    note = (
        "--headroom 0.5: only layouts that fit 41.61 GB per GPU were searched, 50% of the "
        "83.21 GB usable (50% kept free); the verdict compares the peak with the whole 83.21 GB"
    )
    held = runs["frontier headroom json"]
    assert held.returncode == 0, held.stderr[-2000:]
    answer = json.loads(held.stdout)
    assert answer["notes"] == [note]
    assert all(p["total_bytes"] <= int(p["capacity_bytes"] * 0.5) for p in answer["points"])
    text = runs["frontier headroom"]
    assert text.returncode == 0 and text.stdout.splitlines()[1] == f"Note: {note}"


def test_a_file_that_is_not_a_model_names_the_flag_the_value_and_the_rule(runs):
    why = (
        "'/etc/passwd': is not JSON: Expecting value: line 1 column 1 (char 0); a model path must "
        "be a Hugging Face config.json (a JSON object)"
    )
    assert refusal(runs["model not json"]) == f"--model: {why}"
    assert refusal(runs["critic not json"]) == f"--critic-model: {why}"


def test_mfu_refusals_group_thousands_and_echo_the_value_as_typed(runs):
    """6 · 70e9 · 4e6 ÷ (989.4e12 · 512 · 0.001 s) = 3,316.404 (331,640.4%)."""
    assert refusal(runs["mfu above 100%"]).startswith(
        "mfu: 6 · 70e9 · 4e6 ÷ (989.4e12 · 512 · 0.001 s) = 331,640.4% is above 100%, impossible"
    )
    assert refusal(runs["mfu negative recompute"]) == "--recomputed-flops-pct: -5 must be ≥ 0"
    assert refusal(runs["mfu negative recompute e"]) == "--recomputed-flops-pct: -5e0 must be ≥ 0"


def test_the_model_list_says_what_its_active_count_holds(runs):
    """gpt-oss-120b: 5,711,982,912 active here, the card's 5.13B (Table 1) plus its input
    embedding, 201,088 × 2,880 = 579,133,440 (5,132,849,472)."""
    done = runs["models"]
    assert done.returncode == 0, done.stderr[-2000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("gpt-oss-120b "))
    assert row.split()[1:3] == ["116.8B", "5.7B"]
    assert 5_711_982_912 - 201_088 * 2_880 == 5_132_849_472
    assert (
        "num_active_params: the whole input embedding (V × h) and the output layer counted, with "
        "the routed experts a token uses (top-k) and any MTP modules; a source may leave the "
        "input embedding out (gpt-oss-120b's card: 5.13B active, 0.58B fewer)"
    ) in done.stdout.splitlines()


def test_a_batch_given_both_ways_is_refused_with_the_value_as_typed(runs):
    assert refusal(runs["both batches"]) == (
        "--global-batch-tokens: '16e6' does not apply: give the batch in sequences "
        "(--global-batch) or in tokens, not both"
    )
    assert refusal(runs["both batches file"]) == (
        "scenario both.toml: global_batch_tokens: 16,000,000 does not apply: give the batch in "
        "sequences (global_batch) or in tokens, not both"
    )
    assert (
        refusal(runs["headroom file"])
        == "scenario headroom.toml: headroom: 1.5 must be at least 0 and below 1 (100%) (a fraction from 0 to 1, or a "
        "percent such as 40%)"
    )


def test_mfu_names_the_measurements_given_by_their_flags(runs):
    rule = (
        "give exactly one measurement: --tokens with --step-seconds, --tokens-per-second (either "
        "with --params or --model), --achieved-pflops or --achieved-tflops-per-gpu"
    )
    assert refusal(runs["mfu two"]) == (
        f"mfu: given: --tokens 4e6, --step-seconds 7, --tokens-per-second 5e5; {rule}"
    )
    assert refusal(runs["mfu none"]) == f"mfu: no measurement given; {rule}"
    assert refusal(runs["mfu rate params"]) == (
        "--params: '70B' does not apply: a reported FLOP rate already counts what it counts; "
        "N is not read"
    )
    assert refusal(runs["mfu step alone"]) == (
        "--step-seconds: missing; MFU from a step needs both --tokens (tokens in the step, all "
        "chips) and --step-seconds (seconds per step): --tokens alone is given"
    )


def test_a_list_of_accelerators_where_one_is_taken_says_so(runs):
    rule = "this takes one (search and frontier choose among several)"
    assert refusal(runs["evaluate two gpus"]) == (
        f"--gpu: 'H100-SXM,H200' names several accelerators; {rule}"
    )
    assert refusal(runs["rlhf two gpus"]) == (
        f"--gpu: 'H100-SXM;B200' names several accelerators; {rule}"
    )


def test_a_framework_no_layout_runs_is_named_by_its_flag(runs):
    rule = (
        "--framework: deepspeed runs Megatron-DeepSpeed's transformer layer, which has no "
        "QK-norm (use --framework megatron or fsdp2)"
    )
    assert refusal(runs["deepspeed qk-norm"]) == rule
    notes = json.loads(runs["deepspeed or fsdp2"].stdout)["notes"]
    assert f"requested values no layout uses: framework deepspeed ({rule})" in notes


def test_a_one_model_scaling_chart_keeps_its_legend_inside_the_figure(tmp_path: Path):
    """Two parts, each with a what-if, on one panel (4.6 in wide): the four legend entries in
    one row were wider than the figure. No ink in the outermost pixel columns."""
    pytest.importorskip("pyarrow", reason="pip install -e '.[sweep]'")
    image = pytest.importorskip("matplotlib.image", reason="pip install -e '.[plot]'")
    (tmp_path / "one.toml").write_text(
        'global_batch = 96\n[space]\npp = [1]\nrecompute = ["none"]\n'
        '[sweep]\nmodel = ["megatron-1.7b"]\ngpu = ["H100-SXM", "B200"]\ngpus = [16, 32]\n'
        "[what_if]\nhbm_capacity = [1, 2]\n"
    )
    done = run_many({"sweep": ["sweep", "one.toml", "--workers", "1"]}, cwd=tmp_path)["sweep"]
    assert done.returncode == 0, done.stderr[-2000:]
    plot = run_many({"plot": ["sweep-plot", "one.parquet", "--png", "one.png"]}, cwd=tmp_path)
    assert plot["plot"].returncode == 0, plot["plot"].stderr[-2000:]
    pixels = image.imread(tmp_path / "one.png")[..., :3]
    assert pixels.shape[1] == 460  # one panel: 4.6 in at 100 dpi
    for edge in (pixels[:, 0], pixels[:, -1]):
        assert not (edge < 0.9).any(), "the legend runs past the figure's edge"


def test_the_planner_page_says_the_zero_stages_its_table_compares(tmp_path: Path):
    """The intro promised "the four ZeRO stages"; under the default profile the table lists
    Megatron-Core's 0, 1 and 3 (``zero_table`` of evaluate --json), which the intro now says."""
    pytest.importorskip("fastapi", reason="pip install -e '.[web]'")
    pytest.importorskip("httpx", reason="pip install -e '.[webtest]'")
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    done = run_many({"evaluate": ["evaluate", "--model", "llama3-70b", "--tp", "8", "--json"]})
    stages = [row["zero_stage"] for row in json.loads(done["evaluate"].stdout)["zero_table"]]
    assert stages == [0, 1, 3]
    html = TestClient(create_app(("testserver",))).get("/planner").text
    assert "It compares the ZeRO stages the framework runs (megatron: 0, 1, 3)" in html
    assert "four ZeRO stages" not in html
