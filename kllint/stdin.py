"""`kllint check -`: the source comes from standard input, as editors and other tools pipe a buffer.

`--stdin-filename PATH` names the buffer: its configuration is the closest one to PATH, helper
modules are resolved from PATH's project, findings are reported at PATH (`-` when it is not
given) and `--force-exclude` applies PATH's excludes. With `--fix` the fixed source (or the
source unchanged, when nothing was fixed) is printed on stdout and the findings that remain on
stderr, as Ruff does; with `--diff` the diff is printed on stdout.

Standard input is read in chunks up to the size limit of a file (20 MB,
`kllint.pipeline.source.MAX_FILE_BYTES`): more is a usage error (exit 2, "standard input is
larger than 20 MB"), not a finding, since `--fix` could not print back a buffer it has not read;
Ctrl+C stops the read (exit 130).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

from kllint.pipeline.discovery import Discovered

STDIN = "-"


class StdinUsageError(Exception):
    """`-` was combined with other paths or with an option that writes files, or standard
    input is larger than a file may be."""


def read_bounded(stream: BinaryIO, limit: int | None = None) -> bytes:
    """All of `stream`, read in chunks of at most a megabyte (Ctrl+C stops it between two).

    Raises:
        StdinUsageError: the stream holds more than `limit` bytes (default: the limit of a file);
            `limit + 1` bytes at most are read.
    """
    from kllint.pipeline.source import MAX_FILE_BYTES

    limit = MAX_FILE_BYTES if limit is None else limit
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(min(limit + 1 - size, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise StdinUsageError(f"standard input is larger than {limit // (1024 * 1024) or limit} "
                              f"{'MB' if limit >= 1024 * 1024 else 'bytes'} (the limit of a file); not checked")
    return b"".join(chunks)


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


def check_usage(paths: tuple[str, ...], stdin_filename: str | None, add_noqa: bool) -> None:
    """Reject the option combinations that make no sense with stdin.

    Raises:
        StdinUsageError: `-` with other paths or with `--add-noqa`; `--stdin-filename` without `-`.
    """
    stdin = reads_stdin(paths)
    if stdin and add_noqa:
        raise StdinUsageError("--add-noqa cannot be used with standard input (`-`)")
    if stdin_filename and not stdin:
        raise StdinUsageError("--stdin-filename needs `-` (standard input) as the path")


def stdin_files(filename: str | None, settings: object, force_exclude: bool = False,
                stream: BinaryIO | None = None) -> tuple[list[Discovered], dict[str, str]]:
    """The buffer on stdin as the files of a run (none when `--force-exclude` drops it), and
    {display: its text}: what `--fix` prints back, and what the full output frames.

    Raises:
        kllint.config.ConfigError: the configuration of `filename` is invalid.
        StdinUsageError: standard input is larger than a file may be (`read_bounded`).
    """
    item = stdin_item(filename, stream)
    buffers = {item.display: item.content.decode("utf-8", "replace") if item.content is not None else ""}
    if force_exclude and excluded(item, settings.for_path(item.path)):  # type: ignore[attr-defined]
        return [], buffers
    return [item], buffers


def stdin_item(filename: str | None, stream: BinaryIO | None = None) -> Discovered:
    """The buffer read from `stream` (default: the process's stdin) as a file to check, named
    `filename` (default `-`)."""
    stream = stream if stream is not None else sys.stdin.buffer
    data = read_bounded(stream)
    if not filename:
        return Discovered(Path(STDIN), STDIN, content=data)
    path = Path(filename)
    return Discovered(path, path.as_posix(), content=data)


def excluded(item: Discovered, settings: object) -> bool:
    """Whether `--force-exclude` drops the buffer: its `--stdin-filename` matches an exclude."""
    from kllint.pipeline.discovery import is_excluded

    if item.display == STDIN:
        return False
    root = getattr(settings, "root", None)
    return is_excluded(item.path, settings, root or Path.cwd(), is_dir=False)  # type: ignore[arg-type]


def read_text(item: Discovered) -> str:
    """The text to fix: the buffer of an in-memory item, else the file (`kllint.fix.read_source`).

    Raises:
        kllint.fix.FixError: the file cannot be read, or the text is not UTF-8.
    """
    from kllint.fix import FixError, read_source

    if item.content is None:
        return read_source(item.path)
    try:
        return item.content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FixError(f"{item.display}: not valid UTF-8 (byte {exc.start})") from None
