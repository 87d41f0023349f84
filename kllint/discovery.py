"""Find the Python files to check: walk directories, honour excludes and `.gitignore` (pathspec)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pathspec

from kllint.config import Settings

PYTHON_SUFFIXES = (".py", ".pyi")


class MissingPathError(Exception):
    """A path named on the command line does not exist."""


@dataclass(frozen=True)
class Discovered:
    """A file to check, with the path as shown to the user."""

    path: Path
    display: str


def _exclude_spec(settings: Settings) -> pathspec.PathSpec:
    return pathspec.PathSpec.from_lines("gitwildmatch", settings.exclude + settings.extend_exclude)


def _gitignore_spec(folder: Path) -> pathspec.PathSpec | None:
    ignore_file = folder / ".gitignore"
    if not ignore_file.is_file():
        return None
    try:
        lines = ignore_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.PathSpec.from_lines("gitwildmatch", lines)


def _display(path: Path, cwd: Path) -> str:
    try:
        return path.relative_to(cwd).as_posix()
    except ValueError:
        return path.as_posix()


def is_excluded(path: Path, settings: Settings, root: Path) -> bool:
    """Whether `path` matches an exclude pattern (relative to `root`, any of its parts)."""
    spec = _exclude_spec(settings)
    try:
        rel = path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        rel = path.as_posix()
    parts = rel.split("/")
    return any(spec.match_file("/".join(parts[i:])) for i in range(len(parts))) or any(
        spec.match_file(part + "/") for part in parts[:-1]
    )


def discover(paths: list[str], settings: Settings, force_exclude: bool = False,
             cwd: Path | None = None) -> Iterator[Discovered]:
    """Yield the Python files under `paths`, sorted per directory, without duplicates.

    Files named explicitly are always checked unless `force_exclude` applies the excludes to
    them too (the pre-commit hook passes `--force-exclude`).

    Raises:
        MissingPathError: when a named path does not exist.
    """
    cwd = (cwd or Path.cwd()).resolve()
    spec = _exclude_spec(settings)
    seen: set[Path] = set()
    for raw in paths:
        start = Path(raw)
        if not start.exists():
            raise MissingPathError(f"{raw}: no such file or directory")
        if start.is_file():
            resolved = start.resolve()
            if resolved in seen:
                continue
            if force_exclude and is_excluded(start, settings, cwd):
                continue
            seen.add(resolved)
            yield Discovered(start, _display(start.resolve(), cwd) if not start.is_absolute() else start.as_posix())
            continue
        ignores: list[tuple[Path, pathspec.PathSpec]] = []
        for folder, dirnames, filenames in os.walk(start):
            here = Path(folder)
            if settings.respect_gitignore:
                ignores = [(base, s) for base, s in ignores if base == here or base in here.parents]
                own = _gitignore_spec(here)
                if own is not None:
                    ignores.append((here, own))

            def skipped(name: str, is_dir: bool) -> bool:
                suffix = "/" if is_dir else ""
                if spec.match_file(name + suffix):
                    return True
                rel_to_start = (here / name).relative_to(start).as_posix() + suffix
                if spec.match_file(rel_to_start):
                    return True
                for base, ignore in ignores:
                    if ignore.match_file((here / name).relative_to(base).as_posix() + suffix):
                        return True
                return False

            dirnames[:] = sorted(d for d in dirnames if not skipped(d, True))
            for name in sorted(filenames):
                if not name.endswith(PYTHON_SUFFIXES) or skipped(name, False):
                    continue
                path = here / name
                resolved = path.resolve()
                if resolved in seen:
                    continue
                seen.add(resolved)
                yield Discovered(path, _display(resolved, cwd) if not start.is_absolute() else path.as_posix())
