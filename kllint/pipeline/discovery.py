"""Find the Python files to check: walk directories, honour excludes and `.gitignore` (pathspec).

Settings may differ per folder (the closest configuration file wins): `discover` asks
`settings.for_path(folder)` for each folder it walks, so it accepts a plain `Settings` (one
configuration for everything) or a `kllint.config.SettingsResolver`. Exclude patterns are
gitignore-style and relative to the folder of the configuration file that declares them (the
current folder when there is none); a pattern without a slash matches a name at any depth.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

from kllint.config import Settings

if TYPE_CHECKING:
    import pathspec

PYTHON_SUFFIXES = (".py", ".pyi", ".ipynb")  # notebooks: kllint.notebook


class MissingPathError(Exception):
    """A path named on the command line does not exist."""


class SettingsSource(Protocol):
    """`Settings` or `SettingsResolver`: anything that gives the settings of a path."""

    def for_path(self, path: Path) -> Settings: ...

    def for_folder(self, folder: Path, real_folder: Path | None = None) -> Settings: ...


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


# pathspec is imported where a pattern is matched, not at the top: importing it (it pulls in
# asyncio) costs about a fifth of a pre-commit run's start-up, and a run over named files or a
# walk that meets no excluded name and no `.gitignore` never needs it while the excludes are
# plain names (the default ones: `_plain_names`)
@lru_cache(maxsize=256)
def _spec(patterns: tuple[str, ...]) -> pathspec.PathSpec:
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(patterns)


_PLAIN_NAME = re.compile(r"\.?[A-Za-z0-9_][A-Za-z0-9._-]*")


@lru_cache(maxsize=256)
def _plain_names(patterns: tuple[str, ...]) -> frozenset[str] | None:
    """The patterns as a set of names when every one is a plain file or folder name (letters,
    digits, `.`, `_`, `-`; no slash, wildcard, escape or negation), else None. Gitignore matches
    such a pattern against whole path components only, so a path none of whose components is one
    of the names matches none of the patterns."""
    if all(_PLAIN_NAME.fullmatch(pattern) for pattern in patterns):
        return frozenset(patterns)
    return None


class _Excludes:
    """The exclude patterns of one folder's settings, matched like `pathspec` matches them; while
    the patterns are plain names (the default ones) and no part of a path is one of them, the
    answer (no match) needs no `pathspec`, so a walk that meets no excluded name never imports it."""

    def __init__(self, settings: Settings) -> None:
        self.patterns = tuple(settings.exclude) + tuple(settings.extend_exclude)
        self.names = _plain_names(self.patterns)

    def match_file(self, path: str) -> bool:
        if self.names is not None and self.names.isdisjoint(path.split("/")):
            return False
        return _spec(self.patterns).match_file(path)


def _gitignore_spec(folder: Path) -> pathspec.PathSpec | None:
    ignore_file = folder / ".gitignore"
    if not _is_regular(ignore_file):
        return None
    import pathspec

    try:
        from kllint.pipeline.source import read_regular

        lines = read_regular(ignore_file, 4 * 1024 * 1024).decode("utf-8", errors="replace").splitlines()
    except (OSError, RuntimeError):
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def safe_resolve(path: Path) -> Path:
    """`path.resolve()`, or the absolute path when it cannot be resolved (a symbolic link loop)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _missing(path: Path) -> bool:
    """Whether `path` does not exist; a path that cannot be looked up (in a folder that cannot
    be searched) exists: it is checked, and reported as unreadable."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except (OSError, ValueError):
        return False
    return False


def _display(path: Path, cwd: Path) -> str:
    try:
        return path.relative_to(cwd).as_posix()
    except ValueError:
        return path.as_posix()


def _matches(patterns: tuple[str, ...], rel: str, is_dir: bool, anchored: bool) -> bool:
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if not parts:
        return False
    names = _plain_names(patterns)
    if names is not None and names.isdisjoint(parts):
        return False  # no component is an excluded name: pathspec would match nothing either
    spec = _spec(patterns)
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
    patterns = tuple(settings.exclude) + tuple(settings.extend_exclude)
    base = safe_resolve(root or settings.root or Path.cwd())
    resolved = safe_resolve(path)
    try:
        rel, anchored = resolved.relative_to(base).as_posix(), True
    except ValueError:
        rel, anchored = path.as_posix(), False
    if is_dir is None:
        is_dir = os.path.isdir(resolved)
    return _matches(patterns, rel, is_dir, anchored)


def discover(paths: list[str], settings: SettingsSource, force_exclude: bool = False,
             cwd: Path | None = None, notes: list[str] | None = None) -> Iterator[Discovered]:
    """Yield the Python files under `paths`, sorted per directory, without duplicates.

    Files and folders named explicitly are always checked, even under an excluded folder such
    as `build/` or `venv/`, unless `force_exclude` applies the excludes to them too (the
    pre-commit hook passes `--force-exclude`); the excludes always apply to what is discovered
    below a named folder. `settings` is a `Settings` or a
    `SettingsResolver`; each folder is judged by the settings of its closest configuration.

    Anything named that is not a folder (a FIFO, a device, a broken or looping symbolic link) is
    yielded as a file: the engine reports it (KL900), rather than the run saying "0 files". A
    folder that cannot be read is skipped with a one-line remark appended to `notes`.

    Raises:
        MissingPathError: when a named path does not exist.
        kllint.config.ConfigError: when a configuration file met on the way is invalid.
    """
    cwd = (cwd or Path.cwd()).resolve()
    seen: set[str] = set()  # real paths
    for raw in paths:
        start = Path(raw)
        if _missing(start):
            raise MissingPathError(f"{raw}: no such file or directory")
        if not os.path.isdir(start):
            resolved = safe_resolve(start)
            if str(resolved) in seen:
                continue
            if force_exclude:
                own = settings.for_path(resolved)
                if is_excluded(start, own, own.root or cwd, is_dir=False):
                    continue
            seen.add(str(resolved))
            shown = resolved if _is_regular(resolved) else Path(os.path.abspath(start))
            yield Discovered(start, _display(shown, cwd) if not start.is_absolute() else start.as_posix())
            continue
        own = settings.for_path(start.resolve())
        named_excluded = is_excluded(start, own, own.root or cwd, is_dir=True)
        if force_exclude and named_excluded:
            continue
        # a folder named on the command line is checked even if an exclude (`build`, `venv`)
        # matches it or a folder above it: below it, the patterns apply relative to it
        ignores: list[tuple[Path, pathspec.PathSpec]] = []

        def unreadable(error: OSError) -> None:
            if notes is not None:
                notes.append(f"{error.filename}: cannot read folder: {error.strerror or error}; skipped")

        real_folders: dict[str, Path] = {}  # walked folder -> its real path
        real_roots: dict[Path, Path] = {}
        shown_as_walked = start.is_absolute()
        cwd_prefix = os.path.join(str(cwd), "")  # with one trailing separator
        for folder, dirnames, filenames in walk(start, unreadable):
            here = Path(folder)
            parent = real_folders.get(os.path.dirname(folder))
            # os.walk enters no symbolic link, so below a real parent a folder is its child
            here_resolved = real_folders[folder] = parent / here.name if parent is not None else here.resolve()
            local = settings.for_folder(here, here_resolved)
            spec = _Excludes(local)
            root = local.root or cwd
            if root not in real_roots:
                real_roots[root] = root.resolve()
            try:
                here_rel = None if named_excluded else here_resolved.relative_to(real_roots[root]).as_posix()
            except ValueError:
                here_rel = None
            if local.respect_gitignore:
                ignores = [(base, s) for base, s in ignores if base == here or base in here.parents]
                # os.walk lists a regular .gitignore among the files: no `stat` for the others
                own_ignore = _gitignore_spec(here) if ".gitignore" in filenames else None
                if own_ignore is not None:
                    ignores.append((here, own_ignore))
            else:
                ignores = []
            # the names of this folder, relative to the folders their patterns are relative to
            below_root = None if here_rel is None else _joiner(here_rel)
            below_start = _joiner(here.relative_to(start).as_posix()) if here_rel is None else None
            below_ignores = [(_joiner(here.relative_to(base).as_posix()), ignore) for base, ignore in ignores]

            def skipped(name: str, is_dir: bool) -> bool:
                suffix = "/" if is_dir else ""
                if below_root is not None:  # relative to the configuration's folder
                    if spec.match_file(below_root(name) + suffix):
                        return True
                elif spec.match_file(name + suffix) or spec.match_file(below_start(name) + suffix):
                    return True
                return any(ignore.match_file(below(name) + suffix) for below, ignore in below_ignores)

            dirnames[:] = sorted(d for d in dirnames if not skipped(d, True))
            real_here = os.path.join(str(here_resolved), "")
            for name in sorted(filenames):
                if not name.endswith(PYTHON_SUFFIXES) or skipped(name, False):
                    continue
                path = here / name
                # one realpath per folder; a file that is itself a symlink is resolved on its own
                link = os.path.islink(path)
                resolved = str(safe_resolve(path)) if link else real_here + name
                if resolved in seen:
                    continue
                seen.add(resolved)
                if shown_as_walked:
                    display = path.as_posix()
                else:  # the real path relative to the current folder (a link to a device: its name)
                    shown = str(path) if link and not _is_regular(resolved) else resolved
                    display = _posix(shown[len(cwd_prefix):] if shown.startswith(cwd_prefix) else shown)
                yield Discovered(path, display)


def walk(top: Path, onerror: Callable[[OSError], None]) -> Iterator[tuple[str, list[str], list[str]]]:
    """`os.walk(top, onerror=onerror)` (top-down, symbolic links to folders not entered, the
    caller may prune the folder names it is given), without recursion: Python 3.11's os.walk
    recurses once per level and a tree 1,000 folders deep ran out of the recursion limit."""
    stack = [os.fspath(top)]
    while stack:
        folder = stack.pop()
        dirnames: list[str] = []
        filenames: list[str] = []
        try:
            entries = os.scandir(folder)
        except OSError as error:
            onerror(error)
            continue
        with entries:
            while True:
                try:
                    entry = next(entries)
                except StopIteration:
                    break
                except OSError as error:
                    onerror(error)
                    break
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                (dirnames if is_dir else filenames).append(entry.name)
        yield folder, dirnames, filenames
        for name in reversed(dirnames):
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                stack.append(path)


def _posix(path: str) -> str:
    """`path` with forward slashes (as `Path.as_posix`)."""
    return path if os.sep == "/" else path.replace(os.sep, "/")


def _joiner(folder: str):
    """A function giving `folder/name` for a name in `folder` (just `name` for `.`)."""
    if folder in ("", "."):
        return lambda name: name
    prefix = folder + "/"
    return lambda name: prefix + name
