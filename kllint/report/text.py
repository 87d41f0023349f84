"""Full output (rich): code frame, message, the trace as numbered steps, and the rewrite."""
from __future__ import annotations

from pathlib import Path

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from kllint.diagnostics import Diagnostic
from kllint.report.locations import location


def _file_text(path: str, sources: dict[str, str] | None) -> str:
    if sources is not None and path in sources:
        return sources[path]
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _source_lines(path: str, cache: dict, sources: dict[str, str] | None = None, cell: int | None = None) -> list[str]:
    """The lines of the file (of the notebook cell `cell`) the diagnostic points into."""
    key = (path, cell)
    if key not in cache:
        text = _file_text(path, sources)
        if cell is None:
            cache[key] = text.splitlines()
        else:
            from kllint.notebook import Notebook, NotebookError

            try:
                notebook = Notebook.parse(text)
            except NotebookError:
                notebook = None
            code = notebook.cell(cell) if notebook is not None else None
            cache[key] = "".join(code.lines).splitlines() if code is not None else []
    return cache[key]


def render(diagnostics: list[Diagnostic], console: Console, sources: dict[str, str] | None = None) -> None:
    """Print each diagnostic with a code frame of its primary span.

    `sources` maps reported paths to the text checked when it is not the file on disk (stdin)."""
    cache: dict[str, list[str]] = {}
    for d in diagnostics:
        header = Text()
        header.append(f"{location(d.path, d.span.line, d.span.column, d.cell)}: ", style="bold")
        header.append(f"{d.code} ", style="bold red" if d.severity == "error" else "bold yellow")
        header.append(f"[{d.name}] ", style="dim")
        header.append(d.message)
        console.print(header)
        lines = _source_lines(d.path, cache, sources, d.cell)
        if 0 < d.span.line <= len(lines):
            gutter = len(str(d.span.end_line)) + 1
            for number in range(d.span.line, min(d.span.end_line, d.span.line + 4) + 1):
                if number > len(lines):
                    break
                line = lines[number - 1]
                console.print(Text(f"{number:>{gutter}} | ", style="blue") + Text(line.expandtabs(4)))
                if number == d.span.line:
                    end = d.span.end_column if d.span.end_line == d.span.line else len(line) + 1
                    # columns count characters; tabs and wide characters are laid out as displayed
                    before = cell_len(line[: d.span.column - 1].expandtabs(4))
                    width = cell_len(line[d.span.column - 1: end - 1].expandtabs(4))
                    marks = " " * before + "^" * max(1, width)
                    console.print(Text(" " * gutter + " | ", style="blue") + Text(marks, style="bold red"))
        for index, step in enumerate(d.trace, 1):
            console.print(Text(f"  {index}. {location(step.path, step.line, step.column, step.cell)}: {step.note}",
                               style="dim"))
        if d.help:
            console.print(Text("  help: ", style="bold cyan") + Text(d.help))
        if d.fix is not None and d.fix.replacement:
            console.print(Text(f"  fix ({d.fix.applicability}): ", style="bold green") + Text(d.fix.replacement))
        if d.confirmed:
            console.print(Text("  confirmed: ", style="bold magenta") + Text(str(d.confirmed.get("summary", d.confirmed))))
        console.print()
