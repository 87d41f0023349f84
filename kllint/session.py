"""One `kllint check` run, behind the click command: configuration per file, discovery, analysis,
fixes, suppressions written by `--add-noqa`, baselines, reports and the exit code.

stdout carries only the chosen format (or the `--diff`); every summary, hint and progress bar
goes to stderr. Bad usage raises `UsageError` (the command prints it on one line, exit 2).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TextIO

from kllint.config import OUTPUT_FORMATS, CliOverrides, ConfigError, SettingsResolver
from kllint.console import LazyStderr
from kllint.diagnostics import Diagnostic
from kllint.pipeline.discovery import Discovered, MissingPathError, discover
from kllint.pipeline.run import RunResult, run
from kllint.output import GuardedOutput, OutputError
from kllint.output import OutputContext as _Context, render, write_stdout as _write_stdout  # noqa: F401 - API

if TYPE_CHECKING:
    from rich.console import Console

    from kllint.pipeline.cache import ResultCache

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
MACHINE_FORMATS = ("json", "sarif", "github")
PROGRESS_THRESHOLD = 200


class UsageError(Exception):
    """Bad options, configuration, paths or files: shown as one line, exit code 2."""


@dataclass(frozen=True)
class CheckOptions:
    """The options of `kllint check` (see `kllint check --help`)."""

    paths: tuple[str, ...] = (".",)
    output_format: str | None = None
    reports: tuple[str, ...] = ()
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    config: str | None = None
    isolated: bool = False
    force_exclude: bool = False
    exit_zero: bool = False
    statistics: bool = False
    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    add_noqa: bool = False
    baseline: str | None = None
    write_baseline: str | None = None
    progress: bool | None = None
    jobs: int | None = None
    no_cache: bool = False
    cache_dir: str | None = None
    confirm: bool = False
    stdin_filename: str | None = None
    quiet: bool = False
    verbose: bool = False
    show_files: bool = False
    show_settings: bool = False
    output_file: str | None = None
    exclude: tuple[str, ...] | None = None
    extend_exclude: tuple[str, ...] = ()
    show_fixes: bool = False
    exit_non_zero_on_fix: bool = False
    time_budget: float | None = None
    show_sites: bool = False


def split_codes(values: tuple[str, ...]) -> tuple[str, ...]:
    """Flatten repeated, comma-separated selector options."""
    return tuple(token.strip() for value in values for token in value.split(",") if token.strip())


def parse_report(value: str) -> tuple[str, Path]:
    """`FORMAT:PATH` of `--report`.

    Raises:
        UsageError: no colon, an unknown format or an empty path.
    """
    fmt, sep, path = value.partition(":")
    if not sep or not path:
        raise UsageError(f"--report expects FORMAT:PATH (e.g. sarif:kllint.sarif), not {value!r}")
    if fmt not in OUTPUT_FORMATS:
        raise UsageError(f"--report: unknown format {fmt!r} (choose from {', '.join(OUTPUT_FORMATS)})")
    return fmt, Path(path)


def _validate(options: CheckOptions) -> list[tuple[str, Path]]:
    if options.add_noqa and (options.fix or options.diff):
        raise UsageError("--add-noqa cannot be combined with --fix or --diff")
    if options.write_baseline and options.diff:
        raise UsageError("--write-baseline cannot be combined with --diff")
    if options.jobs is not None and options.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {options.jobs}")
    if options.time_budget is not None and not 0 <= options.time_budget < 1e9:
        raise UsageError(f"--time-budget must be a number of seconds (0: no limit), not {options.time_budget}")
    if options.no_cache and options.cache_dir:
        raise UsageError("--no-cache and --cache-dir cannot be used together")
    if options.quiet and options.verbose:
        raise UsageError("--quiet and --verbose cannot be used together")
    if options.output_format is not None and options.output_format not in OUTPUT_FORMATS:
        raise UsageError(f"unknown output format {options.output_format!r}")
    from kllint.stdin import StdinUsageError, check_usage

    try:
        check_usage(options.paths, options.stdin_filename, options.add_noqa)
    except StdinUsageError as exc:
        raise UsageError(str(exc)) from None
    reports = [parse_report(value) for value in options.reports]
    from kllint.outfiles import OutputFileError, check_target

    targets = [(path, "--report") for _fmt, path in reports]
    if options.write_baseline:
        targets.append((Path(options.write_baseline), "--write-baseline"))
    try:  # before the analysis: a path that cannot be written must not cost a whole run first
        for path, option in targets:
            check_target(path, option)
    except OutputFileError as exc:
        raise UsageError(str(exc)) from None
    return reports


def _discover(options: CheckOptions, resolver: SettingsResolver,
              notes: list[str]) -> tuple[list[Discovered], dict[str, str]]:
    """The files to check, and {display: text} of those read from stdin (kllint.stdin); folders
    that cannot be read are remarks in `notes`."""
    from kllint.stdin import STDIN, StdinUsageError, stdin_files

    try:
        if options.paths == (STDIN,):
            return stdin_files(options.stdin_filename, resolver, options.force_exclude)
        return list(discover(list(options.paths), resolver, force_exclude=options.force_exclude, notes=notes)), {}
    except (MissingPathError, ConfigError, StdinUsageError) as exc:
        raise UsageError(str(exc)) from None


def default_jobs() -> int:
    """The default of `--jobs`: the number of CPUs."""
    return max(os.cpu_count() or 1, 1)


def open_cache(options: CheckOptions, say: Callable[[str], None] | None = None) -> "ResultCache | None":
    """The result cache of this run: None with --no-cache, or when the default folder cannot be
    used (`say` tells why when the folder is not kllint's).

    Raises:
        UsageError: the --cache-dir folder cannot be used.
    """
    if options.no_cache or "-" in options.paths:
        return None
    from kllint.pipeline.cache import ForeignFolderError, ResultCache, default_directory, project_root

    directory = Path(options.cache_dir) if options.cache_dir else default_directory(options.paths)
    try:
        return ResultCache.create(directory, project_root(options.paths))
    except Exception as exc:  # noqa: BLE001 - the default cache never breaks a run
        if options.cache_dir:  # asked for by name: an error
            raise UsageError(f"--cache-dir {options.cache_dir}: {exc}") from None
        if isinstance(exc, ForeignFolderError) and say is not None:
            say(f"kllint: warning: {exc}; checking without the cache")
    return None


def _analyse(files: list[Discovered], resolver: SettingsResolver, show_progress: bool, err: Console,
             jobs: int = 1, cache: "ResultCache | None" = None, keep_index: bool = False,
             sites: bool = False) -> RunResult:
    if not show_progress:
        return run(files, resolver, jobs=jobs, cache=cache, keep_index=keep_index, sites=sites)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("checking"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err.get() if isinstance(err, LazyStderr) else err, transient=True) as bar:
        task = bar.add_task("check", total=len(files))
        return run(files, resolver, progress=lambda _item: bar.advance(task), jobs=jobs, cache=cache,
                   keep_index=keep_index, sites=sites)


def _plural(count: int, word: str) -> str:
    from kllint.views import plural

    return plural(count, word)


def _say(err: Console, message: str) -> None:
    from kllint.report.visible import visible

    # notes and errors quote paths and code of the checked files: their control characters escaped
    err.print(visible(message, newlines=True), markup=False, highlight=False, soft_wrap=True)


def _say_lines(err: Console, lines: list[str]) -> None:
    for line in lines:
        _say(err, line)


def run_check(options: CheckOptions, stdout: TextIO | None = None,
              err: Console | None = None, is_terminal: Callable[[], bool] | None = None) -> int:
    """Run `kllint check` with `options`; returns the exit code (0 clean, 1 findings remain).
    With `options.output_file`, what would go to stdout is written to that file.

    Raises:
        UsageError: invalid options, configuration, paths, baseline or report files.
    """
    from kllint.outfiles import OutputFileError, open_output

    err = err or LazyStderr()
    try:  # a failed write of the output names where it went (OutputError)
        if options.output_file is None:
            stdout = stdout or sys.stdout
            if stdout is None or getattr(stdout, "closed", False):
                raise UsageError("standard output is closed: nothing could be reported (redirect it, e.g. >/dev/null)")
            return _run_check(options, GuardedOutput(stdout, "cannot write to standard output: {}"), err, is_terminal)
        with open_output(options.output_file, "--output-file") as handle:  # as --report: folders made, atomic
            where = f"--output-file {options.output_file}: cannot write: {{}}"
            return _run_check(options, GuardedOutput(handle, where), err, is_terminal)
    except (OutputFileError, OutputError) as exc:
        raise UsageError(str(exc)) from None


def _run_check(options: CheckOptions, stdout: TextIO, err: Console,
               is_terminal: Callable[[], bool] | None = None) -> int:
    from kllint import views

    reports = _validate(options)
    try:
        resolver = SettingsResolver(
            CliOverrides(select=split_codes(options.select) if options.select else None,
                         extend_select=split_codes(options.extend_select), ignore=split_codes(options.ignore),
                         exclude=split_codes(options.exclude) if options.exclude else None,
                         extend_exclude=split_codes(options.extend_exclude), time_budget=options.time_budget),
            config=Path(options.config) if options.config else None, isolated=options.isolated)
        run_settings = resolver.for_path(Path.cwd())
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    fmt = options.output_format or run_settings.output_format or "full"
    if options.show_sites and views.sites_usage(options, fmt):
        raise UsageError(views.sites_usage(options, fmt))
    baseline = None
    if options.baseline:
        from kllint.baseline import BaselineError, load

        try:
            baseline = load(Path(options.baseline))
        except BaselineError as exc:
            raise UsageError(str(exc)) from None

    discovery_notes: list[str] = []
    files, buffers = _discover(options, resolver, discovery_notes)  # buffers: stdin's text, fixed by --fix
    if options.show_files or options.show_settings:
        try:
            from kllint.report.visible import visible

            shown = views.show_files(files) if options.show_files else views.show_settings(resolver, files)
            stdout.write(visible(shown, newlines=True))  # paths and patterns: control characters escaped
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        return EXIT_CLEAN
    for note in discovery_notes if not options.quiet else ():
        _say(err, f"kllint: {note}")
    if not files and not options.quiet:
        _say(err, f"kllint: warning: no Python files found under {', '.join(options.paths)}")
    terminal = is_terminal() if is_terminal else sys.stderr.isatty()
    show_progress = options.progress if options.progress is not None else (
        len(files) > PROGRESS_THRESHOLD and terminal and fmt not in MACHINE_FORMATS)
    jobs = options.jobs if options.jobs is not None else default_jobs()
    # the cache keeps no sites
    cache = open_cache(options, None if options.quiet else lambda line: _say(err, line)) if not options.show_sites else None
    try:
        result = _analyse(files, resolver, bool(show_progress), err, jobs=jobs, cache=cache,  # fixes analyse again
                          keep_index=not (options.fix or options.diff or options.add_noqa), sites=options.show_sites)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    # errors always; remarks (a time budget run out, ...) and warnings (unknown codes in
    # suppressions) not with -q
    for note in result.internal_errors + ([] if options.quiet else result.notes + result.warnings):
        _say(err, f"kllint: {note}")
    if options.verbose:
        _say_lines(err, [f"kllint: {line}" for line in views.verbose_lines(result)])
    errors_before = len(result.internal_errors)

    notes_before = len(result.notes)
    fixed, changed = 0, False
    fixed_list: list[Diagnostic] = []
    root = None
    if options.fix or options.diff or options.add_noqa:
        from kllint.pipeline.cache import project_root

        root = project_root(options.paths, resolve=False)  # the tree as named: links out of it stay unwritten
    if options.fix or options.diff:
        from kllint import edits

        fixed, changed = edits.apply_fixes(files, resolver, result, unsafe=options.unsafe_fixes, diff=options.diff,
                                           root=root, stdout=stdout, say=lambda line: _say(err, line),
                                           buffers=buffers, fixed_list=fixed_list)
    if buffers and options.fix and not options.diff:  # as Ruff: the fixed source on stdout, findings on stderr
        stdout.write("".join(buffers.values()))
        stdout.flush()
        stdout = GuardedOutput(err.file, "cannot write to standard error: {}")  # type: ignore[assignment]
    for note in result.internal_errors[errors_before:] + ([] if options.quiet else result.notes[notes_before:]):
        _say(err, f"kllint: {note}")
    if options.diff:
        if not options.quiet:
            _say(err, f"Would fix {_plural(fixed, 'finding')}." if fixed else "No fixes available.")
            _say_lines(err, views.unsafe_hint(result.diagnostics, options.unsafe_fixes, diff=True))
        if options.show_fixes:
            _say_lines(err, views.fix_lines(fixed_list, applied=False))
        if result.internal_errors:
            return EXIT_ERROR
        return EXIT_FINDINGS if changed else EXIT_CLEAN

    if options.write_baseline:
        from kllint.baseline import BaselineError, write

        try:
            count = write(Path(options.write_baseline), result.diagnostics)
        except BaselineError as exc:
            raise UsageError(str(exc)) from None
        _say(err, f"Wrote a baseline of {_plural(count, 'finding')} to {options.write_baseline}.")
        return EXIT_ERROR if result.internal_errors else EXIT_CLEAN

    diagnostics = result.diagnostics
    hidden: list[Diagnostic] = []
    if baseline is not None:
        diagnostics, hidden = baseline.split(diagnostics)
    if options.confirm:
        from kllint.edits import fresh_estimates

        diagnostics = confirm_findings(fresh_estimates(files, diagnostics, resolver))  # never the cache's

    if options.add_noqa:
        from kllint.edits import add_noqa

        errors_before, notes_before = len(result.internal_errors), len(result.notes)
        keep = (lambda found: baseline.split(found)[0]) if baseline is not None else (lambda found: found)
        added, skipped = add_noqa(files, diagnostics, resolver, result, root, keep)
        for note in result.internal_errors[errors_before:] + result.notes[notes_before:]:
            _say(err, f"kllint: {note}")
        _say(err, f"Added {_plural(added, 'noqa directive')}.")
        if result.internal_errors:
            return EXIT_ERROR
        return EXIT_FINDINGS if skipped else EXIT_CLEAN  # a file changed meanwhile keeps its findings

    from kllint.fix import is_applicable

    selected: set[str] = set(run_settings.active_codes)
    for settings in resolver.used():
        selected |= settings.active_codes
    context = _Context(frozenset(selected), list(result.internal_errors), buffers or None, options.unsafe_fixes,
                       result.sites if options.show_sites else None)
    fixable = [d for d in diagnostics if is_applicable(d, options.unsafe_fixes)]
    if options.statistics:  # the table is the output, as in Ruff (a failed write: OutputError, run_check)
        stdout.write(views.statistics(diagnostics, fmt, {id(d) for d in fixable}))
        stdout.flush()
    else:
        _write_stdout(fmt, diagnostics, context, stdout)
    from kllint.outfiles import OutputFileError, write_output

    for report_fmt, path in reports:
        try:
            write_output(path, render(report_fmt, diagnostics, replace(context, sites=None)), "--report")
        except OutputFileError as exc:
            raise UsageError(str(exc)) from None

    if options.show_fixes:
        _say_lines(err, views.fix_lines(fixed_list if options.fix else fixable, applied=options.fix))
    if fmt not in MACHINE_FORMATS and not options.quiet and not options.statistics:
        if fixed:
            _say(err, f"Fixed {_plural(fixed, 'finding')}.")
        if hidden:
            _say(err, f"{_plural(len(hidden), 'finding')} hidden by the baseline {options.baseline}.")
        _say(err, views.found_summary(diagnostics, result.files_checked))
        if result.abandoned:
            _say(err, f"The analysis gave up on {_plural(len(result.abandoned), 'function')} "
                      "(a finding on those paths may be missing; `-v` lists them).")
        if result.stopped:
            _say(err, f"{_plural(len(result.stopped), 'file')} not checked: the analysis ran past the time budget "
                      f"({', '.join(result.stopped[:5])}{', ...' if len(result.stopped) > 5 else ''}); "
                      "raise it with --time-budget or `time-budget`.")
        if not (options.fix or options.diff):
            if fixable:
                _say(err, f"[*] {len(fixable)} fixable with the `--fix` option.")
            _say_lines(err, views.unsafe_hint(diagnostics, options.unsafe_fixes))
    if result.internal_errors:
        return EXIT_ERROR
    if options.exit_non_zero_on_fix and changed:
        return EXIT_FINDINGS
    return EXIT_FINDINGS if diagnostics and not options.exit_zero else EXIT_CLEAN


def confirm_findings(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """`--confirm`: attach the gradient checker's verdict to each finding with an estimate
    (`kllint.gradcheck.confirm.confirm_findings`).

    Raises:
        UsageError: neither PyTorch nor JAX is installed (one line naming the extra).
    """
    from kllint.gradcheck.confirm import confirm_findings as confirm_all
    from kllint.gradcheck.errors import GradcheckError

    try:
        return confirm_all(diagnostics)
    except GradcheckError as exc:
        raise UsageError(str(exc)) from None
