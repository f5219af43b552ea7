"""Every transcript of the README and the documentation is what its command prints today
(``tests/transcripts.py`` says how a transcript is read). Run in separate processes, as a user
runs them, two at a time."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.transcripts import ROOT, blocks, drift, pages, pattern, transcripts, workdir

ALL = [t for page in pages() for t in transcripts(page)]


def test_transcripts_found():
    """The README's quick start and the guides' examples are transcripts the check runs."""
    names = {t.path.name for t in ALL}
    assert "README.md" in names and len(ALL) >= 10
    assert any(t.command.startswith("trainplan search --model llama3-405b") for t in ALL)


def test_pattern_reads_excerpts():
    shown = ("a", "...", "c … s", "d")
    assert pattern(shown).fullmatch("a\nb\nb\nc 1.2 s\nd\n")
    assert pattern(shown).fullmatch("a\nc x s\nd\n")
    assert not pattern(shown).fullmatch("a\nc 1 s\nd\ne\n")  # more output than shown
    assert not pattern(shown).fullmatch("a\nc 1 s\nD\n")


@pytest.mark.slow
def test_transcripts_match_their_commands():
    def run_block(block):
        return [(t, drift(t, Path(tmp))) for t in block]

    with workdir() as tmp, ThreadPoolExecutor(2) as pool:
        results = [r for block in pool.map(run_block, blocks(ALL)) for r in block]
    drifted = [f"{t.name}: $ {t.command}\n{actual}" for t, actual in results if actual is not None]
    assert not drifted, (
        f"{len(drifted)} transcript(s) drifted from what the command prints "
        "(python -m tests.transcripts FILE shows them):\n" + "\n".join(drifted)
    )


def test_every_transcript_is_runnable():
    """Each transcript is a whole command (no `…` standing for options left out)."""
    for t in ALL:
        assert "…" not in t.command and not re.search(r"(^|\s)\.\.\.(\s|$)", t.command), t.name
    assert ROOT.is_dir()
