"""Limits that keep one hostile file from taking down or stalling a run.

- libcst's native parser recurses once per operand of a chained `and` / `or` and overflows the
  C stack (a segmentation fault, which no `except` can catch) at about 8,000 operands on an
  8 MB stack, where CPython keeps the chain flat and compiles the file. `too_long_chain`
  screens a text before libcst sees it, and `guarded_parse_module` refuses what it screens out
  (with a `RecursionError`, which the callers already treat as "cannot parse").
- Whatever cannot be screened runs on a thread with a large stack (`STACK_BYTES`, reserved
  address space, touched only as used): any nesting that CPython's own parser accepts (about
  3,000 levels) takes libcst a few megabytes at most.
- `call_with_limits` runs one analysis on such a thread under a time budget: when it is spent,
  `AnalysisStopped` is raised in the analysing thread (at the next bytecode, as Ctrl+C is) and
  in the caller, so the run goes on with the next file. So it is when the process's resident
  memory grows by more than `MEMORY_BUDGET_BYTES` during the call (measured every quarter of a
  second where /proc tells it): a runaway analysis is stopped within a second or two of reaching
  it, not after minutes of allocation.
"""
from __future__ import annotations

import ast
import ctypes
import os
import re
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, TypeVar

if TYPE_CHECKING:  # libcst is imported when a text is parsed: a warm run from the cache never is
    import libcst

MAX_CHAIN_OPERANDS = 5_000
MAX_LAMBDA_DEPTH = 500  # libcst's parse of nested lambdas grows quadratically: 2,900 took 42 s and 1.6 GB
STACK_BYTES = 256 * 1024 * 1024
GRACE_SECONDS = 2.0
MEMORY_BUDGET_BYTES = 2 * 1024 ** 3  # growth of resident memory in one analysis (a nine-release audit: 316 MB)
POLL_SECONDS = 0.25
_WORD = re.compile(r"\b(?:and|or)\b")
_LAMBDA = re.compile(r"\blambda\b")

T = TypeVar("T")


class AnalysisStopped(BaseException):
    """The analysis of a file ran past its time budget (a BaseException, so that no
    `except Exception` in the analysis swallows it). `abandoned`: the analysing thread did not
    stop within `GRACE_SECONDS` (it is left to die; nothing it shares may be reused)."""

    def __init__(self, seconds: float, abandoned: bool = False, memory: bool = False) -> None:
        super().__init__(f"analysis stopped after using {memory_budget()} of memory" if memory
                         else f"analysis stopped after {seconds:g} s")
        self.seconds = seconds
        self.abandoned = abandoned
        self.memory = memory  # the memory budget ran out, not the time budget


def longest_chain(outline: ast.AST) -> int:
    """The largest number of operands of one `and` / `or` chain in an `ast` tree (iterative)."""
    longest = 0
    stack = [outline]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.BoolOp):
            longest = max(longest, len(node.values))
        stack.extend(ast.iter_child_nodes(node))
    return longest


def deepest_lambda(outline: ast.AST) -> int:
    """The deepest nesting of `lambda` expressions in an `ast` tree (iterative)."""
    deepest = 0
    stack: list[tuple[ast.AST, int]] = [(outline, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, ast.Lambda):
            depth += 1
            deepest = max(deepest, depth)
        stack.extend((child, depth) for child in ast.iter_child_nodes(node))
    return deepest


def too_long_chain(text: str, outline: ast.AST | None = None) -> str | None:
    """Why libcst must not parse `text` (None when it may): a chain of more than
    `MAX_CHAIN_OPERANDS` `and` / `or` operands (libcst's stack), or lambdas nested more than
    `MAX_LAMBDA_DEPTH` deep (its time and memory). Regular expressions bound the counts first,
    so ordinary code is never walked; `outline` is the text's `ast` tree when the caller has it.
    Plain substring counts bound the regular expressions' (each match is such a substring, and
    neither word overlaps itself), so ordinary text is not even searched with them."""
    if (text.count("and") + text.count("or") < MAX_CHAIN_OPERANDS
            and text.count("lambda") <= MAX_LAMBDA_DEPTH):
        return None
    chains = len(_WORD.findall(text)) >= MAX_CHAIN_OPERANDS
    lambdas = len(_LAMBDA.findall(text)) > MAX_LAMBDA_DEPTH
    if not (chains or lambdas):
        return None
    if outline is None:
        try:
            outline = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None  # libcst is not asked to parse what Python rejects
    chain = longest_chain(outline) if chains else 0
    if chain > MAX_CHAIN_OPERANDS:
        return f"a chain of {chain} `and`/`or` operands is too deeply nested to check"
    depth = deepest_lambda(outline) if lambdas else 0
    if depth > MAX_LAMBDA_DEPTH:
        return f"{depth} nested lambdas are too deeply nested to check"
    return None


def guarded_parse_module(source: str, *, validate: bool = True) -> libcst.Module:
    """`libcst.parse_module`, refusing texts that would overflow the native parser's stack.
    `validate=False` skips libcst's node validation (`kllint.unvalidated`): only for source that
    is known to be Python.

    Raises:
        RecursionError: the text is screened out by `too_long_chain`.
        libcst.ParserSyntaxError: libcst rejects the text.
    """
    reason = too_long_chain(source)
    if reason is not None:
        raise RecursionError(reason)
    if not validate:
        from kllint.unvalidated import parse_unvalidated

        return parse_unvalidated(source)
    import libcst

    return libcst.parse_module(source)


def _raise_in(thread: threading.Thread, exc_type: type[BaseException]) -> None:
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))


class _Budget(AnalysisStopped):
    """Raised asynchronously in the analysing thread (a class without arguments)."""

    def __init__(self) -> None:
        super().__init__(0.0)


WALL_FACTOR = 10.0


def _own_clock() -> int | None:
    """The CPU-time clock of the calling thread (None where the platform has none). Read by the
    thread itself: `pthread_getcpuclockid` of another thread that has just ended reads freed
    memory (a crash), whereas `clock_gettime` of an ended thread's clock is only an error."""
    try:
        return time.pthread_getcpuclockid(threading.get_ident())
    except (AttributeError, OSError, OverflowError, TypeError):
        return None


def _cpu_seconds(clock: int | None) -> float | None:
    """CPU time used on `clock` (None where the platform cannot tell, or the thread has ended)."""
    if clock is None:
        return None
    try:
        return time.clock_gettime(clock)
    except (AttributeError, OSError, OverflowError, TypeError):
        return None


def memory_budget() -> str:
    """`MEMORY_BUDGET_BYTES` in words ("2 GB")."""
    return f"{MEMORY_BUDGET_BYTES / 1024 ** 3:.3g} GB"


def resident_bytes() -> int | None:
    """The resident memory of this process (None where /proc does not tell it)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):
    _PAGE = 4096


def _over_memory(start: int | None, outcome: dict[str, Any] | None) -> bool:
    now = resident_bytes() if start is not None else None
    if now is not None and now - start > MEMORY_BUDGET_BYTES:
        if outcome is not None:
            outcome["memory"] = True
        return True
    return False


def _wait(thread: threading.Thread, budget: float | None, ready: threading.Event | None = None,
          outcome: dict[str, Any] | None = None) -> None:
    """Wait for `thread` until it ends or has used `budget` seconds of CPU time (a loaded
    machine must not stop analyses that are merely slowed down), or a wall-clock backstop of
    `WALL_FACTOR` times the budget (at least a minute) has passed, or the process has grown by
    `MEMORY_BUDGET_BYTES` (`outcome["memory"]` is then set)."""
    start = resident_bytes()
    if not budget:
        while thread.is_alive() and not _over_memory(start, outcome):
            thread.join(POLL_SECONDS)
        return
    deadline = time.monotonic() + max(budget * WALL_FACTOR, 60.0)
    if ready is not None:
        ready.wait()  # the thread has put its own clock in `outcome`
    while thread.is_alive():
        thread.join(min(POLL_SECONDS, budget))
        if not thread.is_alive():
            return
        if _over_memory(start, outcome):
            return
        used = _cpu_seconds((outcome or {}).get("clock"))
        if used is None:  # no per-thread clock (or the thread just ended): wall time
            thread.join(budget)
            return
        if used >= budget or time.monotonic() >= deadline:
            return


def call_with_limits(function: Callable[..., T], *args: Any, budget: float | None = None,
                     **kwargs: Any) -> T:
    """`function(*args, **kwargs)` on a thread with a `STACK_BYTES` stack, within `budget`
    seconds (None or 0: no limit). Exceptions of `function` are re-raised here.

    Raises:
        AnalysisStopped: the budget ran out (the analysing thread was interrupted).
    """
    outcome: dict[str, Any] = {}
    ready = threading.Event()

    def body() -> None:
        outcome["clock"] = _own_clock()
        ready.set()
        try:
            outcome["value"] = function(*args, **kwargs)
        except _Budget:
            outcome["stopped"] = True
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc

    previous = threading.stack_size()
    try:
        threading.stack_size(STACK_BYTES)
        thread = threading.Thread(target=body, name="kllint-analysis", daemon=True)
    except (ValueError, RuntimeError):  # a platform without settable stacks
        threading.stack_size(previous)
        thread = threading.Thread(target=body, name="kllint-analysis", daemon=True)
    thread.start()
    threading.stack_size(previous)
    try:
        _wait(thread, budget, ready, outcome)
    except BaseException:  # Ctrl+C, SIGTERM: stop the analysis too
        _raise_in(thread, _Budget)
        raise
    if thread.is_alive():
        _raise_in(thread, _Budget)
        thread.join(GRACE_SECONDS)
        raise AnalysisStopped(budget or 0.0, abandoned=thread.is_alive(), memory=bool(outcome.get("memory")))
    if "error" in outcome:
        error = outcome.pop("error")
        try:
            raise error
        finally:
            del error
    if outcome.get("stopped"):
        raise AnalysisStopped(budget or 0.0, memory=bool(outcome.get("memory")))
    return outcome["value"]
