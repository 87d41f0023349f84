"""The per-file pipeline: read -> decode -> parse -> analyse -> filter (select, suppressions).

Every failure on one file becomes a KL900 diagnostic or an internal-error note for that file;
the run always goes on with the other files. The process pool is in `kllint.parallel`, the
result cache in `kllint.cache`.
"""
from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from kllint.config import Settings
from kllint.diagnostics import Diagnostic, Span
from kllint.discovery import Discovered
from kllint.rules.registry import BY_CODE, select_codes
from kllint.guard import AnalysisStopped, call_with_limits, too_long_chain
from kllint.source import FileTooLargeError, NotRegularFileError, decode_source, read_regular
from kllint.suppression import Suppressions

if TYPE_CHECKING:
    from kllint.analysis.index import ProjectIndex
    from kllint.cache import ResultCache
    from kllint.discovery import SettingsSource

MAX_FILE_BYTES = 20 * 1024 * 1024


@dataclass
class RunResult:
    """Diagnostics of a run, sorted; `internal_errors` are one-line notes for stderr (exit 2),
    `notes` other one-line remarks for stderr, `stopped` the files whose analysis ran out of time."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    files_checked: int = 0
    abandoned: list[str] = field(default_factory=list)  # functions the analysis gave up on (listed by `-v`)
    # per file shown to the user: how it was handled ("analysed", "skipped by the prefilter",
    # "cached") and notes on it (e.g. an analysis abandoned, with the reason); for `-v`
    file_status: dict[str, str] = field(default_factory=dict)
    file_notes: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # shown on stderr; the exit code is unchanged
    notes: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)


def parse_failure(error: SyntaxError) -> str:
    """The message of a KL900 for a file that does not parse; never empty."""
    if getattr(error, "newer_python", False):
        return error.msg
    return f"cannot parse: {error.msg or type(error).__name__}"


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
                 path: Path | None = None, warnings: list[str] | None = None) -> list[Diagnostic]:
    """Keep the findings of selected codes that no per-file-ignore or inline suppression hides,
    and add KL901 (unused suppressions) when it is selected. `warnings` collects the unknown
    codes of the suppression comments."""
    from kllint.suppression_audit import UNUSED_CODE, unknown_codes, unused_suppressions

    if warnings is not None:
        warnings.extend(unknown_codes(text, display))
    audit = UNUSED_CODE in settings.active_codes
    if not found and not audit:
        return []
    active = settings.active_codes - _per_file_ignored(display, settings, path)
    suppressions = Suppressions.parse(text, blanket_noqa=settings.blanket_noqa)
    kept = [d for d in found if d.code in active and not suppressions.hides(d)]
    if audit and UNUSED_CODE in active:
        kept.extend(d for d in unused_suppressions(text, display, found, frozenset(active))
                    if not suppressions.hides(d))
        kept.sort(key=lambda d: d.sort_key)
    return kept


@dataclass
class Outcome:
    """The result of one file.

    `found` is what the analysis gave before selection and suppressions (what the cache keeps),
    `diagnostics` what is reported; `filtered` says whether `found` goes through `filter_found`
    (false for KL900 notes about unreadable or unparsable files, which are always reported).
    `notes` are one-line remarks for stderr that are not errors; `stopped` says the analysis ran
    out of its time budget (`thread_alive`: its thread did not stop, so its index must be dropped).
    Distinct from those: `gave_up` lists the functions the analysis abandoned (step or call-depth
    budgets; `RunResult.abandoned`, listed by `-v`), `file_notes` are remarks on the file for `-v`
    only, `warnings` go to stderr unless `-q`, `skipped` says the prefilter let the file go.
    `digest` is the sha256 of the bytes checked (None when unreadable) and `deps` the project
    module files the analysis looked at, each with [sha256, code digest, real path] (None: it must
    not exist; `kllint.cache.dependency_digests`); both only when the run keeps a cache (`track=True`).
    """

    found: list[Diagnostic]
    diagnostics: list[Diagnostic]
    errors: list[str] = field(default_factory=list)
    filtered: bool = False
    digest: str | None = None
    deps: dict[str, list[str | None] | None] | None = None
    gave_up: list[str] = field(default_factory=list)  # functions the analysis abandoned (`check -v`)
    skipped: bool = False  # skipped by the prefilter (`check -v`)
    file_notes: list[str] = field(default_factory=list)  # remarks on the file for `check -v`
    warnings: list[str] = field(default_factory=list)  # e.g. unknown codes in suppressions (stderr)
    notes: list[str] = field(default_factory=list)
    stopped: bool = False
    thread_alive: bool = False


def _final(found: list[Diagnostic], digest: str | None = None) -> Outcome:
    return Outcome(found, list(found), digest=digest)


def analyse_file(item: Discovered, settings: Settings, index: "ProjectIndex | None" = None,
                 track: bool = False, prefilter: bool = True) -> Outcome:
    """Read, analyse and filter one file (a notebook's code cells as one module: kllint.notebook);
    never raises for bad input. With `prefilter` off, the analysis runs even on files that name
    no KL or reference (their findings must be none: tests/test_prefilter.py)."""
    from kllint.notebook import is_notebook

    if is_notebook(item.path):
        return analyse_notebook(item, settings, index, prefilter)
    return _analyse_python(item, settings, index, track, prefilter)


def analyse_notebook(item: Discovered, settings: Settings, index: "ProjectIndex | None" = None,
                     prefilter: bool = True) -> Outcome:
    """A notebook's code cells checked as one module, findings reported per cell. A file that
    is not a notebook kllint can read is KL900; a notebook in another language has no findings."""
    from kllint.notebook import Notebook, NotebookError

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
    outcome = _analyse_python(virtual, settings, index, False, prefilter)
    return Outcome([notebook.map_diagnostic(d, display) for d in outcome.found],
                   [notebook.map_diagnostic(d, display) for d in outcome.diagnostics],
                   outcome.errors, outcome.filtered, gave_up=outcome.gave_up, skipped=outcome.skipped,
                   file_notes=outcome.file_notes, warnings=outcome.warnings, notes=outcome.notes,
                   stopped=outcome.stopped, thread_alive=outcome.thread_alive)


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
                    track: bool, prefilter: bool) -> Outcome:
    from kllint.prefilter import might_matter, parse_or_error

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
    # Every file goes through `ast` first (cheap): KL900 then means "Python rejects it", whether
    # or not the prefilter lets the file through, and libcst never sees code Python rejects.
    outline, error = parse_or_error(text)
    if error is not None:
        return _final([syntax_diagnostic(display, parse_failure(error), error.lineno or 1, error.offset or 1)],
                      digest)
    if prefilter and not might_matter(text, settings.vocab):
        outcome = _final([], digest)
        outcome.skipped = True
        return outcome
    too_deep = too_long_chain(text, outline)
    if too_deep is not None:
        return _final([syntax_diagnostic(display, f"{too_deep}; not checked")], digest)
    from kllint.analysis.checker import check_source

    tracking = track and index is not None and hasattr(index, "begin_tracking")
    if tracking:
        index.begin_tracking()
    gave_up: list[str] = []
    try:
        found = call_with_limits(check_source, text, display, item.path, settings, index=index, outline=outline,
                                 notes=gave_up, budget=settings.time_budget)
    except AnalysisStopped as stop:
        note = f"analysis of {display} stopped after {settings.time_budget:g} s (time budget)"
        return Outcome([], [syntax_diagnostic(display, f"analysis stopped after {settings.time_budget:g} s "
                                                       "(the time budget, `time-budget`); not checked")],
                       notes=[note], stopped=True, thread_alive=stop.abandoned)
    except SyntaxError as exc:
        return _final([syntax_diagnostic(display, parse_failure(exc), exc.lineno or 1, exc.offset or 1)], digest)
    except RecursionError:
        outcome = _final([syntax_diagnostic(display, "expression nesting too deep to analyse; not checked")], digest)
        outcome.file_notes.append("analysis abandoned: expression nesting too deep")
        return outcome
    except MemoryError:
        return _final([syntax_diagnostic(display, "out of memory while analysing; not checked")])
    except Exception as exc:  # noqa: BLE001 - one file must never stop the run
        return Outcome([], [], [f"{display}: internal error: {type(exc).__name__}: {exc}"],
                       file_notes=[f"analysis abandoned: internal error ({type(exc).__name__})"])
    deps = None
    if tracking:
        from kllint.cache import dependency_digests

        deps = dependency_digests(index.tracked_paths(), index)
    warnings: list[str] = []
    return Outcome(found, filter_found(found, text, display, settings, item.path, warnings), filtered=True,
                   digest=digest, deps=deps, gave_up=gave_up, warnings=warnings)


def check_file(item: Discovered, settings: Settings, index: "ProjectIndex | None" = None
               ) -> tuple[list[Diagnostic], list[str]]:
    """Analyse one file; never raises for bad input. `index` is shared by the files of a run."""
    outcome = analyse_file(item, settings, index)
    return outcome.diagnostics, outcome.errors


def cacheable(item: Discovered) -> bool:
    """Whether the result cache may keep `item`'s result: not for text given in memory (stdin,
    an editor's buffer), nor for notebooks (their findings are per cell)."""
    from kllint.notebook import is_notebook

    return item.content is None and not is_notebook(item.path)


def run(files: list[Discovered], settings: "Settings | SettingsSource",
        progress: Callable[[Discovered], None] | None = None, *, jobs: int = 1,
        cache: "ResultCache | None" = None, prefilter: bool = True) -> RunResult:
    """Check every file and return the sorted, de-duplicated diagnostics.

    `settings` is a `Settings` or a `SettingsResolver` (each file gets `settings.for_path(path)`,
    the closest configuration); `progress` is called after each file. With `jobs` > 1 and more
    than `kllint.parallel.THRESHOLD` files to analyse that pass the prefilter, the files are
    analysed by a pool of worker processes (the output is the same as with one job). `cache` (a `kllint.cache.ResultCache`)
    supplies the results of unchanged files and keeps the new ones. `prefilter=False` (for tests)
    analyses every file in this process.

    Raises:
        kllint.config.ConfigError: when a file's configuration is invalid.
    """
    from kllint.analysis.index import ProjectIndex, forget_package_roots

    forget_package_roots()
    per_file = [settings.for_path(item.path) for item in files]
    outcomes: list[Outcome | None] = [None] * len(files)

    def done(position: int, outcome: Outcome) -> None:
        outcomes[position] = outcome
        if cache is not None and not outcome.errors and not outcome.stopped and cacheable(files[position]):
            cache.store(files[position], per_file[position], outcome)
        if progress is not None:
            progress(files[position])

    pending: list[int] = []
    cached: set[int] = set()
    for position, item in enumerate(files):
        hit = cache.lookup(item, per_file[position]) if cache is not None and cacheable(item) else None
        if hit is None:
            pending.append(position)
        else:
            cached.add(position)
            outcomes[position] = hit
            if progress is not None:
                progress(item)
    track = cache is not None
    from kllint import parallel

    if (prefilter and jobs > 1 and len(pending) > parallel.THRESHOLD and parallel.usable()
            and parallel.worth_it([files[p] for p in pending])):
        parallel.analyse([parallel.Task(p, files[p], per_file[p]) for p in pending], jobs, track, done)
    else:
        from kllint.memory import analysis_thresholds

        index = ProjectIndex()
        with analysis_thresholds():
            for position in pending:
                outcome = analyse_file(files[position], per_file[position], index, track, prefilter)
                if outcome.stopped:  # interrupted anywhere: nothing it shared is trusted again
                    index = ProjectIndex()
                done(position, outcome)

    result = RunResult()
    seen: set[tuple] = set()
    for position, (item, outcome) in enumerate(zip(files, outcomes)):
        if outcome is None:  # cannot happen; never lose the run over it
            outcome = Outcome([], [], [f"{item.display}: internal error: no result"])
        result.files_checked += 1
        result.internal_errors.extend(outcome.errors)
        result.abandoned.extend(outcome.gave_up)
        result.file_status[item.display] = ("cached" if position in cached else
                                            "skipped by the prefilter" if outcome.skipped else
                                            "stopped by the time budget" if outcome.stopped else "analysed")
        if outcome.file_notes:
            result.file_notes[item.display] = list(outcome.file_notes)
        result.warnings.extend(outcome.warnings)
        result.notes.extend(outcome.notes)
        if outcome.stopped:
            result.stopped.append(item.display)
        for diagnostic in outcome.diagnostics:
            key = (diagnostic.path, diagnostic.cell, diagnostic.span, diagnostic.code)
            if key not in seen:
                seen.add(key)
                result.diagnostics.append(diagnostic)
    result.diagnostics.sort(key=lambda d: d.sort_key)
    return result
