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


def test_fix_rewrites_a_drifted_page_and_keeps_its_elisions(tmp_path):
    """``python -m tests.transcripts --fix PAGE`` on a page whose ``trainplan gpus`` excerpt
    (indented under a list item) drifted: a row whose figures moved takes the printed row, a row
    no longer printed is dropped, a ``…`` row that still matches stays as written, the ``...``
    lines stay where they stood and the text around the block is untouched; the page then
    matches, and a second run has nothing to rewrite."""
    from tests.transcripts import Transcript, main, run

    with workdir() as tmp:
        printed = run(Transcript(tmp_path, 0, "trainplan gpus", (), 0), Path(tmp))
    rows = printed.rstrip("\n").split("\n")
    header, rule, v100, _, a100 = rows[:5]
    assert v100.startswith("V100-SXM2-32GB  32 GB") and a100.startswith("A100-80GB       80 GB")
    shown = [header, rule, v100.replace("32 GB", "31 GB"), "...", "A100-80GB       80 GB     …",
             "Z100            1 GB", "..."]  # fmt: skip
    page = tmp_path / "page.md"
    fence = "   ```console"
    body = "\n".join(f"   {line}" for line in ["$ trainplan gpus", *shown])
    page.write_text(f"# A page\n\n1. The parts:\n\n{fence}\n{body}\n   ```\n\nAfter.\n")
    assert main(["--fix", str(page)]) == 0
    want = [header, rule, v100, "...", "A100-80GB       80 GB     …", "..."]
    body = "\n".join(f"   {line}" for line in ["$ trainplan gpus", *want])
    assert page.read_text() == f"# A page\n\n1. The parts:\n\n{fence}\n{body}\n   ```\n\nAfter.\n"
    (t,) = transcripts(page)
    assert pattern(t.expected).fullmatch(printed)
    assert main(["--fix", str(page)]) == 0 and page.read_text().count("...") == 2


def test_fix_names_what_it_cannot_rewrite():
    """A printed line that would read as a command (``$ …``) or close the block is not
    written into the page: the transcript is named and left as it was."""
    from tests.transcripts import rewrite

    assert rewrite(("a", "..."), "a\n$ trainplan gpus\n") == (
        None,
        "a printed line would read as a command or a fence: '$ trainplan gpus'",
    )
    assert rewrite(("a",), "a\n```\n")[0] is None
    assert rewrite(("a 1", "...", "z"), "a 2\nb\nz\n") == (("a 2", "...", "z"), "")
