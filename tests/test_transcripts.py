"""Every transcript of the README and the documentation is what its command prints today
(``tests/transcripts.py`` says how a transcript is read). Run in separate processes, as a user
runs them, two at a time."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.transcripts import (
    ROOT,
    by_page,
    pages,
    pattern,
    run_page,
    transcripts,
    transcripts_of_text,
    workdir,
)

ALL = [t for page in pages() for t in transcripts(page)]


def test_transcripts_found():
    """The README's quick start and the guides' examples are transcripts the check runs."""
    names = {t.path.name for t in ALL}
    assert "README.md" in names and len(ALL) >= 10
    assert any(t.command.startswith("trainplan search --model llama3-405b") for t in ALL)
    commands = {t.command for t in ALL}
    assert "trainplan sweep docs/sweeps/study.toml --point 93" in commands


def test_every_trainplan_line_of_a_block_is_a_transcript():
    """No form of block is skipped: every ``$ trainplan`` line inside a fenced block of the
    README or the documentation is a transcript's command (the sweeps page's blocks opened with
    a ``# …`` line saying what they run, and were not checked: their figures went stale)."""
    found = {(t.path, t.line) for t in ALL}
    shown = []
    for page in pages():
        fenced = False
        for n, line in enumerate(page.read_text().split("\n"), 1):
            if re.match(r"^\s*(```|~~~)", line):
                fenced = not fenced
            elif fenced and re.match(r"^\s*\$ trainplan ", line):
                shown.append((page, n))
    missing = [f"{p.relative_to(ROOT)}:{n}" for p, n in shown if (p, n) not in found]
    assert not missing and len(shown) == len(ALL), missing


def test_a_block_may_say_what_it_runs_first(tmp_path):
    """``# …`` lines before a block's first command are words, not output; the command's line
    number is its own."""
    text = "x\n```\n# the grid above\n$ trainplan gpus\nrow\n$ trainplan models\n```\n"
    first, second = transcripts_of_text(tmp_path / "p.md", text)
    assert (first.line, first.command, first.expected) == (4, "trainplan gpus", ("row",))
    assert (second.line, second.expected, second.block) == (6, (), first.block)


def test_pattern_reads_excerpts():
    shown = ("a", "...", "c … s", "d")
    assert pattern(shown).fullmatch("a\nb\nb\nc 1.2 s\nd\n")
    assert pattern(shown).fullmatch("a\nc x s\nd\n")
    assert not pattern(shown).fullmatch("a\nc 1 s\nd\ne\n")  # more output than shown
    assert not pattern(shown).fullmatch("a\nc 1 s\nD\n")


@pytest.mark.slow
def test_transcripts_match_their_commands():
    with ThreadPoolExecutor(2) as pool:  # two pages at a time, each page's commands in order
        results = [r for page in pool.map(run_page, by_page(ALL)) for r in page]
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


def test_long_blocks_run_only_on_request(tmp_path, monkeypatch):
    """A block marked ``# long run`` is read but left out unless long blocks run."""
    page = tmp_path / "page.md"
    page.write_text(
        "```\n# the grid\n# long run: about 6 minutes\n$ trainplan gpus\nnot this\n```\n"
    )
    (t,) = transcripts(page)
    assert t.long and t.command == "trainplan gpus"
    monkeypatch.delenv("TRAINPLAN_LONG_TRANSCRIPTS", raising=False)
    assert run_page([t]) == []
    assert [(t.path.name, t.command.split()[1]) for t in ALL if t.long] == [
        ("sweeps.md", "sweep"),  # the 243-point study
        ("sweeps.md", "sweep-plot"),  # its two figures
        ("sweeps.md", "sweep-plot"),
    ]


def test_a_width_the_terminal_chose_is_not_taken_for_the_output(tmp_path, monkeypatch):
    """A transcript runs as its command prints into a pipe, whatever terminal the check runs in:
    ``trainplan pipeline --stages 4 --microbatches 8`` shown in an 80-column terminal's bands
    (the tools guide's, before it gave ``--width 80``) drifts from the 120 columns the reader
    gets piped — the check set ``COLUMNS=80`` and passed it; with ``--width 80`` it matches."""
    monkeypatch.setenv("COLUMNS", "80")
    bands = "...\nstage 0 |F0-F1-F2-F3-..................B0====F4-B1====F5-B2=\n...\n```\n"
    page = tmp_path / "page.md"
    page.write_text(f"```\n$ trainplan pipeline --stages 4 --microbatches 8\n{bands}")
    ((_, actual),) = run_page(transcripts(page))
    assert actual is not None and max(len(line) for line in actual.splitlines()) > 100
    page.write_text(f"```\n$ trainplan pipeline --stages 4 --microbatches 8 --width 80\n{bands}")
    assert run_page(transcripts(page))[0][1] is None
