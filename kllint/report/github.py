"""GitHub Actions workflow commands: one `::error` / `::warning` annotation per finding.

`::error file=PATH,line=L,col=C,endLine=EL,endColumn=EC,title=CODE name::message`, with paths
relative to the repository root. In the message `%`, CR and LF are escaped (`%25`, `%0D`,
`%0A`); in the properties `:` and `,` are escaped as well (`%3A`, `%2C`).
"""
from __future__ import annotations

from pathlib import Path

from kllint.diagnostics import Diagnostic
from kllint.report.locations import file_region, relative_to_root, source_root
from kllint.report.visible import visible


def escape_data(text: str) -> str:
    """Escape a workflow-command message (control characters and bidi overrides quoted from a
    checked file are shown as `\\x1b`-style escapes: the command is printed in the CI log)."""
    return visible(text, newlines=True).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow-command property value."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(d: Diagnostic, path: str, region: tuple[int, int, int, int] | None = None) -> str:
    """One workflow command for `d`, reported at `path` (repository-relative) and `region`
    (line, column, end line, end column in the file; default: the diagnostic's span). In a
    notebook the region is in the notebook's JSON text and the message starts with the cell."""
    command = "error" if d.severity == "error" else "warning"
    line, column, end_line, end_column = region or (d.span.line, d.span.column, d.span.end_line, d.span.end_column)
    properties = {
        "file": path,
        "line": str(line),
        "col": str(column),
        "endLine": str(end_line),
        "endColumn": str(end_column),
        "title": f"{d.code} {d.name}",
    }
    rendered = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    message = f"{d.code} {d.message}"
    if d.cell is not None:
        message = f"{d.code} (cell {d.cell}, line {d.span.line}, column {d.span.column}) {d.message}"
    if d.help:
        message += f"\nhelp: {d.help}"
    return f"::{command} {rendered}::{escape_data(message)}\n"


def render(diagnostics: list[Diagnostic], root: Path | None = None, cwd: Path | None = None) -> str:
    """The annotations of `diagnostics`, sorted; paths relative to `root` (default: the repository root)."""
    cwd = (cwd or Path.cwd()).resolve()
    root = root if root is not None else source_root(cwd)
    lines = []
    notebooks: dict = {}
    for d in sorted(diagnostics, key=lambda d: d.sort_key):
        path = relative_to_root(d.path, root, cwd) or d.path
        region = file_region(d.path, d.cell, d.span.line, d.span.column, d.span.end_line, d.span.end_column,
                             cwd, notebooks)
        lines.append(annotation(d, path, region))
    return "".join(lines)
