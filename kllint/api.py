"""Library entry points: `check_paths` for files and folders, `check_source` for a string."""
from __future__ import annotations

from pathlib import Path

from kllint.config import Settings
from kllint.diagnostics import Diagnostic
from kllint.discovery import discover
from kllint.engine import RunResult, run


def check_paths(paths: list[str], settings: Settings | None = None, force_exclude: bool = False) -> RunResult:
    """Check every Python file under `paths`.

    Raises:
        kllint.discovery.MissingPathError: a named path does not exist.
    """
    settings = settings or Settings()
    return run(list(discover(paths, settings, force_exclude=force_exclude)), settings)


def check_source(source: str, path: str = "<string>", settings: Settings | None = None) -> list[Diagnostic]:
    """Check one module's source text (cross-module helpers are not resolved).

    Raises:
        SyntaxError: the source does not parse.
    """
    from kllint.analysis.checker import check_source as _check

    settings = settings or Settings()
    found = _check(source, path, Path(path), settings)
    return sorted((d for d in found if d.code in settings.active_codes), key=lambda d: d.sort_key)
