"""What a cached result depends on, as digests: the bytes and code of a file and of every
project module its analysis looked at, the settings that change what the analysis gives, and
kllint itself. `kllint.pipeline.cache` keeps a result only while all of these are unchanged."""
from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import kllint
from kllint.analysis.index import ProjectIndex, package_folders
from kllint.config import Settings
from kllint.pipeline import prefilter
from kllint.pipeline.prefilter import parse_or_error
from kllint.pipeline.source import MAX_FILE_BYTES, code_digest, decode_source, read_regular, source_lines

_FILE_DIGESTS: dict[Path, tuple[tuple[int, int, int], str | None]] = {}


def file_digest(path: Path) -> str | None:
    """sha256 of a file's bytes (None when it is not a readable file); memoised by stat."""
    try:
        st = path.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    signature = (st.st_mtime_ns, st.st_size, st.st_ino)
    known = _FILE_DIGESTS.get(path)
    if known is not None and known[0] == signature:
        return known[1]
    try:
        digest: str | None = hashlib.sha256(read_regular(path, MAX_FILE_BYTES)).hexdigest()
    except (OSError, RuntimeError):
        digest = None
    _FILE_DIGESTS[path] = (signature, digest)
    return digest


def dependency_digests(tracked: dict[Path, bool], index: Any = None) -> dict[str, Any]:
    """The recorded dependencies of one analysis: a loaded module -> [sha256 of its bytes, its
    code digest (`kllint.pipeline.source.code_digest`, from `index` when it loaded the module, else
    None), the real path it resolves to (the analysis names a module by it: a symlink pointed
    elsewhere is a change)], an absent candidate -> None."""
    deps: dict[str, Any] = {}
    for path, exists in tracked.items():
        if exists:
            code = index.code_digest(path) if index is not None else None
            deps[str(path)] = [file_digest(path), code, _real_path(path)]
        else:
            deps[str(path)] = None
    return deps


def _real_path(path: Path) -> str | None:
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):
        return None


def _may_exist(name: str, seen: dict[str, Any]) -> bool:
    """Whether `name` may exist: its folder's listing (read once per run, `seen`) holds a name
    equal to its last part but for case (a file system may ignore case). Most dependencies
    recorded as absent are import candidates that never existed (`os.py` at a project root),
    and one listing per folder answers them all instead of one `stat` each. A name that is not
    ASCII may exist under another Unicode normalisation or case folding than Python's (macOS,
    Windows): only a `stat` can tell."""
    folder, base = os.path.split(name)
    if not base.isascii():
        return True
    listings = seen.get(_LISTINGS)
    if listings is None:
        listings = seen[_LISTINGS] = {}
    listing = listings.get(folder, _UNKNOWN)
    if listing is _UNKNOWN:
        listing = _listing(folder, listings)
    return listing is None or base.casefold() in listing


_LISTINGS = "\0listings"  # no path holds a NUL: the key of the folder listings in the memo of `dependencies_unchanged`
_UNKNOWN = object()
_NOTHING: frozenset[str] = frozenset()


def _listing(folder: str, listings: dict[str, frozenset[str] | None]) -> frozenset[str] | None:
    """The case-folded names in `folder` (`listings` memoises them over a run): empty when it does
    not exist, None when it cannot be listed (no read permission, yet its files may be readable).
    A folder whose name is missing from the listing of the folder above it does not exist: the
    candidates of an import probe many folders that were never there, and the listing of the
    folder above (memoised, up to one that exists) answers for them without a failed `listdir`.
    A name that is not ASCII, `.` or `..` is listed itself (see `_may_exist`)."""
    parent, base = os.path.split(folder)
    if base and base.isascii() and base not in (".", "..") and parent != folder:
        above = listings.get(parent, _UNKNOWN)
        if above is _UNKNOWN:
            above = _listing(parent, listings)
        if above is not None and base.casefold() not in above:
            listings[folder] = _NOTHING
            return _NOTHING
    try:
        listing: frozenset[str] | None = frozenset(entry.casefold() for entry in os.listdir(folder or "."))
    except (FileNotFoundError, NotADirectoryError):  # no such folder: nothing in it
        listing = _NOTHING
    except OSError:  # unlistable (no read permission) yet its files may be readable
        listing = None
    listings[folder] = listing
    return listing


def _real_path_memoised(name: str, seen: dict[str, Any]) -> str | None:
    """`_real_path` of a file, its folder resolved once per run (`seen`): resolving a path
    looks at every folder above it, and the modules of a project share their folders."""
    folder, base = os.path.split(name)
    key = "folder:" + folder
    if key not in seen:
        seen[key] = _real_path(Path(folder)) if folder else None
    if seen[key] is None or base in ("", ".", "..") or os.path.islink(name):
        return _real_path(Path(name))
    return os.path.join(seen[key], base)


def current_code_digest(path: Path) -> str | None:
    """The code digest of the module file at `path` as the project index would load it; None
    when the index would not load it (too large, undecodable, unparsable) or it is unreadable."""
    try:
        text = decode_source(read_regular(path, ProjectIndex.MAX_MODULE_BYTES))
    except (OSError, RuntimeError, UnicodeDecodeError, LookupError, SyntaxError):
        return None
    outline, error = parse_or_error(text)
    return code_digest(source_lines(text), outline) if error is None else None


def dependencies_unchanged(deps: dict[str, Any], seen: dict[Any, Any] | None = None,
                           digest_of: Callable[[str], str | None] | None = None) -> bool:
    """Whether every dependency is unchanged: an absent one still absent, a module file at the
    same real path with the same bytes or, failing that, the same code digest (an edit of its comments or blank lines
    between statements keeps the results of its importers). `seen` memoises digests and verdicts
    over one run, in which files do not change (many files share helpers, recorded alike).
    `digest_of` gives a file's sha256 (default `file_digest`; the cache's manifest knows most)."""
    seen = {} if seen is None else seen
    absent = seen.get(_ABSENT)  # name -> verdict, for the names recorded as absent (most of them)
    if absent is None:
        absent = seen[_ABSENT] = {}
    for name, recorded in deps.items():
        if recorded is None:
            verdict = absent.get(name)
            if verdict is None:
                verdict = absent[name] = _dependency_unchanged(name, None, seen, digest_of)
        else:
            key = (name, tuple(recorded)) if isinstance(recorded, list) else (name, recorded)
            verdict = seen.get(key)
            if verdict is None:
                verdict = seen[key] = _dependency_unchanged(name, recorded, seen, digest_of)
        if not verdict:
            return False
    return True


_ABSENT = "\0absent"  # no path holds a NUL: the key of the verdicts on absent names in `seen`


def _dependency_unchanged(name: str, recorded: Any, seen: dict[Any, Any],
                          digest_of: Callable[[str], str | None] | None) -> bool:
    """One dependency of `dependencies_unchanged`: `recorded` as the entry holds it."""
    if recorded is None and not _may_exist(name, seen):
        return True
    if name not in seen:
        seen[name] = digest_of(name) if digest_of is not None else file_digest(Path(name))
    if recorded is None:
        return seen[name] is None
    if not isinstance(recorded, list) or len(recorded) != 3:
        return False
    digest, code, real = recorded
    key = "real:" + name
    if key not in seen:
        seen[key] = _real_path_memoised(name, seen)
    if seen[key] != real or real is None:
        return False
    if seen[name] == digest:
        return True
    if seen[name] is None or code is None:
        return False
    key = "code:" + name
    if key not in seen:
        seen[key] = current_code_digest(Path(name))
    return seen[key] == code


_IMPLEMENTATION: str | None = None


def implementation_digest(entry_format: str) -> str:
    """kllint's version, the cache's `entry_format` and the sha256 of kllint's own Python
    sources, plus the analysis entry points.

    The sources count because an editable install keeps its version while its code changes; the
    entry points count because tests replace the analysis by a fake one in process.
    """
    global _IMPLEMENTATION
    # the analysis (libcst, the term algebra) is not imported just to read this name: if nothing imported
    # it yet, nothing replaced its entry point either
    dispatch = sys.modules.get("kllint.rules.dispatch")
    check_source = dispatch.check_source if dispatch is not None else None

    hasher = hashlib.sha256(f"{kllint.__version__}\0{entry_format}\0".encode())
    package = Path(kllint.__file__).resolve().parent
    if _IMPLEMENTATION is None:
        sources = hashlib.sha256()
        for path in sorted(package.rglob("*.py")):
            try:
                sources.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
            except OSError:
                continue
        _IMPLEMENTATION = sources.hexdigest()
    hasher.update(_IMPLEMENTATION.encode())
    names = ["kllint.rules.dispatch.check_source" if check_source is None
             else f"{check_source.__module__}.{check_source.__qualname__}"]
    for test in (prefilter.might_matter, prefilter.code_might_matter):
        names.append(f"{test.__module__}.{test.__qualname__}")
    for name in names:
        hasher.update(f"\0{name}".encode())
    return hasher.hexdigest()


# Settings a cached result does not depend on: the selection and suppression settings are
# applied afresh to every hit (`kllint.pipeline.selection.filter_found`), the others act before the analysis
# (discovery) or after it (output).
_APPLIED_ON_HITS = ("select", "extend_select", "ignore", "per_file_ignores", "blanket_noqa",
                    "exclude", "extend_exclude", "respect_gitignore", "output_format",
                    "time_budget")  # a result that ran out of time is never stored


def settings_digest(settings: Settings) -> str:
    """A digest of everything in `settings` that can change what the analysis of a file gives
    (the vocabulary, for one); selection and suppression settings are left out, so changing
    `--select` or `ignore` re-uses the cached results."""
    data = asdict(settings)
    for name in _APPLIED_ON_HITS:
        data.pop(name, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def package_of(path: Path, known: dict[str, tuple[str, str, tuple[str, ...]]] | None = None) -> list[str]:
    """[import root, dotted module name, whether the root has a `src` folder] of a file
    (`kllint.analysis.index.package_root`); `known` memoises the folder part per folder."""
    parent = os.path.dirname(path)
    folder = known.get(parent) if known is not None else None
    if folder is None:
        root, packages = package_folders(path.parent)
        folder = (str(root), str(os.path.isdir(root / "src")), packages)
        if known is not None:
            known[parent] = folder
    parts = [*folder[2], path.stem] if path.name != "__init__.py" else folder[2]
    return [folder[0], ".".join(parts), folder[1]]
