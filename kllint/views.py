"""What `kllint check` prints besides the findings themselves: the `-v` file list, `--show-files`,
`--show-settings`, the `--statistics` table, the `--show-fixes` enumeration and the summary.

Each function returns text; `kllint.session` decides where it goes (stdout for what the user
asked to see instead of the findings, stderr for everything else).
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from kllint.diagnostics import Diagnostic
from kllint.rules.registry import BY_CODE

if TYPE_CHECKING:
    from kllint.config import Settings, SettingsResolver
    from kllint.pipeline.discovery import Discovered
    from kllint.pipeline.run import RunResult


def plural(count: int, word: str) -> str:
    """`1 file`, `2 files`, `2 matches`."""
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word}{'es' if word.endswith(('x', 's', 'sh', 'ch')) else 's'}"


def found_summary(diagnostics: list[Diagnostic], checked: int) -> str:
    """`Found 3 findings in 2 files (5 checked).`: the files with findings, then all checked."""
    if not diagnostics:
        return f"Found 0 findings ({plural(checked, 'file')} checked)."
    files = len({d.path for d in diagnostics})
    return f"Found {plural(len(diagnostics), 'finding')} in {plural(files, 'file')} ({checked} checked)."


def verbose_lines(result: "RunResult") -> list[str]:
    """`-v`: one line per file (how it was handled: analysed, skipped by the prefilter, cached),
    then one line per note the pipeline attached to a file (e.g. an analysis it abandoned), one
    line per function the analysis gave up on (`path:line: analysis of `f` abandoned: why`),
    and the count of files per status."""
    from kllint.report.paths import escape_path

    lines = [f"{status}: {escape_path(display)}" for display, status in result.file_status.items()]
    for display, notes in result.file_notes.items():
        lines.extend(note if note.startswith(f"{display}:") else f"{escape_path(display)}: {note}" for note in notes)
    lines.extend(result.abandoned)
    counts = Counter(result.file_status.values())
    if counts:
        lines.append("files: " + ", ".join(f"{count} {status}" for status, count in sorted(counts.items())))
    return lines


def show_files(files: Iterable["Discovered"]) -> str:
    """`--show-files`: the files a check would look at, one per line, as they are displayed
    (a name that is not valid UTF-8 escaped as in the findings: `kllint.report.paths`)."""
    from kllint.report.paths import escape_path

    return "".join(f"{escape_path(item.display)}\n" for item in files)


def _toml_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(value) for value in values) + "]"


def settings_text(settings: "Settings", target: str) -> str:
    """The resolved settings of one path, as TOML-like `key = value` lines."""
    source = str(settings.source) if settings.source is not None else "none (defaults)"
    lines = [
        f"# settings for: {target}",
        f"# configuration file: {source}",
        f"select = {_toml_list(settings.select)}",
        f"extend-select = {_toml_list(settings.extend_select)}",
        f"ignore = {_toml_list(settings.ignore)}",
        f"exclude = {_toml_list(settings.exclude)}",
        f"extend-exclude = {_toml_list(settings.extend_exclude)}",
        "per-file-ignores = {" + ", ".join(f"{json.dumps(pattern)} = {_toml_list(codes)}"
                                           for pattern, codes in settings.per_file_ignores) + "}",
        f"output-format = {json.dumps(settings.output_format or 'full')}",
        f"respect-gitignore = {str(settings.respect_gitignore).lower()}",
        f"blanket-noqa = {str(settings.blanket_noqa).lower()}",
        f"time-budget = {settings.time_budget:g}",
        f"line-length = {settings.line_length}",
    ]
    for key in ("logprob_functions", "stop_gradient_functions", "loss_sinks", "reference_names"):
        lines.append(f"vocab.{key.replace('_', '-')} = {_toml_list(getattr(settings.vocab, key))}")
    lines.append(f"# active rules: {', '.join(sorted(settings.active_codes))}")
    return "\n".join(lines) + "\n"


def show_settings(resolver: "SettingsResolver", files: list["Discovered"]) -> str:
    """`--show-settings`: the settings that apply to the first file found (else the current
    folder), as Ruff shows them."""
    target = files[0].path if files else Path.cwd()
    return settings_text(resolver.for_path(target), files[0].display if files else str(target))


def statistics(diagnostics: list[Diagnostic], fmt: str, fixable: "set[int]") -> str:
    """`--statistics`: findings per code, most frequent first; `fixable` holds the `id()` of the
    findings `--fix` would fix. JSON for `--output-format json`, else an aligned table."""
    counts = Counter(d.code for d in diagnostics)
    fixes = Counter(d.code for d in diagnostics if id(d) in fixable)
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    if fmt == "json":
        return json.dumps([{"code": code, "name": BY_CODE[code].name if code in BY_CODE else "",
                            "count": count, "fixable": fixes[code] == count}
                           for code, count in rows], indent=2) + "\n"
    width = max((len(str(count)) for count in counts.values()), default=1)
    return "".join(f"{count:>{width}}\t{code}\t{'[*] ' if fixes[code] == count else '[-] ' if fixes[code] else ''}"
                   f"{BY_CODE[code].name if code in BY_CODE else ''}\n" for code, count in rows)


def fix_lines(diagnostics: list[Diagnostic], applied: bool) -> list[str]:
    """`--show-fixes`: one line per finding fixed (or, without --fix, that --fix would fix)."""
    if not diagnostics:
        return []
    from kllint.report.locations import location
    from kllint.report.paths import escape_path
    from kllint.report.visible import visible

    head = "Fixed:" if applied else "Fixable with --fix:"
    return [head] + [visible(f"  {location(escape_path(d.path), d.span.line, d.span.column, d.cell)}: {d.code} "
                             f"[{d.name}] {d.fix.description if d.fix else ''}".rstrip()) for d in diagnostics]


def unsafe_hint(diagnostics: list[Diagnostic], unsafe_fixes: bool, diff: bool = False) -> list[str]:
    """How many unsafe fixes were left out, and how to preview them with `--diff` (empty when
    there are none or `--unsafe-fixes` is on)."""
    from kllint.fix import is_applicable

    if unsafe_fixes:
        return []
    unsafe = sum(1 for d in diagnostics if is_applicable(d, True) and not is_applicable(d, False))
    if not unsafe:
        return []
    fixes = "1 hidden fix" if unsafe == 1 else f"{unsafe} hidden fixes"
    how = ("Add `--unsafe-fixes` to include them in the diff." if diff else
           "Preview them with `--unsafe-fixes --diff` (they change the training gradient on purpose).")
    return [f"{fixes} can be enabled with the `--unsafe-fixes` option.", how]


def sites_usage(options: object, fmt: str) -> str | None:
    """Why `--show-sites` cannot be used in this run (None: it can): the sites go with the
    findings of the full, concise and JSON formats, of a run that reports its findings."""
    from kllint.report.sites import SHOWN_WITH

    for flag in ("fix", "diff", "add_noqa", "write_baseline", "statistics", "show_files", "show_settings"):
        if getattr(options, flag, False):
            return f"--show-sites cannot be combined with --{flag.replace('_', '-')}"
    if fmt not in SHOWN_WITH:
        return f"--show-sites needs the full, concise or json output format, not {fmt}"
    return None
