"""The cache's manifest: what lets a warm run check most files with one `stat` each, instead of
reading and hashing each file and loading its entry.

One file beside the entries (`kllint-manifest.json`, the sha256 of its body on the first line,
like the entries; written atomically at the end of a run), with two tables:

- `digests`: path as named (absolute, `..` kept: the system resolves it after symbolic links)
  -> the `stat` signature of the file taken before its bytes were read (device, inode, size,
  modification and change times), the run's reference time, and the sha256 of those bytes. A file
  whose `stat` still gives that signature has that sha256 without being read, provided it had
  not changed for `RACY_NS` before the reference: the start of the run that read it, on the
  earlier of this machine's clock and the clock that stamps files (a stamp file written in the
  cache folder), since a file written within the timestamps' granularity of the reading could
  keep its signature while its bytes change (git's "racily clean" entries are re-hashed alike).
- `skipped`: cache entry name -> sha256 of the file: the files the prefilter let go, whose
  result depends on nothing but their bytes, the settings (in the entry name) and kllint (the
  manifest's `implementation`). A hit returns their empty result without loading the entry.

The manifest, like the rest of the cache, is not trusted to be well formed: anything wrong in it
is a miss. A forged row cannot match a file of this machine, whose inode and change time it
cannot know in advance.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from kllint.atomic import replacing
from kllint.pipeline.source import read_regular

NAME = "kllint-manifest.json"
STAMP = "kllint-manifest.stamp"
RACY_NS = 2_000_000_000  # 2 s: coarser than the timestamps of every common file system
MAX_ROWS = 500_000  # a larger manifest starts afresh (rows of files long gone)


def stat_signature(st: os.stat_result) -> list[int]:
    """What tells a file's bytes unchanged (with the racy check): device, inode, size, times."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def signature_of(path: str | os.PathLike[str]) -> list[int] | None:
    """`stat_signature` of a regular file (None for anything else or an error); taken before a
    file is read, it is the signature its digest may be recorded under."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return stat_signature(st) if stat.S_ISREG(st.st_mode) else None


def _named(path: str | os.PathLike[str]) -> str:
    name = os.fspath(path)
    return name if os.path.isabs(name) else os.path.join(os.getcwd(), name)


class Manifest:
    """The digests and prefilter-skipped results of one cache folder (`entries`), for one run.

    `limit` is the largest file whose digest is taken (larger files are never checked),
    `max_bytes` the largest manifest read.
    """

    def __init__(self, entries: Path, implementation: str, limit: int, max_bytes: int) -> None:
        self.path = entries / NAME
        self.implementation = implementation
        self.limit = limit
        self.reference_ns = _reference(entries)  # None: nothing new can be recorded as settled
        self._dirty = False
        self.digests: dict[str, list] = {}
        self.skipped: dict[str, str] = {}
        try:
            data = read_regular(self.path, max_bytes, follow_symlinks=False)
            check, _, body = data.partition(b"\n")
            if hashlib.sha256(body).hexdigest().encode() == check:
                loaded = json.loads(body)
                if isinstance(loaded, dict):
                    self._adopt(loaded)
        except Exception:  # noqa: BLE001 - missing, foreign or hostile (nested too deep): empty
            self.digests, self.skipped = {}, {}

    def _adopt(self, loaded: dict[str, Any]) -> None:
        digests, skipped = loaded.get("digests"), loaded.get("skipped")
        if isinstance(digests, dict):
            self.digests = digests
        if isinstance(skipped, dict) and loaded.get("implementation") == self.implementation:
            self.skipped = skipped

    def digest(self, path: str | os.PathLike[str]) -> str | None:
        """The sha256 of the file at `path` (None when it is not a readable regular file of at
        most `limit` bytes): from its recorded row while its `stat` signature is unchanged,
        else read, hashed and recorded under the signature taken before the read."""
        name = _named(path)
        signature = signature_of(name)
        if signature is None:
            return None
        row = self.digests.get(name)
        if (isinstance(row, list) and len(row) == 7 and row[:5] == signature and isinstance(row[5], int)
                and isinstance(row[6], str) and max(signature[3], signature[4]) < row[5] - RACY_NS):
            return row[6]
        try:
            digest = hashlib.sha256(read_regular(name, self.limit)).hexdigest()
        except (OSError, RuntimeError):  # also too large or not a regular file (kllint.pipeline.source)
            return None
        self.remember(name, digest, signature)
        return digest

    def remember(self, path: str | os.PathLike[str], digest: str, signature: list[int] | None) -> None:
        """Record `digest`, of bytes this run read from `path` after taking its `signature`."""
        if signature is not None and self.reference_ns is not None:
            self.digests[_named(path)] = [*signature, self.reference_ns, digest]
            self._dirty = True

    def skipped_result(self, entry: str, digest: str | None) -> bool:
        """Whether the entry named `entry` is a file the prefilter let go, with these bytes."""
        return digest is not None and self.skipped.get(entry) == digest

    def remember_skipped(self, entry: str, digest: str) -> None:
        if self.skipped.get(entry) != digest:
            self.skipped[entry] = digest
            self._dirty = True

    def save(self) -> None:
        """Write the manifest if this run changed it (silently skipped on any problem)."""
        if not self._dirty:
            return
        if len(self.digests) + len(self.skipped) > MAX_ROWS:
            self.digests, self.skipped = {}, {}
        try:
            body = json.dumps({"implementation": self.implementation, "digests": self.digests,
                               "skipped": self.skipped}, separators=(",", ":")).encode()
            with replacing(self.path, sync=False) as handle:
                handle.write(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
            self._dirty = False
        except Exception:  # noqa: BLE001 - a cache must never break a run
            return


def _reference(entries: Path) -> int | None:
    """The start of this run on the clocks that stamp files: the earlier of this machine's clock
    and the modification time of a stamp file written now in the cache folder (a file server's
    clock may lag this machine's); None when the stamp cannot be written (a read-only cache)."""
    now = time.time_ns()
    stamp = entries / STAMP
    try:
        with replacing(stamp, sync=False) as handle:
            handle.write(b"kllint\n")
        stamped = os.stat(stamp, follow_symlinks=False).st_mtime_ns
    except Exception:  # noqa: BLE001
        return None
    return min(now, stamped)
