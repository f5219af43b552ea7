"""The suite's commands run both ways — forked from :mod:`tests.fresh_process`'s server and in a
new interpreter (``subprocess.run([sys.executable, "-m", "trainplan", ...])``) — and compared
byte for byte: exit code, stdout and stderr (stdout and stderr together, in the order written,
for the documentation's transcripts, as :func:`tests.transcripts.run` reads them). A script, not
a test: a few hundred commands, minutes on two cores.

    python -m tests.fork_equivalence [--jobs N] [--only WORD]

Each side runs in a scratch folder of its own (:func:`tests.transcripts.workdir`), its path
written ``<cwd>`` in both; wall and CPU times (:data:`TIMING`) are the only figures let differ.
Prints each difference as a diff and a count; exit status 1 when any differ."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests import fresh_process
from tests.sweep.test_sweep_quick import SMALL
from tests.transcripts import ROOT, by_page, long_runs, pages, transcripts, workdir

Call = tuple[str, list[str], Callable[[Path], None] | None]
"""A name, the arguments after ``trainplan``, and what writes the files it reads into its
folder (None: nothing)."""

TIMING = (
    re.compile(
        r"(\b(?:tables|CP-SAT|took|wall|in|uniform search|searches,) )\d+(?:\.\d+)?(?= s\b)"
    ),
    re.compile(r"(\()\d+\.\d+(?= s of cost tables)|( \+ )\d+\.\d+(?= s of CP-SAT)"),
    re.compile(
        r'("(?:solve_seconds|tables_seconds|tables_s|solve_s|search_s|cpu_s|seconds)": )[\d.e-]+'
    ),
    re.compile(r"(\b(?:tables_s|solve_s|search_s|cpu_s)\s+)[\d.e-]+"),
)
"""Wall and CPU times (``tables 1.23 s``, ``"solve_seconds": 0.4``, ``cpu_s  0.37``), the only
figures allowed to differ: each pattern's number becomes ``<t>``."""

SMALL_GRID = SMALL
"""``tests/sweep/test_sweep_quick.py``'s grid: four points."""


def _grid(where: Path) -> None:
    (where / "small.toml").write_text(SMALL_GRID)


def _examples() -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "trainplan", "example", "--list"], capture_output=True, text=True
    )
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def own_calls() -> list[Call]:
    """Every example, every command's ``--help``, refusals, and each command once or twice."""
    from trainplan.interface.cli import COMMAND_MODULES

    m8 = ["--model", "llama3-8b", "--gpu", "H100-SXM"]
    calls: list[Call] = [(f"example {n}", ["example", n], None) for n in _examples()]
    calls += [(f"{c} --help", [c, "--help"], None) for c in sorted(COMMAND_MODULES)]
    calls += [(a, a.split(), None) for a in ("--help", "--version", "example --list", "memory")]
    calls += [(" ".join(a), a, None) for a in (
        ["evaluate", *m8, "--gpus", "8", "--gpu", "H10"],
        ["evaluate", *m8, "--gpus", "0"],
        ["evaluate", *m8, "--gpus", "8", "--dp", "4"],
        ["search", *m8, "--gpus", "abc"],
        ["pipeline", "--stages", "256", "--microbatches", "1000"],
        ["rlhf", "--algorithm", "grpo", "--policy-params", "70B", "--gpus", "4,000,000"],
        ["calibrate", "missing.toml"],
        ["sweep", "missing.toml"],
        ["evaluate", *m8, "--gpus", "8"],
        ["evaluate", *m8, "--gpus", "8", "--json"],
        ["evaluate", "--model", "llama3-70b", "--gpus", "4,096", "--tp", "8", "--pp", "4"],
        ["search", *m8, "--gpus", "8"],
        ["search", *m8, "--gpus", "8", "--json"],
        ["search", "--model", "llama3-70b", "--gpus", "2", "--json"],
        ["frontier", *m8, "--gpus", "8"],
        ["frontier", *m8, "--gpus", "8", "--json"],
        ["rlhf", "--algorithm", "grpo", "--policy-params", "70B"],
        ["rlhf", "--algorithm", "ppo", "--policy-params", "70B", "--json"],
        ["rlhf-plan", "--algorithm", "grpo", "--model", "qwen2.5-7b", "--reward", "rule"],
        ["pipeline", "--stages", "4", "--microbatches", "8"],
        ["pipeline", "--stages", "4", "--microbatches", "8", "--schedule", "interleaved"],
        ["mfu", "--model", "llama3-70b", "--tokens", "4e6", "--step-seconds", "7", "--chips", "512"],
        ["ckpt", "--layers", "9", "--every", "3"],
        ["gpus"], ["gpus", "--json"], ["models"], ["models", "--json"],
    )]  # fmt: skip
    calls += [
        ("sweep small.toml", ["sweep", "small.toml", "--workers", "1"], _grid),
        ("sweep --workers 2", ["sweep", "small.toml", "--workers", "2", "--json"], _grid),
        ("sweep --point", ["sweep", "small.toml", "--point", "1"], _grid),
    ]
    return calls


def suite_calls() -> list[Call]:
    """The calls of ``tests/test_cli_new_user.py`` and ``tests/test_cli_one_number_form.py``,
    with the files the first writes for them."""
    from tests import test_cli_new_user as new_user
    from tests import test_cli_one_number_form as one_form

    calls: list[Call] = [
        (f"new user: {k}", list(v), new_user._files) for k, v in new_user.CALLS.items()
    ]
    calls += [(f"new user: {k}", list(v), new_user._files) for k, v in new_user.SLOW_CALLS.items()]
    calls += [(f"one number: {k}", list(v), None) for k, v in one_form.CALLS.items()]
    return calls


def both(args: list[str], cwds: tuple[Path, Path], merge: bool, env: dict[str, str]) -> list[str]:
    """``trainplan ARGS`` forked (in ``cwds[0]``) and in a new interpreter (``cwds[1]``): each
    as ``exit N``, stdout and stderr (one stream where ``merge``), normalised (:func:`same`)."""
    cmd = [sys.executable, "-m", "trainplan", *args]
    forked = fresh_process.run_module(cmd, "trainplan", args, cwds[0], 900, merge, env)
    err = subprocess.STDOUT if merge else subprocess.PIPE
    new = subprocess.run(
        cmd, cwd=cwds[1], env=env, stdout=subprocess.PIPE, stderr=err, text=True, timeout=900
    )
    return [_shown(done, cwd) for done, cwd in ((forked, cwds[0]), (new, cwds[1]))]


def _shown(done: subprocess.CompletedProcess[str], cwd: Path) -> str:
    text = f"exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr or ''}"
    for path in {str(cwd), os.path.realpath(cwd)}:
        text = text.replace(path, "<cwd>")
    for timing in TIMING:
        text = timing.sub(lambda m: "".join(g for g in m.groups() if g) + "<t>", text)
    return text


def diff(name: str, shown: list[str]) -> str | None:
    """None where both sides printed the same, else a unified diff (new interpreter → forked)."""
    if shown[0] == shown[1]:
        return None
    lines = difflib.unified_diff(
        shown[1].splitlines(True), shown[0].splitlines(True), "new interpreter", "forked", n=1
    )
    return f"== {name}\n" + "".join(list(lines)[:60])


def run_calls(calls: list[Call], jobs: int) -> list[tuple[str, str | None]]:
    """Each call both ways; calls with the same file writer share a folder per side (a sweep's
    grid, whose results land beside it, has one per call)."""
    env = dict(os.environ)
    folders: dict[object, tuple[Path, Path]] = {}
    scratch = []

    def folder(key: object, write: Callable[[Path], None] | None) -> tuple[Path, Path]:
        if key not in folders:
            pair = []
            for _ in range(2):
                tmp = workdir()
                scratch.append(tmp)
                pair.append(Path(tmp.name))
                if write is not None:
                    write(pair[-1])
            folders[key] = (pair[0], pair[1])
        return folders[key]

    planned = [
        (name, args, folder(name if write is _grid else write, write))
        for name, args, write in calls
    ]
    with ThreadPoolExecutor(jobs) as pool:
        found = list(pool.map(lambda c: (c[0], diff(c[0], both(c[1], c[2], False, env))), planned))
    for tmp in scratch:
        tmp.cleanup()
    return found


def run_transcripts(jobs: int) -> list[tuple[str, str | None]]:
    """Every transcript of the README and the documentation (a long block only when long
    blocks run), each page's in order in a folder per side, stdout and stderr together."""
    import shlex

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}

    def page(ts: list) -> list[tuple[str, str | None]]:
        out = []
        with workdir() as a, workdir() as b:
            cwds = (Path(a), Path(b))
            for t in ts:
                if t.long and not long_runs():
                    continue
                for cwd in cwds:
                    for name, text in t.files:
                        (cwd / name).write_text(text)
                args = shlex.split(t.command)[1:]
                out.append((t.name, diff(f"{t.name}: {t.command}", both(args, cwds, True, env))))
        return out

    ts = [t for p in pages() for t in transcripts(p)]
    with ThreadPoolExecutor(jobs) as pool:
        return [r for found in pool.map(page, by_page(ts)) for r in found]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="run the calls whose name holds this word")
    opts = parser.parse_args()
    calls = [c for c in own_calls() + suite_calls() if opts.only in c[0]]
    found = run_calls(calls, opts.jobs)
    if not opts.only:
        found += run_transcripts(opts.jobs)
    differ = [d for _, d in found if d is not None]
    for d in differ:
        print(d)
    print(f"{len(found)} commands compared, {len(differ)} differ", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
