"""Checks on the suppression comments themselves: unknown codes (a warning on stderr) and
suppressions that hide nothing (the opt-in rule KL901 `unused-suppression`, fixable).

A directive is one `# noqa: ...`, `# kllint: ignore[...]` or `# kllint: file-ignore[...]`
(the grammar of `kllint.pipeline.suppressions`). Only kllint's own codes are judged: `# noqa: E501, KL102`
leaves `E501` to the tool it belongs to, while every code inside `kllint: ignore[...]` must be a
kllint code or prefix. A code counts as used when a finding of an enabled rule with that code
(or prefix) lies on a line the directive covers; codes of rules that are not enabled are left
alone, so `--extend-select KL901` never reports the suppressions of rules a run did not check.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kllint.diagnostics import Diagnostic, Fix, Span
from kllint.rules.registry import BY_CODE
from kllint.pipeline.suppressions import FILE_IGNORE, IGNORE, NOQA, comments, may_name_kllint, names_a_suppression, statement_lines

UNUSED_CODE = "KL901"
_TOKEN = re.compile(r"[^\s,]+")


@dataclass(frozen=True)
class Directive:
    """One suppression comment: where it is, its codes (with their 0-based columns) and the
    lines it covers (None: the whole file)."""

    kind: str
    line: int
    start: int
    end: int
    codes: tuple[tuple[str, int, int], ...]
    covers: frozenset[int] | None
    whole_comment: bool
    alone: bool
    comment_start: int


def _is_kllint_selector(code: str) -> bool:
    return code == "ALL" or any(known.startswith(code) for known in BY_CODE)


def directives(text: str) -> list[Directive]:
    """The suppression directives of `text`, in order (none when it names neither noqa nor kllint)."""
    if not names_a_suppression(text):
        return []
    found = comments(text)
    comment_lines = {number for number, _column, _comment, alone in found if alone}
    statements = statement_lines(text)
    out: list[Directive] = []
    for number, column, comment, alone in found:
        for kind, pattern in (("noqa", NOQA), ("ignore", IGNORE), ("file-ignore", FILE_IGNORE)):
            for match in pattern.finditer(comment):
                base = column + match.start("codes")
                codes = tuple((token.group(0).upper(), base + token.start(), base + token.end())
                              for token in _TOKEN.finditer(match.group("codes")))
                covers: frozenset[int] | None = frozenset({number})
                if kind == "file-ignore":
                    covers = None
                elif kind == "ignore" and alone:
                    target, lines = number + 1, {number}
                    while target in comment_lines:
                        lines.add(target)
                        target += 1
                    covers = frozenset(lines | {target})
                if covers is not None:  # a statement over several lines is covered from its first
                    covers = covers.union(*(statements.get(line, ()) for line in covers))
                end = column + match.end()
                # the directive is the whole comment (a `kllint: ignore[...]` reason belongs to it)
                whole = match.start() == 0 and (kind != "noqa" or comment[match.end():].strip() == "")
                out.append(Directive(kind, number, column + match.start(), end, codes, covers,
                                     whole, alone, column))
    return out


def unknown_codes(text: str, display: str) -> list[str]:
    """Warnings for codes in suppressions that name no kllint rule (`# noqa: KL999`,
    `# kllint: ignore[K1O2]`); one line each, `path:line:column: ...`."""
    warnings: list[str] = []
    if not may_name_kllint(text):
        return warnings
    for directive in directives(text):
        for code, start, _end in directive.codes:
            if directive.kind == "noqa" and not code.startswith("KL"):
                continue  # another tool's code
            if not _is_kllint_selector(code):
                comment = "# noqa" if directive.kind == "noqa" else f"# kllint: {directive.kind}[...]"
                warnings.append(f"{display}:{directive.line}:{start + 1}: warning: unknown rule code "
                                f"{code!r} in `{comment}` (`kllint rules` lists the codes)")
    return warnings


def _used(code: str, directive: Directive, found: list[Diagnostic], active: frozenset[str]) -> bool:
    for diagnostic in found:
        if diagnostic.code not in active or not (code == "ALL" or diagnostic.code.startswith(code)):
            continue
        lines = range(diagnostic.span.line, diagnostic.span.end_line + 1)
        if directive.covers is None or any(line in directive.covers for line in lines):
            return True
    return False


def _judged(code: str, active: frozenset[str]) -> bool:
    """Whether a run with `active` rules can tell that `code` hides nothing."""
    if code == "ALL":
        return False
    return any(known.startswith(code) for known in active - {UNUSED_CODE})


def _fix(directive: Directive, unused: list[tuple[str, int, int]], line_text: str, last_line: int) -> tuple[Span, Fix]:
    """The safe fix of a KL901 finding: drop the unused codes, or the directive when none is left."""
    kept = [code for code, _s, _e in directive.codes if code not in {u[0] for u in unused}]
    line = directive.line
    if kept:
        span = Span(line, directive.codes[0][1] + 1, line, directive.codes[-1][2] + 1)
        return span, Fix("safe", "remove the unused codes", (", " if directive.kind == "noqa" else ",").join(kept))
    fix = Fix("safe", "remove the unused suppression", "")
    if directive.whole_comment and directive.alone:  # the comment line goes
        if line < last_line:
            return Span(line, 1, line + 1, 1), fix
        return Span(line, 1, line, len(line_text) + 1), fix
    if directive.whole_comment:  # the trailing comment goes, with the blanks before it
        return Span(line, len(line_text[:directive.comment_start].rstrip()) + 1, line, len(line_text) + 1), fix
    return Span(line, directive.start + 1, line, directive.end + 1), fix


def unused_suppressions(text: str, display: str, found: list[Diagnostic],
                        active: frozenset[str]) -> list[Diagnostic]:
    """KL901 findings: one per directive with codes that hide no finding of an enabled rule."""
    info = BY_CODE[UNUSED_CODE]
    lines = text.splitlines()
    out = []
    for directive in directives(text):
        unused = [entry for entry in directive.codes
                  if _is_kllint_selector(entry[0]) and _judged(entry[0], active)
                  and not _used(entry[0], directive, found, active)]
        if not unused:
            continue
        line_text = lines[directive.line - 1] if directive.line <= len(lines) else ""
        span, fix = _fix(directive, unused, line_text, len(lines))
        names = ", ".join(code for code, _s, _e in unused)
        comment = "# noqa" if directive.kind == "noqa" else f"# kllint: {directive.kind}[...]"
        message = (f"unused suppression: `{comment}` names {names}, but no such finding is "
                   f"{'in the file' if directive.covers is None else 'on the lines it covers'}")
        out.append(Diagnostic(info.code, info.name, info.severity, display, span, message,
                              help="remove the code (or the comment): it hides nothing and would hide a future finding",
                              fix=fix))
    return out
