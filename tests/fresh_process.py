"""``python -m MODULE ARGS`` in a process of its own, started without paying again for the
third-party imports every process of the suite repeats.

A search's process spends about 0.9 s of CPU importing numpy, pandas (and pyarrow through it),
OR-Tools' CP-SAT and click before it reads its first option; the suite starts about a thousand
``trainplan`` processes on two cores. Each command is forked from a server (this module run as
``python -m tests.fresh_process``, one a test process) that has imported those libraries and
nothing of this project (:data:`PRELOAD`). The child then runs the module as ``python -m`` would —
its own ``sys.argv``, ``sys.path`` (the working directory first), environment, working directory,
stdout and stderr (text, buffered as a new interpreter buffers a pipe), at-exit handlers and exit
code — so every module of trainplan is imported afresh in each command, and a command that works
only after another has run in the same interpreter fails here as it does for a user. What these
children share that a user's interpreters do not is only the preloaded libraries' state at import.

The standard library's ``multiprocessing`` forkserver does the same, but it is one server a
process: trainplan's web jobs and sweep pools preload trainplan's own modules into it, and a test
that runs them in-process before a command would hand the command those modules. Hence a server of
its own: a request is a JSON file and the command's stdout and stderr (``socket.send_fds``); the
server forks a waiter, which forks the command, sends its pid, waits and sends its exit status.

``TRAINPLAN_TESTS_FORK=0`` runs each command with ``subprocess`` instead. The page's server, the
commands a test signals, limits or reads from a terminal, and :mod:`tests.test_fresh_process`'s
comparisons always start a new interpreter.
"""

from __future__ import annotations

import atexit
import io
import json
import locale
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["PRELOAD", "enabled", "run_module"]

PRELOAD = (
    "numpy",
    "pandas",
    "ortools.sat.python.cp_model",
    "click",
    "cloup",
    "tabulate",
    "dataclasses",
    "fractions",
    "inspect",
    "importlib.metadata",
    "tomllib",
)
"""The modules the server imports once (third-party libraries trainplan's commands import, and
standard-library modules they all import); none of this project's. One not installed is skipped."""

ROOT = Path(__file__).resolve().parents[1]


def enabled() -> bool:
    """Whether commands are forked from the server (``TRAINPLAN_TESTS_FORK`` not ``0``)."""
    return os.environ.get("TRAINPLAN_TESTS_FORK", "1") != "0"


# ------------------------------------------------------------------------------ the test side


class _Server:
    """The server of this test process: started on first use, stopped at exit."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="trainplan-fork-")
        self.address = os.path.join(self.folder, "socket")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fresh_process", self.address],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()  # the server says when it listens
        if ready.strip() != "ready":
            raise RuntimeError(f"tests.fresh_process: the server did not start ({ready!r})")
        atexit.register(self.stop)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for name in os.listdir(self.folder):
            os.unlink(os.path.join(self.folder, name))
        os.rmdir(self.folder)


_LOCK = threading.Lock()


@cache
def _server() -> _Server:
    return _Server()


@cache
def _base_path() -> tuple[str, ...]:
    """``sys.path`` of a new interpreter but its first entry (the script's folder, or the
    working directory under ``-m``)."""
    code = "import json, sys; print(json.dumps(sys.path[1:]))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return tuple(json.loads(done.stdout))


def run_module(
    cmd: list[str], module: str, args: list[str], cwd: str | Path | None, timeout: float,
    merge_stderr: bool = False, env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``python -m module args`` forked from the server: what ``subprocess.run(cmd,
    capture_output=True, text=True, timeout=timeout, cwd=cwd)`` returns (stderr into stdout
    where ``merge_stderr``; ``env`` the process's environment, else this one's).

    Raises
    ------
    subprocess.TimeoutExpired
        As ``subprocess.run`` does, the command killed.
    """
    with _LOCK:
        server = _server()
    with tempfile.TemporaryDirectory(prefix="trainplan-run-") as tmp:
        request = Path(tmp, "request.json")
        request.write_text(
            json.dumps(
                {
                    "module": module,
                    "args": args,
                    "cwd": None if cwd is None else str(cwd),
                    "env": dict(os.environ if env is None else env),
                    "path": _base_path(),
                }
            )
        )
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        with open(out, "wb") as out_file, open(err, "wb") as err_file:
            fds = [out_file.fileno(), (out_file if merge_stderr else err_file).fileno()]
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(server.address)
                socket.send_fds(sock, [str(request).encode()], fds)
                reply = sock.makefile("r")
                pid = int(reply.readline())
                sock.settimeout(timeout)
                try:
                    status = reply.readline()
                except TimeoutError:
                    os.kill(pid, signal.SIGKILL)
                    raise subprocess.TimeoutExpired(cmd, timeout, _read(out), _read(err)) from None
        code = int(status)
        return subprocess.CompletedProcess(
            cmd, code, _read(out), "" if merge_stderr else _read(err)
        )


def _read(path: Path) -> str:
    """A captured stream as ``subprocess`` decodes it in text mode (the locale's encoding,
    universal newlines)."""
    with open(path, encoding=locale.getpreferredencoding(False), newline=None) as f:
        return f.read()


# ------------------------------------------------------------------------------ the server


def serve(address: str) -> None:
    """Preload :data:`PRELOAD`, then fork a waiter for each request on the socket ``address``
    until the test process that started the server is gone."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    parent = os.getppid()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters reap themselves
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    listener.settimeout(1.0)
    print("ready", flush=True)
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        data, fds, _, _ = socket.recv_fds(conn, 4096, 2)
        if os.fork() == 0:  # the waiter
            listener.close()
            _wait_for(conn, json.loads(Path(data.decode()).read_text()), fds)
        conn.close()
        for fd in fds:
            os.close(fd)


def _wait_for(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """The waiter: fork the command (:func:`_command`), send its pid, wait for it, send its
    exit code (``−N`` for a signal, as ``subprocess`` says it), exit."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _command(request, fds)
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        conn.sendall(f"{code}\n".encode())
    except OSError:  # the test gave up on it (a timeout)
        pass
    os._exit(0)


def _stream(fd: int, line_buffering: bool, errors: str) -> io.TextIOWrapper:
    """A text stream on ``fd`` as a new interpreter opens stdout (block-buffered) or stderr
    (line-buffered, backslash escapes) on a pipe; unbuffered under ``PYTHONUNBUFFERED``
    (CPython's ``create_stdio``)."""
    encoding = os.environ.get("PYTHONIOENCODING") or locale.getpreferredencoding(False)
    raw = io.FileIO(fd, "w", closefd=False)
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    return io.TextIOWrapper(
        raw if unbuffered else io.BufferedWriter(raw),  # type: ignore[arg-type]
        encoding=encoding,
        errors=errors,
        line_buffering=line_buffering,
        write_through=unbuffered,
    )


def _command(request: dict[str, Any], fds: list[int]) -> None:
    """The command: ``python -m module args`` in the request's working directory and
    environment, stdout and stderr on ``fds``; exits with its code."""
    import gc
    import runpy

    gc.freeze()  # the server's objects: never traversed by the collector (no page copied)
    if request["cwd"] is not None:
        os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in set(fds):
        os.close(fd)
    sys.stdout = sys.__stdout__ = _stream(1, False, "strict")
    sys.stderr = sys.__stderr__ = _stream(2, True, "backslashreplace")
    sys.path[:] = [os.getcwd(), *request["path"]]
    sys.argv[:] = ["-m", *request["args"]]  # runpy sets argv[0] to the module's file
    code: Any = 0
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # as the interpreter reports an uncaught exception
        import traceback

        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter ends: its threads,
    atexit._run_exitfuncs()  # then the at-exit handlers, then the streams (Py_FinalizeEx)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a reader gone (a closed pipe): nothing more to write
            pass
    os._exit(code & 0xFF)


if __name__ == "__main__":
    serve(sys.argv[1])
