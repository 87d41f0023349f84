"""JSON output: the stable contract (an array of diagnostics, sorted by path, line, column, code)."""
from __future__ import annotations

import json

from kllint.diagnostics import Diagnostic


def render(diagnostics: list[Diagnostic]) -> str:
    return json.dumps([d.to_json() for d in sorted(diagnostics, key=lambda d: d.sort_key)], indent=2) + "\n"
