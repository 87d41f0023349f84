"""Inline suppressions and `--add-noqa`.

Recognised comments (only real comments count, never text inside strings):

- `# noqa: KL102` (several: `# noqa: KL102, KL201`) on any line of the finding's primary span;
- `# kllint: ignore[KL102] reason`, trailing on such a line, or alone on the line before it;
- `# kllint: file-ignore[KL2]` anywhere: the codes (or prefixes) are ignored in the whole file.

Codes are required: a blanket `# noqa` written for a style tool does not hide a correctness
finding, unless the configuration sets `blanket-noqa = true`.
"""
from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

from kllint.diagnostics import Diagnostic

_CODE = r"[A-Z]+[0-9]+"
NOQA = re.compile(rf"#\s*noqa\s*:\s*(?P<codes>{_CODE}(?:(?:\s*,\s*|\s+){_CODE})*)", re.IGNORECASE)
_BLANKET_NOQA = re.compile(r"#\s*noqa\b(?!\s*:)", re.IGNORECASE)
IGNORE = re.compile(r"#\s*kllint\s*:\s*ignore\[(?P<codes>[^\]]+)\]", re.IGNORECASE)
FILE_IGNORE = re.compile(r"#\s*kllint\s*:\s*file-ignore\[(?P<codes>[^\]]+)\]", re.IGNORECASE)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# a text without this names no kllint code in a suppression (noqa codes of other tools never
# match a KL code), so it needs no tokenizing: most files carry only `# noqa: E501`-like comments
_MAY_NAME_KLLINT = re.compile(r"noqa\s*:[^\n]*?KL|kllint\s*:", re.IGNORECASE)
ALL_CODES = "*"


def _codes(text: str) -> set[str]:
    return {c.strip().upper() for c in re.split(r"[\s,]+", text) if c.strip()}


def _matches(code: str, selectors: set[str]) -> bool:
    return ALL_CODES in selectors or any(code.startswith(sel) for sel in selectors)


def names_a_suppression(text: str) -> bool:
    """Whether `text` names `noqa` or `kllint` in any case: without either it holds no
    suppression of any kind (blanket or not), so its findings need no suppression pass."""
    if "noqa" in text or "kllint" in text:  # as usually written: no need to lower the text
        return True
    lowered = text.lower()  # two substring searches are far faster than a case-blind regex
    return "noqa" in lowered or "kllint" in lowered


# where a match of _MAY_NAME_KLLINT can start, in the lower-cased text: re's case-blind matching
# takes the dotless ı for an i (and İ, which lowers to two characters: see may_name_kllint)
_STARTS = ("noqa", "kllint", "kll\u0131nt")


def may_name_kllint(text: str) -> bool:
    """Whether `text` may hold a suppression of a kllint code (a `# noqa:` naming a KL code or
    a `# kllint:` directive); False is certain, True needs the tokenizer.

    The case-blind pattern is tried only where the lower-cased text reads one of `_STARTS`
    (searching the whole text with it goes a character at a time): every character that
    re's case-blind matching takes for a letter of `noqa` or `kllint` lowers to that letter,
    but for ı and İ. İ lowers to two characters, so where lowering changes the length (the
    places differ) the whole text is searched."""
    lowered = text.lower()
    if "noqa" not in lowered and "kllint" not in lowered:
        return False
    if len(lowered) != len(text):
        return _MAY_NAME_KLLINT.search(text) is not None
    for word in _STARTS:
        start = lowered.find(word)
        while start >= 0:
            if _MAY_NAME_KLLINT.match(text, start):
                return True
            start = lowered.find(word, start + 1)
    return False


def comments(text: str) -> list[tuple[int, int, str, bool]]:
    """The comments of a module: (line, 0-based column, text, whether alone on its line).

    Uses the tokenizer so that `#` inside strings is not a comment; for text that does not
    tokenize (a syntax error), falls back to a line scan.
    """
    found: list[tuple[int, int, str, bool]] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text, newline="").readline):
            if token.type == tokenize.COMMENT:
                alone = token.line[: token.start[1]].strip() == ""
                found.append((token.start[0], token.start[1], token.string, alone))
        return found
    except (tokenize.TokenError, SyntaxError, ValueError):
        found = []
    for number, line in enumerate(_LINE_BREAK.split(text), 1):
        index = line.find("#")
        if index >= 0:
            found.append((number, index, line[index:], line[:index].strip() == ""))
    return found


def statement_lines(text: str) -> dict[int, frozenset[int]]:
    """For each statement written over several lines (`kl = (` ... `)`), its first line -> all
    its lines: a suppression on the first line (or the comment line above it) covers what is
    reported inside, as it would on a one-line statement. Empty when the text does not tokenize."""
    spans: dict[int, frozenset[int]] = {}
    start: int | None = None
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    try:
        for token in tokenize.generate_tokens(io.StringIO(text, newline="").readline):
            if token.type == tokenize.NEWLINE:
                if start is not None and token.start[0] > start:
                    spans[start] = frozenset(range(start, token.start[0] + 1))
                start = None
            elif start is None and token.type not in skip and token.type != tokenize.ENDMARKER:
                start = token.start[0]
    except (tokenize.TokenError, SyntaxError, ValueError):
        return {}
    return spans


@dataclass
class Suppressions:
    """Suppressions found in one file's text: codes or prefixes per line, and file-wide ones."""

    by_line: dict[int, set[str]] = field(default_factory=dict)
    file_wide: set[str] = field(default_factory=set)

    @classmethod
    def parse(cls, text: str, blanket_noqa: bool = False) -> "Suppressions":
        """Collect the suppression comments of `text`; a blanket `# noqa` counts only if allowed."""
        result = cls()
        if not (blanket_noqa and "noqa" in text.lower()) and not may_name_kllint(text):
            return result
        found = comments(text)
        comment_lines = {number for number, _column, _comment, alone in found if alone}
        for number, _column, comment, alone in found:
            for match in NOQA.finditer(comment):
                result.by_line.setdefault(number, set()).update(_codes(match.group("codes")))
            if blanket_noqa and _BLANKET_NOQA.search(comment):
                result.by_line.setdefault(number, set()).add(ALL_CODES)
            for match in IGNORE.finditer(comment):
                codes = _codes(match.group("codes"))
                result.by_line.setdefault(number, set()).update(codes)
                if alone:  # a comment line covers the next line (past further comment lines)
                    target = number + 1
                    while target in comment_lines:
                        result.by_line.setdefault(target, set()).update(codes)
                        target += 1
                    result.by_line.setdefault(target, set()).update(codes)
            for match in FILE_IGNORE.finditer(comment):
                result.file_wide.update(_codes(match.group("codes")))
        if result.by_line:
            for first, lines in statement_lines(text).items():
                if first in result.by_line:
                    for line in lines:
                        result.by_line.setdefault(line, set()).update(result.by_line[first])
        return result

    def hides(self, diagnostic: Diagnostic) -> bool:
        """Whether a suppression covers the diagnostic's code on any line of its primary span."""
        if _matches(diagnostic.code, self.file_wide):
            return True
        for line in range(diagnostic.span.line, diagnostic.span.end_line + 1):
            if _matches(diagnostic.code, self.by_line.get(line, set())):
                return True
        return False


def _comment_lines(text: str) -> set[int] | None:
    """Lines whose end can take a trailing comment (None when the text does not tokenize).

    A line continued by a backslash or inside a multi-line string cannot.
    """
    lines: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text, newline="").readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT):
                lines.add(token.start[0])
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None
    return lines


def add_noqa(text: str, diagnostics: list[Diagnostic]) -> tuple[str, int]:
    """Add `# noqa: CODE` comments for `diagnostics` to `text`; returns (new text, lines changed).

    Each finding gets its code on the first line of its primary span that can hold a comment.
    An existing `# noqa: X` on that line is extended (`# noqa: X, KL102`); other comments are
    kept and the new one is appended after them. Line endings are kept. Findings whose span has
    no such line (or text that does not tokenize) are left alone.
    """
    allowed = _comment_lines(text)
    if allowed is None:
        return text, 0
    wanted: dict[int, set[str]] = {}
    for diagnostic in diagnostics:
        for line in range(diagnostic.span.line, diagnostic.span.end_line + 1):
            if line in allowed:
                wanted.setdefault(line, set()).add(diagnostic.code)
                break
    if not wanted:
        return text, 0
    existing: dict[int, list[tuple[int, str]]] = {}
    for number, column, comment, _alone in comments(text):
        existing.setdefault(number, []).append((column, comment))
    pieces = re.split(r"(\r\n|\r|\n)", text)
    lines = pieces[0::2]
    breaks = pieces[1::2] + [""]
    changed = 0
    for number, codes in sorted(wanted.items()):
        if number > len(lines):
            continue
        line = lines[number - 1]
        present: set[str] = set()
        noqa_at: tuple[int, re.Match[str]] | None = None
        for column, comment in existing.get(number, []):
            for match in NOQA.finditer(comment):
                present |= _codes(match.group("codes"))
                if noqa_at is None:
                    noqa_at = (column, match)
        missing = sorted(codes - present)
        if not missing:
            continue
        if noqa_at is not None:
            column, match = noqa_at
            end = column + match.end("codes")
            line = line[:end] + ", " + ", ".join(missing) + line[end:]
        else:
            line = line.rstrip(" \t") + "  # noqa: " + ", ".join(missing)
        lines[number - 1] = line
        changed += 1
    return "".join(line + brk for line, brk in zip(lines, breaks)), changed
