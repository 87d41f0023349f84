"""Apply the fixes carried by diagnostics (`--fix`, `--unsafe-fixes`, `--diff`), and atomic writes.

A `Diagnostic.fix` replaces the diagnostic's primary span with `fix.replacement`. As in Ruff,
`safe` fixes are applied by `--fix`, `unsafe` ones only with `--unsafe-fixes` as well, and
`display-only` ones never. A batch of non-overlapping replacements is kept only if the new text
parses (libcst) and re-linting it shows the fixed findings gone, with no new finding of the same
family (KL1xx, KL3xx, ...) in the rewritten region; otherwise the fixes are tried
one at a time. Passes repeat (a fix may reveal another) up to `MAX_PASSES`.

Files are read and written in their own encoding (a PEP 263 coding line or a UTF-8 byte-order
mark, else UTF-8, as Python reads them), keeping their line endings. They are written
atomically (a temporary file in the same folder, fsynced, then `os.replace`), keeping the
file's mode and owner. `write_atomic` refuses (`FixRefused`): a file whose real path is outside
the project root (a symbolic link out of the tree), a read-only file (no write bit), and a file
with more than one hard link (replacing it would detach it from its other names; fix such files
by hand, or break the link first). Given the bytes that were read and analysed (`expect`), it
also refuses (`FileChanged`) a file that no longer holds them: an edit saved while kllint ran is
kept, and the file is not fixed (`kllint.atomic.replacing` compares just before the rename).
"""
from __future__ import annotations

import bisect
import difflib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from kllint.atomic import TargetChanged, replacing
from kllint.config import Settings
from kllint.diagnostics import Diagnostic, Span
from kllint.pipeline.discovery import Discovered
from kllint.guard import AnalysisStopped, call_with_limits, guarded_parse_module

MAX_PASSES = 10
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class FixError(Exception):
    """A file could not be read or written while fixing; the message names the file."""


class FixRefused(FixError):
    """A file kllint will not write (outside the project, read-only, hard-linked); the message says why."""


class FileChanged(FixRefused):
    """The file no longer holds what kllint read and analysed (edited during the run); not written."""


def is_applicable(diagnostic: Diagnostic, unsafe: bool = False) -> bool:
    """Whether `--fix` applies the diagnostic's fix (`unsafe`: with `--unsafe-fixes`)."""
    fix = diagnostic.fix
    if fix is None or fix.replacement is None:
        return False
    return fix.applicability == "safe" or (unsafe and fix.applicability == "unsafe")


def fix_region(diagnostic: Diagnostic) -> Span:
    """The region a diagnostic's fix replaces: its own region, or the primary span."""
    fix = diagnostic.fix
    return fix.span if fix is not None and fix.span is not None else diagnostic.span


def fix_text_of(diagnostic: Diagnostic) -> str | None:
    """The new text of the region `fix_region` gives."""
    fix = diagnostic.fix
    if fix is None:
        return None
    return fix.content if fix.span is not None and fix.content is not None else fix.replacement


def line_ending(text: str) -> str:
    """The line ending a file uses: CRLF, CR or LF (LF when there is no line break)."""
    match = _LINE_BREAK.search(text)
    return match.group(0) if match else "\n"


def _line_starts(text: str) -> list[int]:
    return [0] + [match.end() for match in _LINE_BREAK.finditer(text)]


def _line_end(text: str, starts: list[int], index: int) -> int:
    """Offset where the content of line `index` (0-based) ends, before its line break."""
    end = starts[index + 1] if index + 1 < len(starts) else len(text)
    while end > starts[index] and text[end - 1] in "\r\n":
        end -= 1
    return end


def span_offsets(text: str, span: Span) -> tuple[int, int] | None:
    """Character offsets of a 1-based, end-exclusive span in `text`; None if it does not fit."""
    starts = _line_starts(text)
    if not (1 <= span.line <= span.end_line <= len(starts)):
        return None
    start = starts[span.line - 1] + span.column - 1
    end = starts[span.end_line - 1] + span.end_column - 1
    if span.column < 1 or start > _line_end(text, starts, span.line - 1):
        return None
    if span.end_column < 1 or end > _line_end(text, starts, span.end_line - 1) or end < start:
        return None
    return start, end


def _span_at(text: str, start: int, end: int) -> Span:
    starts = _line_starts(text)

    def position(offset: int) -> tuple[int, int]:
        index = bisect.bisect_right(starts, offset) - 1
        return index + 1, offset - starts[index] + 1

    line, column = position(start)
    end_line, end_column = position(end)
    return Span(line, column, end_line, end_column)


def _overlaps(a: Span, b: Span) -> bool:
    return (a.line, a.column) < (b.end_line, b.end_column) and (b.line, b.column) < (a.end_line, a.end_column) \
        or (a.line, a.column) == (b.line, b.column)


def apply_fixes(text: str, diagnostics: list[Diagnostic]) -> tuple[str, list[tuple[Diagnostic, Span]]]:
    """Apply the replacements of `diagnostics` (all assumed applicable) that do not overlap.

    The replacement's line breaks are converted to the file's. Returns the new text and, for
    each applied fix, the diagnostic with the span its replacement occupies in the new text.
    Fixes whose span does not fit the text, or that overlap an earlier one, are skipped.
    """
    eol = line_ending(text)
    chosen: list[tuple[int, int, str, Diagnostic]] = []
    for diagnostic in sorted(diagnostics, key=lambda d: d.sort_key):
        offsets = span_offsets(text, fix_region(diagnostic))
        if offsets is None or diagnostic.fix is None or diagnostic.fix.replacement is None:
            continue
        start, end = offsets
        if any(start < c_end and c_start < end or start == c_start for c_start, c_end, _, _ in chosen):
            continue
        replacement = _LINE_BREAK.sub(eol, fix_text_of(diagnostic))
        chosen.append((start, end, replacement, diagnostic))
    chosen.sort(key=lambda item: item[0])
    pieces: list[str] = []
    placed: list[tuple[int, int, Diagnostic]] = []
    cursor = 0
    length = 0
    for start, end, replacement, diagnostic in chosen:
        pieces.append(text[cursor:start])
        length += start - cursor
        placed.append((length, length + len(replacement), diagnostic))
        pieces.append(replacement)
        length += len(replacement)
        cursor = end
    pieces.append(text[cursor:])
    new_text = "".join(pieces)
    return new_text, [(diagnostic, _span_at(new_text, s, e)) for s, e, diagnostic in placed]


@dataclass
class FixOutcome:
    """Result of fixing one file's text: the new text, what was fixed, what remains."""

    original: str
    text: str
    fixed: list[Diagnostic] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)
    rejected: list[Diagnostic] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.text != self.original


def lint_text(text: str, item: Discovered, settings: Settings) -> list[Diagnostic]:
    """The selected, unsuppressed findings of `text` as the file `item`.

    Raises:
        SyntaxError, libcst.ParserSyntaxError: the text does not parse.
    """
    from kllint.guard import call_with_limits
    from kllint.pipeline.selection import filter_found
    from kllint.rules.dispatch import check_source

    # on a large stack, within the time budget (kllint.guard.AnalysisStopped when it runs out)
    found = call_with_limits(check_source, text, item.display, item.path, settings,
                             budget=getattr(settings, "time_budget", None))
    return sorted(filter_found(list(found), text, item.display, settings, item.path), key=lambda d: d.sort_key)


def _verified(new_text: str, applied: list[tuple[Diagnostic, Span]], before: list[Diagnostic],
              item: Discovered, settings: Settings) -> list[Diagnostic] | None:
    """The findings of `new_text` if it parses and the applied fixes' findings are gone, else None."""
    try:
        call_with_limits(guarded_parse_module, new_text)
        after = lint_text(new_text, item, settings)
    except (Exception, AnalysisStopped):  # noqa: BLE001 - any failure rejects the fix
        return None
    for diagnostic, region in applied:
        if any(d.code == diagnostic.code and _overlaps(d.span, region) for d in after):
            return None
        # a fix must not trade its finding for another of the same family (KL1xx, ...) there
        present = {d.code for d in before if _overlaps(d.span, diagnostic.span)}
        if any(d.code not in present and d.code[:3] == diagnostic.code[:3] and _overlaps(d.span, region)
               for d in after):
            return None
    for code in {d.code for d, _ in applied}:
        fixed_count = sum(1 for d, _ in applied if d.code == code)
        if sum(1 for d in after if d.code == code) > sum(1 for d in before if d.code == code) - fixed_count:
            return None
    return after


def fix_text(text: str, item: Discovered, settings: Settings, unsafe: bool = False,
             findings: list[Diagnostic] | None = None) -> FixOutcome:
    """Apply the applicable fixes to `text` until none is left or none verifies.

    `findings` are the current findings of `text` (computed when omitted).

    Raises:
        SyntaxError, libcst.ParserSyntaxError: the original text does not parse.
    """
    current = findings if findings is not None else lint_text(text, item, settings)
    outcome = FixOutcome(original=text, text=text, remaining=current)
    rejected: set[tuple] = set()
    for _ in range(MAX_PASSES):
        candidates = [d for d in current if is_applicable(d, unsafe)
                      and (d.code, d.span, d.fix) not in rejected]
        if not candidates:
            break
        new_text, applied = apply_fixes(outcome.text, candidates)
        after = _verified(new_text, applied, current, item, settings) if applied else None
        if after is None:
            after, applied, new_text = None, [], outcome.text
            for candidate in candidates:  # one at a time: keep the first that verifies
                single_text, single = apply_fixes(outcome.text, [candidate])
                result = _verified(single_text, single, current, item, settings) if single else None
                if result is not None:
                    after, applied, new_text = result, single, single_text
                    break
                rejected.add((candidate.code, candidate.span, candidate.fix))
                outcome.rejected.append(candidate)
            if after is None:
                break
        outcome.fixed.extend(d for d, _ in applied)
        outcome.text = new_text
        current = after
        outcome.remaining = after
    return outcome


def read_source(path: Path) -> str:
    """A file's text, decoded as Python does (PEP 263 coding line or BOM, else UTF-8), without
    translating line endings.

    Raises:
        FixError: the file cannot be read (or is not a regular file) or cannot be decoded.
    """
    return read_source_encoded(path)[0]


def read_source_encoded(path: Path) -> tuple[str, str]:
    """A file's text and the encoding it is written in (see `read_source`).

    Raises:
        FixError: the file cannot be read (or is not a regular file) or cannot be decoded.
    """
    text, encoding, _ = read_source_bytes(path)
    return text, encoding


def read_source_bytes(path: Path) -> tuple[str, str, bytes]:
    """A file's text, its encoding (see `read_source`) and the bytes it was decoded from (what
    `write_atomic`'s `expect` compares the file with before replacing it).

    Raises:
        FixError: the file cannot be read (or is not a regular file) or cannot be decoded.
    """
    import io
    import tokenize

    from kllint.pipeline.source import MAX_FILE_BYTES, read_regular

    try:
        raw = read_regular(path, MAX_FILE_BYTES)
    except (OSError, RuntimeError) as exc:
        raise FixError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        return raw.decode(encoding), encoding, raw
    except UnicodeDecodeError as exc:
        raise FixError(f"{path}: not valid {exc.encoding} (byte {exc.start})") from None
    except (LookupError, SyntaxError) as exc:
        raise FixError(f"{path}: cannot decode: {exc}") from None


def _inside(target: str, root: Path) -> bool:
    try:
        real_root = os.path.realpath(root)
    except (OSError, ValueError):
        return False
    return os.path.commonpath([target, real_root]) == real_root


def write_atomic(path: Path, text: str, encoding: str = "utf-8", root: Path | None = None,
                 expect: bytes | None = None) -> None:
    """Replace the file `path` with `text` in `encoding` atomically, keeping its mode and owner.

    A symbolic link is followed (its target is rewritten) only when the target is inside
    `root` (the project root; no check when None). Line endings are written as they are in `text`.
    With `expect` (the bytes the text was made from), the file is replaced only if it still holds
    exactly them when the new file is ready (`kllint.atomic.replacing`).

    Raises:
        FileChanged: with `expect`, the file was changed meanwhile (it is left as it is now).
        FixRefused: the target is outside `root`, read-only or has other hard links.
        FixError: the text cannot be encoded or the file cannot be written.
    """
    target = os.path.realpath(path)
    if root is not None and not _inside(target, root):
        raise FixRefused(f"{path}: its real path {target} is outside the project ({root}); not fixed")
    try:
        st = os.stat(target)
    except OSError as exc:
        raise FixError(f"{path}: cannot write: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise FixRefused(f"{path}: not a regular file; not fixed")
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o222 or not os.access(target, os.W_OK):
        raise FixRefused(f"{path}: the file is read-only; not fixed")
    if st.st_nlink > 1:
        raise FixRefused(f"{path}: the file has {st.st_nlink} hard links and replacing it would break them; "
                         "not fixed")
    try:
        data = text.encode(encoding)
    except (UnicodeEncodeError, LookupError) as exc:
        raise FixError(f"{path}: the fixed text cannot be written in the file's encoding {encoding} ({exc}); "
                       "not fixed") from None
    def keep_owner(temporary: str) -> None:
        if hasattr(os, "chown") and (st.st_uid, st.st_gid) != _owner(temporary):
            try:
                os.chown(temporary, st.st_uid, st.st_gid)
            except OSError:
                raise FixRefused(f"{path}: cannot keep the file's owner; not fixed") from None

    try:
        with replacing(target, mode=mode, prepare=keep_owner, expect=expect) as handle:
            handle.write(data)
    except TargetChanged:
        raise FileChanged(f"{path}: changed while kllint ran; not fixed") from None
    except OSError as exc:
        raise FixError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _owner(name: str) -> tuple[int, int]:
    st = os.stat(name)
    return st.st_uid, st.st_gid


def unified_diff(display: str, before: str, after: str) -> str:
    """A unified diff (`--- a/path`, `+++ b/path`) of one file's change."""
    old = before.splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    lines = []
    for line in difflib.unified_diff(old, new, fromfile=f"a/{display}", tofile=f"b/{display}"):
        if not line.endswith(("\n", "\r")):
            line += "\n\\ No newline at end of file\n"
        lines.append(line)
    return "".join(lines)


def fix_file(item: Discovered, settings: Settings, unsafe: bool = False, write: bool = True) -> FixOutcome:
    """Fix one file: apply the applicable fixes, verify them and (if `write`) save atomically.

    Raises:
        FileChanged: the file changed while it was being fixed (it is not written).
        FixError: the file cannot be read or written.
        SyntaxError, libcst.ParserSyntaxError: the file does not parse.
    """
    text, encoding, raw = read_source_bytes(item.path)
    outcome = fix_text(text, item, settings, unsafe=unsafe)
    if write and outcome.changed:
        write_atomic(item.path, outcome.text, encoding, expect=raw)
    return outcome
