"""`kllint check -`: the source comes from standard input, as editors and other tools pipe a buffer.

`--stdin-filename PATH` names the buffer: its configuration is the closest one to PATH, helper
modules are resolved from PATH's project, findings are reported at PATH (`-` when it is not
given) and `--force-exclude` applies PATH's excludes. With `--fix` the fixed source (or the
source unchanged, when nothing was fixed) is printed on stdout and the findings that remain on
stderr, as Ruff does; with `--diff` the diff is printed on stdout.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

from kllint.discovery import Discovered

STDIN = "-"


class StdinUsageError(Exception):
    """`-` was combined with other paths or with an option that writes files."""


def reads_stdin(paths: tuple[str, ...]) -> bool:
    """Whether the paths of `kllint check` ask for standard input (`-`).

    Raises:
        StdinUsageError: `-` is named together with other paths.
    """
    if STDIN not in paths:
        return False
    if len(paths) > 1:
        raise StdinUsageError("`-` (standard input) cannot be combined with other paths")
    return True


def stdin_item(filename: str | None, stream: BinaryIO | None = None) -> Discovered:
    """The buffer read from `stream` (default: the process's stdin) as a file to check, named
    `filename` (default `-`)."""
    stream = stream if stream is not None else sys.stdin.buffer
    data = stream.read()
    if not filename:
        return Discovered(Path(STDIN), STDIN, content=data)
    path = Path(filename)
    return Discovered(path, path.as_posix(), content=data)


def excluded(item: Discovered, settings: object) -> bool:
    """Whether `--force-exclude` drops the buffer: its `--stdin-filename` matches an exclude."""
    from kllint.discovery import is_excluded

    if item.display == STDIN:
        return False
    root = getattr(settings, "root", None)
    return is_excluded(item.path, settings, root or Path.cwd(), is_dir=False)  # type: ignore[arg-type]


def source_text(item: Discovered) -> str | None:
    """The text of an in-memory item (None for a file on disk, or bytes that are not UTF-8)."""
    if item.content is None:
        return None
    try:
        return item.content.decode("utf-8")
    except UnicodeDecodeError:
        return None
