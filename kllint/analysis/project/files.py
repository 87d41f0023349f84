"""The project a file belongs to and its Python files.

The project root is the nearest folder at or above the file's folder that holds a project
marker (`pyproject.toml`, `setup.py`, `setup.cfg`, `.git`); a file with none above it belongs to
its import root (the folder above its top-level package), an installed package's file to the
package's top-level folder. The files are read once per process
and kept while they are unchanged (size and modification time).
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from stat import S_ISREG

from kllint.analysis.index import package_folders
from kllint.config import DEFAULT_EXCLUDES

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
MAX_FILES = 20_000  # a project walk stops here (`ProjectFiles.truncated` says so)
MAX_FILE_BYTES = 2 * 1024 * 1024  # larger modules are not read (as `ProjectIndex.MAX_MODULE_BYTES`)
SKIPPED_FOLDERS = frozenset(DEFAULT_EXCLUDES) | {".eggs", ".ipynb_checkpoints", ".git"}


@lru_cache(maxsize=4096)
def project_root(folder: Path) -> Path:
    """The project root of a file in `folder` (an absolute, resolved folder). An installed package
    is its own project: the walk up stops below a folder of installed distributions (one holding
    `*.dist-info` metadata, such as `site-packages`) at the package's top-level folder."""
    current = folder
    while True:
        if any((current / marker).exists() for marker in ROOT_MARKERS):
            return current
        if current.parent == current:
            return package_folders(folder)[0]
        if _installs_distributions(current.parent):
            return current
        current = current.parent


@lru_cache(maxsize=256)
def _installs_distributions(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return any(entry.name.endswith(".dist-info") for entry in entries)
    except OSError:
        return False


class ProjectFiles:
    """The Python files under one project root, in a stable order (found once)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.truncated = False
        self.paths: list[Path] = []
        self._walk()

    def _walk(self) -> None:
        stack = [self.root]
        while stack:
            folder = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            folders = []
            for entry in entries:
                name = entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if name not in SKIPPED_FOLDERS and not name.startswith("."):
                            folders.append(Path(entry.path))
                    elif name.endswith(".py") and entry.is_file(follow_symlinks=False):
                        self.paths.append(Path(entry.path))
                        if len(self.paths) >= MAX_FILES:
                            self.truncated = True
                            return
                except OSError:
                    continue
            stack.extend(reversed(folders))


_TEXTS: dict[Path, tuple[tuple[int, int], str | None]] = {}


def read_text(path: Path) -> str | None:
    """The text of a project file (UTF-8, at most MAX_FILE_BYTES), None when it cannot be read;
    kept while the file's size and modification time stay the same."""
    try:
        stat = path.stat()
    except OSError:
        return None
    key = (stat.st_size, stat.st_mtime_ns)
    known = _TEXTS.get(path)
    if known is not None and known[0] == key:
        return known[1]
    text: str | None = None
    # a FIFO, a device or a socket is never opened (it may block, or never end)
    if stat.st_size <= MAX_FILE_BYTES and S_ISREG(stat.st_mode):
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            text = None
    _TEXTS[path] = (key, text)
    return text


@lru_cache(maxsize=64)
def project_files(root: Path) -> ProjectFiles:
    """The files of the project at `root` (walked once per process)."""
    return ProjectFiles(root)
