"""Leave the process without tearing down the heap.

At exit CPython frees every object one by one and runs a last cyclic collection. After an
audit the heap holds the project index (parsed trees, symbolic expressions): freeing it took
1.2 s of a one-job run over two releases, and 3.2 s of a two-job run over nine releases (the
workers). Nothing needs that work: results are written and flushed before, cache files are
written atomically. So the command line and the worker processes end with `os._exit`, as mypy
does by default (its `--fast-exit`).

For the same reason a check on the command line does not free its last project index when the
run returns (`keep_until_exit`): that is the same teardown, only earlier.
"""
from __future__ import annotations

import os
import sys

_kept: list[object] = []  # what `keep_until_exit` holds: one value at most
_exits_fast = False


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


def exits_fast() -> None:
    """Declare that this process ends with `fast_exit` (the command line's `main` does): from now
    on `keep_until_exit` holds what it is given."""
    global _exits_fast
    _exits_fast = True


def keep_until_exit(value: object) -> None:
    """In a process that ends with `fast_exit`, hold `value` (a run's project index) until then,
    in place of what an earlier call held, instead of freeing it object by object now: freeing
    the index of a five-file pre-commit run (parsed trees and outlines) took 9-19 ms of its
    0.8 s (0.6 % of its instructions). Elsewhere (a library caller, tests) do nothing. One value
    at most: a process that checks again frees the earlier one then, as before."""
    if _exits_fast:
        _kept[:] = [value]
