"""Files written for a newer Python than the one kllint runs on.

The analysis takes a module's outline from `ast`, so on Python 3.11 a file that uses Python
3.12+ grammar (PEP 695 `type` aliases and type parameters, PEP 701 f-strings, 3.14 t-strings)
would be a "syntax error". libcst's parser accepts that grammar. When `ast` rejects a file that
shows such syntax, `newer_syntax_outline` has libcst parse it and rewrite, line for line, what
the older grammar cannot read: `type X[T] = v` -> `X = None`, `def f[T](...)` -> `def f   (...)`,
an f-string the old grammar rejects -> `""` (in parentheses holding its line breaks). The
rewritten text has the same lines, so the outline's line numbers are the file's; libcst parses
the original text for the analysis itself.

libcst's native parser can overflow its stack on input Python rejects for its nesting, and
such input is not screened here, so the parse runs in a child process with a time limit and an
address-space limit: whatever happens there costs one file, never the run. The child imports
nothing from the checked project (issue 35): it runs this file as a script in isolated mode
(`-I`: no current folder or script folder on `sys.path`, no PYTHON* variables, no user
site-packages), from a fresh empty folder, with the PYTHON* variables removed from its
environment; only the folder libcst is installed in is added, at the end of `sys.path`.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
from functools import lru_cache

NEWER_SYNTAX = re.compile(r"^[ \t]*type[ \t]+\w|^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+\w+[ \t]*\[|"
                          r"(?<![\w.])[rRbB]?[fFtT][rR]?['\"]", re.M)
# libcst takes 1-2 s and about half a gigabyte per 256 KB (a 1 MB file Python rejects: 13 s, 1.4 GB)
CHILD_SECONDS = 10.0  # a cold start of the child takes 0.5-1 s, 3-5 s on a loaded machine
CHILD_MEMORY_BYTES = 1024 * 1024 * 1024
MAX_BYTES = 256 * 1024
NEAR_LINES = 30  # the newer syntax must show this close above the line Python rejects
_UNCHECKABLE, _REJECTED = 3, 4


class NewerSyntaxError(SyntaxError):
    """Valid Python for a newer version (libcst parses it) that this Python cannot check."""

    newer_python = True


def _rewrite(text: str) -> str | None:
    """The line-for-line rewrite of `text` that the running Python's `ast` accepts (None if
    there is none); raises libcst.ParserSyntaxError when libcst rejects `text`."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    wrapper = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offsets(node: cst.CSTNode) -> tuple[int, int]:
        where = positions[node]
        return (starts[where.start.line - 1] + where.start.column, starts[where.end.line - 1] + where.end.column)

    edits: list[tuple[int, int, str]] = []

    def placeholder(start: int, end: int, value: str) -> str:
        breaks = text.count("\n", start, end)
        return f"({chr(10) * breaks}{value})" if breaks else value

    strings = tuple(getattr(cst, name) for name in ("FormattedString", "TemplatedString") if hasattr(cst, name))
    stack: list[cst.CSTNode] = [wrapper.module]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.TypeAlias):
            start, end = offsets(node)
            edits.append((start, end, f"{node.name.value} = " + placeholder(start, end, "None")))
            continue
        if isinstance(node, strings):
            start, end = offsets(node)
            try:
                ast.parse(text[start:end], mode="eval")
            except SyntaxError:
                edits.append((start, end, placeholder(start, end, '""')))
            continue
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node.type_parameters is not None:
            start, end = offsets(node.type_parameters)
            if "\n" in text[start:end] or "\r" in text[start:end]:
                return None
            edits.append((start, end, " " * (end - start)))
        stack.extend(node.children)
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    ast.parse(text)  # SyntaxError: not something this rewrite can help
    return text


def _child() -> None:  # pragma: no cover - runs in the child process
    """Read a module's text on stdin, write its rewrite on stdout (see `_rewrite`); exit 3 when
    libcst accepts it but it cannot be rewritten, 4 when libcst rejects it."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):
        pass
    import libcst as cst

    text = sys.stdin.buffer.read().decode("utf-8", "surrogatepass")
    try:
        rewritten = _rewrite(text)
    except cst.ParserSyntaxError:
        sys.exit(_REJECTED)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        sys.exit(_UNCHECKABLE)
    if rewritten is None:
        sys.exit(_UNCHECKABLE)
    sys.stdout.buffer.write(rewritten.encode("utf-8", "surrogatepass"))


def _libcst_folder() -> str | None:
    """The folder libcst is imported from in this process (found, not imported), or None."""
    from importlib.util import find_spec

    try:
        spec = find_spec("libcst")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    return os.path.dirname(os.path.abspath(locations[0])) if locations else None


def child_command() -> list[str]:
    """The command line of the parser child: this file as an isolated script (see the module
    docstring), the folder of libcst as its argument."""
    folder = _libcst_folder()
    return [sys.executable, "-I", os.path.abspath(__file__), *([folder] if folder else [])]


def child_environment() -> dict[str, str]:
    """This process's environment without the PYTHON* variables (`-I` ignores them too)."""
    return {name: value for name, value in os.environ.items() if not name.upper().startswith("PYTHON")}


@lru_cache(maxsize=64)
def _in_child(text: str) -> tuple[int, str]:
    try:
        with tempfile.TemporaryDirectory(prefix="kllint-parse-", ignore_cleanup_errors=True) as neutral:
            done = subprocess.run(child_command(), input=text.encode("utf-8", "surrogatepass"), capture_output=True,
                                  timeout=CHILD_SECONDS, env=child_environment(), cwd=neutral)
    except (OSError, subprocess.SubprocessError):
        return -1, ""
    return done.returncode, done.stdout.decode("utf-8", "surrogatepass")


def newer_syntax_outline(text: str, error: SyntaxError) -> tuple[ast.Module | None, SyntaxError]:
    """For a text `ast` rejected with `error`: its outline from the rewrite (see the module
    docstring) and `error`; or (None, a `NewerSyntaxError`) for valid newer Python that cannot
    be rewritten; or (None, `error`) when libcst rejects it too or it shows no newer syntax."""
    if len(text) > MAX_BYTES or not NEWER_SYNTAX.search(text):
        return None, error
    if error.lineno and not NEWER_SYNTAX.search("\n".join(text.splitlines()[max(error.lineno - NEAR_LINES, 0):error.lineno])):
        return None, error  # an error far from any newer syntax (an f-string elsewhere): a plain error
    code, rewritten = _in_child(text)
    if code == 0:
        try:
            return ast.parse(rewritten), error
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None, error
    if code == _UNCHECKABLE:
        newer = NewerSyntaxError(f"valid Python of a newer version than this one ({sys.version_info[0]}."
                                 f"{sys.version_info[1]}) that kllint cannot check here; needs a newer Python "
                                 "to check")
        newer.lineno, newer.offset = error.lineno, error.offset
        return None, newer
    return None, error


if __name__ == "__main__":  # pragma: no cover - the parser child (`child_command`)
    sys.path.extend(folder for folder in sys.argv[1:] if folder not in sys.path)
    _child()
