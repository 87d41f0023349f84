"""Control characters and bidi overrides of a checked file never reach the terminal raw: the
formats for people (full, concise, github, --diff, --show-fixes, stderr) show them as escapes,
JSON and SARIF keep the exact text as escaped JSON."""
from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console

from kllint.diagnostics import Fix, Span, TraceStep
from kllint.report import concise, github, sarif, text
from kllint.report import json as report_json
from kllint.report.visible import visible
from test_cli_support import fake_analysis, make_diagnostic, run_cli, write  # noqa: F401 - fixture

HOSTILE = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202egnp.\u2066x\u2069\x01"
# what a terminal must never receive: C0 but tab / newline, DEL, C1, bidi overrides and isolates
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_visible_escapes_controls_and_bidi_keeps_tabs_and_newlines():
    assert visible("a\x1bb\tc\u202ed\u2066e\x85f\x7f") == "a\\x1bb\tc\\u202ed\\u2066e\\x85f\\x7f"
    assert visible("one\ntwo\r\nthree\rfour") == "one\\ntwo\\r\\nthree\\rfour"
    assert visible("one\ntwo\r\nthree\rfour", newlines=True) == "one\ntwo\r\nthree\\rfour"
    assert visible("plain ünïcode → 日本") == "plain ünïcode → 日本"


def _hostile_diagnostic(path: str):
    fix = Fix("safe", f"rewrite {HOSTILE}", f"GOOD(x)  # {HOSTILE}", span=Span(2, 1, 2, 20),
              content=f"    y = 1  # {HOSTILE}\n    return GOOD(x)  # {HOSTILE}")
    trace = (TraceStep(path, 2, 12, f"returned by `{HOSTILE}`"),)
    return make_diagnostic("KL102", path, Span(2, 12, 2, 18), message=f"k3 from '{HOSTILE}'", fix=fix,
                           trace=trace, help=f"use {HOSTILE}")


@pytest.fixture
def hostile_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "t.py", f"def f(x):\n    return BAD(x)  # {HOSTILE}\n")
    return "t.py"


def test_full_output_escapes_frames_messages_trace_help_and_fix_preview(hostile_file):
    buffer = io.StringIO()
    text.render([_hostile_diagnostic(hostile_file)], Console(file=buffer, no_color=True, width=200, soft_wrap=True))
    out = buffer.getvalue()
    assert not RAW.search(out), repr(out)
    assert out.count("\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\u202egnp.\\u2066x\\u2069\\x01") == 6  # message, frame, trace, help, 2 fix lines
    frame = [line for line in out.splitlines() if line.startswith(" 2 | ")]
    carets = [line for line in out.splitlines() if re.fullmatch(r" +\| +\^+", line)][0]
    assert frame[0][carets.index("^"):carets.index("^") + 6] == "BAD(x)"  # carets under the span still


def test_concise_and_github_escape_too(hostile_file):
    d = _hostile_diagnostic(hostile_file)
    for out in (concise.render([d]), github.render([d])):
        assert not RAW.search(out), repr(out)
        assert "\\x1b[2J" in out and "\\u202e" in out
        assert out.count("\n") == 1


def test_sarif_and_json_keep_the_exact_text_as_escaped_json(hostile_file):
    d = _hostile_diagnostic(hostile_file)
    out = sarif.render([d], selected=frozenset({"KL102"}))
    assert not RAW.search(out)
    assert HOSTILE in json.loads(out)["runs"][0]["results"][0]["message"]["text"]
    out = report_json.render([d])
    assert not RAW.search(out) and "\\u001b[2J" in out
    assert json.loads(out)[0]["fix"]["region"]["content"] == d.fix.content


@pytest.mark.usefixtures("fake_analysis")
@pytest.mark.parametrize("args", [[], ["--output-format", "concise"], ["--output-format", "github"],
                                  ["--diff"], ["--show-fixes"], ["--statistics"], ["-v"]])
def test_the_command_never_prints_them_raw(hostile_file, args):
    result = run_cli(["check", "--no-cache", *args, hostile_file])
    assert not RAW.search(result.stdout + result.stderr), repr(result.stdout + result.stderr)
    if not args or args == ["--diff"]:
        assert "\\x1b[2J" in result.stdout


@pytest.mark.usefixtures("fake_analysis")
def test_a_file_name_with_an_escape_is_shown_escaped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "a\x1b[31m.py", "def f(x):\n    return BAD(x)\n")
    for args in ([], ["--output-format", "concise"], ["--show-files"]):
        result = run_cli(["check", "--no-cache", *args, "."])
        assert not RAW.search(result.stdout + result.stderr)
        assert "a\\x1b[31m.py" in result.stdout


def test_form_feed_does_not_shift_the_frame(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "t.py", "x = 1\x0c\ny = 2\x1c\ndef f(x):\n    return BAD(x)\n")
    d = make_diagnostic("KL102", "t.py", Span(4, 12, 4, 18))
    buffer = io.StringIO()
    text.render([d], Console(file=buffer, no_color=True, width=200, soft_wrap=True))
    assert " 4 |     return BAD(x)" in buffer.getvalue()
