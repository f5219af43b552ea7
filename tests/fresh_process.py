"""``python -m MODULE ARGS`` in a process of its own, started without paying again for the
third-party imports every process of the suite repeats.

A search's process spends about 0.9 s of CPU importing numpy, pandas (and pyarrow through it),
OR-Tools' CP-SAT and click before it reads its first option; the suite starts about a thousand
``trainplan`` processes on two cores. Each command is forked from a server (this module run as
``python -m tests.fresh_process``, one a test process) that has imported those libraries and
nothing of this project (:data:`PRELOAD`). The child then runs the module as ``python -m`` does
(``runpy._run_module_as_main``, in a ``__main__`` of its own) — its own ``sys.argv``,
``sys.orig_argv``, ``sys.path`` (the working directory first), environment and working
directory; stdout and stderr on pipes, as text streams built as CPython's ``create_stdio`` builds
them (encoding, errors, buffering: the server's own, started under the same environment); an
uncaught exception through ``sys.excepthook``, an uncaught ``KeyboardInterrupt`` ending it by
SIGINT; at exit its threads joined, then the at-exit handlers, then the streams, Python's and
C's, flushed (``Py_FinalizeEx``) — so every module of trainplan is imported afresh in each
command, and a command that works only after another has run in the same interpreter fails here
as it does for a user. What these children share that a user's interpreters do not is the
preloaded libraries' state at import (numpy's warning filters) and the hash seed. A command whose environment differs from
the server's in a variable the interpreter or those libraries read only as they start
(:func:`startup`: ``PYTHON*``, the locale, ``TZ``, ``HOME``, BLAS threads) starts a new
interpreter instead.

The standard library's ``multiprocessing`` forkserver does the same, but it is one server a
process: trainplan's web jobs and sweep pools preload trainplan's own modules into it, and a test
that runs them in-process before a command would hand the command those modules. Hence a server of
its own: a request is a JSON file and the files for the command's stdout and stderr
(``socket.send_fds``); the server forks a waiter, which forks the command, copies its pipes into
the files, kills it if the client asks (its timeout), sends its exit status once it is reaped and
``done`` once the pipes close (as ``subprocess.run`` reads them to their end).

``TRAINPLAN_TESTS_FORK=0`` runs each command with ``subprocess`` instead. The page's server, the
commands a test signals, limits or reads from a terminal, and :mod:`tests.test_fresh_process`'s
comparisons always start a new interpreter. A command's stdin is ``/dev/null`` (a new
interpreter's is the test process's): no trainplan command reads stdin.
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
import time
from pathlib import Path
from typing import Any

__all__ = ["PRELOAD", "enabled", "run_module", "startup"]

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
STARTUP_NAMES = ("LANG", "TZ", "HOME")
STARTUP_PREFIXES = ("PYTHON", "LC_", "OMP_", "OPENBLAS_", "MKL_", "NUMPY_")
"""Environment variables read as an interpreter starts (CPython's ``PyConfig``: ``PYTHON*``; the
locale: ``LANG``, ``LC_*``; the time zone: ``TZ``; the user site-packages: ``HOME``) or as numpy
loads its BLAS (its thread count): a fork of the server cannot take another value of them."""

KILLED_WAIT_S = 60.0
"""How long a command killed at its timeout is waited for (it is reaped at once: SIGKILL)."""


def enabled() -> bool:
    """Whether commands are forked from the server (``TRAINPLAN_TESTS_FORK`` not ``0``)."""
    return os.environ.get("TRAINPLAN_TESTS_FORK", "1") != "0"


def startup(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The variables of ``env`` an interpreter reads as it starts (:data:`STARTUP_PREFIXES`)."""
    return tuple(
        sorted(
            (k, v) for k, v in env.items() if k in STARTUP_NAMES or k.startswith(STARTUP_PREFIXES)
        )
    )


# ------------------------------------------------------------------------------ the test side


class _Server:
    """A server of this test process, started under its environment of the moment."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.startup = startup(dict(os.environ))
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
            self.stop()
            raise RuntimeError(f"tests.fresh_process: the server did not start ({ready!r})")
        atexit.register(self.stop)

    def stop(self) -> None:
        """Kill the server and remove its folder (in the process that started it: a fork of a
        test process that runs its at-exit handlers leaves it be)."""
        if os.getpid() != self.owner:
            return
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        for name in os.listdir(self.folder) if os.path.isdir(self.folder) else ():
            os.unlink(os.path.join(self.folder, name))
        if os.path.isdir(self.folder):
            os.rmdir(self.folder)


_LOCK = threading.Lock()
_SERVERS: list[_Server] = []


def _server() -> _Server:
    """This process's server; a new one where it has ended (its end is no command's doing)."""
    with _LOCK:
        last = _SERVERS[-1] if _SERVERS else None
        if last is None or last.proc.poll() is not None or last.owner != os.getpid():
            if last is not None:
                last.stop()
            _SERVERS.append(_Server())
        return _SERVERS[-1]


class _Reply:
    """The waiter's lines on the socket, each read by a deadline."""

    def __init__(self, sock: socket.socket, cmd: list[str], deadline: float) -> None:
        self.sock, self.cmd, self.deadline, self.seen = sock, cmd, deadline, b""

    def line(self, what: str, deadline: float | None = None) -> str:
        """The next line; ``TimeoutError`` past the deadline; ``RuntimeError`` where the server
        or the waiter ended without sending it."""
        while b"\n" not in self.seen:
            self.sock.settimeout(max(1e-3, (deadline or self.deadline) - time.monotonic()))
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError(
                    f"tests.fresh_process: the server ended before it sent {what} of "
                    f"{' '.join(self.cmd[2:])!r} (a waiter or the server killed?)"
                )
            self.seen += chunk
        line, _, self.seen = self.seen.partition(b"\n")
        return line.decode()


def run_module(
    cmd: list[str], module: str, args: list[str], cwd: str | Path | None, timeout: float,
    merge_stderr: bool = False, env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``python -m module args`` forked from the server: what ``subprocess.run(cmd,
    capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)`` returns (stderr into
    stdout where ``merge_stderr``; ``env`` the process's environment, else this one's; ``cwd``
    relative to this process's working directory, or it). Run by ``subprocess.run`` itself where
    ``env`` differs from the server's in a variable read at start (:func:`startup`).

    Raises
    ------
    subprocess.TimeoutExpired
        As ``subprocess.run`` does, the command killed (and reaped).
    FileNotFoundError
        ``cwd`` is not a folder, as ``subprocess.run`` raises.
    """
    env = dict(os.environ if env is None else env)
    where = os.path.abspath(os.getcwd() if cwd is None else cwd)
    if not os.path.isdir(where):
        raise FileNotFoundError(2, "No such file or directory", str(cwd))
    server = _server()
    if startup(env) != server.startup:
        err = subprocess.STDOUT if merge_stderr else subprocess.PIPE
        return subprocess.run(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout
        )
    request = {"module": module, "args": list(args), "cwd": where, "env": env}
    with tempfile.TemporaryDirectory(prefix="trainplan-run-") as tmp:
        Path(tmp, "request.json").write_text(json.dumps(request))
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        with open(out, "wb") as out_file, open(err, "wb") as err_file:
            fds = [out_file.fileno()] + ([] if merge_stderr else [err_file.fileno()])
            code = _ask(server, str(Path(tmp, "request.json")), fds, cmd, timeout, (out, err))
        return subprocess.CompletedProcess(
            cmd, code, _read(out), "" if merge_stderr else _read(err)
        )


def _ask(
    server: _Server, request: str, fds: list[int], cmd: list[str], timeout: float,
    files: tuple[Path, Path],
) -> int:  # fmt: skip
    """Send the request; the command's exit code once its output has ended, by ``timeout``.
    Past it, have the waiter kill the command (it alone knows the pid is still the command's),
    wait until it is reaped, raise ``TimeoutExpired`` with what it printed so far."""
    sent, code = False, None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        reply = _Reply(sock, cmd, time.monotonic() + timeout)
        try:
            sock.settimeout(timeout)
            try:
                sock.connect(server.address)
            except (ConnectionRefusedError, FileNotFoundError) as gone:
                raise RuntimeError(f"tests.fresh_process: the server is gone ({gone})") from None
            socket.send_fds(sock, [request.encode()], fds)
            sent = True
            code = int(reply.line("the exit code"))
            reply.line("the end of the output")
            return code
        except TimeoutError:
            if sent and code is None:
                try:
                    sock.sendall(b"kill\n")
                    reply.line("the exit code", time.monotonic() + KILLED_WAIT_S)
                except (OSError, RuntimeError):  # the waiter gone: nothing left to kill
                    pass
            raise subprocess.TimeoutExpired(
                cmd, timeout, _read(files[0]), _read(files[1])
            ) from None


def _read(path: Path) -> str:
    """A captured stream as ``subprocess`` decodes it in text mode (the locale's encoding,
    universal newlines)."""
    with open(path, encoding=locale.getpreferredencoding(False), newline=None) as f:
        return f.read()


# ------------------------------------------------------------------------------ the server

_LIKE: list[Any] = []
"""The server's own stdout (a pipe) and stderr, as its interpreter opened them at start under
the environment every forked command shares (:func:`startup`): the commands' streams take their
encoding, errors, buffering and line buffering."""

_PATH: list[str] = []
"""``sys.path`` of the server but its first entry (the working directory, which ``-m`` puts
first unless ``PYTHONSAFEPATH``): a command's, after its own working directory."""


def serve(address: str) -> None:
    """Preload :data:`PRELOAD`, then fork a waiter (:func:`_wait_for`) for each request on the
    socket ``address`` until the test process that started the server is gone; then remove the
    socket and its folder."""
    import importlib

    _LIKE[:] = [sys.__stdout__, sys.__stderr__]
    _PATH[:] = sys.path if sys.flags.safe_path else sys.path[1:]
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
    try:
        while os.getppid() == parent:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            _accept(listener, conn)
    finally:
        listener.close()
        for gone in (lambda: os.unlink(address), lambda: os.rmdir(os.path.dirname(address))):
            try:
                gone()
            except OSError:  # the test process removed it first
                pass


def _accept(listener: socket.socket, conn: socket.socket) -> None:
    """Read one request and fork its waiter; a request that cannot be read is reported on the
    server's stderr and dropped (its client reads the end of the connection)."""
    fds: list[int] = []
    try:
        conn.settimeout(10.0)  # a client sends its request as it connects
        data, fds, _, _ = socket.recv_fds(conn, 4096, 2)
        request = json.loads(Path(data.decode()).read_text())
        if os.fork() == 0:
            listener.close()
            _wait_for(conn, request, fds)
    except Exception as failed:
        print(f"tests.fresh_process: a request failed: {failed!r}", file=sys.stderr)
    finally:
        conn.close()
        for fd in fds:
            os.close(fd)


def _wait_for(conn: socket.socket, request: dict[str, Any], files: list[int]) -> None:
    """The waiter: fork the command (:func:`_command`) on pipes, copy them into ``files``, kill
    it when the client asks (``kill``), send its exit code once reaped (``−N`` for a signal, as
    ``subprocess`` says it), then ``done`` once its pipes have closed; exit. Never returns."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        conn.settimeout(None)
        pipes = [os.pipe() for _ in files]
        pid = os.fork()
        if pid == 0:
            _command(request, conn, [w for _, w in pipes], [*files, *(r for r, _ in pipes)])
        for _, w in pipes:
            os.close(w)
        copiers = [
            threading.Thread(target=_copy, args=(r, f))
            for (r, _), f in zip(pipes, files, strict=True)
        ]
        for copier in copiers:
            copier.start()
        reaped = [False]
        lock = threading.Lock()
        threading.Thread(target=_kill_on_ask, args=(conn, pid, reaped, lock), daemon=True).start()
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # ended, its pid still its own
        with lock:
            reaped[0] = True
            _, status = os.waitpid(pid, 0)
        _send(conn, str(os.waitstatus_to_exitcode(status)))
        for copier in copiers:
            copier.join()
        _send(conn, "done")
    finally:
        os._exit(0)


def _copy(reader: int, file: int) -> None:
    """Everything written into the pipe ``reader``, into ``file``, until every writer closed it."""
    while chunk := os.read(reader, 65536):
        view = memoryview(chunk)
        while view:
            view = view[os.write(file, view) :]
    os.close(reader)


def _kill_on_ask(conn: socket.socket, pid: int, reaped: list[bool], lock: threading.Lock) -> None:
    """Kill the command when the client asks, unless it is already reaped (its pid free)."""
    try:
        asked = conn.recv(16)
    except OSError:
        return
    with lock:
        if asked.startswith(b"kill") and not reaped[0]:
            os.kill(pid, signal.SIGKILL)


def _send(conn: socket.socket, line: str) -> None:
    try:
        conn.sendall(f"{line}\n".encode())
    except OSError:  # the client gave up on it (a timeout)
        pass


def _command(
    request: dict[str, Any], conn: socket.socket, pipes: list[int], close: list[int]
) -> None:
    """The command: ``python -m module args`` as a new interpreter runs it (module docstring),
    stdout and stderr on ``pipes``; exits with its code. Never returns."""
    code, interrupted = 1, False
    try:
        conn.close()
        for fd in close:
            os.close(fd)
        os.dup2(pipes[0], 1)
        os.dup2(pipes[-1], 2)
        for fd in set(pipes):
            os.close(fd)
        _become(request)
        code, interrupted = _run(request["module"])
        _finalize()
    except BaseException:  # this module's own failure, not the command's
        import traceback

        os.write(2, traceback.format_exc().encode(errors="backslashreplace"))
    finally:
        if interrupted:  # as CPython ends on an uncaught KeyboardInterrupt (exit_sigint)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code & 0xFF)


def _become(request: dict[str, Any]) -> None:
    """The process state a new interpreter starts ``python -m module args`` in."""
    import builtins
    import gc
    import types

    gc.freeze()  # the server's objects: never traversed by the collector (no page copied)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.stdout = sys.__stdout__ = _stdio(1, _LIKE[0], "<stdout>")
    sys.stderr = sys.__stderr__ = _stdio(2, _LIKE[1], "<stderr>")
    sys.path[:] = [*([] if sys.flags.safe_path else [os.getcwd()]), *_PATH]
    sys.argv[:] = ["-m", *request["args"]]  # runpy sets argv[0] to the module's file
    sys.orig_argv[:] = [sys.orig_argv[0], "-m", request["module"], *request["args"]]
    for name in [m for m in sys.modules if m.split(".")[0] == "tests"]:
        del sys.modules[name]  # the package this server ran from: not a command's to import
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = main


def _stdio(fd: int, like: io.TextIOWrapper, name: str) -> io.TextIOWrapper:
    """A text stream on ``fd`` as CPython's ``create_stdio`` opens one (``io.open(fd, "wb",
    -1 or 0)``: the buffer the interpreter sizes for a pipe; ``raw.name`` ``<stdout>``), with the
    encoding, errors, line buffering and write-through of the server's own stream ``like``."""
    buffered = not isinstance(like.buffer, io.RawIOBase)  # PYTHONUNBUFFERED: the raw file
    stream = open(fd, "wb", -1 if buffered else 0, closefd=False)  # noqa: SIM115
    raw = stream.raw if buffered else stream  # type: ignore[attr-defined]
    raw.name = name
    text = io.TextIOWrapper(
        stream,
        encoding=like.encoding,
        errors=like.errors,
        newline="\n",
        line_buffering=like.line_buffering,
        write_through=like.write_through,
    )
    text.mode = "w"  # type: ignore[misc]
    return text


def _run(module: str) -> tuple[int, bool]:
    """Run ``module`` as ``python -m`` does (``runpy._run_module_as_main``: "No module named"
    an exit message); its exit code (CPython's ``_Py_HandleSystemExit``: None 0, an int itself,
    anything else printed on stderr and 1) and whether an uncaught ``KeyboardInterrupt`` ended
    it. An uncaught exception goes to ``sys.excepthook`` from runpy's frame on, as the
    interpreter prints it."""
    import runpy

    try:
        runpy._run_module_as_main(module)  # type: ignore[attr-defined]
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0, False
        print(stop.code, file=sys.stderr)
        return 1, False
    except BaseException as failed:
        tb = failed.__traceback__
        failed.__traceback__ = tb.tb_next if tb is not None else None
        sys.excepthook(type(failed), failed, failed.__traceback__)
        return 1, isinstance(failed, KeyboardInterrupt)
    return 0, False


def _finalize() -> None:
    """What ``Py_FinalizeEx`` does first: join the threads, run the at-exit handlers, flush
    ``sys.stdout`` and ``sys.stderr``; then what C's ``exit`` does, flush C's stdio buffers (a
    library's ``printf``)."""
    import ctypes

    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a reader gone (a closed pipe): nothing more to write
            pass
    ctypes.CDLL(None).fflush(None)


if __name__ == "__main__":
    serve(sys.argv[1])
