"""The per-file pipeline: read -> decode -> parse -> analyse -> filter (select, suppressions).

Every failure on one file becomes a KL900 diagnostic or an internal-error note for that file;
the run always goes on with the other files.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import libcst as cst

from kllint.config import Settings
from kllint.diagnostics import Diagnostic, Span
from kllint.discovery import Discovered
from kllint.rules.registry import BY_CODE, select_codes
from kllint.suppression import Suppressions

if TYPE_CHECKING:
    from kllint.analysis.index import ProjectIndex
    from kllint.discovery import SettingsSource

MAX_FILE_BYTES = 20 * 1024 * 1024


@dataclass
class RunResult:
    """Diagnostics of a run, sorted; `internal_errors` are one-line notes for stderr."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    files_checked: int = 0


def syntax_diagnostic(display: str, message: str, line: int = 1, column: int = 1) -> Diagnostic:
    info = BY_CODE["KL900"]
    return Diagnostic(info.code, info.name, info.severity, display,
                      Span(line, column, line, column + 1), message)


def _per_file_ignored(display: str, settings: Settings, path: Path | None = None) -> set[str]:
    candidates = {display, Path(display).name}
    if path is not None and settings.root is not None:
        try:
            candidates.add(path.resolve().relative_to(settings.root.resolve()).as_posix())
        except ValueError:
            pass
    ignored: set[str] = set()
    for pattern, codes in settings.per_file_ignores:
        if any(fnmatch.fnmatch(candidate, pattern) for candidate in candidates):
            ignored |= set(select_codes(["ALL"], []) - select_codes(["ALL"], list(codes)))
    return ignored


def filter_found(found: list[Diagnostic], text: str, display: str, settings: Settings,
                 path: Path | None = None) -> list[Diagnostic]:
    """Keep the findings of selected codes that no per-file-ignore or inline suppression hides."""
    active = settings.active_codes - _per_file_ignored(display, settings, path)
    suppressions = Suppressions.parse(text, blanket_noqa=settings.blanket_noqa)
    return [d for d in found if d.code in active and not suppressions.hides(d)]


def check_file(item: Discovered, settings: Settings, index: "ProjectIndex | None" = None
               ) -> tuple[list[Diagnostic], list[str]]:
    """Analyse one file; never raises for bad input. `index` is shared by the files of a run."""
    from kllint.analysis.checker import check_source
    from kllint.prefilter import might_matter, syntax_error

    display = item.display
    try:
        raw = item.path.read_bytes()
    except OSError as exc:
        return [syntax_diagnostic(display, f"cannot read file: {exc.strerror or exc}")], []
    if len(raw) > MAX_FILE_BYTES:
        return [syntax_diagnostic(display, f"file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB; not checked")], []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [syntax_diagnostic(display, f"file is not valid UTF-8 (byte {exc.start}); not checked")], []
    if not might_matter(text):
        error = syntax_error(text)
        if error is None:
            return [], []
        return [syntax_diagnostic(display, f"cannot parse: {error.msg}", error.lineno or 1, error.offset or 1)], []
    try:
        found = check_source(text, display, item.path, settings, index=index)
    except SyntaxError as exc:
        return [syntax_diagnostic(display, f"cannot parse: {exc.msg}", exc.lineno or 1, exc.offset or 1)], []
    except cst.ParserSyntaxError as exc:
        reason = exc.message.splitlines()[0] if exc.message else "syntax error"
        return [syntax_diagnostic(display, f"cannot parse: {reason}", exc.raw_line or 1,
                                  (exc.raw_column or 0) + 1)], []
    except RecursionError:
        return [syntax_diagnostic(display, "expression nesting too deep to analyse; not checked")], []
    except Exception as exc:  # noqa: BLE001 - one file must never stop the run
        return [], [f"{display}: internal error: {type(exc).__name__}: {exc}"]
    return filter_found(found, text, display, settings, item.path), []


def run(files: list[Discovered], settings: "Settings | SettingsSource",
        progress: Callable[[Discovered], None] | None = None) -> RunResult:
    """Check every file and return the sorted, de-duplicated diagnostics.

    `settings` is a `Settings` or a `SettingsResolver` (each file gets `settings.for_path(path)`,
    the closest configuration); `progress` is called after each file.

    Raises:
        kllint.config.ConfigError: when a file's configuration is invalid.
    """
    from kllint.analysis.index import ProjectIndex

    result = RunResult()
    seen: set[tuple] = set()
    index = ProjectIndex()
    for item in files:
        diagnostics, errors = check_file(item, settings.for_path(item.path), index)
        if progress is not None:
            progress(item)
        result.files_checked += 1
        result.internal_errors.extend(errors)
        for diagnostic in diagnostics:
            key = (diagnostic.path, diagnostic.span, diagnostic.code)
            if key not in seen:
                seen.add(key)
                result.diagnostics.append(diagnostic)
    result.diagnostics.sort(key=lambda d: d.sort_key)
    return result
