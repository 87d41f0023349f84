"""Baselines for adopting kllint in an existing code base (`--write-baseline`, `--baseline`).

A baseline file records a fingerprint per finding; with `--baseline FILE`, findings whose
fingerprint is recorded are not reported, so only new ones fail the run. A fingerprint is the
SHA-256 of: the rule code, the file's path relative to the baseline file's folder, the source
text of the primary span's lines (whitespace runs collapsed, ends stripped) and the finding's
occurrence index among findings of that file with the same code and text. Line numbers are not
part of it, so findings survive lines added or removed above them; editing the flagged line
itself makes the finding new.

File format (JSON, stable):
`{"kllint-baseline": 1, "findings": [{"fingerprint", "code", "path", "line", "message"}]}`;
only `fingerprint` is used for matching, the rest helps reviewers.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kllint.diagnostics import Diagnostic
from kllint.report.paths import escape_path

FORMAT_VERSION = 1
MAX_BASELINE_BYTES = 256 * 1024 * 1024
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class BaselineError(Exception):
    """A baseline file cannot be read or written, or is not a kllint baseline."""


def _relative_path(display: str, base: Path, cwd: Path) -> str:
    absolute = Path(display) if Path(display).is_absolute() else cwd / display
    return Path(os.path.relpath(os.path.abspath(absolute), os.path.abspath(base))).as_posix()


def _normalized(lines: list[str], diagnostic: Diagnostic) -> str:
    span = diagnostic.span
    if not (1 <= span.line <= len(lines)):
        return diagnostic.message
    chosen = lines[span.line - 1: min(span.end_line, len(lines))]
    return "\n".join(" ".join(line.split()) for line in chosen)


def _read_lines(path: Path) -> list[str]:
    try:
        from kllint.pipeline.source import read_regular

        return _LINE_BREAK.split(read_regular(path, 20 * 1024 * 1024).decode("utf-8", errors="replace"))
    except (OSError, RuntimeError):
        return []


def _cell_lines(path: Path, cell: int) -> list[str]:
    """The lines of a notebook cell (a finding in a notebook is fingerprinted by its cell's text)."""
    from kllint.notebook import read_notebook

    notebook = read_notebook(path)
    code = notebook.cell(cell) if notebook is not None else None
    return _LINE_BREAK.split("".join(code.lines)) if code is not None else []


def fingerprints(diagnostics: list[Diagnostic], base: Path, cwd: Path | None = None,
                 read_lines: Callable[[Path], list[str]] = _read_lines) -> list[tuple[Diagnostic, str]]:
    """Each diagnostic with its fingerprint (see the module docstring), in the order given.

    `base` is the folder paths are made relative to (the baseline file's folder); `cwd` is the
    folder the diagnostics' paths are relative to.
    """
    cwd = cwd or Path.cwd()
    cache: dict[str, list[str]] = {}
    occurrences: Counter[tuple[str, str, str]] = Counter()
    result: list[tuple[Diagnostic, str]] = []
    for diagnostic in sorted(diagnostics, key=lambda d: d.sort_key):
        where = diagnostic.path if diagnostic.cell is None else f"{diagnostic.path}\0{diagnostic.cell}"
        if where not in cache:
            source = Path(diagnostic.path) if Path(diagnostic.path).is_absolute() else cwd / diagnostic.path
            cache[where] = read_lines(source) if diagnostic.cell is None else _cell_lines(source, diagnostic.cell)
        rel = _relative_path(diagnostic.path, base, cwd)
        text = _normalized(cache[where], diagnostic)
        key = (diagnostic.code, rel, text)
        index = occurrences[key]
        occurrences[key] += 1
        digest = hashlib.sha256("\0".join((diagnostic.code, rel, text, str(index)))
                                .encode("utf-8", "surrogateescape")).hexdigest()
        result.append((diagnostic, digest))
    order = {id(d): i for i, d in enumerate(diagnostics)}
    result.sort(key=lambda pair: order[id(pair[0])])
    return result


@dataclass(frozen=True)
class Baseline:
    """The fingerprints recorded in a baseline file (with multiplicity)."""

    path: Path
    fingerprints: Counter

    def split(self, diagnostics: list[Diagnostic], cwd: Path | None = None) -> tuple[list[Diagnostic], list[Diagnostic]]:
        """(new findings, findings recorded in the baseline); each record matches once."""
        left = Counter(self.fingerprints)
        new: list[Diagnostic] = []
        known: list[Diagnostic] = []
        for diagnostic, digest in fingerprints(diagnostics, self.path.parent, cwd):
            if left[digest] > 0:
                left[digest] -= 1
                known.append(diagnostic)
            else:
                new.append(diagnostic)
        return new, known


def load(path: Path) -> Baseline:
    """Read a baseline file.

    Raises:
        BaselineError: unreadable, not JSON, or not a kllint baseline.
    """
    from kllint.pipeline.source import read_regular

    try:
        data = json.loads(read_regular(path, MAX_BASELINE_BYTES).decode("utf-8"))
    except RecursionError:
        raise BaselineError(f"{path}: not a kllint baseline (JSON nested too deeply)") from None
    except (OSError, RuntimeError) as exc:
        raise BaselineError(f"{path}: cannot read baseline: {getattr(exc, 'strerror', None) or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BaselineError(f"{path}: not a kllint baseline (invalid JSON: {exc})") from None
    if not isinstance(data, dict) or data.get("kllint-baseline") != FORMAT_VERSION \
            or not isinstance(data.get("findings"), list):
        raise BaselineError(f"{path}: not a kllint baseline (version {FORMAT_VERSION} expected)")
    found: Counter[str] = Counter()
    for entry in data["findings"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("fingerprint"), str):
            raise BaselineError(f"{path}: not a kllint baseline (a finding has no fingerprint)")
        found[entry["fingerprint"]] += 1
    return Baseline(path.resolve(), found)


def write(path: Path, diagnostics: list[Diagnostic], cwd: Path | None = None) -> int:
    """Write a baseline of `diagnostics` to `path` (atomically); returns the number recorded.

    Raises:
        BaselineError: the file cannot be written.
    """
    from kllint.outfiles import OutputFileError, write_output

    cwd = cwd or Path.cwd()
    base = (path if path.is_absolute() else cwd / path).parent
    entries = [
        {"fingerprint": digest, "code": d.code, "path": escape_path(_relative_path(d.path, base, cwd)),
         "line": d.span.line, "message": d.message}
        for d, digest in fingerprints(diagnostics, base, cwd)
    ]
    entries.sort(key=lambda e: (e["path"], e["line"], e["code"], e["fingerprint"]))
    text = json.dumps({"kllint-baseline": FORMAT_VERSION, "findings": entries}, indent=2) + "\n"
    try:  # as --output-file and --report: a missing folder is created, the file replaced atomically
        write_output(path, text, "--write-baseline")
    except OutputFileError as exc:
        raise BaselineError(str(exc)) from None
    return len(entries)
