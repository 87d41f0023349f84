"""A run: every file checked, in the order given, and the sorted, de-duplicated diagnostics.
Results of unchanged files come from the cache (`kllint.pipeline.cache`); with several jobs the
files to analyse go to worker processes (`kllint.pipeline.parallel`), else they are analysed
here (`kllint.pipeline.file`)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from kllint.analysis.index import IndexPerRoot, display_path, forget_package_roots
from kllint.analysis.project.callers import refresh_models
from kllint.config import Settings
from kllint.diagnostics import Diagnostic
from kllint.exit import keep_until_exit
from kllint.memory import analysis_thresholds
from kllint.pipeline.cache import cacheable
from kllint.pipeline.discovery import Discovered, safe_resolve
from kllint.pipeline.file import analyse_file
from kllint.pipeline.outcome import Outcome
from kllint.pipeline.selection import filter_found
from kllint.pipeline.source import MAX_FILE_BYTES, decode_source, read_regular

if TYPE_CHECKING:
    from kllint.pipeline.cache import ResultCache
    from kllint.pipeline.discovery import SettingsSource


@dataclass
class RunResult:
    """Diagnostics of a run, sorted; `internal_errors` are one-line notes for stderr (exit 2),
    `notes` other one-line remarks for stderr, `stopped` the files whose analysis ran out of time
    (one that ran out of memory is a KL900 and a note)."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    files_checked: int = 0
    abandoned: list[str] = field(default_factory=list)  # functions the analysis gave up on, each once (`-v`)
    # per file shown to the user: how it was handled ("analysed", "skipped by the prefilter",
    # "cached") and notes on it (e.g. an analysis abandoned, with the reason); for `-v`
    file_status: dict[str, str] = field(default_factory=dict)
    file_notes: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # shown on stderr; the exit code is unchanged
    notes: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    sites: list = field(default_factory=list)  # the KL estimates seen in the checked files (`--show-sites`)


def run(files: list[Discovered], settings: "Settings | SettingsSource",
        progress: Callable[[Discovered], None] | None = None, *, jobs: int = 1,
        cache: "ResultCache | None" = None, prefilter: bool = True, keep_index: bool = False,
        sites: bool = False) -> RunResult:
    """Check every file and return the sorted, de-duplicated diagnostics.

    `settings` is a `Settings` or a `SettingsResolver` (each file gets the closest configuration:
    `settings.for_folder` of its folder, `for_path` for text given in memory); `progress` is
    called after each file. With `jobs` > 1 and more than `kllint.pipeline.parallel.THRESHOLD`
    files to analyse that pass the prefilter, the files are analysed by a pool of worker
    processes (the output is the same as with one job).
    `cache` (a `kllint.pipeline.cache.ResultCache`) supplies the results of unchanged files and
    keeps the new ones. `prefilter=False` (for tests) analyses every file in this process.
    `keep_index`: the last project index is not freed when the run returns but held until the
    process ends, if it ends with `kllint.exit.fast_exit` (a check on the command line that
    only reports after the run: `kllint.exit.keep_until_exit`). `sites`: list the KL estimates
    seen in the checked files (`RunResult.sites`); the cache, which does not keep them, is bypassed.

    Raises:
        kllint.config.ConfigError: when a file's configuration is invalid.
    """
    forget_package_roots()
    refresh_models()
    if sites:
        cache = None
    checked = len(files)
    # the modules whose units call into the checked files, not checked themselves: analysed too,
    # for what they place in the checked files (a pre-commit run of one helper module)
    context, context_notes = context_files(files, settings) if prefilter else ([], [])
    files = list(files) + context
    # a file read from disk was found as a file (discovery): its folder's settings, without a
    # `stat` to tell it from a folder; text given in memory may name anything
    per_file = [settings.for_folder(item.path.parent) if item.content is None else settings.for_path(item.path)
                for item in files]
    outcomes: list[Outcome | None] = [None] * len(files)

    def done(position: int, outcome: Outcome) -> None:
        outcomes[position] = outcome
        if cache is not None and not outcome.errors and not outcome.stopped and cacheable(files[position]):
            cache.store(files[position], per_file[position], outcome)
        if progress is not None and position < checked:
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
            if progress is not None and position < checked:
                progress(item)
    track = cache is not None
    in_pool = False
    if prefilter and jobs > 1 and pending:  # the pool (multiprocessing) is imported only when it may serve
        from kllint.pipeline import parallel

        in_pool = (len(pending) > parallel.THRESHOLD and parallel.usable()
                   and parallel.worth_it([files[p] for p in pending]))
    if in_pool:
        parallel.analyse([parallel.Task(p, files[p], per_file[p]) for p in pending], jobs, track, done, sites)
    else:
        indexes = IndexPerRoot()
        with analysis_thresholds():
            for position in pending:
                index = indexes.for_file(files[position].path)
                outcome = analyse_file(files[position], per_file[position], index, track, prefilter, sites)
                if outcome.stopped:
                    indexes.drop()
                done(position, outcome)
        if keep_index:
            keep_until_exit(indexes)

    if cache is not None:
        cache.flush()
    place_foreign_findings(files[:checked], per_file, outcomes)
    result = RunResult(notes=context_notes)
    seen: set[tuple] = set()
    abandoned: set[str] = set()
    for position, (item, outcome) in enumerate(zip(files[:checked], outcomes)):
        if outcome is None:  # cannot happen; never lose the run over it
            outcome = Outcome([], [], [f"{item.display}: internal error: no result"])
        result.files_checked += 1
        result.internal_errors.extend(outcome.errors)
        # a helper of another module cut in the analysis of several files: one line, counted once
        result.abandoned.extend(note for note in dict.fromkeys(outcome.gave_up) if note not in abandoned)
        abandoned.update(outcome.gave_up)
        result.file_status[item.display] = ("cached" if position in cached else
                                            "skipped by the prefilter" if outcome.skipped else
                                            f"stopped by the {outcome.stop_reason}" if outcome.stopped else "analysed")
        if outcome.file_notes:
            result.file_notes[item.display] = list(outcome.file_notes)
        result.warnings.extend(outcome.warnings)
        result.notes.extend(outcome.notes)
        if outcome.stopped and outcome.stop_reason == "time budget":  # the summary's advice: raise --time-budget
            result.stopped.append(item.display)
        for diagnostic in outcome.diagnostics:
            key = (diagnostic.path, diagnostic.cell, diagnostic.span, diagnostic.code)
            if key not in seen:
                seen.add(key)
                result.diagnostics.append(diagnostic)
    result.diagnostics.sort(key=lambda d: d.sort_key)
    if sites:
        from kllint.sites import merge_sites

        result.sites = merge_sites(_sites_in(files[:checked], outcomes))
    return result


def _sites_in(files: list[Discovered], outcomes: list["Outcome | None"]) -> list:
    """The sites the analyses saw in the checked files, under the checked files' displays (a
    site in a helper is seen by its callers' analyses under a display relative to the current
    folder, the helper given by an absolute path is displayed so)."""
    displays = {item.display for item in files}
    by_real = {os.path.realpath(item.path): item.display for item in files if item.content is None}
    found = []
    for outcome in outcomes:
        for site in outcome.sites if outcome is not None else ():
            if site.path in displays:
                found.append(site)
            elif os.path.realpath(site.path) in by_real:
                found.append(replace(site, path=by_real[os.path.realpath(site.path)]))
    return found


def place_foreign_findings(files: list[Discovered], per_file: list[Settings], outcomes: list["Outcome | None"]) -> None:
    """Add to each checked file the findings other files' analyses placed in it (an estimate its
    helper writes, judged by what a caller does with it), then select and suppress its findings
    again with its own text and settings. `outcomes` may be longer than `files` (context files)."""
    where: dict[str, int] | None = None  # checked files by real path, built when needed
    placed: dict[int, list[Diagnostic]] = {}
    for outcome in outcomes:
        for diagnostic in outcome.foreign if outcome is not None else ():
            if where is None:
                where = {os.path.realpath(item.path): position for position, item in enumerate(files)
                         if item.content is None}
            position = where.get(diagnostic.path)  # foreign findings carry the real path
            # a checked file let go by the prefilter (a helper whose code names no KL: its
            # caller's analysis decides) takes them too; unreadable or unparsable ones do not
            target = outcomes[position] if position is not None else None
            if target is not None and (target.filtered or target.skipped) and not target.errors:
                placed.setdefault(position, []).append(replace(diagnostic, path=files[position].display))
    for position, extra in placed.items():
        outcome = outcomes[position]
        keys = {(d.code, d.cell, d.span) for d in outcome.found}
        added = [d for d in extra if (d.code, d.cell, d.span) not in keys and not keys.add((d.code, d.cell, d.span))]
        if not added:
            continue
        item = files[position]
        found = sorted(outcome.found + added, key=lambda d: d.sort_key)
        text = _text_of(item)
        warnings: list[str] = []
        outcome.found = found
        outcome.diagnostics = filter_found(found, text, item.display, per_file[position], item.path, warnings)


def _text_of(item: Discovered) -> str | None:
    """The text of a checked file, for its suppressions (None when it cannot be read again)."""
    try:
        raw = item.content if item.content is not None else read_regular(item.path, MAX_FILE_BYTES)
        return decode_source(raw)
    except (OSError, UnicodeDecodeError, LookupError, SyntaxError, ValueError, RuntimeError):
        return None


def context_files(files: list[Discovered], settings: "Settings | SettingsSource") -> tuple[list[Discovered], list[str]]:
    """The project modules, not among `files`, holding units that call into the checked files
    (`kllint.analysis.project.callers.upstream_files`; none when the run checks whole projects),
    and the notes of searches a limit cut."""
    from kllint.analysis.project.callers import upstream_files

    named = {safe_resolve(item.path) for item in files if item.content is None}
    sources = [item.path for item in files if item.content is None and item.path.suffix == ".py"]
    try:
        upstream, notes = upstream_files(sources, named, getattr(settings, "vocab", None))
    except (OSError, RuntimeError):  # a symbolic link loop, an unreadable folder: no context
        return [], []
    return [Discovered(path, display_path(path)) for path in upstream], notes
