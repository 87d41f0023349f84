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
