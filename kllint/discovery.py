"""Find the Python files to check: walk directories, honour excludes and `.gitignore` (pathspec).

Settings may differ per folder (the closest configuration file wins): `discover` asks
`settings.for_path(folder)` for each folder it walks, so it accepts a plain `Settings` (one
configuration for everything) or a `kllint.config.SettingsResolver`. Exclude patterns are
gitignore-style and relative to the folder of the configuration file that declares them (the
current folder when there is none); a pattern without a slash matches a name at any depth.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Protocol

import pathspec

from kllint.config import Settings

PYTHON_SUFFIXES = (".py", ".pyi", ".ipynb")  # notebooks: kllint.notebook


class MissingPathError(Exception):
    """A path named on the command line does not exist."""


class SettingsSource(Protocol):
    """`Settings` or `SettingsResolver`: anything that gives the settings of a path."""

    def for_path(self, path: Path) -> Settings: ...


@dataclass(frozen=True)
class Discovered:
    """A file to check, with the path as shown to the user.

    `content` holds the file's bytes when they come from elsewhere than `path` (`kllint check -`
    reads stdin; an editor's unsaved buffer): then `path` is only used for the configuration
    lookup, module resolution and the cache is not used.
    """

    path: Path
    display: str
    content: bytes | None = field(default=None, compare=False, repr=False)


@lru_cache(maxsize=256)
def _spec(patterns: tuple[str, ...]) -> pathspec.PathSpec:
    return pathspec.GitIgnoreSpec.from_lines(patterns)


def _exclude_spec(settings: Settings) -> pathspec.PathSpec:
    return _spec(tuple(settings.exclude) + tuple(settings.extend_exclude))


def _gitignore_spec(folder: Path) -> pathspec.PathSpec | None:
    ignore_file = folder / ".gitignore"
    if not ignore_file.is_file():
        return None
    try:
        lines = ignore_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _display(path: Path, cwd: Path) -> str:
    try:
        return path.relative_to(cwd).as_posix()
    except ValueError:
        return path.as_posix()


def _matches(spec: pathspec.PathSpec, rel: str, is_dir: bool, anchored: bool) -> bool:
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if not parts:
        return False
    suffix = "/" if is_dir else ""
    starts = range(1) if anchored else range(len(parts))
    if any(spec.match_file("/".join(parts[i:]) + suffix) for i in starts):
        return True
    return any(spec.match_file("/".join(parts[i:j]) + "/") for i in starts for j in range(i + 1, len(parts)))


def is_excluded(path: Path, settings: Settings, root: Path | None = None, is_dir: bool | None = None) -> bool:
    """Whether `path` matches an exclude pattern of `settings`.

    The path is matched relative to `root` (default: the folder of the configuration file, else
    the current folder), and so is every folder above it. A path outside `root` is matched by
    each of its trailing parts instead.
    """
    spec = _exclude_spec(settings)
    base = (root or settings.root or Path.cwd()).resolve()
    resolved = path.resolve()
    try:
        rel, anchored = resolved.relative_to(base).as_posix(), True
    except ValueError:
        rel, anchored = path.as_posix(), False
    if is_dir is None:
        is_dir = resolved.is_dir()
    return _matches(spec, rel, is_dir, anchored)


def discover(paths: list[str], settings: SettingsSource, force_exclude: bool = False,
             cwd: Path | None = None) -> Iterator[Discovered]:
    """Yield the Python files under `paths`, sorted per directory, without duplicates.

    Files and folders named explicitly are always checked, even under an excluded folder such
    as `build/` or `venv/`, unless `force_exclude` applies the excludes to them too (the
    pre-commit hook passes `--force-exclude`); the excludes always apply to what is discovered
    below a named folder. `settings` is a `Settings` or a
    `SettingsResolver`; each folder is judged by the settings of its closest configuration.

    Raises:
        MissingPathError: when a named path does not exist.
        kllint.config.ConfigError: when a configuration file met on the way is invalid.
    """
    cwd = (cwd or Path.cwd()).resolve()
    seen: set[Path] = set()
    for raw in paths:
        start = Path(raw)
        if not start.exists():
            raise MissingPathError(f"{raw}: no such file or directory")
        if start.is_file():
            resolved = start.resolve()
            if resolved in seen:
                continue
            if force_exclude:
                own = settings.for_path(resolved)
                if is_excluded(start, own, own.root or cwd, is_dir=False):
                    continue
            seen.add(resolved)
            yield Discovered(start, _display(resolved, cwd) if not start.is_absolute() else start.as_posix())
            continue
        own = settings.for_path(start.resolve())
        named_excluded = is_excluded(start, own, own.root or cwd, is_dir=True)
        if force_exclude and named_excluded:
            continue
        # a folder named on the command line is checked even if an exclude (`build`, `venv`)
        # matches it or a folder above it: below it, the patterns apply relative to it
        ignores: list[tuple[Path, pathspec.PathSpec]] = []
        for folder, dirnames, filenames in os.walk(start):
            here = Path(folder)
            here_resolved = here.resolve()
            local = settings.for_path(here_resolved)
            spec = _exclude_spec(local)
            try:
                here_rel = None if named_excluded else (
                    here_resolved.relative_to((local.root or cwd).resolve()).as_posix())
            except ValueError:
                here_rel = None
            if local.respect_gitignore:
                ignores = [(base, s) for base, s in ignores if base == here or base in here.parents]
                own_ignore = _gitignore_spec(here)
                if own_ignore is not None:
                    ignores.append((here, own_ignore))
            else:
                ignores = []

            def skipped(name: str, is_dir: bool) -> bool:
                suffix = "/" if is_dir else ""
                if here_rel is not None:  # relative to the configuration's folder
                    rel_to_root = name if here_rel in ("", ".") else f"{here_rel}/{name}"
                    if spec.match_file(rel_to_root + suffix):
                        return True
                elif spec.match_file(name + suffix) or spec.match_file(
                        (here / name).relative_to(start).as_posix() + suffix):
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
                # one realpath per folder; a file that is itself a symlink is resolved on its own
                resolved = path.resolve() if os.path.islink(path) else here_resolved / name
                if resolved in seen:
                    continue
                seen.add(resolved)
                yield Discovered(path, _display(resolved, cwd) if not start.is_absolute() else path.as_posix())
