"""libcst parses without libcst's node validation, for text that is known to be Python.

Every libcst node checks itself when it is built (`CSTNode.__post_init__` calls `_validate`: no
unbalanced parentheses, a space where a keyword needs one, ...). That guards trees built by
hand; a tree libcst's own parser builds from Python source is valid by construction, and the
checks cost about a sixth of a parse. `parse_unvalidated` parses with them skipped, in the
calling thread only and only for the nodes of that parse: nodes built anywhere else (the
replacement nodes of a fix, another thread's parse) are still validated.

The checks are skipped by one wrapper around `CSTNode.__post_init__`, installed on the first
unvalidated parse, that calls the original unless its thread is inside `unvalidated()`. It is
installed only where libcst's `__post_init__` does nothing but call `self._validate()`; where
libcst's internals differ, `parse_unvalidated` is a plain (validated) parse.

A few parses of valid Python fail only in the checks (libcst issue 1061: `() if 0
else(lambda:())` raises a TypeError in a conditional expression's `_validate`): those files are
analysed now, where the validated parse stopped their analysis with an internal error.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:  # libcst is imported when a text is parsed: a warm run from the cache never is
    import libcst

_MARK = "__kllint_unvalidated__"  # the wrapper carries the scope it reads
_STARRED = 0x04 | 0x08  # CO_VARARGS | CO_VARKEYWORDS
_lock = threading.Lock()
_scope: "_Scope | None" = None
_tried = False


class _Scope(threading.local):
    """Per thread: whether the nodes built now come from a parse of valid source."""

    active = False


def install(node_class: type) -> _Scope | None:
    """Wrap `node_class.__post_init__` so that it skips validation in a thread whose scope is
    active, and return that scope; None (nothing changed) when `__post_init__` is not, as
    expected, a plain call of `self._validate()`. Installing twice returns the same scope."""
    original = node_class.__dict__.get("__post_init__")
    scope = getattr(original, _MARK, None)
    if isinstance(scope, _Scope):
        return scope
    code = getattr(original, "__code__", None)
    if (code is None or code.co_argcount != 1 or code.co_kwonlyargcount or code.co_flags & _STARRED
            or code.co_names != ("_validate",)
            or not callable(getattr(node_class, "_validate", None))):
        return None
    scope = _Scope()

    def __post_init__(self: Any) -> None:
        if not scope.active:
            original(self)

    __post_init__.__doc__ = original.__doc__
    __post_init__.__qualname__ = original.__qualname__
    setattr(__post_init__, _MARK, scope)
    node_class.__post_init__ = __post_init__
    return scope


def _installed() -> _Scope | None:
    """The scope of libcst's `CSTNode` (installed on first use; None where it cannot be)."""
    global _scope, _tried
    if not _tried:
        with _lock:
            if not _tried:
                try:
                    from libcst._nodes.base import CSTNode
                except ImportError:
                    CSTNode = None
                _scope = install(CSTNode) if CSTNode is not None else None
                _tried = True
    return _scope


def skips_validation() -> bool:
    """Whether `parse_unvalidated` skips libcst's validation (False: libcst's internals differ)."""
    return _installed() is not None


@contextmanager
def unvalidated() -> Iterator[None]:
    """Nodes built in this thread inside the block are not validated (nested blocks allowed).
    Only for nodes libcst's parser builds from source it accepted."""
    scope = _installed()
    if scope is None or scope.active:
        yield
        return
    scope.active = True
    try:
        yield
    finally:
        scope.active = False


def parse_unvalidated(source: str) -> "libcst.Module":
    """`libcst.parse_module(source)` without validating the nodes it builds.

    Raises:
        libcst.ParserSyntaxError: libcst rejects the text.
    """
    import libcst

    with unvalidated():
        return libcst.parse_module(source)
