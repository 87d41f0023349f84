"""The files `kllint check` writes on request: `-o/--output-file`, `--report FORMAT:PATH` and
`--write-baseline PATH`, all in the same way.

As Ruff's `--output-file`, a missing parent folder is created. The file is written
atomically: a temporary file in the target's folder, synced and renamed over the target, so a
reader never sees half a report and a run that fails leaves the previous file as it was. A
symbolic link is followed (its target is replaced); an existing file keeps its mode, a new one
gets the mode the umask allows. A failure is an `OutputFileError` with a one-line message
naming the option and the path (the command prints it, exit code 2).
"""
from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Iterator, TextIO

from kllint.atomic import replacing


class OutputFileError(Exception):
    """An output file cannot be written (its folder cannot be created, it is a folder, ...)."""


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _target(path: Path, option: str) -> tuple[str, int]:
    """The real path to replace (links followed) and the mode to give it; its folder exists.

    Raises:
        OutputFileError: the folder cannot be created, or the path is not a regular file.
    """
    where = f"{option} {path}"
    target = os.path.realpath(path)
    parent = os.path.dirname(target) or "."
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        why = "a file of that name is in the way" if isinstance(exc, (FileExistsError, NotADirectoryError)) \
            else _reason(exc)
        raise OutputFileError(f"{where}: cannot create the folder {os.path.dirname(os.fspath(path)) or parent}: "
                              f"{why}") from None
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target, 0o666 & ~_umask()
    except OSError as exc:
        raise OutputFileError(f"{where}: cannot write: {_reason(exc)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputFileError(f"{where}: is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise OutputFileError(f"{where}: not a regular file")
    return target, stat.S_IMODE(st.st_mode)


def check_target(path: Path | str, option: str) -> None:
    """Check, before a run, that `path` can be written as `open_output` will write it (a
    missing folder is created now): a bad report path is an error before any analysis, not
    after the findings were printed.

    Raises:
        OutputFileError: the folder cannot be created, or the path is not a regular file.
    """
    _target(Path(path), option)


@contextlib.contextmanager
def open_output(path: Path | str, option: str) -> Iterator[TextIO]:
    """A UTF-8 text handle (newlines as written) whose content replaces `path` atomically when
    the block ends without an exception; on an exception the file is left as it was.

    Raises:
        OutputFileError: the file cannot be created or replaced (`option` names it in the message).
    """
    path = Path(path)
    target, mode = _target(path, option)
    try:
        with replacing(target, text=True, mode=mode) as handle:
            yield handle
    except OSError as exc:
        raise OutputFileError(f"{option} {path}: cannot write: {_reason(exc)}") from None


def write_output(path: Path | str, text: str, option: str) -> None:
    """Write `text` (UTF-8) to `path` atomically, creating missing parent folders.

    Raises:
        OutputFileError: it cannot be written (`option` names it in the message).
    """
    with open_output(path, option) as handle:
        handle.write(text)
