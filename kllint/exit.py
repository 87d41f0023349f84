"""Leave the process without tearing down the heap.

At exit CPython frees every object one by one and runs a last cyclic collection. After an
audit the heap holds the project index (parsed trees, symbolic expressions): freeing it took
1.2 s of a one-job run over two releases, and 3.2 s of a two-job run over nine releases (the
workers). Nothing needs that work: results are written and flushed before, cache files are
written atomically. So the command line and the worker processes end with `os._exit`, as mypy
does by default (its `--fast-exit`).
"""
from __future__ import annotations

import os
import sys


def exit_status(code: object) -> int:
    """The process status `sys.exit(code)` would give: None -> 0, an int as is, anything else
    (a message, already printed by the caller) -> 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1


def fast_exit(code: object = 0) -> None:
    """Flush the standard streams and end the process now with `exit_status(code)`; never returns.

    Atexit handlers do not run, so call it only where nothing is left to clean up."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(exit_status(code))
