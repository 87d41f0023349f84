"""Full output (rich): code frame, message, the trace as numbered steps, and the rewrite."""
from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from kllint.diagnostics import Diagnostic


MAX_FRAME_FILE_BYTES = 20 * 1024 * 1024
MAX_FRAME_COLUMNS = 400


def _source_lines(path: str, cache: dict[str, list[str]]) -> list[str]:
    """The lines of a reported file for its code frames: a regular file only (never a FIFO or a
    device), of bounded size; none when it cannot be read."""
    from kllint.report.paths import unescape_path
    from kllint.source import read_regular

    if path not in cache:
        try:
            raw = read_regular(unescape_path(path), MAX_FRAME_FILE_BYTES)
            cache[path] = raw.decode("utf-8", errors="replace").splitlines()
        except (OSError, RuntimeError):
            cache[path] = []
    return cache[path]


def render(diagnostics: list[Diagnostic], console: Console) -> None:
    """Print each diagnostic with a code frame of its primary span."""
    cache: dict[str, list[str]] = {}
    for d in diagnostics:
        header = Text()
        header.append(f"{d.path}:{d.span.line}:{d.span.column}: ", style="bold")
        header.append(f"{d.code} ", style="bold red" if d.severity == "error" else "bold yellow")
        header.append(f"[{d.name}] ", style="dim")
        header.append(d.message)
        console.print(header)
        lines = _source_lines(d.path, cache)
        if 0 < d.span.line <= len(lines):
            gutter = len(str(d.span.end_line)) + 1
            for number in range(d.span.line, min(d.span.end_line, d.span.line + 4) + 1):
                if number > len(lines):
                    break
                line = lines[number - 1]
                if len(line) > MAX_FRAME_COLUMNS:  # a generated one-line file: no megabyte frames
                    line = line[:MAX_FRAME_COLUMNS] + " ..."
                console.print(Text(f"{number:>{gutter}} | ", style="blue") + Text(line.expandtabs(4)))
                if number == d.span.line:
                    end = d.span.end_column if d.span.end_line == d.span.line else len(line) + 1
                    # columns count characters; tabs and wide characters are laid out as displayed
                    before = cell_len(line[: d.span.column - 1].expandtabs(4))
                    width = cell_len(line[d.span.column - 1: end - 1].expandtabs(4))
                    marks = " " * before + "^" * max(1, width)
                    console.print(Text(" " * gutter + " | ", style="blue") + Text(marks, style="bold red"))
        for index, step in enumerate(d.trace, 1):
            console.print(Text(f"  {index}. {step.path}:{step.line}:{step.column}: {step.note}", style="dim"))
        if d.help:
            console.print(Text("  help: ", style="bold cyan") + Text(d.help))
        if d.fix is not None and d.fix.replacement:
            console.print(Text(f"  fix ({d.fix.applicability}): ", style="bold green") + Text(d.fix.replacement))
        if d.confirmed:
            console.print(Text("  confirmed: ", style="bold magenta") + Text(str(d.confirmed.get("summary", d.confirmed))))
        console.print()
