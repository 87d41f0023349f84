"""Python source bytes to text, the way Python itself decodes a module (PEP 263), and the
digest of a module's code."""
from __future__ import annotations

import ast
import hashlib
import io
import os
import re
import stat
import tokenize

# the largest file kllint checks (larger ones are reported, not read)
MAX_FILE_BYTES = 20 * 1024 * 1024
# Python's own line breaks (str.splitlines also breaks at form feeds and other controls)
_LINE = re.compile(r".*?(?:\r\n|\r|\n)|.+\Z", re.S)


class NotRegularFileError(OSError):
    """A path names something other than a regular file (a FIFO, a device, a socket, a folder)."""


class FileTooLargeError(OSError):
    """A file is larger than the limit it is read with."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"file is larger than {limit // (1024 * 1024) or limit} "
                         f"{'MB' if limit >= 1024 * 1024 else 'bytes'}")
        self.size, self.limit = size, limit


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO (named pipe)", "a character device", ...)."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "not a regular file"


def read_regular(path: str | os.PathLike[str], limit: int, follow_symlinks: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, read without ever blocking or
    reading more than `limit + 1` bytes: a FIFO, a device or a socket (also behind a symbolic
    link) is refused before it is read, a file is measured before it is read, and a file that
    grows while it is read is cut off. With `follow_symlinks` off, a symbolic link is refused too.

    Raises:
        NotRegularFileError: not a regular file (nothing was read from it).
        FileTooLargeError: larger than `limit`.
        OSError: it cannot be opened or read (missing, no permission, a symbolic link loop).
    """
    before = os.stat(path, follow_symlinks=follow_symlinks)
    if stat.S_ISLNK(before.st_mode):
        raise NotRegularFileError("a symbolic link, not followed here")
    if not stat.S_ISREG(before.st_mode):
        raise NotRegularFileError(f"{file_kind(before.st_mode)}, not a regular file")
    if before.st_size > limit:
        raise FileTooLargeError(before.st_size, limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):  # replaced between the two looks
            raise NotRegularFileError(f"{file_kind(opened.st_mode)}, not a regular file")
        if opened.st_size > limit:
            raise FileTooLargeError(opened.st_size, limit)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise FileTooLargeError(size, limit)
        return b"".join(chunks)
    finally:
        os.close(fd)


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
    (kllint.pipeline.cache) keeps the results of the modules that import one whose edit touched only those.
    `lines` are the module's `source_lines`, `outline` its `ast` tree.
    """
    digest = hashlib.sha256()
    for node in outline.body:
        start, end = statement_lines(node, lines)
        digest.update(f"{start}:{end}\n".encode())
        digest.update("".join(lines[start - 1:end]).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()
