"""Replacing a file atomically: the one primitive behind every file kllint writes (fixed sources,
`-o` / `--report` / `--write-baseline` outputs, cache entries).

The new content goes to a temporary file in the target's own folder, which then replaces the
target with `os.replace`: a reader sees the old file or the new one, never half of one, and a
write that fails leaves the old file as it was. The callers decide what may be replaced
(`kllint.fix.write_atomic` refuses files outside the project, `kllint.outfiles` creates missing
folders); this module only writes.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Callable, Iterator


@contextlib.contextmanager
def replacing(target: str | Path, *, text: bool = False, mode: int | None = None, sync: bool = True,
              prepare: Callable[[str], None] | None = None) -> Iterator[IO]:
    """A handle on a temporary file next to `target` (UTF-8 text with newlines as written if
    `text`, else bytes) that replaces `target` when the block ends without an exception; on an
    exception the temporary file is removed and `target` is untouched.

    Before the replacement the data is synced to disk (unless `sync` is False), the file gets
    `mode` (when given; else mkstemp's 0600) and `prepare(temporary path)` runs (e.g. to keep an
    owner).

    Raises:
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
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError, ValueError):
            handle.close()
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
