"""Replacing a file atomically: the one primitive behind every file kllint writes (fixed sources,
`-o` / `--report` / `--write-baseline` outputs, cache entries).

The new content goes to a temporary file in the target's own folder, which then replaces the
target with `os.replace`: a reader sees the old file or the new one, never half of one, and a
write that fails leaves the old file as it was. The callers decide what may be replaced
(`kllint.fix.write_atomic` refuses files outside the project, `kllint.outfiles` creates missing
folders); this module only writes, and with `expect` replaces a file only if it still holds what
the caller read from it (`--fix`, `--add-noqa`: an edit made meanwhile is never overwritten).
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Callable, Iterator


class TargetChanged(Exception):
    """The target no longer holds the bytes `replacing` was told to expect; it was not replaced."""


def holds(target: str | Path, expected: bytes) -> bool:
    """Whether the regular file `target` holds exactly `expected` now: its size first (one
    `stat`), then its bytes (read without blocking, at most one byte more than expected). A
    missing or unreadable file, or one that is no longer a regular file, does not."""
    try:
        if os.stat(target).st_size != len(expected):
            return False
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_BINARY", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            chunks: list[bytes] = []
            size = 0
            while size <= len(expected):
                chunk = os.read(fd, len(expected) + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
    except OSError:
        return False
    return b"".join(chunks) == expected


@contextlib.contextmanager
def replacing(target: str | Path, *, text: bool = False, mode: int | None = None, sync: bool = True,
              prepare: Callable[[str], None] | None = None, expect: bytes | None = None) -> Iterator[IO]:
    """A handle on a temporary file next to `target` (UTF-8 text with newlines as written if
    `text`, else bytes) that replaces `target` when the block ends without an exception; on an
    exception the temporary file is removed and `target` is untouched.

    Before the replacement the data is synced to disk (unless `sync` is False), the file gets
    `mode` (when given; else mkstemp's 0600) and `prepare(temporary path)` runs (e.g. to keep an
    owner). With `expect`, `target` is replaced only if it still holds exactly those bytes
    (`holds`), compared as the very last step before `os.replace`, after the write, the sync,
    the mode and `prepare`: an edit saved during the run is never overwritten. Without a lock
    (editors take none) the window cannot be zero: a save that lands between that comparison
    and the rename (one `stat`, one read of the file, one rename; microseconds for a source
    file) is still lost.

    Raises:
        TargetChanged: with `expect`, `target` holds something else (nothing was replaced).
        OSError: the temporary file cannot be made, written, synced or renamed (also what
            `prepare` raises).
    """
    target = os.fspath(target)
    fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".kllint.tmp",
                                     dir=os.path.dirname(target) or ".")
    handle = os.fdopen(fd, "w", encoding="utf-8", newline="") if text else os.fdopen(fd, "wb")
    try:
        yield handle
        handle.flush()
        if sync:
            os.fsync(handle.fileno())
        handle.close()
        if mode is not None:
            os.chmod(temporary, mode)
        if prepare is not None:
            prepare(temporary)
        if expect is not None and not holds(target, expect):
            raise TargetChanged(target)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError, ValueError):
            handle.close()
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
