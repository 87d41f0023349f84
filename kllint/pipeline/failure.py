"""What becomes of a file whose analysis failed: never the run's failure.

An exception out of one file's analysis is that file's KL900 ("not checked", with the reason)
when its cause is the input (nesting too deep for Python's recursion limit, a number too large,
memory, a file that cannot be read), else that file's internal-error line. Its message is
bounded and never formats the objects it holds: a libcst node in a `KeyError` (libcst's
position pass raises one when a `RecursionError` interrupted it) prints itself recursively, and
formatting it overflowed the stack of the error path itself.
"""
from __future__ import annotations

from kllint.diagnostics import Diagnostic, Span
from kllint.pipeline.outcome import Outcome
from kllint.rules.registry import BY_CODE

MAX_MESSAGE = 200
_PLAIN = (str, bytes, int, float, bool, type(None))


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the exceptions it was raised from or during (at most 20)."""
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(found) < 20 and all(current is not seen for seen in found):
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def _plain(value: object) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() <= 64  # str() of a huge int is slow, or refused
    return isinstance(value, _PLAIN)


def describe(exc: BaseException) -> str:
    """`TypeName: message` of an exception, at most about `MAX_MESSAGE` characters; arguments
    that are not plain values (strings, numbers) are shown by their type only."""
    name = type(exc).__name__
    try:
        args = exc.args if isinstance(exc.args, tuple) else ()
        if isinstance(exc, OSError) and exc.strerror:
            text = exc.strerror + (f": {exc.filename}" if isinstance(exc.filename, str) else "")
        elif all(_plain(arg) for arg in args):
            text = str(exc)
        else:
            text = ", ".join(str(arg) if _plain(arg) else f"<{type(arg).__name__}>" for arg in args)
    except Exception:  # noqa: BLE001 - a message that cannot be made (a __str__ that recurses) is no message
        text = ""
    text = " ".join(text.split())
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE - 3] + "..."
    return f"{name}: {text}" if text else name


def input_failure(exc: BaseException) -> tuple[str, str] | None:
    """`(message, short reason)` when `exc` (or what it was raised during) comes from the input
    rather than from a bug: nesting too deep, a number too large, memory, an unreadable file."""
    for cause in _chain(exc):  # running out of stack or memory can raise another error on the way out
        if isinstance(cause, RecursionError):
            return "expression nesting too deep to analyse", "expression nesting too deep"
        if isinstance(cause, MemoryError):
            return "out of memory while analysing", "out of memory"
    if isinstance(exc, OverflowError):
        return "a number too large to analyse (OverflowError)", "a number too large"
    if isinstance(exc, OSError):
        return f"cannot read a file while analysing ({describe(exc)})", "a file could not be read"
    return None


def failed(display: str, exc: BaseException) -> Outcome:
    """The outcome of a file whose analysis raised `exc`: KL900 with the reason when the input
    caused it (see `input_failure`), else an internal-error line for the file. Never cached."""
    reason = input_failure(exc)
    if reason is None:
        return Outcome([], [], [f"{display}: internal error: {describe(exc)}"],
                       file_notes=[f"analysis abandoned: internal error ({type(exc).__name__})"])
    info = BY_CODE["KL900"]
    note = Diagnostic(info.code, info.name, info.severity, display, Span(1, 1, 1, 2), f"{reason[0]}; not checked")
    return Outcome([note], [note], file_notes=[f"analysis abandoned: {reason[1]}"])
