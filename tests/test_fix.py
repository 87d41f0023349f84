"""Autofix machinery: applicability levels, verification, atomic writes, --fix / --unsafe-fixes / --diff."""
from __future__ import annotations

import json
import os
import stat

import pytest

from test_cli_support import fake_analysis, make_diagnostic, run_cli, write  # noqa: F401 - fixture

from kllint.config import Settings
from kllint.diagnostics import Fix, Span
from kllint.pipeline.discovery import Discovered
from kllint.fix import (FixError, apply_fixes, fix_text, is_applicable, line_ending, span_offsets,
                        unified_diff, write_atomic)


def _with_fix(span, replacement, applicability="safe", code="KL102"):
    return make_diagnostic(code, "m.py", span, fix=Fix(applicability, "rewrite", replacement))


# --- units -------------------------------------------------------------------------------


def test_applicability_levels():
    safe = _with_fix(Span(1, 1, 1, 2), "x", "safe")
    unsafe = _with_fix(Span(1, 1, 1, 2), "x", "unsafe")
    display = _with_fix(Span(1, 1, 1, 2), "x", "display-only")
    none = make_diagnostic("KL102", "m.py", Span(1, 1, 1, 2), fix=Fix("safe", "explain only", None))
    assert [is_applicable(d) for d in (safe, unsafe, display, none)] == [True, False, False, False]
    assert [is_applicable(d, unsafe=True) for d in (safe, unsafe, display, none)] == [True, True, False, False]


def test_span_offsets():
    text = "ab\r\ncdé\nfg"
    assert span_offsets(text, Span(2, 1, 2, 4)) == (4, 7)
    assert text[4:7] == "cdé"
    assert span_offsets(text, Span(1, 2, 3, 2)) == (1, 9)
    assert span_offsets(text, Span(2, 5, 2, 6)) is None  # past the end of the line
    assert span_offsets(text, Span(4, 1, 4, 2)) is None
    assert line_ending(text) == "\r\n" and line_ending("a\nb") == "\n" and line_ending("a") == "\n"


def test_apply_fixes_skips_overlaps_and_maps_regions():
    text = "x = BAD(a) + BAD(b)\n"
    first = _with_fix(Span(1, 5, 1, 11), "GOOD(a, more)")
    overlapping = _with_fix(Span(1, 5, 1, 20), "ALL", code="KL201")
    second = _with_fix(Span(1, 14, 1, 20), "GOOD(b)")
    new, applied = apply_fixes(text, [second, overlapping, first])
    assert new == "x = GOOD(a, more) + GOOD(b)\n"
    assert [(d.span, region) for d, region in applied] == [
        (Span(1, 5, 1, 11), Span(1, 5, 1, 18)), (Span(1, 14, 1, 20), Span(1, 21, 1, 28))]


def test_multiline_replacement_uses_the_files_line_endings():
    text = "a = 1\r\nloss = BAD(x)\r\n"
    new, _ = apply_fixes(text, [_with_fix(Span(2, 8, 2, 14), "(\n    GOOD(x)\n)")])
    assert new == "a = 1\r\nloss = (\r\n    GOOD(x)\r\n)\r\n"


def test_fix_text_verifies_and_iterates(fake_analysis):
    item = Discovered(path=__import__("pathlib").Path("m.py"), display="m.py")
    text = "a = BAD(x)\nb = LOOP(y)\nc = BREAK(z)\nd = RISKY(w)\ne = SHOW(v)\n"
    outcome = fix_text(text, item, Settings())
    assert outcome.text == "a = GOOD(x)\nb = LOOP(y)\nc = BREAK(z)\nd = RISKY(w)\ne = SHOW(v)\n"
    assert [d.code for d in outcome.fixed] == ["KL102"]
    assert sorted(d.code for d in outcome.rejected) == ["KL101", "KL103"]
    assert sorted(d.code for d in outcome.remaining) == ["KL101", "KL103", "KL105", "KL201"]
    unsafe = fix_text(text, item, Settings(), unsafe=True)
    assert "d = FINE(w)" in unsafe.text and "SHOW(v)" in unsafe.text


def test_write_atomic_keeps_mode_and_bytes(tmp_path):
    target = write(tmp_path / "m.py", "old\r\n")
    os.chmod(target, 0o751)
    write_atomic(target, "\ufeffnew é\r\n")
    assert target.read_bytes() == "\ufeffnew é\r\n".encode("utf-8")
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert [p.name for p in tmp_path.iterdir()] == ["m.py"]
    link = tmp_path / "link.py"
    link.symlink_to(target)
    write_atomic(link, "via link\n")
    assert link.is_symlink() and target.read_text() == "via link\n"


def test_write_atomic_error_is_fix_error(tmp_path):
    with pytest.raises(FixError, match="cannot write"):
        write_atomic(tmp_path / "missing" / "m.py", "x\n")


def test_unified_diff():
    diff = unified_diff("m.py", "a = BAD(x)\nb = 1", "a = GOOD(x)\nb = 1")
    assert diff.startswith("--- a/m.py\n+++ b/m.py\n")
    assert "-a = BAD(x)\n+a = GOOD(x)\n" in diff
    assert diff.endswith(" b = 1\n\\ No newline at end of file\n")
    crlf = unified_diff("m.py", "a = BAD(x)\r\n", "a = GOOD(x)\r\n")
    assert "-a = BAD(x)\r\n+a = GOOD(x)\r\n" in crlf


# --- command line ------------------------------------------------------------------------


@pytest.fixture
def fixable(tmp_path, monkeypatch, fake_analysis):
    monkeypatch.chdir(tmp_path)
    return write(tmp_path / "m.py", "import torch\r\n\r\nloss = BAD(x) + RISKY(y)\r\n")


def test_fix_safe_only_then_unsafe(fixable):
    result = run_cli(["check", "--fix", "--output-format", "json", "m.py"])
    assert result.exit_code == 1  # the unsafe one remains
    assert fixable.read_bytes() == b"import torch\r\n\r\nloss = GOOD(x) + RISKY(y)\r\n"
    remaining = json.loads(result.stdout)
    assert [(d["code"], d["column"]) for d in remaining] == [("KL201", 18)]
    both = run_cli(["check", "--fix", "--unsafe-fixes", "m.py"])
    assert both.exit_code == 0  # everything fixed
    assert fixable.read_bytes() == b"import torch\r\n\r\nloss = GOOD(x) + FINE(y)\r\n"
    assert "Fixed 1 finding." in both.stderr
    assert "Found 0 findings (1 file checked)." in both.stderr


def test_fix_all_fixed_exits_0(tmp_path, monkeypatch, fake_analysis):
    monkeypatch.chdir(tmp_path)
    target = write(tmp_path / "m.py", "a = BAD(x)\nb = BAD(y)\n")
    os.chmod(target, 0o600)
    result = run_cli(["check", "--fix", "m.py"])
    assert result.exit_code == 0
    assert target.read_text() == "a = GOOD(x)\nb = GOOD(y)\n"
    assert "Fixed 2 findings." in result.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_rejected_fixes_leave_the_file_alone(tmp_path, monkeypatch, fake_analysis):
    monkeypatch.chdir(tmp_path)
    target = write(tmp_path / "m.py", "a = LOOP(x)\nb = BREAK(y)\nc = SHOW(z)\n")
    before = target.read_bytes()
    result = run_cli(["check", "--fix", "--unsafe-fixes", "--output-format", "concise", "m.py"])
    assert result.exit_code == 1
    assert target.read_bytes() == before
    assert "fix for KL101 not applied" in result.stderr and "fix for KL103 not applied" in result.stderr
    assert len(result.stdout.splitlines()) == 3


def test_diff_prints_and_does_not_write(fixable):
    before = fixable.read_bytes()
    result = run_cli(["check", "--diff", "m.py"])
    assert result.exit_code == 1
    assert fixable.read_bytes() == before
    assert result.stdout.startswith("--- a/m.py\n+++ b/m.py\n")
    assert "-loss = BAD(x) + RISKY(y)\n+loss = GOOD(x) + RISKY(y)\n" in result.stdout  # click drops CR
    assert "Would fix 1 finding." in result.stderr
    unsafe = run_cli(["check", "--diff", "--unsafe-fixes", "m.py"])
    assert "+loss = GOOD(x) + FINE(y)" in unsafe.stdout


def test_diff_without_fixes_exits_0(tmp_path, monkeypatch, fake_analysis):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m.py", "a = SHOW(x)\n")
    result = run_cli(["check", "--diff", "m.py"])
    assert result.exit_code == 0
    assert result.stdout == ""


def test_fix_hint_without_fix(fixable):
    result = run_cli(["check", "m.py"])
    assert "[*] 1 fixable with the `--fix` option." in result.stderr
    assert "1 hidden fix can be enabled with the `--unsafe-fixes` option." in result.stderr
