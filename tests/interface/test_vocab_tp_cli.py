"""The command-line and interface parts of tests/model/test_vocab_tp.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

import json
import subprocess
import sys


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainplan", *args], capture_output=True, text=True, timeout=120
    )


def test_pad_vocab_must_be_positive_everywhere(tmp_path):
    for command in (["evaluate", "--model", "llama3-8b"], ["search", "--model", "llama3-8b"]):
        out = _run(*command, "--gpus", "8", "--set", "vocab_multiple=0")
        assert out.returncode == 2
        assert out.stderr.strip() == "Error: --set vocab_multiple: 0 must be at least 1"
    scenario = tmp_path / "s.toml"
    scenario.write_text('model = "llama3-8b"\ngpus = 8\n[cluster]\nvocab_multiple = 0\n')
    out = _run("search", "--scenario", str(scenario))
    assert out.returncode == 2 and "vocab_multiple: 0 must be at least 1" in out.stderr


def test_the_search_takes_pad_vocab():
    out = _run(
        "search", "--model", "qwen2.5-7b", "--gpus", "8", "--tp", "4", "--framework", "fsdp2",
        "--set", "vocab_multiple=5", "--json",
    )  # fmt: skip
    d = json.loads(out.stdout)
    # 152,064 rounded up to a multiple of 5·4 = 20: 7,604·20 = 152,080
    assert d["model"]["padded_vocab_size"] == 152_080
    assert "vocabulary 152,064 padded to 152,080 rows (--set vocab_multiple 5 = 20" in " ".join(
        d["notes"]
    )
