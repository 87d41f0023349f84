"""One file to its result: read -> decode -> parse -> prefilter -> analyse and judge
(`kllint.rules.dispatch`) -> select and suppress (`kllint.pipeline.selection`).

Every failure on one file becomes a KL900 diagnostic or an internal-error note for that file;
the run (`kllint.pipeline.run`) always goes on with the other files. Worker processes
(`kllint.pipeline.parallel`) call `analyse_file` too.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from typing import TYPE_CHECKING

from kllint.config import Settings
from kllint.diagnostics import Diagnostic, Span
from kllint.guard import AnalysisStopped, call_with_limits, memory_budget, too_long_chain
from kllint.nesting import too_deeply_nested
from kllint.notebook import Notebook, NotebookError, is_notebook
from kllint.pipeline import prefilter as prefilter_module  # tests and embedders replace its functions
from kllint.pipeline.discovery import Discovered
from kllint.pipeline.failure import failed
from kllint.pipeline.fingerprints import dependency_digests
from kllint.pipeline.manifest import signature_of
from kllint.pipeline.outcome import Outcome
from kllint.pipeline.selection import filter_found
from kllint.pipeline.suppressions import names_a_suppression
from kllint.pipeline.source import (
    MAX_FILE_BYTES, FileTooLargeError, NotRegularFileError, decode_source, read_regular,
)
from kllint.rules.registry import BY_CODE

if TYPE_CHECKING:
    from kllint.analysis.index import ProjectIndex
    from kllint.sites import Site


def parse_failure(error: SyntaxError) -> str:
    """The message of a KL900 for a file that does not parse; never empty."""
    if getattr(error, "newer_python", False):
        return error.msg
    return f"cannot parse: {error.msg or type(error).__name__}"


def syntax_diagnostic(display: str, message: str, line: int = 1, column: int = 1) -> Diagnostic:
    """A KL900 (the file is not checked) at `line`, `column` of the file shown as `display`."""
    info = BY_CODE["KL900"]
    return Diagnostic(info.code, info.name, info.severity, display,
                      Span(line, column, line, column + 1), message)


def _final(found: list[Diagnostic], digest: str | None = None) -> Outcome:
    return Outcome(found, list(found), digest=digest)


def analyse_file(item: Discovered, settings: Settings, index: "ProjectIndex | None" = None,
                 track: bool = False, prefilter: bool = True, sites: bool = False) -> Outcome:
    """Read, analyse and filter one file (a notebook's code cells as one module: kllint.notebook);
    never raises but for Ctrl+C and SIGTERM: whatever fails is that file's KL900 or internal
    error (`kllint.pipeline.failure`). With `prefilter` off, the analysis runs even on files that
    name no KL or reference (their findings must be none: tests/test_prefilter.py). `sites`: the
    outcome lists the KL estimates seen (`Outcome.sites`)."""
    try:
        if is_notebook(item.path):
            return analyse_notebook(item, settings, index, prefilter, sites)
        return _analyse_python(item, settings, index, track, prefilter, sites)
    except Exception as exc:  # noqa: BLE001 - one file must never stop the run
        return failed(item.display, exc)


def analyse_notebook(item: Discovered, settings: Settings, index: "ProjectIndex | None" = None,
                     prefilter: bool = True, sites: bool = False) -> Outcome:
    """A notebook's code cells checked as one module, findings reported per cell. A file that
    is not a notebook kllint can read is KL900; a notebook in another language has no findings."""
    display = item.display
    raw = _read_bounded(item)
    if isinstance(raw, Outcome):
        return raw
    try:
        notebook = Notebook.parse(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return _final([syntax_diagnostic(display, f"cannot decode the notebook (byte {exc.start} is not valid "
                                                  "UTF-8); not checked")])
    except NotebookError as exc:
        return _final([syntax_diagnostic(display, f"cannot read the notebook: {exc}; not checked")])
    if notebook is None:
        return _final([])
    virtual = Discovered(item.path, display, content=notebook.text.encode("utf-8"))
    outcome = _analyse_python(virtual, settings, index, False, prefilter, sites)
    return Outcome([notebook.map_diagnostic(d, display) for d in outcome.found],
                   [notebook.map_diagnostic(d, display) for d in outcome.diagnostics],
                   outcome.errors, outcome.filtered, gave_up=outcome.gave_up, skipped=outcome.skipped,
                   file_notes=outcome.file_notes, warnings=outcome.warnings, notes=outcome.notes,
                   stopped=outcome.stopped, stop_reason=outcome.stop_reason, thread_alive=outcome.thread_alive,
                   sites=[_site_in_cells(notebook, site) for site in outcome.sites if site.path == display],
                   # placed in a module the notebook calls: their steps in the notebook per cell
                   foreign=[replace(d, trace=notebook.map_diagnostic(d, display).trace) for d in outcome.foreign])


def _site_in_cells(notebook: Notebook, site: "Site") -> "Site":
    """A site of a notebook's virtual source at its place per cell (its roles' places too)."""
    def at(path: str, line: int, column: int) -> tuple[int | None, int, int]:
        if path != site.path or not line:
            return None, line, column
        cell, span = notebook.to_cell(Span(line, column, line, column + 1))
        return cell, span.line, span.column

    cell, line, column = at(site.path, site.line, site.column)
    roles = []
    for role in site.roles:
        role_cell, role_line, role_column = at(role.path, role.line, role.column)
        via_cell, *via = at(*role.via) if role.via else (None,)
        roles.append(replace(role, line=role_line, column=role_column, cell=role_cell,
                             via=(role.via[0], *via) if role.via else None, via_cell=via_cell))
    judged = tuple((code, path, *at(path, line_, column_)[1:]) for code, path, line_, column_ in site.judged)
    return replace(site, line=line, column=column, cell=cell, roles=tuple(roles), judged=judged)


def _read_bounded(item: Discovered) -> "bytes | Outcome":
    """The bytes of a file to check (a regular file, at most MAX_FILE_BYTES, or the buffer held
    in memory), or the KL900 outcome saying why it cannot be read."""
    display = item.display
    try:
        raw = item.content if item.content is not None else read_regular(item.path, MAX_FILE_BYTES)
        if len(raw) > MAX_FILE_BYTES:
            raise FileTooLargeError(len(raw), MAX_FILE_BYTES)
    except FileTooLargeError:
        return _final([syntax_diagnostic(display, f"file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB; "
                                                  "not checked")])
    except NotRegularFileError as exc:
        return _final([syntax_diagnostic(display, f"{exc}; not checked")])
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symbolic link loop on some versions
        return _final([syntax_diagnostic(display, f"cannot read file: {getattr(exc, 'strerror', None) or exc}")])
    return raw


def _analyse_python(item: Discovered, settings: Settings, index: "ProjectIndex | None",
                    track: bool, prefilter: bool, sites: bool = False) -> Outcome:
    # the signature the cache's manifest may record the digest under is taken before the read
    signature = signature_of(item.path) if track and item.content is None else None
    outcome = _analyse_source(item, settings, index, track, prefilter, sites)
    if outcome.digest is not None:
        outcome.signature = signature
    return outcome


def _analyse_source(item: Discovered, settings: Settings, index: "ProjectIndex | None",
                    track: bool, prefilter: bool, sites: bool = False) -> Outcome:
    display = item.display
    raw = _read_bounded(item)
    if isinstance(raw, Outcome):
        return raw
    digest = hashlib.sha256(raw).hexdigest() if track else None
    try:
        text = decode_source(raw)
    except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
        start = getattr(exc, "start", 0) or 0
        line = raw[:start].count(b"\n") + 1
        column = start - (raw.rfind(b"\n", 0, start) + 1) + 1
        reason = (f"byte {start} is not valid {exc.encoding.upper().replace('UTF-8-SIG', 'UTF-8')}"
                  if isinstance(exc, UnicodeDecodeError) else (str(exc) or type(exc).__name__))
        return _final([syntax_diagnostic(display, f"cannot decode the file ({reason}); not checked", line, column)],
                      digest)
    # A file whose text names no KL nor reference is skipped unparsed (most of a project); the
    # others go through `ast` first (cheap): KL900 then means "Python rejects it", and libcst
    # never sees code Python rejects.
    if prefilter and not prefilter_module.might_matter(text, settings.vocab):
        return _skipped(digest)
    known = index.outline_of(item.path, text) if index is not None and item.content is None else None
    outline, error = (known, None) if known is not None else prefilter_module.parse_or_error(text)
    if error is not None:
        return _final([syntax_diagnostic(display, parse_failure(error), error.lineno or 1, error.offset or 1)],
                      digest)
    if prefilter and not prefilter_module.code_might_matter(outline, settings.vocab):
        return _skipped(digest)
    chain = too_long_chain(text, outline)
    too_deep = (chain, 1) if chain is not None else too_deeply_nested(text, outline)
    if too_deep is not None:  # before anything recursive (libcst, the interpreter) touches it
        outcome = _final([syntax_diagnostic(display, f"{too_deep[0]}; not checked", too_deep[1])], digest)
        outcome.file_notes.append(f"not analysed: {too_deep[0]}")
        return outcome
    # imported here, not at the top: a run whose files are all cached or skipped by the
    # prefilter never loads the analysis (libcst, the term algebra)
    from kllint.rules.dispatch import check_source

    tracking = track and index is not None and hasattr(index, "begin_tracking")
    if tracking:
        index.begin_tracking()
    gave_up: list[str] = []
    seen: list = []
    extra = {"sites": seen} if sites else {}  # the KL estimates seen, only when the run lists them
    try:
        found = call_with_limits(check_source, text, display, item.path, settings, index=index, outline=outline,
                                 notes=gave_up, from_disk=item.content is None, budget=settings.time_budget,
                                 **extra)
    except AnalysisStopped as stop:
        if stop.memory:
            note = f"analysis of {display} stopped after using {memory_budget()} of memory (memory budget)"
            message = f"analysis stopped after using {memory_budget()} of memory (the memory budget); not checked"
        else:
            note = f"analysis of {display} stopped after {settings.time_budget:g} s (time budget)"
            message = f"analysis stopped after {settings.time_budget:g} s (the time budget, `time-budget`); not checked"
        return Outcome([], [syntax_diagnostic(display, message)], notes=[note], stopped=True,
                       stop_reason="memory budget" if stop.memory else "time budget", thread_alive=stop.abandoned)
    except SyntaxError as exc:
        return _final([syntax_diagnostic(display, parse_failure(exc), exc.lineno or 1, exc.offset or 1)], digest)
    except Exception as exc:  # noqa: BLE001 - one file must never stop the run
        return failed(display, exc)
    deps = None
    if tracking:
        deps = dependency_digests(index.tracked_paths(), index)
    # placed in other files: kept under their real path (a display is relative to the current
    # folder, and a checked file given by an absolute path is displayed so: matched by the run)
    foreign = [replace(d, path=os.path.realpath(d.path)) for d in found if d.path != display]
    found = [d for d in found if d.path == display]
    warnings: list[str] = []
    suppressible = names_a_suppression(text)  # asked once: filter_found takes None for "no suppression"
    return Outcome(found, filter_found(found, text if suppressible else None, display, settings, item.path, warnings),
                   filtered=True, digest=digest, deps=deps, gave_up=gave_up, warnings=warnings,
                   suppressible=suppressible, foreign=foreign, sites=seen)


def _skipped(digest: str | None) -> Outcome:
    outcome = _final([], digest)
    outcome.skipped = True
    return outcome


def check_file(item: Discovered, settings: Settings, index: "ProjectIndex | None" = None
               ) -> tuple[list[Diagnostic], list[str]]:
    """Analyse one file; never raises for bad input. `index` is shared by the files of a run."""
    outcome = analyse_file(item, settings, index)
    return outcome.diagnostics, outcome.errors


