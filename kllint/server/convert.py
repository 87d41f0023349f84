"""kllint's diagnostics as LSP diagnostics: ranges in the client's position encoding (UTF-16 by
default) from kllint's 1-based code-point spans, the trace as related information, the rule page
as the code's description."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace.position_codec import PositionCodec, ServerTextPosition, ServerTextRange

from kllint.diagnostics import Diagnostic, Span

SOURCE = "kllint"
HELP_URI = "https://github.com/kllint/kllint/blob/main/rules/{code}.md"


def to_range(span: Span, lines: Sequence[str], codec: PositionCodec) -> types.Range:
    """The LSP range of a kllint span in a document of `lines`."""
    server = ServerTextRange(ServerTextPosition(max(span.line - 1, 0), max(span.column - 1, 0)),
                             ServerTextPosition(max(span.end_line - 1, 0), max(span.end_column - 1, 0)))
    return codec.range_to_client_units(list(lines), server)


def to_span(rng: types.Range, lines: Sequence[str], codec: PositionCodec) -> Span:
    """A kllint span of an LSP range in a document of `lines` (`to_range`'s inverse)."""
    server = codec.range_from_client_units(list(lines), rng)
    return Span(server.start.line + 1, server.start.character + 1, server.end.line + 1, server.end.character + 1)


def _uri_of(path: str, cwd: Path) -> str:
    absolute = Path(path) if Path(path).is_absolute() else cwd / path
    return from_fs_path(str(absolute)) or absolute.as_uri()


def to_lsp(d: Diagnostic, lines: Sequence[str], codec: PositionCodec, cwd: Path,
           lines_of: Callable[[str], Sequence[str]] | None = None) -> types.Diagnostic:
    """One LSP diagnostic: code and link to its rule page, severity, the message (and the help),
    the trace steps as related information. `lines_of(path)` gives the lines of another file
    a trace step points into (for its columns); `data` carries the fix's applicability."""
    related = []
    for step in d.trace:
        step_lines = lines if step.path == d.path else (lines_of(step.path) if lines_of else [])
        point = Span(step.line, step.column, step.line, step.column)
        related.append(types.DiagnosticRelatedInformation(
            location=types.Location(uri=_uri_of(step.path, cwd), range=to_range(point, step_lines, codec)),
            message=step.note))
    message = d.message + (f"\nhelp: {d.help}" if d.help else "")
    return types.Diagnostic(
        range=to_range(d.span, lines, codec),
        message=message,
        severity=types.DiagnosticSeverity.Error if d.severity == "error" else types.DiagnosticSeverity.Warning,
        code=d.code,
        code_description=types.CodeDescription(href=HELP_URI.format(code=d.code)),
        source=SOURCE,
        related_information=related or None,
        data={"name": d.name, "fix": d.fix.applicability if d.fix and d.fix.replacement else None},
    )


def not_checked(reason: str, lines: Sequence[str], codec: PositionCodec) -> types.Diagnostic:
    """The diagnostic published when a buffer could not be checked (an internal error, an invalid
    configuration): on its first line, so that the editor shows why no finding is shown."""
    first = lines[0].rstrip("\r\n") if lines else ""
    return types.Diagnostic(
        range=to_range(Span(1, 1, 1, len(first) + 1), lines, codec),
        message=f"kllint could not check this file ({reason}); its findings, if any, are not shown",
        severity=types.DiagnosticSeverity.Warning, code="KL900",
        code_description=types.CodeDescription(href=HELP_URI.format(code="KL900")), source=SOURCE,
        data={"name": "not-checked", "fix": None})
