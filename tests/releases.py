"""Download pinned releases of third-party projects into a local cache and unpack them.

Used by `tests/test_real_releases.py` and `bench/bench_releases.py`. Nothing downloaded here
is ever committed: the cache lives outside the repository (`KLLINT_RELEASE_CACHE`, default
`~/.cache/kllint/releases`).

Layout of the cache::

    CACHE/dists/<artefact>                 wheels and sdists as `pip download` saved them
    CACHE/unpacked/<name>-<version>/       the unpacked release (sdists without their top folder)
    CACHE/locks/<name>-<version>.lock      one lock file per release (POSIX `flock`)

`release_tree` is idempotent and safe under concurrent runs: each release is prepared under
its own lock, artefacts are moved into place with `os.replace`, and the unpacked tree is built
in a temporary folder and renamed into place, so a reader never sees a half-written tree.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator

CACHE_ENV = "KLLINT_RELEASE_CACHE"
DOWNLOAD_TIMEOUT_S = 900

# The releases the tests and the benchmark use, pinned.
CORE_RELEASES = ("trl==0.14.0", "google-tunix==0.1.7", "trl==0.11.4", "verl==0.9.1")
ALL_RELEASES = (
    "trl==1.16.0", "verl==0.9.1", "openrlhf==0.11.2", "nemo-aligner==0.7.0", "areal==1.0.4",
    "skyrl==0.4.0", "torchtune==0.6.1", "deepspeed==0.19.8", "roll==0.13.4",
)

# Tried in order; the second is for releases that publish only wheels for newer Pythons
# (e.g. skyrl 0.4.0, maxtext): the wheel is pure Python, we only read its source.
_PIP_ATTEMPTS = ((), ("--only-binary=:all:", "--python-version", "3.12"))
_ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".zip", ".tar.bz2")
_COMPLETE = ".kllint-release-complete"


class ReleaseUnavailable(RuntimeError):
    """A pinned release could not be downloaded or unpacked."""


def cache_dir() -> Path:
    """The cache folder: `$KLLINT_RELEASE_CACHE`, else `~/.cache/kllint/releases`."""
    configured = os.environ.get(CACHE_ENV)
    base = Path(configured).expanduser() if configured else Path.home() / ".cache" / "kllint" / "releases"
    return base.resolve()


def normalize_name(name: str) -> str:
    """PEP 503 normalisation, with `_` (wheel filenames use it)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def parse_spec(spec: str) -> tuple[str, str]:
    """`name==version` -> (name, version). Only exact pins are accepted."""
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*", spec)
    if not match:
        raise ValueError(f"{spec!r} is not a pinned requirement of the form name==version")
    return match.group(1), match.group(2)


def _artefact_key(filename: str) -> tuple[str, str] | None:
    """(normalised name, version) of a wheel or sdist filename, or None."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return (normalize_name(parts[0]), parts[1]) if len(parts) >= 5 else None
    for suffix in _ARCHIVE_SUFFIXES[1:]:
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)]
            if "-" not in stem:
                return None
            name, version = stem.rsplit("-", 1)
            return normalize_name(name), version
    return None


def _find_artefact(folder: Path, name: str, version: str) -> Path | None:
    if not folder.is_dir():
        return None
    wanted = (normalize_name(name), version)
    # Prefer a wheel: it is the tree as installed.
    matches = sorted((p for p in folder.iterdir() if p.is_file() and _artefact_key(p.name) == wanted),
                     key=lambda p: (not p.name.endswith(".whl"), p.name))
    return matches[0] if matches else None


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        try:
            import fcntl
        except ImportError:  # not POSIX: atomic renames alone keep the cache consistent
            yield
            return
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _pip_download(spec: str, dists: Path) -> Path:
    name, version = parse_spec(spec)
    dists.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    for extra in _PIP_ATTEMPTS:
        with tempfile.TemporaryDirectory(prefix=".download-", dir=dists) as tmp:
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                       "--no-input", "--quiet", *extra, spec, "-d", tmp]
            try:
                proc = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                failures.append(f"{' '.join(extra) or 'plain'}: timed out after {DOWNLOAD_TIMEOUT_S} s")
                continue
            found = _find_artefact(Path(tmp), name, version)
            if proc.returncode == 0 and found is not None:
                final = dists / found.name
                os.replace(found, final)
                return final
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            failures.append(f"{' '.join(extra) or 'plain'}: exit {proc.returncode}: {' | '.join(tail)}")
    raise ReleaseUnavailable(f"pip download {spec} failed: " + "; ".join(failures))


def _safe_tar_extract(archive: tarfile.TarFile, dest: Path) -> None:
    if hasattr(tarfile, "data_filter"):
        archive.extractall(dest, filter="data")
        return
    root = dest.resolve()
    members = []
    for member in archive.getmembers():
        target = (dest / member.name).resolve()
        if root not in target.parents and target != root:
            raise ReleaseUnavailable(f"unsafe path in archive: {member.name}")
        if member.isfile() or member.isdir():
            members.append(member)
    archive.extractall(dest, members=members)


def _install_data_libs(dest: Path) -> None:
    """Move `<name>.data/{purelib,platlib}/*` to the tree root, where an install puts them.

    Some wheels (e.g. openrlhf 0.11.2) ship their whole package under `.data/purelib/`.
    """
    for data in sorted(dest.glob("*.data")):
        for lib in ("purelib", "platlib"):
            folder = data / lib
            if not folder.is_dir():
                continue
            for child in sorted(folder.iterdir()):
                if not (dest / child.name).exists():
                    child.rename(dest / child.name)


def _unpack(artefact: Path, dest: Path) -> None:
    """Unpack a wheel (zip) or sdist into `dest`; an sdist loses its single top-level folder."""
    name = artefact.name
    if name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(artefact) as archive:
            archive.extractall(dest)
    else:
        with tarfile.open(artefact) as archive:
            _safe_tar_extract(archive, dest)
    if name.endswith(".whl"):
        _install_data_libs(dest)
    else:
        entries = [p for p in dest.iterdir()]
        if len(entries) == 1 and entries[0].is_dir():
            top = entries[0]
            staging = dest.with_name(dest.name + ".top")
            top.rename(staging)
            dest.rmdir()
            staging.rename(dest)


def _package_root(tree: Path) -> Path:
    """The folder holding the importable packages: `src/` for a src-layout sdist, else the tree."""
    src = tree / "src"
    if src.is_dir() and any((child / "__init__.py").is_file() for child in src.iterdir() if child.is_dir()):
        return src
    return tree


def release_tree(spec: str) -> Path:
    """Download (once) and unpack (once) the pinned release `spec`; return its package folder.

    For a wheel that is the unpacked wheel (`<tree>/trl`, `<tree>/trl-0.14.0.dist-info`); for
    an sdist it is the project root, or its `src/` when the project uses that layout.

    Raises:
        ValueError: `spec` is not `name==version`.
        ReleaseUnavailable: the download or the unpacking failed.
    """
    name, version = parse_spec(spec)
    cache = cache_dir()
    target = cache / "unpacked" / f"{name}-{version}"
    if (target / _COMPLETE).is_file():
        return _package_root(target)
    with _locked(cache / "locks" / f"{normalize_name(name)}-{version}.lock"):
        if (target / _COMPLETE).is_file():  # another process finished while we waited
            return _package_root(target)
        dists = cache / "dists"
        artefact = _find_artefact(dists, name, version) or _pip_download(spec, dists)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-{version}-", dir=target.parent))
        try:
            tree = staging / "tree"
            tree.mkdir()
            try:
                _unpack(artefact, tree)
            except (zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
                artefact.unlink(missing_ok=True)  # a truncated download: fetch it again next time
                raise ReleaseUnavailable(f"cannot unpack {artefact.name}: {exc}") from exc
            (tree / _COMPLETE).write_text(f"{spec}\n{artefact.name}\n", encoding="utf-8")
            if target.exists():  # a stale, incomplete tree from an interrupted run (not ours: locked)
                shutil.rmtree(target)
            os.replace(tree, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return _package_root(target)


def python_files(folder: Path) -> list[Path]:
    """Every `.py` file under `folder`, sorted (the benchmark's file set)."""
    return sorted(p for p in folder.rglob("*.py") if p.is_file())


if __name__ == "__main__":  # python tests/releases.py trl==0.14.0 ...
    for requirement in sys.argv[1:] or CORE_RELEASES:
        print(f"{requirement}\t{release_tree(requirement)}")
