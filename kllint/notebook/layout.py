"""Where things are in a notebook's JSON text: the offsets of each cell's `source` value and of its
strings, so that a finding can point at the notebook file's own lines (SARIF, GitHub annotations)
and `--fix` can rewrite one cell's source and leave every other byte (outputs, metadata, layout)
as it was.

A small JSON reader that keeps positions; the values themselves come from the `json` module.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)", re.S)


@dataclass
class Node:
    """A JSON value at `start:end` of the text; `items` for arrays, `members` for objects."""

    start: int
    end: int
    items: list["Node"] = field(default_factory=list)
    members: dict[str, "Node"] = field(default_factory=dict)


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text

    def skip(self, at: int) -> int:
        return _WS.match(self.text, at).end()  # type: ignore[union-attr]

    def value(self, at: int) -> Node:
        at = self.skip(at)
        char = self.text[at:at + 1]
        if char == "{":
            return self._object(at)
        if char == "[":
            return self._array(at)
        if char == '"':
            _, end = json.decoder.scanstring(self.text, at + 1)
            return Node(at, end)
        for literal in ("true", "false", "null"):
            if self.text.startswith(literal, at):
                return Node(at, at + len(literal))
        match = _NUMBER.match(self.text, at)
        if match is None or match.end() == at:
            raise ValueError(f"unexpected character at offset {at}")
        return Node(at, match.end())

    def _array(self, at: int) -> Node:
        node = Node(at, at)
        at = self.skip(at + 1)
        if self.text.startswith("]", at):
            node.end = at + 1
            return node
        while True:
            item = self.value(at)
            node.items.append(item)
            at = self.skip(item.end)
            if self.text.startswith("]", at):
                node.end = at + 1
                return node
            if not self.text.startswith(",", at):
                raise ValueError(f"expected ',' or ']' at offset {at}")
            at += 1

    def _object(self, at: int) -> Node:
        node = Node(at, at)
        at = self.skip(at + 1)
        if self.text.startswith("}", at):
            node.end = at + 1
            return node
        while True:
            at = self.skip(at)
            if not self.text.startswith('"', at):
                raise ValueError(f"expected a key at offset {at}")
            key, at = json.decoder.scanstring(self.text, at + 1)
            at = self.skip(at)
            if not self.text.startswith(":", at):
                raise ValueError(f"expected ':' at offset {at}")
            member = self.value(at + 1)
            node.members[key] = member
            at = self.skip(member.end)
            if self.text.startswith("}", at):
                node.end = at + 1
                return node
            if not self.text.startswith(",", at):
                raise ValueError(f"expected ',' or '}}' at offset {at}")
            at += 1


def read_layout(text: str) -> Node:
    """The positions of the JSON document `text` (already known to be valid JSON).

    Raises:
        ValueError: the text is not the JSON it was taken for.
    """
    return _Reader(text).value(1 if text.startswith("\ufeff") else 0)


def cell_sources(text: str) -> list[Node | None]:
    """For each cell of the notebook `text`, the node of its `source` value (None if missing)."""
    root = read_layout(text)
    cells = root.members.get("cells")
    if cells is None:
        return []
    return [cell.members.get("source") for cell in cells.items]


def raw_offset(text: str, string: Node, index: int) -> int:
    """The offset in `text` of character `index` of the JSON string at `string` (decoded)."""
    at = string.start + 1
    decoded = 0
    while decoded < index and at < string.end - 1:
        if text[at] == "\\":
            escape = _ESCAPE.match(text, at)
            length = escape.end() - at if escape else 2
            if text.startswith("\\u", at) and 0xD800 <= int(text[at + 2:at + 6], 16) < 0xDC00 \
                    and text.startswith("\\u", at + 6):
                length = 12  # a surrogate pair is one character
            at += length
        else:
            at += 1
        decoded += 1
    return at


def offset_position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column (in characters) of `offset` in `text`."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def format_source(lines: list[str], text: str, old: Node, as_list: bool) -> str:
    """The JSON text of a cell's new source `lines`, laid out as the old value at `old` was
    (one string per line at the same indentation and with the same line breaks, CRLF or LF, as
    Jupyter writes it; or one string)."""
    if not as_list:
        return json.dumps("".join(lines), ensure_ascii=False)
    if not lines:
        return "[]"
    original = text[old.start:old.end]
    if "\n" not in original or not old.items:
        return "[" + ", ".join(json.dumps(line, ensure_ascii=False) for line in lines) + "]"
    first = old.items[0].start
    indent = text[text.rfind("\n", old.start, first) + 1:first]
    closing = text[text.rfind("\n", old.start, old.end - 1) + 1:old.end - 1]
    eol = "\r\n" if "\r\n" in original else "\n"
    body = ("," + eol).join(indent + json.dumps(line, ensure_ascii=False) for line in lines)
    return "[" + eol + body + eol + closing + "]"
