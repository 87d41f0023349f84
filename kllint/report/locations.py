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
        if (folder / ".git").exists():
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
