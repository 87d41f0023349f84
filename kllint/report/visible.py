"""Text from checked files, made safe for a terminal or a CI log.

A checked file is untrusted: its source lines (code frames, fix previews, `--diff`), the names
and strings the messages quote and its path may hold ESC and other C0 / C1 control characters
(terminal escape sequences: colours, titles, cursor moves, hyperlinks) or the bidirectional
overrides and isolates of Trojan Source (U+202A..U+202E, U+2066..U+2069). Every output meant
for people (full, concise, github, `--diff`, `--show-fixes`, the lines on stderr) prints such
text through `visible`, which writes each of these characters as a Python escape (`\\x1b`,
`\\u202e`); tabs stay tabs, and newlines (LF, CRLF) stay with `newlines=True`. JSON escapes them
itself (`json.dumps`); SARIF, written with `ensure_ascii=False`, goes through `json_escaped`.
"""
from __future__ import annotations

import re

# C0 but tab, DEL, C1, the bidi marks, embeddings, overrides and isolates, and the Unicode line
# and paragraph separators (a terminal or a viewer would break the line there)
_WIDE = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_ANY = re.compile(f"[\x00-\x08\x0a-\x1f{_WIDE}]")
_BUT_NEWLINES = re.compile(f"\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f{_WIDE}]")
_NON_ASCII_UNSAFE = re.compile(f"[{_WIDE}]")

_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def visible(text: str, newlines: bool = False) -> str:
    """`text` with every control character but tab (and, with `newlines`, LF and CRLF) and
    every bidirectional control written as a Python escape: `\\x1b`, `\\u202e`."""
    pattern = _BUT_NEWLINES if newlines else _ANY
    return pattern.sub(_escape, text) if pattern.search(text) else text


def json_escaped(text: str) -> str:
    """JSON text written with `ensure_ascii=False`, with DEL, C1 and the bidirectional controls
    as `\\u` escapes (the JSON value is unchanged: these characters only occur inside strings;
    `json.dumps` already escapes C0)."""
    return _NON_ASCII_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
