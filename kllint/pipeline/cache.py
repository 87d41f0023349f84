"""The result cache: `.kllint_cache/` in the project root, one entry per checked file.

An entry holds what the analysis of one file gave before selection and suppressions (these are
re-applied on every run, so `--select` and `# noqa` edits never need a fresh analysis). It is
used only when all of these are unchanged:

- the file's bytes (sha256), its path and displayed path, and its package (the folders with
  `__init__.py` above it decide its module name and its relative imports);
- the settings that apply to it, except those applied afresh to every hit or used only before
  or after the analysis (`settings_digest`: selection, suppressions, excludes and the output
  format are left out; the entry's file name is derived from it, so runs with, say, another
  vocabulary keep separate entries);
- kllint itself (`implementation_digest`: the version and the sha256 of kllint's own source);
- every project module the analysis looked at: the module files it loaded and the candidate
  files it probed and did not find (they must still be absent), as recorded by
  `ProjectIndex.begin_tracking()` / `tracked_paths()`. A loaded module counts as unchanged when
  its bytes are (sha256) or, failing that, its code is (`kllint.pipeline.source.code_digest`: the lines
  of its top-level statements with their line numbers). Editing the code of a helper module
  that the file imports therefore re-analyses the file; editing only comments or blank lines
  between its statements does not.

Beside the entries, the manifest (`kllint.pipeline.manifest`) lets a warm run skip most of this
work: a file whose `stat` signature is unchanged (and was not racily new) has its recorded
sha256 without being read, and a file the prefilter let go is a hit without loading its entry.

The cache never breaks a run: an unreadable, corrupt or foreign entry is a miss; a cache folder
that cannot be created or written is skipped. The folder is kllint's alone
(`kllint.pipeline.cachedir`): a folder kllint did not create (non-empty, without its tag) or a
symbolic link is never written to. Entries are written atomically (a temporary file
in the same folder, then `os.replace`), so concurrent runs never see half an entry.

The cache is not trusted. Its folder may be shared between CI jobs, where a pull request from
a fork can write it, so nothing that is executed or written to a source file is taken from it:
`--fix`, `--diff`, `--add-noqa` and `--confirm` derive their edits and expressions from a fresh
analysis of each file they act on (`kllint.session`). Each entry starts with the sha256 of the
rest of it, and an entry that fails it (a flipped byte, a truncated write) is a miss, rewritten
by the run. Only regular files are read from the cache (no symbolic links, FIFOs or devices),
of bounded size, and folders inside the cache that are symbolic links are neither followed nor
written through.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable

from kllint.atomic import replacing
from kllint.config import Settings
from kllint.diagnostics import Diagnostic, Estimate, Fix, Span, TraceStep
from kllint.notebook import is_notebook
from kllint.pipeline.discovery import Discovered
from kllint.pipeline.cachedir import (CACHEDIR_TAG, TAG_SIGNATURE, TAG_TEXT, CacheFolderError,  # noqa: F401 - API
                                      ForeignFolderError, claim, clean, is_cache_directory)
from kllint.pipeline.manifest import Manifest
from kllint.pipeline.fingerprints import dependencies_unchanged, implementation_digest, package_of, settings_digest
from kllint.pipeline.outcome import Outcome
from kllint.pipeline.selection import filter_found
from kllint.pipeline.source import MAX_FILE_BYTES, decode_source, read_regular

CACHE_DIR_NAME = ".kllint_cache"
FORMAT = "v3"
MAX_ENTRY_BYTES = 64 * 1024 * 1024
PROJECT_MARKERS = ("pyproject.toml", ".git")


def project_root(paths: Iterable[str | Path], cwd: Path | None = None, resolve: bool = True) -> Path:
    """The closest folder at or above the checked paths with a pyproject.toml or .git, else `cwd`
    (or, for paths outside `cwd`, their common folder). `resolve=False` takes the paths as
    named, without following symbolic links (the root `--fix` keeps its writes in)."""
    cwd = (cwd or Path.cwd()).resolve()
    resolved = [((cwd / p).resolve() if resolve else Path(os.path.abspath(cwd / p))) for p in paths] or [cwd]
    try:
        common = Path(os.path.commonpath([str(p) for p in resolved]))
    except ValueError:  # different drives
        return cwd
    start = common if common.is_dir() else common.parent
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    # no project marker: the current folder if the paths are in it, else the paths' own folder
    # (`kllint clean ../other` must not pick this project's cache)
    return cwd if start == cwd or cwd in start.parents else start


def default_directory(paths: Iterable[str | Path], cwd: Path | None = None) -> Path:
    """`.kllint_cache` in the project root of `paths`."""
    return project_root(paths, cwd) / CACHE_DIR_NAME


# -- serialisation of diagnostics (JSON, only the known data classes) ------------------------

_CLASSES = {cls.__name__: cls for cls in (Diagnostic, Span, TraceStep, Fix, Estimate)}


def _encode(value: Any) -> Any:
    if _CLASSES.get(type(value).__name__) is type(value):
        return {"@": type(value).__name__,
                **{f.name: _encode(getattr(value, f.name)) for f in fields(value)}}
    if isinstance(value, tuple):
        return {"@t": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("dictionary keys must be strings")
        return {"@d": {k: _encode(v) for k, v in value.items()}}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot cache a {type(value).__name__}")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if "@t" in value:
            return tuple(_decode(v) for v in value["@t"])
        if "@d" in value:
            return {k: _decode(v) for k, v in value["@d"].items()}
        cls = _CLASSES[value["@"]]
        return cls(**{k: _decode(v) for k, v in value.items() if k != "@"})
    return value


# -- the cache -------------------------------------------------------------------------------

class ResultCache:
    """Per-file results under `directory` (normally `<project root>/.kllint_cache`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.entries = self.directory / FORMAT
        self.enabled = True
        self.hits = 0
        self.misses = 0
        self._implementation = implementation_digest(FORMAT)
        self._settings: dict[int, tuple[Settings, str]] = {}
        self._run_digests: dict[str, Any] = {}  # dependency digests, memoised over this run
        self._packages: dict[str, tuple[str, str, tuple[str, ...]]] = {}  # folder -> its package, this run
        self._real_folders: set[str] = set()  # entry folders checked not to be symbolic links, this run
        self._entries_prefix = os.path.join(os.fspath(self.entries), "")  # with one trailing separator
        self._manifest: Manifest | None = None

    @classmethod
    def create(cls, directory: Path, within: Path | None = None) -> "ResultCache":
        """The cache in `directory`, a folder that is kllint's (`kllint.pipeline.cachedir.claim`;
        `within`: the checked project's root, no symbolic link below it is followed).

        Raises:
            ForeignFolderError: the folder is not kllint's to write.
            CacheFolderError: it cannot be created or written.
        """
        claim(Path(directory), within)
        cache = cls(directory)
        try:
            _real_folder(cache.entries, create=True)
        except OSError as exc:
            raise CacheFolderError(f"cannot write the cache there: {exc.strerror or exc}") from None
        return cache

    @classmethod
    def open(cls, directory: Path) -> "ResultCache | None":
        """`create`, or None when it raises."""
        try:
            return cls.create(directory)
        except Exception:  # noqa: BLE001 - a cache must never break a run
            return None

    def _settings_digest(self, settings: Settings) -> str:
        known = self._settings.get(id(settings))
        if known is None or known[0] is not settings:
            known = (settings, settings_digest(settings))
            self._settings[id(settings)] = known
        return known[1]

    def _entry_path(self, item: Discovered, settings: Settings) -> tuple[str, str]:
        """The entry's (folder, file name); strings, as this runs for every file of a warm run."""
        # NUL can be in no path nor display: the joined identity is unambiguous
        identity = "\0".join((os.path.abspath(item.path), item.display, self._settings_digest(settings)))
        # surrogateescape: a file name that is not UTF-8 reaches Python with lone surrogates
        key = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()
        return self._entries_prefix + key[:2], key + ".json"

    @property
    def manifest(self) -> Manifest:
        """The digests and prefilter-skipped results of this cache (`kllint.pipeline.manifest`)."""
        if self._manifest is None:
            self._manifest = Manifest(self.entries, self._implementation, MAX_FILE_BYTES, MAX_ENTRY_BYTES)
        return self._manifest

    def lookup(self, item: Discovered, settings: Settings):
        """The `Outcome` of an unchanged file, or None (a miss, also for any problem)."""
        if not self.enabled:
            return None
        try:
            folder, name = self._entry_path(item, settings)
            manifest = self.manifest
            digest = manifest.digest(item.path)
            if manifest.skipped_result(name, digest):  # let go by the prefilter: nothing to load
                self.hits += 1
                return Outcome([], [], digest=digest, deps={}, skipped=True)
            entry = _load_entry(os.path.join(folder, name), self._real_folders)
            valid = (digest is not None and isinstance(entry, dict) and entry.get("implementation") == self._implementation
                     and entry.get("digest") == digest and entry.get("package") == package_of(item.path, self._packages)
                     and isinstance(entry.get("deps"), dict)
                     and dependencies_unchanged(entry["deps"], self._run_digests, manifest.digest))
            if not valid:
                self.misses += 1
                return None
            found = _decode(entry["found"])
            if not all(isinstance(d, Diagnostic) for d in found):
                raise TypeError("not a list of diagnostics")
            diagnostics = list(found)
            warnings: list[str] = []
            if entry["filtered"] and entry.get("suppressible") is False:  # no suppression: no need to read it
                diagnostics = filter_found(found, None, item.display, settings, item.path, warnings)
            elif entry["filtered"]:  # also without findings: KL901 audits the suppressions
                raw = read_regular(item.path, MAX_FILE_BYTES)
                if hashlib.sha256(raw).hexdigest() != digest:
                    raise ValueError("the file changed while it was looked up")
                diagnostics = filter_found(found, decode_source(raw), item.display, settings, item.path, warnings)
            gave_up = entry.get("gave_up", [])
            if not isinstance(gave_up, list) or not all(isinstance(n, str) for n in gave_up):
                raise TypeError("gave_up is not a list of strings")
            foreign = _decode(entry.get("foreign", []))
            if not all(isinstance(d, Diagnostic) for d in foreign):
                raise TypeError("not a list of diagnostics")
        except Exception:  # noqa: BLE001 - missing, unreadable or corrupt: analyse again
            self.misses += 1
            return None
        self.hits += 1
        return Outcome(found, diagnostics, filtered=bool(entry["filtered"]), digest=digest, deps=entry["deps"],
                       gave_up=gave_up, warnings=warnings, foreign=foreign)

    def store(self, item: Discovered, settings: Settings, outcome: Outcome) -> None:
        """Keep the outcome of a freshly analysed file (silently skipped on any problem)."""
        if not self.enabled or outcome.digest is None or outcome.errors:
            return
        try:
            entry = {
                "implementation": self._implementation,
                "path": str(item.path.resolve()),
                "digest": outcome.digest,
                "package": package_of(item.path, self._packages),
                "deps": dict(outcome.deps or {}),
                "filtered": outcome.filtered,
                "found": _encode(list(outcome.found)),
                "gave_up": list(outcome.gave_up),
                "suppressible": outcome.suppressible,
                "foreign": _encode(list(outcome.foreign)),
            }
            folder, name = self._entry_path(item, settings)
            _real_folder(self.entries, folder, create=True)
            body = json.dumps(entry, separators=(",", ":")).encode()
            _write_atomic(os.path.join(folder, name), hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
            self.manifest.remember(item.path, outcome.digest, outcome.signature)
            if outcome.skipped:  # nothing found, nothing followed: its bytes alone decide it
                self.manifest.remember_skipped(name, outcome.digest)
        except (OSError, TypeError, ValueError):
            return

    def flush(self) -> None:
        """Write what this run learnt into the manifest (at the end of a run)."""
        if self.enabled and self._manifest is not None:
            self._manifest.save()


def _real_folder(*levels: str | Path, create: bool = False) -> None:
    """Check that each of `levels` (folders inside the cache, outermost first) is a folder, not
    a symbolic link; create the missing ones if asked.

    Raises:
        OSError: one is a symbolic link or not a folder (or is missing, unless `create`).
    """
    for level in levels:
        try:
            mode = os.lstat(level).st_mode
        except FileNotFoundError:
            if not create:
                raise
            os.mkdir(level)
            mode = os.lstat(level).st_mode
        if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
            raise OSError(f"{level}: not a folder (a symbolic link in the cache is never followed)")


def _load_entry(path: str | Path, checked: set[str] | None = None) -> Any:
    """The JSON of a cache entry whose first line is the sha256 of the rest. `checked`: the
    entry folders already found to be real folders in this run (each is looked at once).

    Raises:
        OSError: missing, not a regular file (a symbolic link, a FIFO, a device) or too large.
        ValueError: the digest does not match or the JSON is invalid.
    """
    folder = os.path.dirname(path)
    if checked is None or folder not in checked:
        _real_folder(os.path.dirname(folder), folder)
        if checked is not None:
            checked.add(folder)
    data = read_regular(path, MAX_ENTRY_BYTES, follow_symlinks=False)
    check, _, body = data.partition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != check:
        raise ValueError("the entry fails its digest")
    return json.loads(body)


def _write_atomic(target: str | Path, data: bytes) -> None:
    with replacing(target, sync=False) as handle:  # an entry lost in a crash is a miss, not an error
        handle.write(data)


def cacheable(item: Discovered) -> bool:
    """Whether the result cache may keep `item`'s result: not for text given in memory (stdin,
    an editor's buffer), nor for notebooks (their findings are per cell)."""
    return item.content is None and not is_notebook(item.path)
