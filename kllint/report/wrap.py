"""Prose lines for a terminal: wrapped at spaces with a hanging indent (the lines after the
first start under the text, not under the line's label), and a message's condition split off
(`(when ...)`, `; the estimate is ...`) so that it can stand on a line of its own."""
from __future__ import annotations

import re

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

_PIECE = re.compile(r"\s*\S+")
ESTIMATE_IS = "; the estimate is "
WHEN = " (when "


def breaks(plain: str, first: int, rest: int) -> list[int]:
    """Offsets where `plain` is broken into lines of at most `first` cells (the first line) and
    `rest` cells (the others): before a word that does not fit, inside a word wider than a line."""
    offsets: list[int] = []
    used, room = 0, first
    for match in _PIECE.finditer(plain):
        piece = match.group()
        if used and used + cell_len(piece) > room:
            piece = piece.lstrip()
            offsets.append(match.end() - len(piece))
            used, room = 0, rest
        at = match.end() - len(piece)
        while used + cell_len(piece) > room:  # a word wider than the room left: folded
            fits, width = 0, used
            while fits < len(piece) and width + cell_len(piece[fits]) <= room:
                width += cell_len(piece[fits])
                fits += 1
            fits = max(fits, 1)
            offsets.append(at + fits)
            at, piece = at + fits, piece[fits:]
            used, room = 0, rest
        used += cell_len(piece)
    return [o for o in offsets if 0 < o < len(plain)]


def hanging(text: Text, width: int, indent: int) -> list[Text]:
    """`text` as lines of at most `width` cells, each after the first indented by `indent`
    spaces (at most half the width); a newline in `text` starts a new indented line."""
    indent = max(0, min(indent, width // 2))
    out: list[Text] = []
    for number, paragraph in enumerate(text.split("\n", allow_blank=True)):
        first = width if number == 0 else width - indent
        lines = paragraph.divide(breaks(paragraph.plain, first, width - indent))
        for index, line in enumerate(lines):
            line.rstrip()
            if number or index:
                line = line[len(line.plain) - len(line.plain.lstrip(" ")):]
                line = Text(" " * indent) + line
            out.append(line)
    return out


def print_hanging(console: Console, text: Text, indent: int) -> None:
    """Print `text` with a hanging indent of `indent` on a console that wraps (a terminal); a
    soft-wrapping console (a file, a pipe) gets it on one line, as before."""
    if console.soft_wrap:
        console.print(text)
        return
    for line in hanging(text, console.width, indent):
        console.print(line, no_wrap=True, crop=True)


def _closing(message: str, start: int) -> int | None:
    """The offset of the `)` that closes the `(` at `start` (code in backticks and quoted
    options skipped), None when it is not closed."""
    depth, quote = 0, None
    for offset in range(start, len(message)):
        char = message[offset]
        if quote is not None:
            quote = None if char == quote else quote
        elif char in "`'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return offset
    return None


def split_condition(message: str) -> tuple[str, str | None]:
    """The message without its condition, and the condition: `(when ...)` at its end, or what
    follows `; the estimate is` (said as `the estimate is ...`); None when it has neither."""
    at = message.find(ESTIMATE_IS)
    if at > 0:
        return message[:at], message[at + 2:]
    at = message.find(WHEN)
    while at > 0:
        if _closing(message, at + 1) == len(message) - 1:
            return message[:at], message[at + 1:]
        at = message.find(WHEN, at + 1)
    return message, None
