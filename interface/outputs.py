"""The files a command writes (``--csv``, ``--png``, ``--svg``, ``--gif``, ``--chart``…): one
check of the path before anything is computed or written, and one line for what the file system
still refuses at the write."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from trainplan.model.errors import InputError
from trainplan.model.units import shown_text

__all__ = ["output_path", "writing", "MAX_SHOWN_PATH"]

MAX_SHOWN_PATH = 400
"""Characters of a file path an error line echoes: a path is what the user typed and needs whole
to act on (a temporary folder's path alone runs past 80); a pasted 100,000-character value is still
cut, with its length said."""


def output_path(
    path: str | os.PathLike[str] | None, name: str, suffixes: tuple[str, ...] = ()
) -> Path:
    """The file a command will write (``--csv``, ``--png``, ``--svg``, ``--gif``, ``--chart``),
    checked before anything is computed or written — the one rule for every output path.

    The path must be non-empty, end in one of ``suffixes`` (any ending when empty; compared
    without case), not be a folder, and lie in a folder that exists and may be written (an
    existing file there must be writable too).

    Raises
    ------
    InputError
        Naming the option (``name``), the path and the broken rule.

    Examples
    --------
    >>> output_path("", "--csv")
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: --csv: '' is empty; give the file to write, e.g. --csv out.csv
    """
    text = "" if path is None else os.fspath(path)
    if not text.strip():
        example = f"out{suffixes[0]}" if suffixes else "out.csv"
        raise InputError(
            f"{name}: {text!r} is empty; give the file to write, e.g. {name} {example}"
        )
    shown = shown_text(text, MAX_SHOWN_PATH)
    p = Path(text).expanduser()
    try:
        if p.is_dir():
            raise InputError(f"{name}: {shown} is a folder; give a file path inside it")
        if suffixes and p.suffix.lower() not in suffixes:
            raise InputError(f"{name}: {shown} must end in {', '.join(suffixes)}")
        folder = p.parent
        if not folder.is_dir():
            raise InputError(
                f"{name}: {shown} is in a folder that does not exist ({shown_text(str(folder), MAX_SHOWN_PATH)}); "
                "create it first"
            )
        if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
            raise InputError(f"{name}: {shown} cannot be written (permission denied)")
        if not p.exists():
            _check_name(p)
    except OSError as err:  # a name the file system refuses: too long, a NUL byte…
        raise InputError(f"{name}: {shown} cannot be written: {err.strerror or err}") from None
    return p


def _check_name(path: Path) -> None:
    """Raise the OSError the file system gives for ``path``'s name (too long for the folder's
    file system: ``pathconf`` ``PC_NAME_MAX``), before any work is done."""
    limit = os.pathconf(path.parent, "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
    if len(os.fsencode(path.name)) > limit:
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), str(path))


@contextmanager
def writing(path: str | os.PathLike[str], name: str) -> Iterator[None]:
    """Around the write itself: what the file system still refuses after :func:`output_path`'s
    check (a read-only mount, a full disk, ``/proc``) becomes an InputError naming the option and
    the path, never a traceback.

    Raises
    ------
    InputError
        ``--png: '/proc/x.png' could not be written: No such file or directory``.
    """
    try:
        yield
    except OSError as err:
        raise InputError(
            f"{name}: {os.fspath(path)!r} could not be written: {err.strerror or err}"
        ) from None
