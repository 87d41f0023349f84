"""Concise output: one `path:line:col: CODE message` line per finding."""
from __future__ import annotations

from kllint.diagnostics import Diagnostic
from kllint.report.locations import location


def render(diagnostics: list[Diagnostic]) -> str:
    """One line per finding (`path:cell N:line:col:` in a notebook)."""
    return "".join(
        f"{location(d.path, d.span.line, d.span.column, d.cell)}: {d.code} {d.message}\n" for d in diagnostics
    )
