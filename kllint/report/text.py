"""Full output (rich): code frame, message, the trace as numbered steps, and the rewrite.

Prose (the message, the trace, the help) wraps at the console width on a terminal, with a
hanging indent (`kllint.report.wrap`); a long message's condition (`(when ...)`) goes on a line
of its own there. Files and pipes get each on one line. Code-frame lines are
never wrapped: on a terminal, a line wider than the console is cropped, and shifted left when
the finding starts past the visible part, so the carets always stay under the code they mark.
A soft-wrapping console (files and pipes) gets whole lines, up to `MAX_FRAME_COLUMNS` (a longer
line is cropped around the span in the same way). Frames read regular files only, of bounded size.
Text from the checked file (its lines, paths, and what messages, notes, help and fixes quote)
is printed through `kllint.report.visible.visible`: control characters and bidi overrides are
shown as escapes, never sent to the terminal.
"""
from __future__ import annotations

import re

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from kllint.diagnostics import Diagnostic
from kllint.report.locations import location
from kllint.report.visible import visible
from kllint.report.wrap import print_hanging, split_condition

ELLIPSIS = "…"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # as Python splits source lines


MESSAGE_INDENT = 4  # a finding's message, wrapped on a terminal, goes on under its location
MAX_FRAME_FILE_BYTES = 20 * 1024 * 1024
# files and pipes get whole lines up to this width; a longer line (a generated one-line file) is
# cropped around the span as on a terminal, so a frame is never megabytes wide
MAX_FRAME_COLUMNS = 2000


def _file_text(path: str, sources: dict[str, str] | None) -> str:
    """The text of a reported file for its code frames: the buffer checked (stdin), else a
    regular file only (never a FIFO or a device), of bounded size; empty when it cannot be read."""
    from kllint.report.paths import unescape_path
    from kllint.pipeline.source import read_regular

    if sources is not None and (path in sources or unescape_path(path) in sources):
        return sources[path] if path in sources else sources[unescape_path(path)]
    try:
        return read_regular(unescape_path(path), MAX_FRAME_FILE_BYTES).decode("utf-8", errors="replace")
    except (OSError, RuntimeError):
        return ""


def _lines(text: str) -> list[str]:
    """The lines of `text` as Python counts them (a form feed or U+2028 does not end a line)."""
    return _LINE_BREAK.split(text.removesuffix("\r\n").removesuffix("\n").removesuffix("\r")) if text else []


def _source_lines(path: str, cache: dict, sources: dict[str, str] | None = None, cell: int | None = None) -> list[str]:
    """The lines of the file (of the notebook cell `cell`) the diagnostic points into."""
    key = (path, cell)
    if key not in cache:
        text = _file_text(path, sources)
        if cell is None:
            cache[key] = _lines(text)
        else:
            from kllint.notebook import Notebook, NotebookError

            try:
                notebook = Notebook.parse(text)
            except NotebookError:
                notebook = None
            code = notebook.cell(cell) if notebook is not None else None
            cache[key] = _lines("".join(code.lines)) if code is not None else []
    return cache[key]


def _drop_cells(text: str, cells: int) -> str:
    """`text` without its first `cells` display cells (a wide character is dropped whole)."""
    dropped = 0
    for index, char in enumerate(text):
        if dropped >= cells:
            return text[index:]
        dropped += cell_len(char)
    return ""


def frame_shift(before: int, width: int, room: int) -> int:
    """How many cells to hide on the left so that a span starting `before` cells into the line
    and `width` cells wide is visible in `room` cells (0 when it fits)."""
    if before + max(width, 1) <= room:
        return 0
    return max(0, min(before - room // 4, before + max(width, 1) - room + 1))


def _frame(d: Diagnostic, lines: list[str], console: Console) -> None:
    if not 0 < d.span.line <= len(lines):
        return
    gutter = len(str(d.span.end_line)) + 1
    # a soft-wrapping console (a file or a pipe) keeps whole lines: nothing wraps there anyway
    room = MAX_FRAME_COLUMNS if console.soft_wrap else min(max(console.width - gutter - 3, 20), MAX_FRAME_COLUMNS)
    first = lines[d.span.line - 1]  # control characters are shown escaped: columns count as shown
    end = d.span.end_column if d.span.end_line == d.span.line else len(first) + 1
    # columns count characters; tabs and wide characters are laid out as displayed
    before = cell_len(visible(first[: d.span.column - 1]).expandtabs(4))
    width = cell_len(visible(first[d.span.column - 1: end - 1]).expandtabs(4))
    shift = frame_shift(before, width, room)
    for number in range(d.span.line, min(d.span.end_line, d.span.line + 4) + 1):
        if number > len(lines):
            break
        shown = visible(lines[number - 1]).expandtabs(4)
        if shift:
            shown = ELLIPSIS + _drop_cells(shown, shift + 1)
        code = Text(shown)
        code.truncate(room, overflow="ellipsis")
        console.print(Text(f"{number:>{gutter}} | ", style="blue") + code, no_wrap=True, crop=True)
        if number == d.span.line:
            start = before - shift
            marks = " " * start + "^" * max(1, min(width, room - start))
            console.print(Text(" " * gutter + " | ", style="blue") + Text(marks, style="bold red"),
                          no_wrap=True, crop=True)


def render(diagnostics: list[Diagnostic], console: Console, sources: dict[str, str] | None = None,
           unsafe: bool = False) -> None:
    """Print each diagnostic with a code frame of its primary span; `[*]` marks a finding that
    `--fix` fixes (with `unsafe`: `--fix --unsafe-fixes`).

    `sources` maps reported paths to the text checked when it is not the file on disk (stdin)."""
    from kllint.report.concise import fixable_marker
    from kllint.report.confirmation import line as confirmation_line

    cache: dict[tuple[str, int | None], list[str]] = {}
    for d in diagnostics:
        header = Text()
        header.append(f"{visible(location(d.path, d.span.line, d.span.column, d.cell))}: ", style="bold")
        header.append(f"{d.code} ", style="bold red" if d.severity == "error" else "bold yellow")
        header.append(f"[{d.name}] ", style="dim")
        marker = fixable_marker(d, unsafe)
        if marker:
            header.append(marker, style="bold green")
        message, condition = visible(d.message, newlines=True), None
        if not console.soft_wrap and cell_len(header.plain + message) > console.width:
            message, condition = split_condition(message)
        print_hanging(console, header + message, MESSAGE_INDENT)
        if condition is not None:  # a long message's condition on a line of its own
            print_hanging(console, Text(" " * MESSAGE_INDENT + condition), MESSAGE_INDENT + 2)
        _frame(d, _source_lines(d.path, cache, sources, d.cell), console)
        for index, step in enumerate(d.trace, 1):
            where = location(step.path, step.line, step.column, step.cell)
            label = f"  {index}. "
            print_hanging(console, Text(visible(f"{label}{where}: {step.note}", newlines=True), style="dim"), len(label))
        if d.help:
            _labelled(console, "  help: ", "bold cyan", d.help)
        if d.fix is not None and d.fix.replacement and d.fix.span is not None and d.fix.content is not None:
            _region_fix(d, console)
        elif d.fix is not None and d.fix.replacement:
            _labelled(console, f"  fix ({d.fix.applicability}): ", "bold green", d.fix.replacement)
        if d.confirmed:
            label, text = confirmation_line(d.confirmed)
            style = {"confirmed": "bold magenta", "contradicted": "bold red"}.get(label, "bold yellow")
            _labelled(console, f"  {label}: ", style, text)
        console.print()


def _labelled(console: Console, label: str, style: str, text: str) -> None:
    """`label` then `text`, wrapped lines under the text's start."""
    print_hanging(console, Text(label, style=style) + Text(visible(text, newlines=True)), len(label))


def _region_fix(d: Diagnostic, console: Console) -> None:
    """A fix that rewrites whole lines: the lines it writes, dedented, under a `fix` header."""
    import textwrap

    span = d.fix.span
    lines = f"line {span.line} becomes" if span.end_line == span.line else f"lines {span.line}-{span.end_line} become"
    console.print(Text(f"  fix ({d.fix.applicability}): ", style="bold green") + Text(lines))
    for line in _lines(textwrap.dedent(d.fix.content)):
        print_hanging(console, Text(f"    | {visible(line)}"), len("    | ") + 2)
