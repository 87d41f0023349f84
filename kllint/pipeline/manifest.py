"""The cache's manifest: what lets a warm run check most files with one `stat` each, instead of
reading and hashing each file and loading its entry.

One file beside the entries (`manifest.json`, the sha256 of its body on the first line, like
the entries; written atomically at the end of a run), with two tables:

- `digests`: absolute path -> [size, mtime_ns, inode, ctime_ns, sha256] of a file, recorded with
  the time it was recorded. A file whose `stat` still gives the same signature has the recorded
  sha256 without being read, provided it had not changed for `RACY_NS` before the signature was
  taken: a file written within the clock's granularity of the recording could keep its
  timestamps while its bytes change (git's "racily clean" entries are re-hashed alike).
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

NAME = "manifest.json"
RACY_NS = 2_000_000_000  # 2 s: coarser than the timestamps of every common file system
MAX_ROWS = 500_000  # a larger manifest starts afresh (rows of files long gone)


class Manifest:
    """The digests and prefilter-skipped results of one cache folder (`entries`), for one run.

    `limit` is the largest file whose digest is taken (larger files are never checked).
    """

    def __init__(self, entries: Path, implementation: str, limit: int, max_bytes: int) -> None:
        self.path = entries / NAME
        self.implementation = implementation
        self.limit = limit
        self.started_ns = time.time_ns()  # a file changed after this may have changed after it was read
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
        except (OSError, ValueError):
            pass

    def _adopt(self, loaded: dict[str, Any]) -> None:
        digests, skipped = loaded.get("digests"), loaded.get("skipped")
        if isinstance(digests, dict):
            self.digests = digests
        if isinstance(skipped, dict) and loaded.get("implementation") == self.implementation:
            self.skipped = skipped

    def digest(self, path: str | os.PathLike[str]) -> str | None:
        """The sha256 of the file at `path` (None when it is not a readable regular file of at
        most `limit` bytes): from its recorded row while its `stat` signature is unchanged,
        else read, hashed and recorded."""
        name = os.path.abspath(path)
        try:
            st = os.stat(name)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        signature = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
        row = self.digests.get(name)
        if (isinstance(row, list) and len(row) == 6 and row[:4] == signature and isinstance(row[5], str)
                and isinstance(row[4], int) and row[4] - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_NS):
            return row[5]
        recorded = time.time_ns()  # taken after the signature: a later change shows in the signature
        try:
            digest = hashlib.sha256(read_regular(name, self.limit)).hexdigest()
        except (OSError, RuntimeError):  # also too large or not a regular file (kllint.pipeline.source)
            return None
        self.digests[name] = [*signature, recorded, digest]
        self._dirty = True
        return digest

    def remember(self, path: str | os.PathLike[str], digest: str) -> None:
        """Record `digest`, taken from the bytes a run read from `path` after it started, if
        the file's timestamps show it unchanged since well before that (else nothing)."""
        name = os.path.abspath(path)
        try:
            st = os.stat(name)
        except OSError:
            return
        if stat.S_ISREG(st.st_mode) and max(st.st_mtime_ns, st.st_ctime_ns) < self.started_ns - RACY_NS:
            self.digests[name] = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, self.started_ns, digest]
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
        except (OSError, TypeError, ValueError):
            return
