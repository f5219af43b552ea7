"""What a new user met from a clean clone, each run as the user runs it: its own ``trainplan``
process (:func:`tests.cli_runs.trainplan`), text and ``--json`` where both apply."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, trainplan

LLAMA8_TP8 = ("--model", "llama3-8b", "--gpus", "8", "--tp", "8")


def test_userbuffers_without_sequence_parallelism_are_refused():
    """Megatron-LM d98e8a64dd ``validate_args`` asserts ``args.sequence_parallel`` when
    ``args.tp_comm_overlap`` ("Tensor parallel communication/GEMM overlap can happen only when
    sequence parallelism is enabled"): ``--no-sequence-parallel`` with ``tp_comm_overlap=full``
    at tp 8 is one line and exit 2 (it was rc 0, with 1.65 GB of userbuffers and tp exposed
    257.3 → 234.1 s); with sequence parallelism it runs, userbuffers counted."""
    args = ("evaluate", "--model", "llama3-70b", "--tp", "8", "--set", "tp_comm_overlap=full")
    line = refusal(trainplan(*args, "--no-sequence-parallel"))
    assert line == (
        "--set tp_comm_overlap: full (Transformer Engine's userbuffers) needs sequence "
        "parallelism at tp 8 (Megatron-LM's validate_args asserts it); turn sequence_parallel "
        "on or use tp_comm_overlap async"
    )
    done = trainplan(*args, "--json")
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    assert d["time"]["tp_comm_overlap"] == "full" and d["memory"]["userbuffer_bytes"] > 0


def test_a_search_keeps_the_frameworks_that_run_userbuffers():
    """A search over megatron and fsdp2 with ``tp_comm_overlap=full`` drops the fsdp2 candidates
    (torchtitan has no userbuffers) and answers with megatron, where it stopped at the first
    fsdp2 table; fsdp2 alone is refused by the rule's own line."""
    # pp 1: the rule is under test, not the search (its other shapes' tables take 10 s)
    args = ("search", "--model", "llama3-8b", "--gpus", "8", "--pp", "1")
    args += ("--set", "tp_comm_overlap=full")
    done = trainplan(*args, "--framework", "megatron", "--framework", "fsdp2", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["layout"]["framework"] == "megatron"
    line = refusal(trainplan(*args, "--framework", "fsdp2"))
    assert line == (
        "--set tp_comm_overlap: full (Transformer Engine's userbuffers) needs framework "
        "megatron or textbook, not fsdp2"
    )


def test_async_tp_without_sequence_parallelism_runs_as_none():
    """torchtitan b5bcd76c6 runs ``enable_async_tensor_parallel`` without sequence parallelism,
    and Inductor's ``micro_pipeline_tp_pass`` fuses only all-gathers and reduce-scatters: the
    plan's all-reduces are all waited for, so Llama 3 8B at tp 8 on 8 H100s (fsdp2) exposes the
    whole tp time, as under ``none`` (it hid the backward all-reduces: 58.206 s exposed of
    86.632 s). With sequence parallelism async TP still hides part of it."""
    base = ("evaluate", *LLAMA8_TP8, "--framework", "fsdp2", "--json")
    runs = {
        o: json.loads(
            trainplan(*base, "--no-sequence-parallel", "--set", f"tp_comm_overlap={o}").stdout
        )
        for o in ("none", "async-tp")
    }
    tp = {o: next(r for r in d["traffic"] if r["axis"] == "tp") for o, d in runs.items()}
    assert tp["async-tp"]["exposed_seconds"] == tp["async-tp"]["seconds"]
    assert tp["async-tp"]["seconds"] == tp["none"]["seconds"]
    assert round(tp["async-tp"]["seconds"], 3) == 86.632
    assert runs["async-tp"]["time"]["step_s"] == runs["none"]["time"]["step_s"]
    assert runs["async-tp"]["time"]["tp_comm_overlap"] == "none"
    sp = json.loads(trainplan(*base, "--set", "tp_comm_overlap=async-tp").stdout)
    row = next(r for r in sp["traffic"] if r["axis"] == "tp")
    assert row["exposed_seconds"] < row["seconds"] and sp["time"]["tp_comm_overlap"] == "async-tp"


def test_a_misspelt_run_key_names_the_file_the_run_and_the_key_meant(tmp_path):
    """``calibrate`` with ``global_batch = 64`` in a ``[[run]]`` (a scenario file's spelling) was
    a 2,700-character line of every key, internal ones included, naming neither file nor run;
    now one line: the file, the run's number and label, the key, the parameter meant and where
    the names are listed."""
    bad = tmp_path / "m.toml"
    run = '[[run]]\nlabel = "8B"\nstep_seconds = 5.0\nmodel = "llama3-8b"\ndp = 8\n'
    bad.write_text(f'gpu = "H100-SXM"\n{run}global_batch = 64\n')
    line = refusal(trainplan("calibrate", str(bad)))
    assert line == (
        f"measurements {bad}: run 1 ('8B'): global_batch: not a planner parameter; did you mean "
        "global_batch_size? (a scenario file's global_batch is global_batch_size here; "
        "docs/guides/python.md#parameter-names lists them)"
    )
    bad.write_text(f'gpu = "H100-SXM"\n{run}\n{run}global_bach_size = 64\n')
    line = refusal(trainplan("calibrate", str(bad)))
    assert line.startswith(
        f"measurements {bad}: run 2 ('8B'): global_bach_size: not a planner parameter; did you "
        "mean global_batch_size? (docs/guides/python.md"
    )
    assert len(line) < 250 and "model_spec" not in line


def test_the_guide_lists_every_parameter_and_no_internal_one():
    """docs/guides/python.md "Parameter names" is :data:`interface.inputs.PARAMETERS`, which
    leaves out the names the interface passes on (``model_spec``, ``training_defaults``,
    ``name``, a search's ``*_fsdp2`` checks)."""
    import re
    from pathlib import Path

    from trainplan.interface.inputs import INTERNAL_KEYS, KNOWN_KEYS, PARAMETERS

    text = (Path(__file__).resolve().parents[1] / "docs/guides/python.md").read_text()
    block = text.split("<!-- interface.inputs.PARAMETERS -->\n", 1)[1].split("\n\n", 1)[0]
    assert set(re.findall(r"`([a-z0-9_]+)`", block)) == PARAMETERS
    assert PARAMETERS == KNOWN_KEYS - INTERNAL_KEYS and "model_spec" not in PARAMETERS


def test_a_table_entry_is_refused_as_typed():
    """``--set overlap.dp=0.5`` under the roofline model (which times overlaps by mechanism) was
    refused as ``overlap: {'dp': 0.5}`` (a Python dict); the line shows the entries as typed,
    headed by the table the user set."""
    why = (
        "does not apply: the roofline time model (the default for megatron, deepspeed and fsdp2) "
        "times each operation and overlaps by mechanism; this option belongs to --set "
        "time_model=single"
    )
    args = ("evaluate", "--model", "llama3-8b", "--set", "overlap.dp=0.5")
    assert refusal(trainplan(*args)) == f"--set overlap: dp=0.5 {why}"
    line = refusal(trainplan(*args, "--set", "overlap.tp=0.25"))
    assert line == f"--set overlap: dp=0.5, tp=0.25 {why}"


def _without(module: str, *args: str, cwd) -> object:
    """``trainplan ARGS`` in its own process with ``module`` not importable (an extra not
    installed)."""
    import subprocess
    import sys

    code = (
        f"import sys; sys.modules[{module!r}] = None; sys.argv = ['trainplan', *{list(args)!r}]; "
        "from trainplan.interface.cli import main; main()"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_a_missing_extra_is_installed_as_the_readme_installs(tmp_path):
    """The README installs from the checkout (``pip install -e .``, ``pip install -e
    '.[web]'``); a missing extra's hint says the same (``pip install 'trainplan[sweep]'`` would
    fetch another trainplan from PyPI), and no hint or page says otherwise."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assert "pip install -e '.[web]' && trainplan serve" in (root / "README.md").read_text()
    (tmp_path / "g.toml").write_text('model = "megatron-1.7b"\n[sweep]\ngpus = [8]\n')
    line = refusal(_without("pyarrow", "sweep", "g.toml", cwd=tmp_path))
    assert line == "sweep: pyarrow is not installed; pip install -e '.[sweep]'"
    plot = ("pipeline", "--stages", "2", "--microbatches", "2", "--svg", "x.svg")
    line = refusal(_without("matplotlib", *plot, cwd=tmp_path))
    assert line == "plots: matplotlib is not installed; pip install -e '.[plot]'"
    files = [root / "README.md", *(root / "docs").rglob("*.md")]
    files += [p for d in ("interface", "model", "trainplan") for p in (root / d).rglob("*.py")]
    assert [str(p) for p in files if "pip install 'trainplan[" in p.read_text()] == []


HEAT_GRID = """tokens = 1e11
[space]
pp = [1]
zero = [1]
schedule = ["1f1b"]
[sweep]
model = ["megatron-1.7b", "llama3-8b"]
gpus = [8, 16]
[what_if]
hbm_capacity = [1, 0.5]
peak_flops = [1, 2]
"""


def _svg_texts(svg: str) -> list[tuple[str, str, float, float]]:
    """(text, fill, left x, right x) of each text matplotlib's SVG writer drew: the comment it
    writes before each, the group's fill (black when it sets none), its translate and scale,
    and its last glyph's offset plus one glyph (DejaVu Sans: at most 100 font units)."""
    import re

    out = []
    pattern = re.compile(
        r"<!-- (.*?) -->\n\s*<g (?:style=\"fill: (#[0-9a-f]+)\" )?transform=\"translate\("
        r"([-\d.]+) [-\d.]+\) scale\(([\d.]+) -[\d.]+\)\">(.*?)</g>",
        re.S,
    )
    for m in pattern.finditer(svg):
        x, scale = float(m.group(3)), float(m.group(4))
        glyphs = re.findall(
            r'<use xlink:href="[^"]+"(?: transform="translate\(([\d.]+) 0\)")?', m.group(5)
        )
        last = max([float(g) for g in glyphs if g] or [0.0])
        out.append((m.group(1), m.group(2) or "#000000", x, x + scale * (last + 100)))
    return out


def test_a_narrow_heatmap_keeps_its_title_and_its_numbers_read(tmp_path):
    """``sweep-plot --kind heatmap`` with two multipliers (a 4.4-inch figure): its title was cut
    at the figure's edge ("…best over peak_flop") and every number was white, unreadable on
    viridis's yellow end. Now the title wraps inside the figure (matplotlib's ``wrap=True``
    under the constrained layout) and each number is black or white by its cell's WCAG
    luminance: the ×1 column is each model's reference, 1.00, the colormap's yellow end
    (viridis_r at 0: (0.993, 0.906, 0.144), luminance 0.78 > 0.179: black); llama3-8b with
    half its HBM is the dark end (white)."""
    import re

    (tmp_path / "h.toml").write_text(HEAT_GRID)
    done = trainplan("sweep", "h.toml", "--workers", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    args = ("h.parquet", "--png", "h.svg", "--kind", "heatmap", "--what-if", "hbm_capacity")
    done = trainplan("sweep-plot", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    svg = (tmp_path / "h.svg").read_text()
    width = float(re.search(r'<svg [^>]*width="([\d.]+)pt"', svg).group(1))
    texts = _svg_texts(svg)
    title = [t for t in texts if t[0].startswith("hbm_capacity") or t[0].endswith("gpus)")]
    assert " ".join(t[0] for t in title) == (
        "hbm_capacity: time to train ÷ its ×1 value (best over peak_flops, gpus)"
    )
    assert len(title) == 2 and all(0 <= left and right <= width for _, _, left, right in title)
    cells = {}
    for text, fill, _, _ in texts:
        if re.fullmatch(r"\d\.\d\d", text):
            cells.setdefault(text, set()).add(fill)
    assert cells["1.00"] == {"#000000"}  # 4 cells: each model's ×1 column
    assert max(cells) > "1.00" and cells[max(cells)] == {"#ffffff"}


def test_every_example_names_its_source():
    """The 20 worked examples each name a source; ``grpo-long-rollouts`` named none (and ran
    ``grpo-rule-70b``'s very inputs: its source gives no rollout lengths, so its point, the
    rollout's share of FLOPs and time, joined ``grpo-rule-70b``). The header shows the source as
    the others do, in brackets after what it says. The scoring phase counts the actor's old
    log-probs beside the reference's forward (4N, not 2N): a sixth of the FLOPs in the rollout."""
    from trainplan.interface.examples import examples

    missing = [name for name, ex in examples().items() if not ex.get("source")]
    assert missing == [] and len(examples()) == 20 and "grpo-long-rollouts" not in examples()
    done = trainplan("example", "grpo-rule-70b")
    assert done.returncode == 0, done.stderr
    head = done.stdout.splitlines()[0]
    assert head.startswith(
        "Example grpo-rule-70b: GRPO with a rule-based reward, as DeepSeek-R1: a sixth of the "
        "FLOPs in the rollout, two thirds of the time  [DeepSeek-AI 2025 (DeepSeek-R1) §2.2.2"
    )
    assert "Kaplan et al. 2020 §2.1" in head
    assert "OpenRLHF measures 80% of RLHF training time in sample generation" in head


def test_the_output_layer_freed_is_a_subtraction_not_a_negative_row():
    """``search --model llama3-8b --gpus 8 --framework fsdp2`` printed ``output layer released
    before it -2.27 GB``; the row is now ``less: …`` with its bytes, and the lines still add up
    to the total: 24.09 + 1.58 + 30.08 + 2.27 + 0.27 − 2.27 + 8.30 + 2.75 = 67.07 GB (the
    answer's model state, buffers, layers, embedding/output, working set, less the output
    layer, loss working set and NCCL's buffers)."""
    import re

    # pp 1, where the answer is (dp 4 × tp 2), keeps the other shapes' 10 s of tables out
    done = trainplan("search", "--model", "llama3-8b", "--gpus", "8", "--framework", "fsdp2",
                     "--pp", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    memory = done.stdout.split("Memory per GPU", 1)[1].split("  verdict:", 1)[0]
    rows = re.findall(r"^  (.+?)\s{2,}(-?[\d,.]+) GB$", memory, re.M)
    assert rows and all(not value.startswith("-") for _, value in rows)
    got = dict(rows)
    assert got["less: output layer, freed before the backward"] == "2.27"
    adds = [float(v) for name, v in rows if not name.startswith(("=", "less:", "capacity"))]
    total = sum(adds) - float(got["less: output layer, freed before the backward"])
    assert abs(total - float(got["= total (peak: forward-backward)"])) < 0.015
