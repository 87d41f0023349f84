"""Helpers shared by the CLI, config, suppression, baseline, fix, SARIF and GitHub tests.

`FakeAnalysis` stands in for `kllint.rules.dispatch.check_source` so that these tests do not
depend on the real analysis: it reports a finding for each marker call in the source text.

- `BAD(x)`    -> KL102 on the call, with a safe fix `GOOD(x)` and a two-step trace;
- `RISKY(x)`  -> KL201 on the call, with an unsafe fix `FINE(x)`;
- `SHOW(x)`   -> KL105 on the call, with a display-only fix;
- `WARN(x)`   -> KL502 (a warning), no fix;
- `LOOP(x)`   -> KL101 with a safe fix that does not remove the finding (`LOOP(x )`);
- `BREAK(x)`  -> KL103 with a safe fix that does not parse.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kllint.cli import cli
from kllint.diagnostics import Diagnostic, Fix, Span, TraceStep
from kllint.rules.registry import BY_CODE

_MARKER = re.compile(r"\b(?P<name>BAD|RISKY|SHOW|WARN|LOOP|BREAK)\((?P<arg>[^()]*)\)")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")

_SPEC = {
    "BAD": ("KL102", "safe", "GOOD({arg})"),
    "RISKY": ("KL201", "unsafe", "FINE({arg})"),
    "SHOW": ("KL105", "display-only", "NEG({arg})"),
    "WARN": ("KL502", None, None),
    "LOOP": ("KL101", "safe", "LOOP({arg} )"),
    "BREAK": ("KL103", "safe", "BREAK({arg}"),
}


def make_diagnostic(code: str, path: str, span: Span, message: str = "expected gradient is wrong.",
                    fix: Fix | None = None, trace: tuple[TraceStep, ...] = (), help: str = "") -> Diagnostic:
    """A Diagnostic with the registry's name and severity for `code`."""
    info = BY_CODE[code]
    return Diagnostic(code, info.name, info.severity, path, span, message, help=help, trace=trace, fix=fix)


def fake_check_source(text: str, display: str, path, settings, index=None, outline=None, notes=None,
                      from_disk=False) -> list[Diagnostic]:
    """The fake analysis: findings for the marker calls of `text` (raises SyntaxError if it does not parse)."""
    compile(text, display, "exec")
    found = []
    for number, line in enumerate(_LINE_BREAK.split(text), 1):
        for match in _MARKER.finditer(line):
            code, applicability, template = _SPEC[match.group("name")]
            span = Span(number, match.start() + 1, number, match.end() + 1)
            fix = None
            if applicability is not None:
                fix = Fix(applicability, f"rewrite {match.group('name')}", template.format(arg=match.group("arg")))
            trace = (TraceStep(display, number, match.start() + 1, "k3 estimate built here"),
                     TraceStep(display, number, 1, "returned as the loss"))
            found.append(make_diagnostic(code, display, span, f"{match.group('name')} misuses the KL gradient.",
                                         fix=fix, trace=trace, help="use the k1 reward instead"))
    return found


@pytest.fixture
def fake_analysis(monkeypatch):
    """Replace the analysis by `fake_check_source` for the duration of a test."""
    import kllint.rules.dispatch as dispatch
    import kllint.pipeline.prefilter as prefilter

    monkeypatch.setattr(dispatch, "check_source", fake_check_source)
    monkeypatch.setattr(prefilter, "might_matter", lambda text, vocab=None: True)
    monkeypatch.setattr(prefilter, "code_might_matter", lambda outline, vocab=None: True)
    return fake_check_source


def run_cli(args: list[str], cwd: Path | None = None, monkeypatch=None):
    """Invoke `kllint` in-process; returns click's Result (stdout, stderr, exit_code)."""
    if cwd is not None and monkeypatch is not None:
        monkeypatch.chdir(cwd)
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def write(path: Path, text: str) -> Path:
    """Write `text` to `path` (creating folders), bytes as given (no newline translation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    return path
