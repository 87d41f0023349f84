"""Repository-relative locations for the CI formats (SARIF, GitHub annotations).

Code scanning and annotations want paths relative to the repository root, whatever folder
kllint ran in: the root is the closest folder upwards with `.git` (the current folder if none).
"""
from __future__ import annotations

import os
from pathlib import Path


def source_root(cwd: Path | None = None) -> Path:
    """The repository root above `cwd` (a folder holding `.git`), else `cwd` itself."""
    start = (cwd or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if os.path.exists(folder / ".git"):
            return folder
    return start


def relative_to_root(display: str, root: Path, cwd: Path | None = None) -> str | None:
    """The POSIX path of `display` (as reported, relative to `cwd`) relative to `root`.

    None when the file lies outside `root`.
    """
    cwd = cwd or Path.cwd()
    absolute = Path(os.path.abspath(Path(display) if Path(display).is_absolute() else cwd / display))
    try:
        return absolute.relative_to(Path(os.path.abspath(root))).as_posix()
    except ValueError:
        return None


def location(path: str, line: int, column: int, cell: int | None = None) -> str:
    """`path:line:column`, or `path:cell N:line:column` in a notebook (as Ruff shows it)."""
    return f"{path}:cell {cell}:{line}:{column}" if cell is not None else f"{path}:{line}:{column}"


def file_region(path: str, cell: int | None, line: int, column: int, end_line: int | None = None,
                end_column: int | None = None, cwd: Path | None = None,
                cache: dict | None = None) -> tuple[int, int, int, int]:
    """The region in the file's own lines: a notebook cell's position becomes the position in
    the notebook's JSON text (line 1, column 1 when it cannot be placed); other files are as given.
    Returns (line, column, end line, end column); the end defaults to one column after the start.
    `cache` keeps the notebooks read during one report."""
    end_line = line if end_line is None else end_line
    end_column = column + 1 if end_column is None else end_column
    if cell is None:
        return line, column, end_line, end_column
    from kllint.notebook import read_notebook

    absolute = Path(path) if Path(path).is_absolute() else (cwd or Path.cwd()) / path
    cache = {} if cache is None else cache
    if absolute not in cache:
        cache[absolute] = read_notebook(absolute)
    notebook = cache[absolute]
    start = notebook.file_position(cell, line, column) if notebook else None
    if start is None:
        return 1, 1, 1, 2
    end = notebook.file_position(cell, end_line, end_column) if notebook else None
    if end is None or end < start:
        end = (start[0], start[1] + 1)
    return start[0], start[1], end[0], end[1]
