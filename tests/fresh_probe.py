"""What :mod:`tests.test_fresh_process` compares between a forked command and a new interpreter:
copied into a test's folder and run there as ``python -m fresh_probe WAY ARGS``, it does one
thing a process does — report what it sees, write, fail, end — chosen by ``WAY``:

* ``report CODE TEXT``: print its working directory, ``sys.argv``, ``sys.orig_argv``,
  ``sys.path[0]``, one environment variable, whether any module of this project was imported
  before it ran, its ``__main__``, its streams (encoding, errors, buffering, name, pipe or not),
  the signals it blocks, ignores and catches, the interpreter's limits, flags, locale, time zone;
  write TEXT on stderr; exit with CODE;
* ``interleave``: 400 lines on stdout, one on stderr every 50, a line through C's ``printf``;
* ``raise``, ``interrupt``, ``exit-text``: an uncaught ``ValueError``, ``KeyboardInterrupt``,
  ``sys.exit`` with a message;
* ``ends``: a thread still running and an at-exit handler, each printing as it ends;
* ``hash``: a string's hash (``PYTHONHASHSEED``);
* ``sleep``: print its pid, then sleep ten minutes.
"""

import atexit
import ctypes
import json
import locale
import os
import signal
import stat
import sys
import threading
import time


def streams() -> dict:
    """What a program can read of its stdout and stderr."""
    return {
        name: [s.encoding, s.errors, s.line_buffering, s.write_through, s.name, s.mode,
               s.seekable(), stat.S_ISFIFO(os.fstat(s.fileno()).st_mode)]
        for name, s in (("stdout", sys.stdout), ("stderr", sys.stderr))
    }  # fmt: skip


def signals() -> dict[str, str] | None:
    """The signals blocked, ignored and caught, as the kernel says (None off Linux), but the
    C library's own (32 up to ``SIGRTMIN``: glibc catches SIGSETXID once a process has started
    a thread, as any that imports numpy has)."""
    glibc = sum(1 << (n - 1) for n in range(32, signal.SIGRTMIN))
    try:
        with open("/proc/self/status") as status:
            lines = [
                line.split() for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt"))
            ]
    except OSError:
        return None
    return {name: hex(int(mask, 16) & ~glibc) for name, mask in lines}


def report(code: str, text: str) -> None:
    seen = {
        "cwd": os.getcwd(),
        "argv": sys.argv[1:],
        "argv0": sys.argv[0],
        "orig_argv": sys.orig_argv[1:],
        "path0": sys.path[0],
        "env": os.environ.get("TRAINPLAN_PROBE"),
        "project": sorted(m for m in sys.modules if m.split(".")[0] in ("trainplan", "tests")),
        "main": sys.modules["__main__"].__spec__.name,
        "streams": streams(),
        "signals": signals(),
        "interpreter": [
            sys.getrecursionlimit(), sys.get_int_max_str_digits(), list(sys.flags),
            sys.getfilesystemencoding(), locale.setlocale(locale.LC_ALL, None), time.tzname,
            sys.getswitchinterval(), sys.getdefaultencoding(), os.umask(0o22),
        ],
    }  # fmt: skip
    print(json.dumps(seen))
    print(text, file=sys.stderr)
    sys.exit(int(code))


def interleave() -> None:
    for i in range(400):
        print(f"out {i:04d} " + "x" * 20)
        if i % 50 == 0:
            print(f"err {i}", file=sys.stderr)
    ctypes.CDLL(None).printf(b"through C's printf\n")


def ends() -> None:
    atexit.register(print, "at exit")
    threading.Thread(target=lambda: (time.sleep(0.2), print("the thread's end"))).start()
    print("the main thread's end")


def fail(way: str) -> None:
    if way == "raise":
        raise ValueError("an uncaught exception")
    if way == "interrupt":
        raise KeyboardInterrupt
    sys.exit("a message on stderr, exit code 1")


way = sys.argv[1]
if way == "report":
    report(*sys.argv[2:])
elif way == "interleave":
    interleave()
elif way == "ends":
    ends()
elif way == "hash":
    print(hash("trainplan"))
elif way == "sleep":
    print(os.getpid(), flush=True)
    time.sleep(600)
else:
    fail(way)
