"""What the language server asks of kllint, without any LSP: check an editor's buffer as the file
it will be saved as, and compute verified fixes for it. Positions stay kllint's (1-based lines and
columns in code points, end exclusive); kllint.server.convert turns them into LSP ranges.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kllint.config import ConfigError, Settings, SettingsResolver
from kllint.diagnostics import Diagnostic, Span
from kllint.pipeline.discovery import Discovered
from kllint.guard import AnalysisStopped

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Checked:
    """The findings of one buffer (`diagnostics`), and the one-line notes of what went wrong
    (`errors`: invalid configuration, internal errors)."""

    diagnostics: tuple[Diagnostic, ...]
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class Edit:
    """Replace `span` of the buffer with `text` (kllint positions)."""

    span: Span
    text: str


def _item(path: Path, text: str) -> Discovered:
    return Discovered(path, str(path), content=text.encode("utf-8", "surrogatepass"))


def settings_for(path: Path) -> Settings:
    """The settings of `path`: its closest configuration file, as on the command line.

    Raises:
        ConfigError: that configuration is invalid.
    """
    return SettingsResolver().for_path(path)


def check_buffer(path: Path, text: str) -> Checked:
    """The findings of the buffer `text` of the file `path` (which need not exist or be saved):
    configuration, per-file ignores and suppressions apply as for the file, helpers in other
    project modules are read from disk. Never raises (it runs in the server's analysis thread)."""
    from kllint.pipeline.run import run

    try:
        result = run([_item(path, text)], SettingsResolver())
    except ConfigError as exc:
        return Checked((), (str(exc),))
    except RecursionError:
        return Checked((), ("internal error: RecursionError (nested too deeply)",))
    except BaseException as exc:  # noqa: BLE001 - also AnalysisStopped: an editor must never lose its server
        return Checked((), (f"internal error: {type(exc).__name__}: {str(exc)[:200]}",))
    return Checked(tuple(result.diagnostics), tuple(result.internal_errors))


def _overlaps(a: Span, b: Span) -> bool:
    return (a.line, a.column) <= (b.end_line, b.end_column) and (b.line, b.column) <= (a.end_line, a.end_column)


def fix_edit(path: Path, text: str, diagnostic: Diagnostic, unsafe: bool = False) -> Edit | None:
    """The edit of `diagnostic`'s fix if it applies (safe, or unsafe with `unsafe`) and is
    verified as `--fix` verifies it: the result parses and no longer has the finding there.
    None otherwise."""
    from kllint.fix import apply_fixes, fix_region, fix_text_of, is_applicable, lint_text, line_ending

    if not is_applicable(diagnostic, unsafe) or diagnostic.fix is None or diagnostic.fix.replacement is None:
        return None
    new_text, applied = apply_fixes(text, [diagnostic])
    if not applied:
        return None
    try:
        import libcst

        libcst.parse_module(new_text)
        after = lint_text(new_text, _item(path, new_text), settings_for(path))
    except (Exception, AnalysisStopped):  # noqa: BLE001 - a fix that cannot be verified is not offered
        return None
    region = applied[0][1]
    if any(d.code == diagnostic.code and _overlaps(d.span, region) for d in after):
        return None
    return Edit(fix_region(diagnostic), _LINE_BREAK.sub(line_ending(text), fix_text_of(diagnostic)))


def fix_all(path: Path, text: str, unsafe: bool = False) -> tuple[str, int]:
    """The buffer with every applicable fix applied (as `kllint check --fix`, with
    `--unsafe-fixes` when `unsafe`), and the number of findings fixed. Never raises."""
    from kllint.fix import fix_text

    try:
        outcome = fix_text(text, _item(path, text), settings_for(path), unsafe=unsafe)
    except (Exception, AnalysisStopped):  # noqa: BLE001 - nothing to offer (also past the time budget)
        return text, 0
    return outcome.text, len(outcome.fixed)
