"""What `kllint check` writes to the user's files or executes: `--fix` / `--diff`, `--add-noqa`
and the estimates `--confirm` evaluates.

None of it is taken from the result cache, which may be shared and written by others (a pull
request from a fork in CI): every edit and every expression comes from a fresh analysis of the
file it concerns (`fresh_outcomes`, `kllint.fix.fix_text` without given findings). The cache
only decides which files are worth that analysis. Files are written by `kllint.fix.write_atomic`
in their own encoding; what it refuses (outside the project, read-only, hard-linked) is a note,
an I/O failure an error. The edits are made to the bytes that were analysed, and a file is
replaced only if it still holds them: one saved meanwhile (an editor, a formatter) keeps that
save, its findings are reported as they were, and a note says "changed while kllint ran".

Notebooks are fixed through their virtual module and written back cell by cell
(`kllint.notebook.fix`); their diffs are per cell. A buffer read from stdin (`Discovered.content`)
is never written: its fixed text goes to `buffers`, which the caller prints.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TextIO

from kllint.diagnostics import Diagnostic
from kllint.pipeline.discovery import Discovered

if TYPE_CHECKING:
    from kllint.config import SettingsResolver
    from kllint.pipeline.outcome import Outcome
    from kllint.pipeline.run import RunResult


def fresh_outcomes(items: list[Discovered], resolver: "SettingsResolver") -> dict[str, "Outcome"]:
    """Each file's outcome from a fresh analysis (never the cache), by displayed path (of the
    bytes an item holds in `content`, else of the file as read now)."""
    from kllint.analysis.index import ProjectIndex
    from kllint.memory import analysis_thresholds
    from kllint.pipeline.file import analyse_file

    index = ProjectIndex()
    found: dict[str, Outcome] = {}
    with analysis_thresholds():
        for item in items:
            outcome = analyse_file(item, resolver.for_path(item.path), index)
            if outcome.stopped:
                index = ProjectIndex()
            found[item.display] = outcome
    return found


def _items(files: list[Discovered], displays: set[str]) -> list[Discovered]:
    return [item for item in files if item.display in displays]


def _read(item: Discovered) -> tuple[str, str, bytes | None]:
    """The text to edit, its encoding and the file's bytes it was decoded from (None for an
    in-memory buffer: stdin, UTF-8, never written).

    Raises:
        kllint.fix.FixError: it cannot be read or decoded.
    """
    from kllint.fix import read_source_bytes
    from kllint.stdin import read_text

    if item.content is not None:
        return read_text(item), "utf-8", None
    return read_source_bytes(item.path)


def apply_fixes(files: list[Discovered], resolver: "SettingsResolver", result: "RunResult", *, unsafe: bool,
                diff: bool, root: Path | None, stdout: TextIO, say: Callable[[str], None],
                buffers: dict[str, str] | None = None,
                fixed_list: list[Diagnostic] | None = None) -> tuple[int, bool]:
    """Fix (or, with `diff`, show) the files with applicable fixes; returns (findings fixed,
    whether any file changed or would change). Updates `result` (remaining findings of written
    files, notes, errors); the findings fixed are added to `fixed_list`. In-memory items
    (stdin) are not written: their fixed text goes to `buffers`."""
    from kllint.fix import FixError, FixRefused, fix_text, is_applicable, unified_diff, write_atomic
    from kllint.guard import AnalysisStopped
    from kllint.notebook import NotebookError, is_notebook
    from kllint.notebook.fix import fix_notebook, notebook_diff
    from kllint.pipeline.failure import describe
    from kllint.report.locations import location
    from kllint.report.visible import visible

    fixable = {d.path for d in result.diagnostics if is_applicable(d, unsafe)}
    fixed, changed = 0, False
    for item in sorted(_items(files, fixable), key=lambda i: i.display):
        display = item.display
        notebook = is_notebook(item.path)
        settings = resolver.for_path(item.path)
        try:
            text, encoding, raw = _read(item)
            # a fresh analysis of the text read, never the cache's findings
            outcome = (fix_notebook(text, item, settings, unsafe=unsafe) if notebook
                       else fix_text(text, item, settings, unsafe=unsafe))
        except (FixError, NotebookError) as exc:
            result.internal_errors.append(str(exc))
            continue
        except AnalysisStopped as exc:
            result.notes.append(f"{display}: {exc} (time budget); not fixed")
            continue
        except Exception as exc:  # noqa: BLE001 - one file must never stop the run
            result.internal_errors.append(f"{display}: fix failed: {describe(exc)}")  # bounded (pipeline.failure)
            continue
        for rejected in outcome.rejected:
            where = location(display, rejected.span.line, rejected.span.column, rejected.cell)
            say(f"kllint: {where}: fix for {rejected.code} not "
                "applied (the result did not parse or still had the finding)")
        if not outcome.changed:
            if not diff:
                _replace_file(result, display, outcome.remaining)  # the fresh findings, not the cache's
            continue
        if diff:
            # for people (a terminal, a CI log): control characters of the file's lines shown as escapes
            stdout.write(visible((notebook_diff if notebook else unified_diff)(display, outcome.original, outcome.text),
                                 newlines=True))
        elif item.content is not None:
            if buffers is not None:
                buffers[display] = outcome.text
            _replace_file(result, display, outcome.remaining)
        else:
            try:
                write_atomic(item.path, outcome.text, encoding, root=root, expect=raw)
            except FixRefused as exc:  # also FileChanged: the findings stay those of the run
                result.notes.append(str(exc))
                continue
            except FixError as exc:
                result.internal_errors.append(str(exc))
                continue
            _replace_file(result, display, outcome.remaining)
        changed = True
        fixed += len(outcome.fixed)
        if fixed_list is not None:
            fixed_list.extend(outcome.fixed)
    return fixed, changed


def _replace_file(result: "RunResult", display: str, remaining: list[Diagnostic]) -> None:
    result.diagnostics = [d for d in result.diagnostics if d.path != display] + list(remaining)
    result.diagnostics.sort(key=lambda d: d.sort_key)


def add_noqa(files: list[Discovered], diagnostics: list[Diagnostic], resolver: "SettingsResolver",
             result: "RunResult", root: Path | None,
             keep: Callable[[list[Diagnostic]], list[Diagnostic]]) -> tuple[int, bool]:
    """`--add-noqa`: add `# noqa: CODE` comments for the findings of a fresh analysis of each
    file that has findings in `diagnostics`, filtered by `keep` (the baseline); returns how many
    comments were added and whether a file was left without its comments because it changed
    during the run (its findings remain). Each file is read once: the comments go into the
    bytes that were analysed. Refusals are notes and failures errors in `result`; the run goes on."""
    from kllint.fix import FileChanged, FixError, FixRefused, write_atomic
    from kllint.notebook import NotebookError, is_notebook
    from kllint.notebook.fix import add_noqa_notebook
    from kllint.pipeline.suppressions import add_noqa as add_comments

    added, skipped = 0, False
    read: dict[str, tuple[str, str, bytes | None]] = {}
    # no noqa for KL900 (the file is not checked) nor KL901 (the unused suppression itself)
    for item in _items(files, {d.path for d in diagnostics if d.code not in ("KL900", "KL901")}):
        try:
            read[item.display] = _read(item)
        except FixError as exc:
            result.internal_errors.append(str(exc))
    # the analysis of the bytes read (in memory), so that the comments fit what is edited
    analysed = [item if item.content is not None else replace(item, content=read[item.display][2])
                for item in _items(files, set(read))]
    outcomes = fresh_outcomes(analysed, resolver)
    for item in sorted(_items(files, set(outcomes)), key=lambda i: i.display):
        outcome = outcomes[item.display]
        result.notes.extend(outcome.notes)
        result.internal_errors.extend(outcome.errors)
        mine = [d for d in keep(outcome.diagnostics) if d.code not in ("KL900", "KL901")]
        if not mine:
            continue
        text, encoding, raw = read[item.display]
        try:
            new_text, count = (add_noqa_notebook if is_notebook(item.path) else add_comments)(text, mine)
            if count:
                write_atomic(item.path, new_text, encoding, root=root, expect=raw)
        except FileChanged:
            result.notes.append(f"{item.path}: changed while kllint ran; no noqa directive added")
            skipped = True
            continue
        except FixRefused as exc:
            result.notes.append(str(exc))
            continue
        except (FixError, NotebookError) as exc:
            result.internal_errors.append(str(exc))
            continue
        added += count
    return added, skipped


def fresh_estimates(files: list[Discovered], diagnostics: list[Diagnostic],
                    resolver: "SettingsResolver") -> list[Diagnostic]:
    """`diagnostics` with each estimate (what `--confirm` evaluates) replaced by the one a fresh
    analysis of its file gives for the same finding (none when the fresh analysis has no such
    finding)."""
    wanted = {d.path for d in diagnostics if d.estimate is not None}
    if not wanted:
        return diagnostics
    outcomes = fresh_outcomes(_items(files, wanted), resolver)
    fresh = {(d.path, d.cell, d.span, d.code): d.estimate for o in outcomes.values() for d in o.diagnostics}
    return [d if d.estimate is None else replace(d, estimate=fresh.get((d.path, d.cell, d.span, d.code)))
            for d in diagnostics]
