"""What a new user met on a clean clone, each call run as the user runs it: its own ``trainplan``
process (text and ``--json`` where both apply), all of them in parallel once per session
(:func:`tests.cli_runs.run_many`).

* a search whose space a framework rule empties names that rule, as ``evaluate`` words it, exit 2
  (it said "No layout satisfies the constraints: - divisibility: …", exit 1);
* a tp that does not divide the heads is refused by that rule whenever it applies (it was only
  when no other line was said), and a requested value no layout uses is said in the notes;
* ``--set help`` gives every key its help (``fp8_activation_storage`` and ``muon_tp_mode`` had
  none);
* a sweep grid trimmed from the documented one keeps a price for a part it no longer runs: noted
  as unused in the summary, not refused;
* ``--model bm/mixtral.json`` is named ``mixtral`` (its stem), not ``bm`` (its folder); a
  ``config.json`` still takes its folder's name;
* the host-memory and reserved lines stand in the memory lines' column;
* ``sweep-plot`` labels every GPU count of the sweep (384 between 256 and 512 had no label).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.cli_runs import Done, refusal, run_many

S70 = ["search", "--model", "llama3-70b"]
DS128 = [*S70, "--gpus", "128", "--framework", "deepspeed"]
DS_RULE = "with --framework deepspeed needs pp = 1 (its pipeline engine allows ZeRO-0/1 only)"
HEADS = "--tp: 3 does not divide num_attention_heads = 64"

EV_DS3 = ["evaluate", "--model", "llama3-70b", "--framework", "deepspeed", "--zero", "3"]

CALLS: dict[str, list[str]] = {
    "evaluate ds pp 4 zero 3": [*EV_DS3, "--pp", "4", "--dp", "32"],
    "ds pp 4 zero 3": [*DS128, "--pp", "4", "--zero", "3"],
    "ds pp 4 zero 2": [*DS128, "--pp", "4", "--zero", "2"],
    "ds pp 2 4 zero 3": [*DS128, "--pp", "2", "--pp", "4", "--zero", "3"],
    "tp 3 on 64": [*S70, "--gpus", "64", "--tp", "3"],
    "tp 3 on 96": [*S70, "--gpus", "96", "--tp", "3"],
    "tp 3 8 on 96": [*S70, "--gpus", "96", "--tp", "3", "--tp", "8"],
    "ds pp 1 4 zero 3": [*DS128, "--pp", "1", "--pp", "4", "--zero", "3"],
    "search set help": ["search", "--set", "help"],
    "evaluate set help": ["evaluate", "--set", "help"],
    "ds offload": [*EV_DS3, "--offload-params", "--dp", "64"],
}
JSON_TOO = (
    "ds pp 4 zero 3", "ds pp 4 zero 2", "ds pp 2 4 zero 3", "tp 3 on 64", "tp 3 8 on 96",
    "ds pp 1 4 zero 3",
)  # fmt: skip


@pytest.fixture(scope="module")
def done() -> dict[str, Done]:
    calls = {**CALLS, **{f"{k} json": [*CALLS[k], "--json"] for k in JSON_TOO}}
    return run_many(calls)


@pytest.mark.parametrize("fmt", ["", " json"])
def test_a_framework_rule_that_empties_the_search_is_named(done, fmt):
    """DeepSpeed's pipeline engine runs ZeRO-0/1 only (model.frameworks.check_framework), so
    ``--pp 4 --zero 3`` (or 2) leaves the search no layout: the rule evaluate states, exit 2."""
    ev = refusal(done["evaluate ds pp 4 zero 3"])
    assert ev == f"--zero: 3 {DS_RULE}; pp is 4"
    assert refusal(done["ds pp 4 zero 3" + fmt]) == ev  # one rule, the same words
    assert refusal(done["ds pp 4 zero 2" + fmt]) == f"--zero: 2 {DS_RULE}; pp is 4"
    # two pp values, both refused: the first's line
    assert refusal(done["ds pp 2 4 zero 3" + fmt]) == f"--zero: 3 {DS_RULE}; pp is 2"


@pytest.mark.parametrize("fmt", ["", " json"])
def test_tp_against_the_heads_wins_whenever_it_applies(done, fmt):
    """Llama 3 70B has 64 heads: tp 3 is refused by that rule on 64 GPUs (where 3 divides no
    GPU count too, which it said instead, exit 1) as on 96."""
    assert refusal(done["tp 3 on 64" + fmt]) == HEADS
    if not fmt:
        assert refusal(done["tp 3 on 96"]) == HEADS


def test_an_unusable_requested_value_is_said_in_the_notes(done):
    """``--tp 3 --tp 8`` on 96 GPUs searches tp 8 only; the notes say tp 3 was dropped and why
    (one line), in text and JSON; ``--pp 1 --pp 4 --zero 3`` under deepspeed keeps pp 1 and says
    why pp 4 is unused."""
    note = f"requested values no layout uses: tp 3 ({HEADS})"
    text = done["tp 3 8 on 96"]
    assert text.returncode == 0, text.stderr[-2000:]
    assert f"Note: {note}" in text.stdout.splitlines()
    d = json.loads(done["tp 3 8 on 96 json"].stdout)
    assert d["layout"]["tp"] == 8 and note in d["notes"]
    ds = json.loads(done["ds pp 1 4 zero 3 json"].stdout)
    assert ds["layout"]["pp"] == 1
    assert f"requested values no layout uses: pp 4 (--zero: 3 {DS_RULE}; pp is 4)" in ds["notes"]
    assert "requested values" in done["ds pp 1 4 zero 3"].stdout


@pytest.mark.parametrize("command", ["search", "evaluate"])
def test_every_settable_key_has_its_help(done, command):
    """``trainplan COMMAND --set help``: each key's line (``  key [table] (kind)``) is followed by
    its help, indented; a key without help (fp8_activation_storage, muon_tp_mode) was a bare
    line. Checked over every key the command takes, so a new key cannot come without help."""
    from trainplan.interface.scenario_keys import EVALUATE_KEYS, SEARCH_KEYS

    d = done[f"{command} set help"]
    assert d.returncode == 0, d.stderr[-2000:]
    lines = d.stdout.splitlines()[1:]
    keys = [x.split()[0] for x in lines if x.startswith("  ") and not x.startswith("   ")]
    assert set(keys) == set(EVALUATE_KEYS if command == "evaluate" else SEARCH_KEYS)
    for i, x in enumerate(lines):
        if x.startswith("  ") and not x.startswith("   "):
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            assert nxt.startswith("      ") and nxt.strip(), f"{x.strip()} has no help"
    text = " ".join(x.strip() for x in lines)
    assert "deepseek_v3 (DeepSeek-V3 report, arXiv 2412.19437 §3.3.3)" in text
    assert "Megatron-Core's --muon-tp-mode: duplicated" in text


def test_key_help_covers_every_key():
    """The library's list (the CLI reference's table reads it too): no key without help."""
    from trainplan.interface.cli.reference import scenario_key_rows

    assert [r["key"] for r in scenario_key_rows() if not r["help"].strip()] == []


TRIMMED = """description = "the documented grid, trimmed to one part"
objective = "time-to-train"
tokens = 15e12
gpu_hour_price = { H100-SXM = 2.5, H200 = 3.2 }
[space]
pp = [1]
[sweep]
model = ["megatron-1.7b"]
gpu = ["H100-SXM"]
gpus = [8]
"""
UNUSED = (
    "gpu_hour_price: H200 is priced and no point runs on it (this grid: H100-SXM); its price "
    "is unused"
)


def test_a_trimmed_grid_keeps_an_unused_price_as_a_note(tmp_path):
    """docs/sweeps.md's grid prices H100-SXM and H200; trimmed to H100-SXM it was refused
    ("gpu_hour_price: 'H200' is not a part of this grid"). Now it runs and the summary says the
    price is unused, text and JSON; a name that is no catalogue part (H100: ambiguous) is still
    refused, one line, exit 2."""
    (tmp_path / "trim.toml").write_text(TRIMMED)
    (tmp_path / "typo.toml").write_text(TRIMMED.replace("H200 = 3.2", "H100 = 3.2"))
    done = run_many(
        {
            "text": ["sweep", "trim.toml", "--workers", "1"],
            "json": ["sweep", "trim.toml", "--workers", "1", "--json", "--out", "j.parquet"],
            "typo": ["sweep", "typo.toml", "--workers", "1"],
        },
        cwd=tmp_path,
    )
    assert done["text"].returncode == 0, done["text"].stderr[-2000:]
    assert f"Note: {UNUSED}" in done["text"].stdout.splitlines()
    s = json.loads(done["json"].stdout)
    assert s["notes"] == [UNUSED] and s["statuses"] == {"optimal": 1}
    assert s["best"][0]["cost_usd"] is not None  # the H100-SXM price is used
    line = refusal(done["typo"])
    assert (
        "gpu_hour_price: 'H100' is not a part of this grid (H100-SXM; write the catalogue " in line
    )
    assert "'H100' is ambiguous" in line


def test_a_config_file_not_named_config_json_is_named_after_its_stem(tmp_path):
    """The file's stem names the model unless it is ``config.json`` (then its folder, the Hugging
    Face layout), in the text's first line and the JSON's model name."""
    from pathlib import Path

    hf = Path(__file__).resolve().parent / "data" / "hf" / "mixtral-8x7b" / "config.json"
    (tmp_path / "bm").mkdir()
    (tmp_path / "bm" / "mixtral.json").write_bytes(hf.read_bytes())
    (tmp_path / "mixtral-8x7b").mkdir()
    (tmp_path / "mixtral-8x7b" / "config.json").write_bytes(hf.read_bytes())
    ev = ["evaluate", "--dp", "8"]
    done = run_many(
        {
            "text": [*ev, "--model", "bm/mixtral.json"],
            "json": [*ev, "--model", str(tmp_path / "bm" / "mixtral.json"), "--json"],
            "folder": [*ev, "--model", "mixtral-8x7b/config.json", "--json"],
        },
        cwd=tmp_path,
    )
    assert done["text"].stdout.startswith("mixtral: 46,702,792,704 parameters"), done["text"].stderr
    assert json.loads(done["json"].stdout)["model"]["name"] == "mixtral"
    assert json.loads(done["folder"].stdout)["model"]["name"] == "mixtral-8x7b"


def test_host_and_reserved_lines_align_with_the_memory_lines(done):
    """DeepSpeed ZeRO-3 with the parameters offloaded: the memory lines' labels run past 44
    columns (the gathered weights' label), and the host-memory and reserved lines kept 44, their
    figures two columns left of the others'."""
    d = done["ds offload"]
    assert d.returncode == 0, d.stderr[-2000:]
    lines = d.stdout.splitlines()
    total = next(x for x in lines if x.startswith("  = total"))
    host = next(x for x in lines if x.startswith("  host memory (offloaded), per GPU"))
    reserved = next(x for x in lines if x.startswith("  reserved at least"))
    end = total.index(" GB") + 3  # the figures' right edge
    assert len("  gathered weights (layers kept for reuse, output, prefetch)") - 2 > 44
    for line in (host, reserved):
        assert line.index(" GB") + 3 == end, (line, total)


def test_sweep_plot_labels_every_gpu_count(tmp_path):
    """A sweep over 16, 24 and 32 GPUs: the scaling figure's GPU axis labels 24 too (the log-2
    axis labelled only the powers of two). The value axis was log whatever its range, labelled
    1.35×10³ or 4.04×10¹: the cost ($1,347–$1,402) and MFU (39.7–41.3 %) span far less than a
    decade, so both axes are linear, their labels plain numbers with thousands separators
    (1,350 … 1,400; 40.0 …), every tick label at 7 pt."""
    grid = (
        'model = "megatron-1.7b"\ntokens = 1e11\ngpu_hour_price = 2\nglobal_batch = 96\n'
        "[space]\npp = [1]\n[sweep]\ngpus = [16, 24, 32]\n"
    )
    (tmp_path / "g.toml").write_text(grid)
    swept = run_many({"sweep": ["sweep", "g.toml", "--workers", "1"]}, cwd=tmp_path)["sweep"]
    assert swept.returncode == 0, swept.stderr[-2000:]
    done = run_many(
        {
            m: ["sweep-plot", "g.parquet", "--png", f"{m}.svg", "--metric", m]
            for m in ("cost", "mfu")
        },
        cwd=tmp_path,
    )
    for m, d in done.items():
        assert d.returncode == 0, d.stderr[-2000:]
        svg = (tmp_path / f"{m}.svg").read_text()
        for count in ("16", "24", "32"):
            assert f"<!-- {count} -->" in svg, (m, count)
        assert "times10" not in svg, m
    # the value axis's labels (text as paths, its text in a comment), each drawn at 7 pt
    labels = {}
    for m in ("cost", "mfu"):
        svg = (tmp_path / f"{m}.svg").read_text()
        found = re.findall(
            r"<!-- ([\d,]+\.?\d*) -->\s*<g transform=\"translate\([^)]*\) scale\(([\d.]+)", svg
        )
        assert {size for _, size in found} == {"0.07"}, found
        labels[m] = [text for text, _ in found if text not in ("16", "24", "32")]
    # ticks of 10 and 0.25 since the optimizer step zeroed the whole gradient buffer
    # (model.terms.optimizer_time.whole_buffer_zeroing_bytes) narrowed the plotted ranges
    # (50 and 0.5 before: 1,350, 1,400; 40.0)
    assert "1,360" in labels["cost"] and "1,400" in labels["cost"], labels
    assert all(re.fullmatch(r"\d\d\.\d\d", x) for x in labels["mfu"]) and "40.00" in labels["mfu"]


def test_the_web_guide_names_every_tab():
    """docs/guides/web.md's "Its tabs are …" sentence left out Sweep: it names each tab of the
    navigation (interface.web.pages.PAGES), in its order."""
    from pathlib import Path

    from trainplan.interface.web.pages import PAGES

    text = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "web.md").read_text()
    start = text.index("Its tabs are the planner's jobs: ")
    sentence = " ".join(text[start : text.index(" (what each tab", start)].split())
    named = re.findall(r"\*\*(.+?)\*\*", sentence)
    assert named == list(PAGES.values())


def test_the_about_tab_describes_every_tab():
    """The About page's list of tabs (a link and a line each) left out Sweep."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app
    from trainplan.interface.web.pages import PAGES

    page = TestClient(create_app(("testserver",))).get("/about").text
    described = re.findall(r"<dt>.*?</dt>", page)
    linked = {k for dt in described for k in re.findall(r'href="/(\w+)"', dt)}
    assert linked == set(PAGES) - {"about"}
