"""The transcripts of the README and the documentation: fenced blocks whose first line is
``$ trainplan …``. Each ``$`` line is a command (a line ending in ``\\`` continues it); the lines
after it, up to the next ``$`` line, are what it prints (stdout and stderr together). A line
``...`` (or ``…``) alone stands for any number of lines; ``…`` inside a line for any text (a
timing, a long source). Without a final ``...`` the output must end where the transcript does.

    python -m tests.transcripts            # run every transcript, print the ones that drifted
    python -m tests.transcripts FILE.md    # those of one page, with their actual output
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = ("...", "…")


@dataclass(frozen=True)
class Transcript:
    """One command of a transcript and the lines shown after it."""

    path: Path
    line: int
    command: str
    expected: tuple[str, ...]
    block: int
    """The line of the block's fence: a block's commands run in order, in one folder (a later
    command may read what an earlier one wrote)."""

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """The README and every documentation page."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def transcripts(path: Path) -> list[Transcript]:
    """The transcripts of one Markdown file, in order."""
    out: list[Transcript] = []
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)(```+|~~~+)", lines[i])
        if not fence:
            i += 1
            continue
        indent, marker = fence.group(1), fence.group(2)
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(marker):
            j += 1
        body = [line.removeprefix(indent) for line in lines[i + 1 : j]]
        if body and body[0].startswith("$ trainplan "):
            out.extend(_commands(path, i + 2, body))
        i = j + 1
    return out


def _commands(path: Path, first: int, body: list[str]) -> list[Transcript]:
    out: list[Transcript] = []
    k = 0
    while k < len(body):
        start = k
        command = body[k][2:]
        while command.endswith("\\"):
            k += 1
            command = command[:-1] + " " + body[k].strip()
        k += 1
        expected = []
        while k < len(body) and not body[k].startswith("$ "):
            expected.append(body[k].rstrip())
            k += 1
        while expected and not expected[-1]:
            expected.pop()
        out.append(Transcript(path, first + start, command.strip(), tuple(expected), first - 1))
    return out


def pattern(expected: tuple[str, ...]) -> re.Pattern[str]:
    """The regular expression the output must match as a whole (see the module docstring)."""
    parts = []
    for line in expected:
        if line.strip() in SKIP:
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*".join(re.escape(p) for p in line.split("…")) + r"\n")
    return re.compile("".join(parts))


def run(t: Transcript, cwd: Path) -> str:
    """What the command prints, stdout and stderr together, trailing spaces stripped."""
    args = shlex.split(t.command)
    assert args[0] == "trainplan", t.command
    env = {**os.environ, "COLUMNS": "80", "LINES": "24"}  # a terminal's default size
    proc = subprocess.run(
        [sys.executable, "-m", "trainplan", *args[1:]],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    text = "\n".join(line.rstrip() for line in proc.stdout.rstrip("\n").split("\n"))
    return text + "\n"


def workdir() -> tempfile.TemporaryDirectory[str]:
    """A scratch folder holding the repository's ``scenarios`` (what transcripts read), where
    files the commands write land."""
    tmp = tempfile.TemporaryDirectory(prefix="trainplan-transcripts-")
    (Path(tmp.name) / "scenarios").symlink_to(ROOT / "scenarios", target_is_directory=True)
    return tmp


def blocks(ts: list[Transcript]) -> list[list[Transcript]]:
    """The transcripts grouped by their block, in order."""
    groups: dict[tuple[Path, int], list[Transcript]] = {}
    for t in ts:
        groups.setdefault((t.path, t.block), []).append(t)
    return list(groups.values())


def drift(t: Transcript, cwd: Path) -> str | None:
    """None when the output matches the transcript, else the actual output."""
    actual = run(t, cwd)
    if pattern(t.expected).fullmatch(actual):
        return None
    return actual


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or pages()
    bad = 0
    with workdir() as tmp:
        for path in paths:
            for t in transcripts(path):
                actual = drift(t, Path(tmp))
                if actual is not None:
                    bad += 1
                    print(f"--- {t.name}: $ {t.command}\n{actual}")
                elif argv:
                    print(f"ok {t.name}: $ {t.command}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
