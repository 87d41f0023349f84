"""Summaries for stderr: findings per code (`--statistics`) and per file (audits of a repository)."""
from __future__ import annotations

from collections import Counter

from kllint.diagnostics import Diagnostic
from kllint.rules.registry import BY_CODE


def per_code(diagnostics: list[Diagnostic]) -> str:
    """One line per code, `count  CODE  name`, by code."""
    counts = Counter(d.code for d in diagnostics)
    lines = []
    for code, count in sorted(counts.items()):
        name = BY_CODE[code].name if code in BY_CODE else ""
        lines.append(f"{count:6d}  {code}  {name}".rstrip())
    return "\n".join(lines) + ("\n" if lines else "")


def per_file(diagnostics: list[Diagnostic], limit: int | None = None) -> str:
    """One line per file, `count  path  codes`, most findings first; at most `limit` files."""
    counts = Counter(d.path for d in diagnostics)
    codes: dict[str, Counter[str]] = {}
    for d in diagnostics:
        codes.setdefault(d.path, Counter())[d.code] += 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    shown = ranked if limit is None else ranked[:limit]
    lines = []
    for path, count in shown:
        detail = ", ".join(f"{code}x{n}" if n > 1 else code for code, n in sorted(codes[path].items()))
        lines.append(f"{count:6d}  {path}  ({detail})")
    if len(ranked) > len(shown):
        lines.append(f"        ... and {len(ranked) - len(shown)} more files")
    return "\n".join(lines) + ("\n" if lines else "")


def tables(diagnostics: list[Diagnostic], file_limit: int | None = None) -> str:
    """Both summaries with headings (empty when there are no findings)."""
    if not diagnostics:
        return ""
    return ("Findings per code:\n" + per_code(diagnostics)
            + "Findings per file:\n" + per_file(diagnostics, file_limit))
