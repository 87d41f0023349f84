"""SARIF 2.1.0 output for code scanning (GitHub `upload-sarif` and other SARIF viewers).

One run: every selected rule in `tool.driver.rules` (help markdown = the rule page), results with
repository-relative URIs (`uriBaseId: %SRCROOT%`, the root in `originalUriBaseIds`), 1-based
regions with exclusive ends in Unicode code points, the trace as `relatedLocations` and a
`codeFlows` thread, `fixes` for fixes with a replacement, and `automationDetails.id = "kllint/"`.
No `partialFingerprints`: GitHub computes its own.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

from kllint.report.paths import uri_bytes

from kllint import __version__
from kllint.diagnostics import Diagnostic, Span
from kllint.report.locations import file_region, relative_to_root, source_root
from kllint.rules.registry import BY_CODE, RULES, RuleInfo, rule_page

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
INFORMATION_URI = "https://github.com/kllint/kllint"
HELP_URI = "https://github.com/kllint/kllint/blob/main/rules/{code}.md"
SRCROOT = "%SRCROOT%"


def _page(code: str) -> str | None:
    try:
        return rule_page(code)
    except (KeyError, OSError):
        return None


def _first_paragraph(page: str) -> str | None:
    """The first prose paragraph of a rule page (after the title and any metadata lines)."""
    paragraph: list[str] = []
    for line in page.splitlines():
        stripped = line.strip()
        if not stripped:
            if paragraph:
                break
            continue
        if stripped.startswith(("#", "|", "```", "-", "*", ">")) and not paragraph:
            continue
        paragraph.append(stripped)
    text = " ".join(paragraph).strip()
    return text or None


def _full_description(page: str | None, summary: str) -> str:
    if page:
        match = re.search(r"^##\s+What it does\s*$(?P<body>.*?)(?=^##\s|\Z)", page, re.MULTILINE | re.DOTALL)
        if match:
            text = _first_paragraph(match.group("body"))
            if text:
                return text
    return summary


def rule_descriptor(info: RuleInfo) -> dict[str, Any]:
    """The `reportingDescriptor` of one rule."""
    page = _page(info.code)
    return {
        "id": info.code,
        "name": info.name,
        "shortDescription": {"text": info.summary},
        "fullDescription": {"text": _full_description(page, info.summary)},
        "help": {"text": info.summary, "markdown": page if page else info.summary},
        "helpUri": HELP_URI.format(code=info.code),
        "defaultConfiguration": {"level": info.severity},
        "properties": {"tags": ["correctness", "reinforcement-learning"]},
    }


class _Locator:
    def __init__(self, root: Path, cwd: Path) -> None:
        self.root = root
        self.cwd = cwd
        self.notebooks: dict = {}

    def region(self, path: str, cell: int | None, span: Span) -> dict[str, int]:
        """The region of `span` in the file's own lines (in a notebook: its JSON text)."""
        if cell is None:
            return _region(span)
        line, column, end_line, end_column = file_region(path, cell, span.line, span.column, span.end_line,
                                                         span.end_column, self.cwd, self.notebooks)
        return _region(Span(line, column, end_line, end_column))

    def artifact(self, path: str) -> dict[str, Any]:
        rel = relative_to_root(path, self.root, self.cwd)
        if rel is not None:
            return {"uri": quote(uri_bytes(rel)), "uriBaseId": SRCROOT}  # bytes: names need not be UTF-8
        absolute = (Path(path) if Path(path).is_absolute() else self.cwd / path).resolve()
        return {"uri": absolute.as_uri()}

    def physical(self, path: str, region: dict[str, int]) -> dict[str, Any]:
        return {"physicalLocation": {"artifactLocation": self.artifact(path), "region": region}}


def _region(span: Span) -> dict[str, int]:
    return {"startLine": span.line, "startColumn": span.column,
            "endLine": span.end_line, "endColumn": span.end_column}


def _result(d: Diagnostic, rule_index: int, locator: _Locator) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": d.code,
        "ruleIndex": rule_index,
        "level": d.severity,
        "message": {"text": d.message},
        "locations": [locator.physical(d.path, locator.region(d.path, d.cell, d.span))],
    }
    if d.trace:
        steps = []
        for number, step in enumerate(d.trace, 1):
            line, column = max(step.line, 1), max(step.column, 1)
            start = locator.region(step.path, step.cell, Span(line, column, line, column + 1))
            location = locator.physical(step.path, {"startLine": start["startLine"],
                                                    "startColumn": start["startColumn"]})
            location["message"] = {"text": step.note}
            steps.append(location)
        result["relatedLocations"] = [{"id": number, **step} for number, step in enumerate(steps, 1)]
        result["codeFlows"] = [{
            "message": {"text": f"From the KL estimate to its sink ({d.name})"},
            "threadFlows": [{"locations": [
                {"location": step, "executionOrder": number} for number, step in enumerate(steps, 1)
            ]}],
        }]
    if d.fix is not None and d.fix.replacement is not None and d.cell is None:  # (not in a notebook's JSON)
        result["fixes"] = [{
            "description": {"text": f"{d.fix.description} ({d.fix.applicability} fix)"},
            "artifactChanges": [{
                "artifactLocation": locator.artifact(d.path),
                "replacements": [{"deletedRegion": _region(d.fix.span or d.span),
                                  "insertedContent": {"text": d.fix.content if d.fix.span else d.fix.replacement}}],
            }],
        }]
    properties: dict[str, Any] = {}
    if d.help:
        properties["help"] = d.help
    if d.cell is not None:  # the position within the notebook cell, as the other formats show it
        properties.update(cell=d.cell, cellLine=d.span.line, cellColumn=d.span.column)
    if properties:
        result["properties"] = properties
    return result


def build(diagnostics: list[Diagnostic], selected: Iterable[str] | None = None, root: Path | None = None,
          cwd: Path | None = None, notifications: Iterable[str] = ()) -> dict[str, Any]:
    """The SARIF log (a dict) for `diagnostics`.

    `selected` are the codes enabled for the run (default: all rules); codes of reported
    diagnostics are added. `root` is the `%SRCROOT%` folder (default: the repository root above
    `cwd`); `notifications` are internal-error notes, reported as failed-execution notices.
    """
    cwd = (cwd or Path.cwd()).resolve()
    root = root if root is not None else source_root(cwd)
    codes = set(selected) if selected is not None else set(BY_CODE)
    codes |= {d.code for d in diagnostics}
    rules = [info for info in RULES if info.code in codes]
    index = {info.code: i for i, info in enumerate(rules)}
    locator = _Locator(root, cwd)
    notes = list(notifications)
    invocation: dict[str, Any] = {"executionSuccessful": not notes}
    if notes:
        invocation["toolExecutionNotifications"] = [
            {"level": "error", "message": {"text": note}} for note in notes
        ]
    root_uri = Path(root).resolve().as_uri()
    run: dict[str, Any] = {
        "tool": {"driver": {
            "name": "kllint",
            "version": __version__,
            "semanticVersion": __version__,
            "informationUri": INFORMATION_URI,
            "rules": [rule_descriptor(info) for info in rules],
        }},
        "automationDetails": {"id": "kllint/"},
        "originalUriBaseIds": {SRCROOT: {"uri": root_uri if root_uri.endswith("/") else root_uri + "/"}},
        "columnKind": "unicodeCodePoints",
        "invocations": [invocation],
        "results": [_result(d, index[d.code], locator) for d in sorted(diagnostics, key=lambda d: d.sort_key)],
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def render(diagnostics: list[Diagnostic], selected: Iterable[str] | None = None, root: Path | None = None,
           cwd: Path | None = None, notifications: Iterable[str] = ()) -> str:
    """The SARIF log as indented JSON text (see `build`)."""
    from kllint.report.visible import json_escaped

    # the same JSON value; C1 and bidi controls as \u escapes, so the file is safe to print
    return json_escaped(json.dumps(build(diagnostics, selected, root, cwd, notifications), indent=2,
                                   ensure_ascii=False)) + "\n"
