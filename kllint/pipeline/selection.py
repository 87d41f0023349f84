"""Which findings of a file are reported: the selected codes, minus the per-file ignores of the
configuration and what inline suppression comments hide, plus KL901 (unused suppressions) when
it is selected. Applied to fresh results and to cached ones alike."""
from __future__ import annotations

import fnmatch
from pathlib import Path

from kllint.config import Settings
from kllint.diagnostics import Diagnostic
from kllint.pipeline.suppression_audit import UNUSED_CODE, unknown_codes, unused_suppressions
from kllint.pipeline.suppressions import Suppressions, names_a_suppression
from kllint.rules.registry import select_codes


def _per_file_ignored(display: str, settings: Settings, path: Path | None = None) -> set[str]:
    candidates = {display, Path(display).name}
    if path is not None and settings.root is not None:
        try:
            candidates.add(path.resolve().relative_to(settings.root.resolve()).as_posix())
        except ValueError:
            pass
    ignored: set[str] = set()
    for pattern, codes in settings.per_file_ignores:
        if any(fnmatch.fnmatch(candidate, pattern) for candidate in candidates):
            ignored |= set(select_codes(["ALL"], []) - select_codes(["ALL"], list(codes)))
    return ignored


def filter_found(found: list[Diagnostic], text: str | None, display: str, settings: Settings,
                 path: Path | None = None, warnings: list[str] | None = None) -> list[Diagnostic]:
    """Keep the findings of selected codes that no per-file-ignore or inline suppression hides,
    and add KL901 (unused suppressions) when it is selected. `warnings` collects the unknown
    codes of the suppression comments. `text` None stands for a text of which
    `names_a_suppression` is false (the result cache records it): it holds no suppression."""
    if text is not None and not names_a_suppression(text):
        text = None
    if warnings is not None and text is not None:
        warnings.extend(unknown_codes(text, display))
    audit = UNUSED_CODE in settings.active_codes
    if not found and not audit:
        return []
    active = settings.active_codes - _per_file_ignored(display, settings, path)
    if text is None:
        kept = [d for d in found if d.code in active]
        return sorted(kept, key=lambda d: d.sort_key) if audit and UNUSED_CODE in active else kept
    suppressions = Suppressions.parse(text, blanket_noqa=settings.blanket_noqa)
    kept = [d for d in found if d.code in active and not suppressions.hides(d)]
    if audit and UNUSED_CODE in active:
        kept.extend(d for d in unused_suppressions(text, display, found, frozenset(active))
                    if not suppressions.hides(d))
        kept.sort(key=lambda d: d.sort_key)
    return kept
