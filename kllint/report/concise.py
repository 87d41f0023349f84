"""Concise output: one `path:line:col: CODE message` line per finding."""
from __future__ import annotations

from kllint.diagnostics import Diagnostic


def render(diagnostics: list[Diagnostic]) -> str:
    return "".join(
        f"{d.path}:{d.span.line}:{d.span.column}: {d.code} {d.message}\n" for d in diagnostics
    )
