"""Library entry points: `check_paths` for files and folders, `check_source` for a string."""
from __future__ import annotations

from pathlib import Path

from kllint.config import Settings
from kllint.diagnostics import Diagnostic
from kllint.pipeline.discovery import discover
from kllint.pipeline.run import RunResult, run


def check_paths(paths: list[str], settings: Settings | None = None, force_exclude: bool = False) -> RunResult:
    """Check every Python file and Jupyter notebook under `paths`.

    Raises:
        kllint.pipeline.discovery.MissingPathError: a named path does not exist.
    """
    settings = settings or Settings()
    return run(list(discover(paths, settings, force_exclude=force_exclude)), settings)


def check_source(source: str, path: str = "<string>", settings: Settings | None = None) -> list[Diagnostic]:
    """Check one module's source text (cross-module helpers are not resolved).

    When `path` names a notebook (`.ipynb`), `source` is the notebook's JSON text: its code cells
    are checked as one module and the findings are per cell (`Diagnostic.cell`); a notebook in
    another language has none.

    Raises:
        SyntaxError: the source (a notebook's code cells) does not parse.
        kllint.notebook.NotebookError: `path` names a notebook and `source` is not one.
    """
    from kllint.notebook import Notebook, is_notebook
    from kllint.rules.dispatch import check_source as _check

    settings = settings or Settings()
    notebook = Notebook.parse(source) if is_notebook(path) else None
    if is_notebook(path) and notebook is None:
        return []
    found = _check(notebook.text if notebook else source, path, Path(path), settings)
    if notebook is not None:
        found = [notebook.map_diagnostic(d, path) for d in found]
    return sorted((d for d in found if d.code in settings.active_codes), key=lambda d: d.sort_key)
