"""Python source bytes to text, the way Python itself decodes a module (PEP 263), and the
digest of a module's code."""
from __future__ import annotations

import ast
import hashlib
import io
import re
import tokenize

# Python's own line breaks (str.splitlines also breaks at form feeds and other controls)
_LINE = re.compile(r".*?(?:\r\n|\r|\n)|.+\Z", re.S)


def decode_source(raw: bytes) -> str:
    """Source bytes to text with the encoding Python would use (PEP 263 cookie or BOM, else UTF-8).

    Raises:
        UnicodeDecodeError, LookupError, SyntaxError: undecodable bytes or a bad encoding cookie.
    """
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    return raw.decode(encoding)


def statement_lines(node: ast.stmt, lines: list[str]) -> tuple[int, int]:
    """The first and last line (1-based, inclusive) of a statement in a file of `lines`:
    decorators included, and a backslash continuation on its last line reaching into the next."""
    decorators = getattr(node, "decorator_list", None) or []
    start = min([node.lineno] + [d.lineno for d in decorators])
    end = node.end_lineno or node.lineno
    while end < len(lines) and lines[end - 1].rstrip("\r\n").endswith("\\"):
        end += 1
    return start, end


def source_lines(text: str) -> list[str]:
    """The lines of a module's text as Python splits them, each with its line break (a leading
    byte order mark dropped)."""
    return _LINE.findall(text[1:] if text.startswith("\ufeff") else text)


def code_digest(lines: list[str], outline: ast.Module) -> str:
    """sha256 of what the analysis can read of a module: the lines of each top-level statement
    (decorators and a trailing backslash continuation included), with their line numbers.

    Comments and blank lines between top-level statements are left out: no definition, constant,
    import or position the analysis takes from the module depends on them, so the result cache
    (kllint.cache) keeps the results of the modules that import one whose edit touched only those.
    `lines` are the module's `source_lines`, `outline` its `ast` tree.
    """
    digest = hashlib.sha256()
    for node in outline.body:
        start, end = statement_lines(node, lines)
        digest.update(f"{start}:{end}\n".encode())
        digest.update("".join(lines[start - 1:end]).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()
