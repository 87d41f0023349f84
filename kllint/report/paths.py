"""File names that are not valid UTF-8, in output that must be valid Unicode.

On POSIX a file name is bytes; Python shows the bytes that are not UTF-8 as lone surrogates
(`os.fsdecode`), which no UTF-8 stream, JSON parser or SARIF viewer accepts. Every format but
SARIF writes such a name with `escape_path`: backslashes doubled and each byte that is not
UTF-8 written as `\\xNN` (`unescape_path` reverses it). Only names that hold such a byte or a
backslash are changed. SARIF percent-encodes the bytes of its URIs instead (RFC 3986).
"""
from __future__ import annotations

import os
import re
from dataclasses import replace

from kllint.diagnostics import Diagnostic

_SURROGATE = re.compile("[\udc80-\udcff]")
_ESCAPE = re.compile(r"\\(\\|x[0-9a-f]{2})")


def needs_escape(path: str) -> bool:
    """Whether `escape_path` changes `path` (it holds an undecodable byte or a backslash)."""
    return "\\" in path or _SURROGATE.search(path) is not None


def escape_path(path: str) -> str:
    """`path` as valid Unicode, reversibly (see the module docstring)."""
    if not needs_escape(path):
        return path
    raw = path.replace("\\", "\\\\").encode("utf-8", "surrogateescape")
    return raw.decode("utf-8", "backslashreplace")


def unescape_path(text: str) -> str:
    """The file name `escape_path` wrote as `text` (with lone surrogates for undecodable bytes)."""
    if "\\" not in text:
        return text
    out = bytearray()
    position = 0
    for match in _ESCAPE.finditer(text):
        out += text[position:match.start()].encode("utf-8", "surrogateescape")
        token = match.group(1)
        out += b"\\" if token == "\\" else bytes([int(token[1:], 16)])
        position = match.end()
    out += text[position:].encode("utf-8", "surrogateescape")
    return os.fsdecode(bytes(out)) if os.name != "nt" else out.decode("utf-8", "surrogateescape")


def uri_bytes(path: str) -> bytes:
    """The bytes of a file name, for percent-encoding in a URI."""
    return path.encode("utf-8", "surrogateescape")


def printable(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """`diagnostics` with every path (primary and trace) passed through `escape_path`."""
    result = []
    for diagnostic in diagnostics:
        if needs_escape(diagnostic.path) or any(needs_escape(step.path) for step in diagnostic.trace):
            diagnostic = replace(diagnostic, path=escape_path(diagnostic.path),
                                 trace=tuple(replace(step, path=escape_path(step.path)) for step in diagnostic.trace))
        result.append(diagnostic)
    return result
