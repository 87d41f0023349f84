"""Concise output: one `path:line:col: CODE [*] message` line per finding (`[*]`: `--fix` fixes it)."""
from __future__ import annotations

from kllint.diagnostics import Diagnostic
from kllint.report.locations import location
from kllint.report.visible import visible


def fixable_marker(diagnostic: Diagnostic, unsafe: bool = False) -> str:
    """`[*] ` when `--fix` (with `unsafe`: `--fix --unsafe-fixes`) would fix the finding, as Ruff marks it."""
    from kllint.fix import is_applicable

    return "[*] " if is_applicable(diagnostic, unsafe) else ""


def confirmation(diagnostic: Diagnostic) -> str:
    """` (confirmed)`, ` (contradicted)` or ` (not confirmed)` after `--confirm`, else empty."""
    from kllint.report.confirmation import status

    return f" ({status(diagnostic.confirmed)})" if diagnostic.confirmed else ""


def render(diagnostics: list[Diagnostic], unsafe: bool = False) -> str:
    """One line per finding (`path:cell N:line:col:` in a notebook); `unsafe` marks unsafe fixes
    as fixable too."""
    return "".join(  # one line each: a newline or a control character quoted from the file is escaped
        visible(f"{location(d.path, d.span.line, d.span.column, d.cell)}: {d.code} {fixable_marker(d, unsafe)}"
                f"{d.message}{confirmation(d)}") + "\n"
        for d in diagnostics
    )
