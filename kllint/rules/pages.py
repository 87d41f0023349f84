"""Locate the rule pages: shipped in the wheel as `kllint/_rule_pages`, or `rules/` in a checkout."""
from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def pages_dir() -> Path:
    shipped = _PACKAGE_DIR / "_rule_pages"
    if shipped.is_dir():
        return shipped
    return _PACKAGE_DIR.parent / "rules"


def read_page(code: str) -> str:
    """Text of `<CODE>.md`. Raises KeyError when the page does not exist."""
    path = pages_dir() / f"{code}.md"
    if not path.is_file():
        raise KeyError(code)
    return path.read_text(encoding="utf-8")
