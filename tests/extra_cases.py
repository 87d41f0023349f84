"""Optional extra annotated cases from outside the repository (same grammar as `fixtures/`).

Set `KLLINT_EXTRA_CASES` to a folder of `*.py` cases annotated with `# expect: KL102` / `# ok`
to have the fixture, prefilter, parallel and fix tests run on them too; without it those tests
are skipped. The repository's own tests never depend on files outside it.
"""
from __future__ import annotations

import os
from pathlib import Path

VARIABLE = "KLLINT_EXTRA_CASES"


def extra_cases_dir() -> Path | None:
    """The folder named by `KLLINT_EXTRA_CASES`, or None when unset (or not a folder)."""
    value = os.environ.get(VARIABLE, "").strip()
    if not value:
        return None
    folder = Path(value).expanduser().resolve()
    return folder if folder.is_dir() else None


SKIP_REASON = f"{VARIABLE} is not set to a folder of annotated cases"


DEV_SET_VARIABLE = "KLLINT_DEV_SET"
CAPABILITIES_VARIABLE = "KLLINT_CAPABILITIES"


def _folder(value: str) -> Path | None:
    folder = Path(value).expanduser().resolve() if value.strip() else None
    return folder if folder is not None and folder.is_dir() else None


def dev_set_folder(name: str) -> Path | None:
    """`$KLLINT_DEV_SET/<name>` when `KLLINT_DEV_SET` names a folder that has it, else None."""
    base = _folder(os.environ.get(DEV_SET_VARIABLE, ""))
    return _folder(str(base / name)) if base is not None else None


def cases_dir() -> Path | None:
    """The annotated cases: `KLLINT_EXTRA_CASES`, else `$KLLINT_DEV_SET/cases` (None: neither)."""
    return extra_cases_dir() or dev_set_folder("cases")


def capabilities_dir() -> Path | None:
    """The capability cases (small programs and packages, one construct each, same grammar):
    `KLLINT_CAPABILITIES`, else `$KLLINT_DEV_SET/capabilities` (None: neither), the folder
    .ci/run finds beside the cases folder."""
    return _folder(os.environ.get(CAPABILITIES_VARIABLE, "")) or dev_set_folder("capabilities")
