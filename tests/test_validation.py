"""The validation set of published end-to-end runs (interface/fidelity/validation.py, scenarios/validation):
strict keys with the file, table and key named; every row with a source; published figures
converted to a step time as the source defines them; the report's page current; and, in the slow
sweep, every row evaluated through ``trainplan evaluate --json`` with the report's structure."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainplan.interface.fidelity.validation import (
    FIGURES,
    evaluate_all,
    runs_from_text,
    validation_files,
    validation_models,
    validation_runs,
)
from trainplan.interface.fidelity.validation_report import (
    GOALS,
    GROUPS,
    goal_table,
    markdown_report,
    report_dict,
)
from trainplan.model.errors import ScenarioError

DOC = Path(__file__).resolve().parents[1] / "docs" / "fidelity-validation.md"

TABLE = """
[[table]]
source = "a paper, Table 1"
framework = "megatron"
framework_as_run = "Megatron-LM"
published = "tokens_per_s_per_gpu"
convention = "tokens/s/GPU"
recipe = "none"
[table.params]
gpu = "H100-SXM"
model = "llama3-8b"
seq_len = 8192
[[table.run]]
key = "a"
num_gpus = 8
dp = 8
global_batch_size = 16
tokens_per_s_per_gpu = 8192
"""


def test_the_set_is_large_and_covers_frameworks_families_and_parts():
    runs = validation_runs()
    assert len(runs) >= 40
    assert len({r.key for r in runs}) == len(runs)
    assert {r.table.framework for r in runs} >= {"megatron", "deepspeed", "fsdp2"}
    parts = {r.params["gpu"] for r in runs}
    assert parts >= {"A100-80GB", "H100-SXM", "H100-96GB-500W", "B200", "GB200", "B300"}
    moe = {"deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b"}
    assert {r.params.get("model") for r in runs} & moe == moe


def test_every_row_and_model_has_a_source():
    for run in validation_runs():
        assert run.source.strip() and run.table.convention.strip(), run.key
        assert run.table.published in FIGURES
    for name, spec in validation_models().items():
        assert spec.source.strip(), name
    assert "models" not in validation_files()


_TABLE_COLUMNS = {
    "MBS": "micro_batch_size",
    "TP": "tp",
    "PP": "pp",
    "VP": "virtual_stages",
    "EP": "ep",
}


def test_a_megatron_bridge_row_takes_the_tables_layout_or_says_why():
    """Each Megatron Bridge row's source quotes the table's columns; where the row's layout
    differs (the release's recipe ran another), one of its assumptions names the recipe. The
    B200 GPT OSS 120B row, for one: the table prints EP 8, the v0.2.0 recipe and the 26.02
    table EP 64, and the row takes 64."""
    checked = 0
    for run in validation_runs():
        if not run.key.startswith("megatron-bridge") or run.row_source is None:
            continue
        for column, name in _TABLE_COLUMNS.items():
            found = re.search(rf"\b{column} (\d+)", run.row_source)
            if found is None:
                continue
            checked += 1
            value = int(run.params.get(name, 1))
            if value != int(found.group(1)):
                assert any("recipe" in a for a in run.assumed), (run.key, column, value)
    assert checked >= 60
    bridge = {r.key: r for r in validation_runs()}
    assert bridge["megatron-bridge-25.11/b200-gpt-oss-120b"].params["ep"] == 64


def test_a_throughput_becomes_a_step_time():
    """16 sequences of 8,192 tokens on 8 GPUs at 8,192 tokens/s/GPU: 2 s per step."""
    (run,) = runs_from_text(TABLE, "example")
    assert run.key == "example/a"
    assert run.published_step_s == 16 * 8192 / (8192 * 8) == 2.0
    assert run.params["framework"] == "megatron" and run.params["dp"] == 8
    assert run.counted


def test_a_published_throughput_row_from_the_data():
    """NeMo 24.07, Llama 2 7B on 8 H100: GBS 128 × s 4,096 / (16,934 tokens/s/GPU × 8)."""
    run = next(r for r in validation_runs() if r.key == "nemo-24.07-h100/llama2-7b")
    assert run.published_step_s == pytest.approx(128 * 4096 / (16934 * 8))
    tt = next(r for r in validation_runs() if r.key == "torchtitan-2024-12-h100/t4-70b-tp8")
    assert tt.published_memory_bytes == round(71.9 * 2**30)
    assert tt.table.memory_kind == "reserved"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('recipe = "none"', 'recipe = "none"\nrecipes = 1'), "unknown key 'recipes'"),
        (("dp = 8", "dp = 8\nd_p = 8"), "run 'a': unknown key 'd_p'"),
        (('source = "a paper, Table 1"\n', ""), "'source' must be a non-empty string"),
        (("tokens_per_s_per_gpu = 8192", "step_s = 2"), "'step_s' given, but the table"),
        (("num_gpus = 8\n", ""), "planner parameter 'num_gpus' is required"),
        (("seq_len = 8192", "seq_lenn = 8192"), "[params]: unknown key 'seq_lenn'"),
        (("dp = 8", "dp = 8\npeak_memory_gib = 70"), "needs the table's 'memory' kind"),
        (("tokens_per_s_per_gpu = 8192", "tokens_per_s_per_gpu = 0"), "must be a positive number"),
    ],
)
def test_bad_files_are_refused_with_the_place_named(edit, message):
    old, new = edit
    text = TABLE.replace(old, new, 1)
    with pytest.raises(ScenarioError, match="scenarios/validation/example.toml") as err:
        runs_from_text(text, "example")
    assert message in str(err.value)


def test_two_rows_with_one_key_are_refused():
    text = TABLE + "\n" + TABLE[TABLE.index("[[table.run]]") :]
    with pytest.raises(ScenarioError, match="two rows with key 'example/a'"):
        runs_from_text(text, "example")


def test_the_page_is_current():
    assert DOC.read_text() == markdown_report()


README = DOC.parents[1] / "README.md"


def test_the_readmes_goal_table_is_current():
    """The README shows the validation set against its goals, as the page does: the block between
    its markers is ``python -m trainplan.interface.fidelity --validation --goals``'s output."""
    text = README.read_text()
    start = (
        "<!-- validation goals: python -m trainplan.interface.fidelity --validation --goals -->\n"
    )
    block = text[text.index(start) + len(start) : text.index("<!-- end validation goals -->")]
    assert block == "\n".join(goal_table(evaluate_all())) + "\n"
    assert "| measure | goal | now | met |" in DOC.read_text()


def test_the_goals_are_the_ones_set():
    """Dense ≤ 5 %, MoE ≤ 10 %, no run beyond 15 % (step time); memory ≤ 10 % mean."""
    assert GOALS == {
        "dense_mean_pct": 5.0,
        "moe_mean_pct": 10.0,
        "max_pct": 15.0,
        "memory_mean_pct": 10.0,
    }


@pytest.mark.slow
def test_every_row_evaluates_and_the_report_has_its_structure():
    """The whole set through ``trainplan evaluate --json``: no row errors; the report has a row
    per run, time statistics per framework, family and part (mean, median, max) and memory
    statistics over the rows that publish a peak. Error levels are not asserted: the goals are
    the model's to meet; the report records where it stands."""
    results = evaluate_all()
    assert [r.run.key for r in results if r.error] == []
    report = report_dict(results)
    assert len(report["rows"]) == len(results)
    for metric in ("time", "memory"):
        stats = report["stats"][metric]
        assert set(stats) == {"all", *GROUPS}
        for groups in stats.values():
            for s in groups.values():
                assert set(s) == {"rows", "mean_pct", "median_pct", "max_pct"}
                assert s["median_pct"] <= s["max_pct"]
    assert set(report["stats"]["time"]["family"]) == {"dense", "moe"}
    counted = [r for r in results if r.run.counted]
    assert report["stats"]["time"]["all"]["all"]["rows"] == len(counted)
    assert {c["key"] for c in report["cannot_express"]} == {
        r.run.key for r in results if not r.run.counted
    }
    for row in report["rows"]:
        assert row["source"] and row["predicted_step_s"] > 0
        shares = row["step_shares"]
        assert sum(shares.values()) <= 1 + 1e-9
    json.dumps(report)


@pytest.mark.slow
def test_the_command_prints_the_report_and_its_json():
    base = [sys.executable, "-m", "trainplan.interface.fidelity", "--validation"]
    text = subprocess.run(base, capture_output=True, text=True, check=True).stdout
    assert "time family moe" in text
    data = json.loads(subprocess.run([*base, "--json"], capture_output=True, text=True,
                                     check=True).stdout)  # fmt: skip
    assert len(data["rows"]) == len(validation_runs())
    bad = subprocess.run(
        [sys.executable, "-m", "trainplan.interface.fidelity", "--json"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--json applies to --validation only" in bad.stderr
