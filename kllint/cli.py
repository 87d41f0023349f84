"""Command-line interface (click). Commands only; the logic lives in session, api, pipeline and report."""
from __future__ import annotations

import signal
import sys
from typing import NoReturn

import click

from kllint import __version__
from kllint.config import OUTPUT_FORMATS
from kllint.console import stderr_console
from kllint.exit import exits_fast, fast_exit
from kllint.report.visible import visible
from kllint.rules.registry import BY_CODE, RULES, rule_page

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _fail(message: str) -> NoReturn:
    try:
        stderr_console().print(visible(f"kllint: error: {message}", newlines=True), markup=False,
                               highlight=False, soft_wrap=True)
    except (OSError, ValueError, AttributeError):  # stderr closed
        pass
    sys.exit(EXIT_ERROR)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kllint")
def cli() -> None:
    """kllint: find KL-divergence gradient pitfalls in RL training code (PyTorch and JAX)."""


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default=None,
              help="How findings are printed on stdout (default: full, or `output-format` in the configuration).")
@click.option("--report", "reports", multiple=True, metavar="FORMAT:PATH",
              help="Also write the findings in FORMAT to PATH (repeatable), e.g. sarif:kllint.sarif.")
@click.option("--select", multiple=True, help="Codes, prefixes (KL1) or names to enable (comma-separated).")
@click.option("--extend-select", multiple=True, help="Codes to enable on top of the configured ones.")
@click.option("--ignore", multiple=True, help="Codes, prefixes or names to disable (comma-separated).")
@click.option("--config", type=click.Path(), default=None,
              help="Use this pyproject.toml or kllint.toml for every file (no closest-file lookup).")
@click.option("--isolated", is_flag=True, help="Ignore all configuration files.")
@click.option("--force-exclude", is_flag=True, help="Apply excludes to files named on the command line too.")
@click.option("--fix", is_flag=True, help="Apply safe fixes, then report what remains.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff, apply unsafe fixes too.")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff instead of writing them (exit 1 if any).")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` comments for the current findings.")
@click.option("--baseline", type=click.Path(), default=None,
              help="Report only findings not recorded in this baseline file.")
@click.option("--write-baseline", type=click.Path(), default=None,
              help="Record the current findings in this baseline file and exit 0.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain.")
@click.option("--statistics", is_flag=True, help="Print the number of findings per code (a table, instead of the findings).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Analyse with N worker processes when more than 8 files need analysis (default: the number of CPUs).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache (.kllint_cache).")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Keep the result cache in this folder (default: .kllint_cache in the project root).")
@click.option("--time-budget", type=float, default=None, metavar="SECONDS",
              help="Stop the analysis of a file after SECONDS of CPU time (default: 60, or `time-budget`; 0: no limit).")
@click.option("--confirm", is_flag=True,
              help="Confirm each finding with the runtime gradient checker (needs the torch or the jax extra "
                   "of kllint). WARNING: this evaluates the estimate expressions of your code.")
@click.option("--stdin-filename", default=None, metavar="PATH",
              help="With `-` (read the source from stdin): the file's path, for configuration, module "
                   "resolution and the reported path.")
@click.option("-q", "--quiet", is_flag=True, help="Print the findings and errors only: no summary or hints on stderr.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also list on stderr each file analysed, skipped by the prefilter or cached, and analyses abandoned.")
@click.option("--show-files", is_flag=True, help="Print the files that would be checked, then exit 0.")
@click.option("--show-settings", is_flag=True,
              help="Print the settings that apply to the first file found (or the current folder), then exit 0.")
@click.option("-o", "--output-file", type=click.Path(), default=None,
              help="Write the output (the chosen format, --statistics or --diff) to this file instead of stdout.")
@click.option("--exclude", multiple=True, metavar="PATTERN",
              help="Exclude these gitignore-style patterns (comma-separated; replaces `exclude` of the configuration).")
@click.option("--extend-exclude", multiple=True, metavar="PATTERN",
              help="Exclude these patterns in addition to the configured ones (comma-separated).")
@click.option("--show-fixes", is_flag=True,
              help="List the findings fixed (with --fix) or that --fix would fix, on stderr.")
@click.option("--exit-non-zero-on-fix", is_flag=True,
              help="With --fix, exit 1 when a file was changed, even if no finding remains.")
@click.option("--show-sites", is_flag=True,
              help="After the findings, list every KL estimate the analysis saw: its place, estimator, fate "
                   "(loss, reward, metric or unknown), verdict and the evidence for each role. With "
                   "--output-format json the output becomes {\"findings\": [...], \"sites\": [...], "
                   "\"summary\": {...}}. Bypasses the cache.")
def check(paths: tuple[str, ...], output_format: str | None, reports: tuple[str, ...], select: tuple[str, ...],
          extend_select: tuple[str, ...], ignore: tuple[str, ...], config: str | None, isolated: bool,
          force_exclude: bool, fix: bool, unsafe_fixes: bool, diff: bool, add_noqa: bool,
          baseline: str | None, write_baseline: str | None, exit_zero: bool, statistics: bool,
          jobs: int | None, no_cache: bool, cache_dir: str | None, time_budget: float | None,
          confirm: bool, stdin_filename: str | None = None, quiet: bool = False,
          verbose: bool = False, show_files: bool = False, show_settings: bool = False,
          output_file: str | None = None, exclude: tuple[str, ...] = (), extend_exclude: tuple[str, ...] = (),
          show_fixes: bool = False, exit_non_zero_on_fix: bool = False, show_sites: bool = False) -> None:
    """Check Python files and folders (default: the current folder) for KL gradient pitfalls.

    Exit codes: 0 no findings (or all fixed), 1 findings remain, 2 usage, configuration or
    internal error. `-` reads the source from stdin (see --stdin-filename).
    """
    from kllint.session import CheckOptions, UsageError, run_check

    options = CheckOptions(
        paths=paths or (("-",) if stdin_filename else (".",)), stdin_filename=stdin_filename,
        output_format=output_format, reports=reports,
        select=select or None, extend_select=extend_select, ignore=ignore, config=config,
        isolated=isolated, force_exclude=force_exclude, exit_zero=exit_zero, statistics=statistics,
        fix=fix, unsafe_fixes=unsafe_fixes, diff=diff, add_noqa=add_noqa, baseline=baseline,
        write_baseline=write_baseline, jobs=jobs, no_cache=no_cache, cache_dir=cache_dir, confirm=confirm,
        quiet=quiet, verbose=verbose, show_files=show_files, show_settings=show_settings, output_file=output_file,
        exclude=exclude or None, extend_exclude=extend_exclude, show_fixes=show_fixes,
        exit_non_zero_on_fix=exit_non_zero_on_fix, time_budget=time_budget, show_sites=show_sites,
    )
    try:
        code = run_check(options)
    except UsageError as exc:
        _fail(str(exc))
    sys.exit(code)


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="The cache folder to remove (default: .kllint_cache in the project root).")
def clean(paths: tuple[str, ...], cache_dir: str | None) -> None:
    """Remove the result cache (.kllint_cache in the project root of PATHS, default: the current folder)."""
    from kllint.clean import run_clean
    from kllint.session import UsageError

    try:
        lines = run_clean(paths or (".",), cache_dir)
    except UsageError as exc:
        _fail(str(exc))
    for line in lines:
        stderr_console().print(line, markup=False, highlight=False, soft_wrap=True)


@cli.command()
@click.argument("code")
def rule(code: str) -> None:
    """Print the documentation page of a rule (code or name)."""
    from kllint.rules.registry import BY_NAME

    info = BY_CODE.get(code.upper()) or BY_NAME.get(code)
    if info is None:
        _fail(f"unknown rule {code!r}; `kllint rules` lists them")
    try:
        click.echo(rule_page(info.code), nl=False)
    except KeyError:
        _fail(f"the page of {info.code} is missing from this installation")


@cli.command()
def server() -> int:
    """Run the language server over stdio, for editors (needs the `server` extra: pygls)."""
    try:
        import pygls  # noqa: F401
    except ImportError:
        _fail("the language server needs pygls: pip install 'pygls>=2,<3' (kllint's `server` extra)")
    from kllint.server import serve

    return serve()  # 0 after a `shutdown` request, else 1 (LSP)


@cli.command(name="rules")
@click.option("--output-format", type=click.Choice(("text", "json")), default="text", show_default=True,
              help="A table for people, or a JSON array of {code, name, severity, summary, default}.")
def list_rules(output_format: str) -> None:
    """List every rule: code, name and one-line summary (opt-in rules are marked)."""
    from kllint.rules.registry import OPT_IN

    if output_format == "json":
        import json

        click.echo(json.dumps([{"code": r.code, "name": r.name, "severity": r.severity, "summary": r.summary,
                                "default": r.code not in OPT_IN} for r in RULES], indent=2))
        return
    width = max(len(r.name) for r in RULES)
    for info in RULES:
        opt_in = "  (opt-in)" if info.code in OPT_IN else ""
        click.echo(f"{info.code}  {info.name:<{width}}  {info.summary}{opt_in}")


def _register_gradcheck() -> None:
    from kllint.gradcheck.command import gradcheck

    cli.add_command(gradcheck)


_register_gradcheck()


EXIT_SIGINT, EXIT_SIGTERM = 130, 143


def _on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(EXIT_SIGTERM)  # unwinds like Ctrl+C: the worker pool is terminated and reaped


def _one_line(exc: click.ClickException) -> str:
    message = " ".join(exc.format_message().split())
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        message += f" (see `{exc.ctx.command_path} --help`)"
    return message


def main() -> None:
    """Console-script entry point: no traceback ever. Usage errors are one line (exit 2),
    unexpected errors `internal error: ...` (exit 2), Ctrl+C exits 130 and SIGTERM 143."""
    exits_fast()
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError):  # not the main thread, or no SIGTERM
        pass
    code: object = EXIT_ERROR
    try:
        try:
            code = cli(standalone_mode=False)
        except (KeyboardInterrupt, click.exceptions.Abort):
            code = EXIT_SIGINT
        except click.exceptions.NoArgsIsHelpError as exc:  # bare `kllint`: the help, as written
            _stderr_line(exc.format_message())
            code = EXIT_ERROR
        except click.ClickException as exc:
            _stderr_line(f"kllint: error: {_one_line(exc)}")
            code = EXIT_ERROR
        except RecursionError:
            _stderr_line("kllint: error: internal error: RecursionError (input nested too deeply)")
            code = EXIT_ERROR
        except Exception as exc:  # noqa: BLE001
            from kllint.pipeline.failure import describe  # bounded: never formats what the exception holds

            _stderr_line(f"kllint: error: internal error: {describe(exc)}")
            code = EXIT_ERROR
    except SystemExit as done:
        code = done.code
        if isinstance(code, str):
            _stderr_line(code)
    except KeyboardInterrupt:
        code = EXIT_SIGINT
    fast_exit(code)


def _stderr_line(line: str) -> None:
    """One line on stderr, even when stderr is closed or cannot encode it."""
    try:
        stream = sys.stderr
        if stream is None:
            return
        line = visible(line, newlines=True)
        stream.write(line.encode(getattr(stream, "encoding", None) or "utf-8", "backslashreplace")
                     .decode(getattr(stream, "encoding", None) or "utf-8", "replace") + "\n")
        stream.flush()
    except (OSError, ValueError, AttributeError, LookupError):
        pass
