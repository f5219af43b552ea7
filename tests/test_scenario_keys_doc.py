"""Scenario files as a user writes them: the manual's example and key list agree with the keys the
reader checks (:data:`interface.scenario_file.VALUE_KINDS`), and every refusal of a file's value
names the file and the key as the file places it (fresh processes, as a user runs them)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli_runs import refusal, run_many
from trainplan.interface.cli.reference import scenario_key_rows, scenario_keys_markdown
from trainplan.interface.scenario_file import VALUE_KINDS
from trainplan.interface.scenario_keys import SEARCH_KEYS, table_of

CLI_DOC = Path(__file__).parents[1] / "docs" / "guides" / "cli.md"


def _example() -> str:
    text = CLI_DOC.read_text()
    start = text.index("## Scenario files")
    return text[text.index("```toml", start) + len("```toml") : text.index("```\n", start + 60)]


def test_the_reference_table_lists_every_key_the_reader_takes():
    """The CLI reference's table (generated from scenario_key_rows) has one row per key of the
    reader's table, in the table the reader files it under; the guide links to it."""
    rows = scenario_key_rows()
    assert sorted(r["key"] for r in rows) == sorted(SEARCH_KEYS)
    for r in rows:
        assert r["table"] == (f"[{table_of(r['key'])}]" if table_of(r["key"]) else "top")
    table = "\n".join(scenario_keys_markdown())
    assert all(f"| `{k}` |" in table for k in SEARCH_KEYS)
    assert "../reference/cli.md#scenario-keys-set" in CLI_DOC.read_text()


def test_the_guides_example_names_only_keys_the_reader_takes_and_is_accepted(tmp_path):
    """Every key the example sets or names in its comments is a key; its values are accepted
    (global_batch_tokens = 16,777,216 = 2048 × 8192 sequences of seq_len 8192, a whole number)."""
    example = _example()
    named = set(re.findall(r"^([a-z_0-9]+) =", example, re.M))
    for comment in re.findall(r"#([^\n]*)", example):
        named |= {w for w in re.findall(r"\b([a-z][a-z0-9]*_[a-z0-9_]+)\b", comment)}
    words = {"flash_attention_2", "ulysses_kv_repeat"}
    unknown = sorted(k for k in named - words if k not in VALUE_KINDS)
    assert unknown == [], unknown
    assert 16_777_216 == 2048 * 8192 and "global_batch_tokens = 16777216" in example
    from trainplan.interface.scenario_file import load_scenario

    path = tmp_path / "s.toml"
    path.write_text(example)
    load_scenario(path)  # raises on an unknown key or a value of the wrong kind


BASE = 'model = "llama3-70b"\ngpu = "H100-SXM"\ngpus = 64\nseq_len = 8192\n'


def test_a_files_refusals_name_the_file_and_the_key(tmp_path):
    """Each line as a user reads it: the file, the key (a table's as ``space.tp``), the value and
    the rule; a misspelt key with the closest one."""
    files = {
        "tokens": BASE + 'global_batch_tokens = "4,000,000"\n',
        "nomodel": 'gpu = "H100-SXM"\ngpus = 64\n',
        "unknown": BASE + "sequence_length = 4096\n",
        "headroom": BASE + '[constraints]\nheadroom = "five"\n',
        "space": BASE + '[space]\ntp = "four"\n',
        "twice": 'model = "llama3-70b"\nmodel = "llama3-8b"\n',
    }
    for name, text in files.items():
        (tmp_path / f"{name}.toml").write_text(text)
    done = run_many({n: ["search", "--scenario", f"{n}.toml"] for n in files}, cwd=tmp_path)
    lines = {n: refusal(d) for n, d in done.items()}
    # 4,000,000 / 8,192 = 488.28…: not a whole number of sequences; 488 × 8,192 = 3,997,696
    # and 489 × 8,192 = 4,005,888 beside it, named as evaluate names them
    assert lines["tokens"] == (
        "scenario tokens.toml: global_batch_tokens: 4,000,000 is not a whole number of "
        "sequences of 8,192 (3,997,696 is 488, 4,005,888 is 489)"
    )
    assert lines["nomodel"].startswith(
        'scenario nomodel.toml: model missing: give model = "NAME" in the file'
    )
    assert lines["unknown"].startswith(
        "scenario unknown.toml: unknown key 'sequence_length'; did you mean seq_len? (known: "
    )
    assert lines["headroom"] == (  # "5%" is read: 0.05 (model.quantities)
        "scenario headroom.toml: constraints.headroom: 'five' is not a number: give a fraction "
        "from 0 to 1, or a percent such as 40%"
    )
    assert lines["space"].startswith("scenario space.toml: space.tp: 'four' is not a number")
    assert lines["twice"] == (
        "scenario twice.toml: 'model': given twice (line 2); give each key once"
    )
