"""Inline suppressions: `# noqa: KL102`, `# kllint: ignore[KL102] reason` (trailing or on the line
before), and `# kllint: file-ignore[KL2]`. Codes are required: a blanket `# noqa` written for a
style tool does not hide a correctness finding.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kllint.diagnostics import Diagnostic

_NOQA = re.compile(r"#\s*noqa\s*:\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*kllint\s*:\s*ignore\[(?P<codes>[^\]]+)\]", re.IGNORECASE)
_FILE_IGNORE = re.compile(r"#\s*kllint\s*:\s*file-ignore\[(?P<codes>[^\]]+)\]", re.IGNORECASE)


def _codes(text: str) -> set[str]:
    return {c.strip().upper() for c in re.split(r"[\s,]+", text) if c.strip()}


def _matches(code: str, selectors: set[str]) -> bool:
    return any(code.startswith(sel) for sel in selectors)


@dataclass
class Suppressions:
    """Suppressions found in one file's text."""

    by_line: dict[int, set[str]] = field(default_factory=dict)
    file_wide: set[str] = field(default_factory=set)

    @classmethod
    def parse(cls, text: str) -> "Suppressions":
        result = cls()
        if "noqa" not in text and "kllint" not in text:
            return result
        for number, line in enumerate(text.splitlines(), 1):
            if "#" not in line:
                continue
            for match in _NOQA.finditer(line):
                result.by_line.setdefault(number, set()).update(_codes(match.group("codes")))
            for match in _IGNORE.finditer(line):
                codes = _codes(match.group("codes"))
                result.by_line.setdefault(number, set()).update(codes)
                if line.lstrip().startswith("#"):  # a comment line covers the next line
                    result.by_line.setdefault(number + 1, set()).update(codes)
            for match in _FILE_IGNORE.finditer(line):
                result.file_wide.update(_codes(match.group("codes")))
        return result

    def hides(self, diagnostic: Diagnostic) -> bool:
        if _matches(diagnostic.code, self.file_wide):
            return True
        for line in range(diagnostic.span.line, diagnostic.span.end_line + 1):
            if _matches(diagnostic.code, self.by_line.get(line, set())):
                return True
        return False
