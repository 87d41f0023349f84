"""Command-line interface (click). Commands only; the logic lives in api, engine and report."""
from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import click
from rich.console import Console

from kllint import __version__
from kllint.config import ConfigError, Settings, find_config, load_file
from kllint.discovery import MissingPathError
from kllint.rules.registry import BY_CODE, RULES, rule_page, select_codes

OUTPUT_FORMATS = ("full", "concise", "json")
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _stderr() -> Console:
    return Console(stderr=True, no_color=bool(os.environ.get("NO_COLOR")), highlight=False)


def _fail(message: str) -> "NoReturn":  # type: ignore[name-defined]
    _stderr().print(f"kllint: error: {message}", markup=False, highlight=False)
    sys.exit(EXIT_ERROR)


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(token for value in values for token in value.split(",") if token.strip())


def _load_settings(paths: tuple[str, ...], config: str | None, isolated: bool) -> Settings:
    if isolated:
        return Settings()
    if config:
        loaded = load_file(Path(config))
        return loaded or Settings(source=Path(config))
    start = Path(paths[0]) if paths else Path.cwd()
    found = find_config(start.resolve() if start.exists() else Path.cwd())
    if found is None:
        return Settings()
    return load_file(found) or Settings()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kllint")
def cli() -> None:
    """kllint: find KL-divergence gradient pitfalls in RL training code (PyTorch and JAX)."""


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default=None,
              help="How findings are printed on stdout (default: full).")
@click.option("--select", multiple=True, help="Codes, prefixes (KL1) or names to enable (comma-separated).")
@click.option("--extend-select", multiple=True, help="Codes to enable on top of the configured ones.")
@click.option("--ignore", multiple=True, help="Codes, prefixes or names to disable (comma-separated).")
@click.option("--config", type=click.Path(), default=None, help="Use this pyproject.toml or kllint.toml.")
@click.option("--isolated", is_flag=True, help="Ignore all configuration files.")
@click.option("--force-exclude", is_flag=True, help="Apply excludes to files named on the command line too.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain.")
@click.option("--statistics", is_flag=True, help="Print the number of findings per code to stderr.")
def check(paths: tuple[str, ...], output_format: str | None, select: tuple[str, ...],
          extend_select: tuple[str, ...], ignore: tuple[str, ...], config: str | None, isolated: bool,
          force_exclude: bool, exit_zero: bool, statistics: bool) -> None:
    """Check Python files and folders (default: the current folder) for KL gradient pitfalls.

    Exit codes: 0 no findings, 1 findings, 2 usage, configuration or internal error.
    """
    from kllint.api import check_paths

    paths = paths or (".",)
    try:
        settings = _load_settings(paths, config, isolated)
        overrides = {}
        if select:
            overrides["select"] = _split(select)
        if extend_select:
            overrides["extend_select"] = settings.extend_select + _split(extend_select)
        if ignore:
            overrides["ignore"] = settings.ignore + _split(ignore)
        settings = settings.with_overrides(**overrides)
        select_codes(settings.select, settings.ignore, settings.extend_select)
    except ConfigError as exc:
        _fail(str(exc))
    except ValueError as exc:
        _fail(str(exc))
    fmt = output_format or settings.output_format or "full"
    if fmt not in OUTPUT_FORMATS:
        _fail(f"unknown output format {fmt!r} (choose from {', '.join(OUTPUT_FORMATS)})")
    try:
        result = check_paths(list(paths), settings, force_exclude=force_exclude)
    except MissingPathError as exc:
        _fail(str(exc))
    err = _stderr()
    for note in result.internal_errors:
        err.print(f"kllint: {note}", markup=False, highlight=False)
    diagnostics = result.diagnostics
    if fmt == "json":
        from kllint.report import json as report_json

        sys.stdout.write(report_json.render(diagnostics))
    elif fmt == "concise":
        from kllint.report import concise

        sys.stdout.write(concise.render(diagnostics))
    else:
        from kllint.report import text

        out = Console(no_color=bool(os.environ.get("NO_COLOR")), highlight=False,
                      width=None if sys.stdout.isatty() else 200, soft_wrap=not sys.stdout.isatty())
        text.render(diagnostics, out)
    if statistics:
        for code, count in sorted(Counter(d.code for d in diagnostics).items()):
            err.print(f"{count:6d}  {code}  {BY_CODE[code].name}", markup=False, highlight=False)
    if fmt in ("full", "concise"):
        plural = "s" if len(diagnostics) != 1 else ""
        err.print(f"Found {len(diagnostics)} finding{plural} in {result.files_checked} files.",
                  markup=False, highlight=False)
    if result.internal_errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if diagnostics and not exit_zero else EXIT_CLEAN)


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


@cli.command(name="rules")
def list_rules() -> None:
    """List every rule: code, name and one-line summary."""
    width = max(len(r.name) for r in RULES)
    for info in RULES:
        click.echo(f"{info.code}  {info.name:<{width}}  {info.summary}")


def main() -> None:
    """Console-script entry point; turns unexpected errors into exit code 2 without a traceback."""
    try:
        cli(standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(EXIT_ERROR)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001
        _fail(f"internal error: {type(exc).__name__}: {exc}")
