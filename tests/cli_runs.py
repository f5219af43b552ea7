"""``trainplan`` as a user runs it: each call its own process (``python -m trainplan``), several at
a time, and the checks of what a refusal looks like (one ``Error:`` line on stderr, nothing on
stdout, no traceback, exit code 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests import fresh_process

Done = subprocess.CompletedProcess[str]


def trainplan(*args: str, cwd: str | Path | None = None, timeout: float = 300) -> Done:
    """Run ``trainplan ARGS`` in a fresh process (``python -m trainplan ARGS`` as a user types
    it, forked from an interpreter that has imported only the third-party libraries:
    :mod:`tests.fresh_process`); its exit code, stdout and stderr."""
    cmd = [sys.executable, "-m", "trainplan", *args]
    if not fresh_process.enabled():
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    return fresh_process.run_module(cmd, "trainplan", list(args), cwd, timeout)


def run_many(calls: Mapping[str, Sequence[str]], cwd: str | Path | None = None) -> dict[str, Done]:
    """Every call of ``calls`` (name → arguments), each its own process, a few at a time."""
    workers = max(2, os.cpu_count() or 2)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        done = pool.map(lambda args: trainplan(*args, cwd=cwd), calls.values())
        return dict(zip(calls, done, strict=True))


def refusal(done: Done) -> str:
    """Assert ``done`` is a refusal of bad input — exit 2, one ``Error:`` line on stderr, nothing
    on stdout, no traceback — and return the line without ``Error: ``."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr[-2000:]
    assert done.stdout == "" and "Traceback" not in done.stderr
    return lines[0].removeprefix("Error: ")


def interrupted_when(args: Sequence[str], marker: str, wait_s: float = 600) -> Done:
    """Run ``trainplan ARGS`` with stderr on a terminal (a pty, so progress is shown), press
    Ctrl-C (SIGINT) once ``marker`` appears there, and return what it did; ``stderr`` holds the
    terminal's text."""
    import fcntl
    import os
    import pty
    import select
    import signal
    import struct
    import termios
    import time

    main, side = pty.openpty()
    # a terminal's size, as a real one has (tqdm draws no bar on a terminal 0 columns wide)
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    cmd = [sys.executable, "-m", "trainplan", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=side, text=True)
    os.close(side)
    seen, start = b"", time.monotonic()

    def read(timeout: float) -> bool:
        nonlocal seen
        if not select.select([main], [], [], timeout)[0]:
            return False
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the process closed the terminal
            return False
        seen += chunk
        return bool(chunk)

    while marker.encode() not in seen and time.monotonic() - start < wait_s:
        if proc.poll() is not None:
            break
        read(0.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    while read(0.5):
        pass
    os.close(main)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, seen.decode(errors="replace"))
