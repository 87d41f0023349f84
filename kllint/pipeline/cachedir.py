"""The result cache's folder is kllint's alone (issue 35): which folder may hold it, and what
`kllint clean` removes.

A folder is kllint's when it holds kllint's `CACHEDIR.TAG`: the standard signature line
(https://bford.info/cachedir/, so that backup tools skip it) followed by a line naming kllint
(another tool's tag is not kllint's). `claim` keeps the cache only in such a folder, in a folder
it creates, or in an empty one it adopts; never in a symbolic link, nor in a folder reached
through a symbolic link inside the checked project (a repository controls those). `clean`
removes only a tagged folder, and in it only the names kllint writes (`OURS`, its `.gitignore`
and its tag); anything else stays, and is listed (the folder, no longer tagged, is then not
used again until it is emptied).
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from kllint.atomic import replacing
from kllint.pipeline.manifest import NAME as MANIFEST, STAMP
from kllint.pipeline.source import read_regular

CACHEDIR_TAG = "CACHEDIR.TAG"
TAG_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"
TAG_OWNER = "# This file is a cache directory tag created by kllint."
TAG_TEXT = (f"{TAG_SIGNATURE}\n{TAG_OWNER}\n"
            "# For information about cache directory tags see https://bford.info/cachedir/\n")
GITIGNORE = ".gitignore"
GITIGNORE_TEXT = "# Automatically created by kllint.\n*\n"
_ENTRY = r"[0-9a-f]{64}\.json"
_TEMPORARY = r"\..+\.kllint\.tmp"  # `kllint.atomic.replacing`'s temporary files
# the files kllint writes at each depth of the cache (the folder, an entries folder `v<N>`, one of
# its `<2 hex digits>` folders) and the folders it makes at the first two
OURS = {0: re.compile(_TEMPORARY), 1: re.compile(f"{_ENTRY}|{_TEMPORARY}|{re.escape(MANIFEST)}|{re.escape(STAMP)}"),
        2: re.compile(f"{_ENTRY}|{_TEMPORARY}")}
OUR_FOLDERS = {0: re.compile(r"v[0-9]+"), 1: re.compile(r"[0-9a-f]{2}")}


class CacheFolderError(Exception):
    """A folder the cache cannot be kept in (cannot be created or written); the message says why."""


class ForeignFolderError(CacheFolderError):
    """A folder that is not kllint's to write (see the module docstring); the message says why."""


def is_cache_directory(directory: Path) -> bool:
    """True when `directory` holds kllint's CACHEDIR.TAG (a regular file, not a link)."""
    try:
        tag = read_regular(Path(directory) / CACHEDIR_TAG, 64 * 1024, follow_symlinks=False)
    except OSError:
        return False
    lines = tag.decode("utf-8", errors="replace").splitlines()
    return lines[:1] == [TAG_SIGNATURE] and TAG_OWNER in lines[1:]


def _link_on_the_way(directory: Path, within: Path | None) -> Path | None:
    """The first symbolic link among `directory` and the folders between `within` (the checked
    project's root) and it, or None. Folders that do not exist end the search."""
    target = Path(os.path.abspath(directory))
    on_the_way = [target]
    if within is not None and (target == within or within in target.parents):
        parts = target.relative_to(within).parts
        on_the_way = [within.joinpath(*parts[:depth]) for depth in range(1, len(parts) + 1)] or [target]
    for folder in on_the_way:
        try:
            if stat.S_ISLNK(os.lstat(folder).st_mode):
                return folder
        except OSError:
            break
    return None


def claim(directory: Path, within: Path | None = None) -> None:
    """Make `directory` the cache folder (see the module docstring): create it, or adopt it when
    it is empty, or keep it when it has kllint's tag; then write the tag and the `.gitignore`.

    Raises:
        ForeignFolderError: a symbolic link (also one on the way from `within`), not a folder,
            or a non-empty folder without kllint's tag.
        CacheFolderError: it cannot be created or written.
    """
    link = _link_on_the_way(directory, within)
    if link is not None:
        raise ForeignFolderError(f"{link} is a symbolic link; kllint keeps its cache only in a real folder")
    try:
        if not os.path.lexists(directory):
            directory.mkdir(parents=True)
        mode = os.lstat(directory).st_mode
    except OSError as exc:
        raise CacheFolderError(f"cannot create the folder: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(mode):
        raise ForeignFolderError(f"{directory} is not a folder")
    try:
        if not is_cache_directory(directory):
            if _listing(directory):
                raise ForeignFolderError(f"{directory} is not a kllint cache folder (it is not empty and has no "
                                         f"{CACHEDIR_TAG} written by kllint); kllint keeps its cache in a "
                                         "folder it created or an empty one")
            _write(directory / CACHEDIR_TAG, TAG_TEXT)  # first: the folder is kllint's from now on
        if not os.path.lexists(directory / GITIGNORE):
            _write(directory / GITIGNORE, GITIGNORE_TEXT)
    except OSError as exc:
        raise CacheFolderError(f"cannot write the cache there: {exc.strerror or exc}") from None


def _write(target: Path, text: str) -> None:
    with replacing(target, sync=False) as handle:
        handle.write(text.encode())


def _listing(folder: Path) -> list[os.DirEntry]:
    with os.scandir(folder) as entries:
        return sorted(entries, key=lambda entry: entry.name)


@dataclass
class Cleaned:
    """What `clean` did: whether the folder existed, the number of files removed, and the entries
    it left (paths relative to the folder; kllint did not write them)."""

    existed: bool
    removed: int = 0
    left: list[str] = field(default_factory=list)

    def lines(self, directory: Path) -> list[str]:
        """What `kllint clean` says about it."""
        if not self.existed:
            return [f"No cache to remove at {directory}."]
        files = f"{self.removed} file{'' if self.removed == 1 else 's'}"
        if not self.left:
            return [f"Removed {directory} ({files})."]
        shown = ", ".join(self.left[:10]) + (", ..." if len(self.left) > 10 else "")
        return [f"Removed {files} from {directory}; left what kllint did not write there: {shown} "
                "(kllint uses the folder again once it is empty)."]


def clean(directory: Path) -> Cleaned:
    """Remove what kllint wrote in the cache folder `directory`, and the folder when nothing else
    is left in it (see the module docstring).

    Raises:
        OSError: the folder is a symbolic link or has no kllint tag (nothing is removed), or an
            entry cannot be removed.
    """
    try:
        mode = os.lstat(directory).st_mode
    except FileNotFoundError:
        return Cleaned(False)
    if stat.S_ISLNK(mode):
        raise OSError(f"{directory} is a symbolic link; not followed, nothing removed")
    if not stat.S_ISDIR(mode) or not is_cache_directory(directory):
        raise OSError(f"{directory} does not look like a kllint cache (no {CACHEDIR_TAG} written by kllint); "
                      "not removed")
    done = Cleaned(True)
    _clean_level(directory, 0, "", done)
    os.unlink(directory / CACHEDIR_TAG)  # last: a clean cut short leaves a folder still kllint's
    done.removed += 1
    if not done.left:
        os.rmdir(directory)
    return done


def _ours(entry: os.DirEntry, depth: int) -> bool:
    """Whether `entry` (at `depth` in the cache) is a file kllint writes (the tag is removed last)."""
    if not entry.is_file(follow_symlinks=False):
        return False
    if depth == 0 and entry.name == GITIGNORE:
        try:
            return read_regular(entry.path, 4096, follow_symlinks=False) == GITIGNORE_TEXT.encode()
        except OSError:
            return False
    return bool(OURS[depth].fullmatch(entry.name))


def _clean_level(folder: Path, depth: int, prefix: str, done: Cleaned) -> None:
    """Remove kllint's files under `folder` (at `depth` in the cache), and its folders once empty."""
    for entry in _listing(folder):
        named = prefix + entry.name
        if depth == 0 and entry.name == CACHEDIR_TAG:
            continue
        if _ours(entry, depth):
            os.unlink(entry.path)
            done.removed += 1
        elif depth in OUR_FOLDERS and entry.is_dir(follow_symlinks=False) and OUR_FOLDERS[depth].fullmatch(entry.name):
            _clean_level(Path(entry.path), depth + 1, named + "/", done)
            if not _listing(Path(entry.path)):
                os.rmdir(entry.path)
        else:
            done.left.append(named)
