"""Every example of the Python guide (docs/guides/python.md) and of the Python API reference
(docs/reference/python.md) prints what the page says it prints:
each ```python block followed by "prints" and a ```text block runs in its own process, as a user
pastes it, and its output is compared line for line. (The guide's FP8 peak had drifted,
73,289,039,872 B against 74,203,398,144 B printed, with no test reading it; the reference's
peak, 76,361,367,552 B against 76,160,040,960 B, likewise.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
GUIDE = DOCS / "guides" / "python.md"
REFERENCE = DOCS / "reference" / "python.md"
EXAMPLE = re.compile(r"```python\n(.*?)```\s*\n\s*prints\s*\n\s*```text\n(.*?)```", re.S)
EXAMPLES = [e for page in (GUIDE, REFERENCE) for e in EXAMPLE.findall(page.read_text("utf-8"))]


def test_the_guide_has_examples_with_their_output():
    assert len(EXAMPLES) >= 4
    assert EXAMPLE.findall(REFERENCE.read_text("utf-8"))


@pytest.mark.parametrize(
    ("code", "shown"), EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))]
)
def test_each_example_prints_what_the_guide_shows(code, shown, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == shown.strip("\n").splitlines()
