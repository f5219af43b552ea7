"""The transcripts of the README and the documentation: fenced blocks whose first line is
``$ trainplan …``, after any ``#`` lines that say what the block runs (``# the grid above``; not
run). Each ``$`` line is a command (a line ending in ``\\`` continues it); the lines
after it, up to the next ``$`` line, are what it prints (stdout and stderr together). A line
``...`` (or ``…``) alone stands for any number of lines; ``…`` inside a line for any text (a
timing, a long source). Without a final ``...`` the output must end where the transcript does.

    python -m tests.transcripts            # run every transcript, print the ones that drifted
    python -m tests.transcripts FILE.md    # those of one page, with their actual output
    python -m tests.transcripts --fix [FILE.md ...]   # rewrite the drifted ones in place

``--fix`` (:func:`rewrite`) writes what each drifted command prints in place of its lines and
keeps the page's elisions: a ``...`` (or ``…``) line stays where it stood and still stands for
the lines around it that the page did not show; a line with ``…`` inside stays as written while
the printed line it faces still matches it (a timing), and is replaced by the printed line when
it does not. What it cannot rewrite — printed lines that would read as a command or close the
block, a command that does not run — it names and leaves as it is; the exit status is then 1.

A page's commands run in the page's order, in one scratch folder of the page's own
(:func:`workdir`): a later block may read what an earlier one wrote (``trainplan sweep-plot
study.parquet`` after the sweep that wrote it), as a reader following the page would.

A block whose fence names a file, ```` ```toml title="m.toml" ```` (MkDocs shows the name above
it), is a file the reader writes: it is written under that name into the page's scratch folder
before the page's next command runs (``trainplan calibrate m.toml`` after the measurements file
the page shows), so the page's own example is what the command reads.

A block whose leading ``#`` lines include one starting ``# long run`` (the documentation's
243-point study, a minute on an idle 2-core machine and several on a busy one, and the blocks
that read its results) runs only
when ``TRAINPLAN_LONG_TRANSCRIPTS=1`` is set or with ``--long`` (``python -m tests.transcripts
--long docs/sweeps.md``; ``--fix --long``): the test suite, CI included, leaves it out to stay
within CI's time, so re-run it by hand after a change that moves step times.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from tests import fresh_process

ROOT = Path(__file__).resolve().parents[1]
SKIP = ("...", "…")
LONG_RUN = "# long run"
"""How a block's leading ``#`` line marks it long (module docstring)."""


def long_runs() -> bool:
    """Whether long blocks run: ``TRAINPLAN_LONG_TRANSCRIPTS=1`` (module docstring)."""
    return os.environ.get("TRAINPLAN_LONG_TRANSCRIPTS") == "1"


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
    long: bool = False
    """The block is marked ``# long run``: run only on request (module docstring)."""
    files: tuple[tuple[str, str], ...] = ()
    """(name, text) of the page's file blocks since the previous command, written into the
    scratch folder before this command runs (module docstring)."""

    @property
    def name(self) -> str:
        shown = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{shown}:{self.line}"


def pages() -> list[Path]:
    """The README and every documentation page."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def transcripts(path: Path) -> list[Transcript]:
    """The transcripts of one Markdown file, in order."""
    return transcripts_of_text(path, path.read_text())


def transcripts_of_text(path: Path, text: str) -> list[Transcript]:
    """The transcripts of ``text``, the contents of the Markdown file ``path``, in order."""
    out: list[Transcript] = []
    lines = text.split("\n")
    files: list[tuple[str, str]] = []
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
        named = re.search(r'\stitle="([\w.-]+)"', lines[i])
        if named:
            files.append((named.group(1), "\n".join(body) + "\n"))
            i = j + 1
            continue
        said = 0  # the block's leading "# …" lines: what it runs, in words
        while said < len(body) and body[said].startswith("#"):
            said += 1
        if body[said:] and body[said].startswith("$ trainplan "):
            long = any(line.startswith(LONG_RUN) for line in body[:said])
            commands = _commands(path, i + 2 + said, body[said:], i + 1, long)
            if files and commands:
                commands[0] = replace(commands[0], files=tuple(files))
                files = []
            out.extend(commands)
        i = j + 1
    return out


def _commands(
    path: Path, first: int, body: list[str], fence: int, long: bool = False
) -> list[Transcript]:
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
        out.append(Transcript(path, first + start, command.strip(), tuple(expected), fence, long))
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
    """What the command prints, stdout and stderr together, trailing spaces stripped, as it
    prints into a pipe or a file: without ``COLUMNS`` and ``LINES`` (which ``shutil.
    get_terminal_size`` reads first), so a command that sizes its output to the terminal
    (``trainplan pipeline``'s timeline) prints its width when not on one, which the reader gets
    too; a page that shows another width gives it (``--width 80``)."""
    args = shlex.split(t.command)
    assert args[0] == "trainplan", t.command
    for name, text in t.files:
        (cwd / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    cmd = [sys.executable, "-m", "trainplan", *args[1:]]
    if fresh_process.enabled():  # its own process (tests.fresh_process)
        proc = fresh_process.run_module(cmd, "trainplan", args[1:], cwd, 600, True, env)
    else:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=600,
        )  # fmt: skip
    text = "\n".join(line.rstrip() for line in proc.stdout.rstrip("\n").split("\n"))
    return text + "\n"


def workdir() -> tempfile.TemporaryDirectory[str]:
    """A scratch folder holding what transcripts read — the repository's ``scenarios`` and the
    grids of ``docs/sweeps`` — where files the commands write land (a sweep's results beside its
    grid too: the grids are linked one by one into a folder of the scratch's own, so nothing is
    written into the checkout)."""
    tmp = tempfile.TemporaryDirectory(prefix="trainplan-transcripts-")
    (Path(tmp.name) / "scenarios").symlink_to(ROOT / "scenarios", target_is_directory=True)
    grids = Path(tmp.name) / "docs" / "sweeps"
    grids.mkdir(parents=True)
    for grid in (ROOT / "docs" / "sweeps").glob("*.toml"):
        (grids / grid.name).symlink_to(grid)
    return tmp


def by_page(ts: list[Transcript]) -> list[list[Transcript]]:
    """The transcripts grouped by their page, each page's in order (module docstring: a page's
    commands run in order, in one folder)."""
    groups: dict[Path, list[Transcript]] = {}
    for t in ts:
        groups.setdefault(t.path, []).append(t)
    return list(groups.values())


def run_page(ts: list[Transcript]) -> list[tuple[Transcript, str | None]]:
    """Each of one page's transcripts ``ts`` with its drift (:func:`drift`), run in order in a
    scratch folder of the page's own (:func:`workdir`); a long block only when long blocks run
    (:func:`long_runs`)."""
    with workdir() as tmp:
        return [(t, drift(t, Path(tmp))) for t in ts if long_runs() or not t.long]


def drift(t: Transcript, cwd: Path) -> str | None:
    """None when the output matches the transcript, else the actual output."""
    actual = run(t, cwd)
    if pattern(t.expected).fullmatch(actual):
        return None
    return actual


def _number_blind(line: str) -> str:
    """A line with its numbers blanked: a printed line that equals a shown one but for its
    figures is that line, drifted."""
    return re.sub(r"[0-9][0-9.,]*", "#", line)


DRIFT, INSERT, DROP = 1, 1, 2
"""What :func:`rewrite`'s alignment pays for a shown line facing a printed one that differs
only in its figures, for a printed line the page did not show, for a shown line no longer
printed (more than a drift, so a drifted line is rewritten rather than dropped beside an
elision that would take its printed line). A shown line that still matches, and printed lines
an elision stands for, cost nothing."""


def _align(shown: list[str], printed: list[str]) -> list[tuple[str, int, int]]:
    """The cheapest alignment of the shown lines with the printed ones (:data:`DRIFT`): steps
    ``keep`` (shown ``i`` matches printed ``j``), ``drift``, ``insert`` (printed ``j``),
    ``drop`` (shown ``i``), ``elide`` (shown ``i``, an elision, stands for printed ``j``) and
    ``end`` (shown ``i``, an elision, stands for no more lines)."""
    n, m = len(shown), len(printed)
    matches = [pattern((line,)).fullmatch for line in shown]
    shown_keys = [_number_blind(line) for line in shown]
    printed_keys = [_number_blind(line) for line in printed]
    inf = float("inf")
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    step: list[list[tuple[str, int, int]]] = [[("", 0, 0)] * (m + 1) for _ in range(n + 1)]
    for i in range(n, -1, -1):
        for j in range(m, -1, -1):
            options: list[tuple[float, str, int, int]] = []
            if i == n:
                options.append((0.0 if j == m else INSERT + cost[i][j + 1], "insert", i, j + 1))
            elif shown[i].strip() in SKIP:
                options.append((cost[i + 1][j], "end", i + 1, j))
                if j < m:
                    options.append((cost[i][j + 1], "elide", i, j + 1))
            else:
                if j < m and matches[i](printed[j] + "\n"):
                    options.append((cost[i + 1][j + 1], "keep", i + 1, j + 1))
                elif j < m and shown_keys[i] == printed_keys[j]:
                    options.append((DRIFT + cost[i + 1][j + 1], "drift", i + 1, j + 1))
                options.append((DROP + cost[i + 1][j], "drop", i + 1, j))
                if j < m:
                    options.append((INSERT + cost[i][j + 1], "insert", i, j + 1))
            best = min(options, key=lambda o: o[0])
            cost[i][j], step[i][j] = best[0], best[1:]
    path, i, j = [], 0, 0
    while (i, j) != (n, m):
        kind, ni, nj = step[i][j]
        path.append((kind, i, j))
        i, j = ni, nj
    return path


def rewrite(expected: tuple[str, ...], actual: str) -> tuple[tuple[str, ...] | None, str]:
    r"""The lines to show for a transcript that drifted: ``actual`` (what the command printed)
    with the elisions of ``expected`` kept (module docstring), and ``""``; or None and why it
    cannot be rewritten. Shown and printed lines are aligned (:func:`_align`): a shown line that
    still matches stays as written, one whose figures moved takes the printed line, printed
    lines an elision can stand for are left to it, other printed lines are added and shown
    lines no longer printed dropped.

    >>> rewrite(("a", "...", "t … s", "d 1", "gone"), "a\nb\nt 9 s\nd 2\ne\n")
    (('a', '...', 't … s', 'd 2', 'e'), '')
    """
    printed = actual.rstrip("\n").split("\n") if actual.strip("\n") else []
    for line in printed:
        if line.startswith("$ ") or re.match(r"^\s*(```|~~~)", line):
            return None, f"a printed line would read as a command or a fence: {line!r}"
    shown = list(expected)
    out: list[str] = []
    for kind, i, j in _align(shown, printed):
        if kind in ("keep", "end"):  # an elision is written once, after the lines it took
            out.append(shown[i])
        elif kind in ("drift", "insert"):
            out.append(printed[j])
    while out and not out[-1].strip():
        out.pop()
    if not pattern(tuple(out)).fullmatch(actual):
        return None, "the rewritten lines do not match what the command prints"
    return tuple(out), ""


def _output_span(lines: list[str], t: Transcript) -> tuple[int, int, str]:
    """The lines of the file (0-based, end excluded) that show ``t``'s output, and their
    indent: right after its command (and the command's ``\\`` continuations)."""
    i = t.line - 1
    indent = re.match(r"^\s*", lines[i]).group(0)  # type: ignore[union-attr]
    more = lines[i].removeprefix(indent).endswith("\\")
    while more:  # as _commands reads a continued command
        i += 1
        more = lines[i].strip().endswith("\\")
    return i + 1, i + 1 + len(t.expected), indent


def fix(path: Path, cwd: Path) -> tuple[list[str], list[str]]:
    """Rewrite the drifted transcripts of ``path`` in place (:func:`rewrite`); the names of
    those rewritten and, with why, of those it could not rewrite (left as they were)."""
    fixed: list[tuple[int, Transcript, tuple[str, ...]]] = []
    left: list[str] = []
    for n, t in enumerate(transcripts(path)):
        if t.long and not long_runs():
            continue
        try:
            actual = run(t, cwd)
        except (AssertionError, subprocess.TimeoutExpired, ValueError) as err:
            left.append(f"{t.name}: the command does not run ({type(err).__name__}: {err})")
            continue
        if pattern(t.expected).fullmatch(actual):
            continue
        lines, why = rewrite(t.expected, actual)
        if lines is None:
            left.append(f"{t.name}: {why}\n{actual}")
        else:
            fixed.append((n, t, lines))
    if not fixed:
        return [], left
    before = path.read_text()
    text = before.split("\n")
    for _, t, lines in reversed(fixed):  # from the bottom: earlier line numbers stay right
        start, end, indent = _output_span(text, t)
        text[start:end] = [indent + line if line else line for line in lines]
    path.write_text("\n".join(text))
    # read back: each rewritten transcript shows its new lines, and no other moved
    now = transcripts(path)
    want = {n: lines for n, _, lines in fixed}
    old = transcripts_of_text(path, before)
    if len(now) != len(old) or any(
        (a.command, want.get(n, b.expected)) != (b.command, a.expected)
        for n, (a, b) in enumerate(zip(now, old, strict=True))
    ):
        path.write_text(before)
        return [], [f"{path}: the rewritten page reads back differently; left as it was"]
    return [t.name for _, t, _ in fixed], left


def main(argv: list[str]) -> int:
    if "--long" in argv:  # long blocks too (module docstring)
        os.environ["TRAINPLAN_LONG_TRANSCRIPTS"] = "1"
        argv = [a for a in argv if a != "--long"]
    if argv[:1] == ["--fix"]:
        return _main_fix(argv[1:])
    paths = [Path(a).resolve() for a in argv] or pages()
    bad = 0
    for path in paths:
        for t, actual in run_page(transcripts(path)):
            if actual is not None:
                bad += 1
                print(f"--- {t.name}: $ {t.command}\n{actual}")
            elif argv:
                print(f"ok {t.name}: $ {t.command}")
    return 1 if bad else 0


def _main_fix(argv: list[str]) -> int:
    """``--fix``: rewrite the drifted transcripts of the pages given (every page when none);
    1 when some could not be rewritten (each named, with what its command printed)."""
    left: list[str] = []
    for path in [Path(a).resolve() for a in argv] or pages():
        with workdir() as tmp:  # each page in a folder of its own (module docstring)
            done, cannot = fix(path, Path(tmp))
        for name in done:
            print(f"fixed {name}")
        left += cannot
    for why in left:
        print(f"--- cannot rewrite {why}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
