"""Baselines: fingerprints that survive line shifts, --write-baseline and --baseline."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_cli_support import fake_analysis, make_diagnostic, run_cli, write  # noqa: F401 - fixture

from kllint.baseline import BaselineError, fingerprints, load
from kllint.diagnostics import Span


def _prints(tmp_path, text, spans, code="KL102"):
    write(tmp_path / "m.py", text)
    diagnostics = [make_diagnostic(code, "m.py", span) for span in spans]
    return [digest for _, digest in fingerprints(diagnostics, tmp_path, tmp_path)]


def test_fingerprint_ignores_line_numbers_and_indentation(tmp_path):
    first = _prints(tmp_path, "a = BAD(x)\n", [Span(1, 5, 1, 11)])
    shifted = _prints(tmp_path, "import os\n\n\ndef f():\n    a  =  BAD(x)\n", [Span(5, 10, 5, 16)])
    assert first == shifted
    edited = _prints(tmp_path, "a = BAD(y)\n", [Span(1, 5, 1, 11)])
    assert edited != first


def test_fingerprint_depends_on_code_path_and_occurrence(tmp_path):
    text = "a = BAD(x)\na = BAD(x)\n"
    two = _prints(tmp_path, text, [Span(1, 5, 1, 11), Span(2, 5, 2, 11)])
    assert len(set(two)) == 2
    other_code = _prints(tmp_path, text, [Span(1, 5, 1, 11)], code="KL201")
    assert other_code[0] not in two
    write(tmp_path / "n.py", text)
    moved = fingerprints([make_diagnostic("KL102", "n.py", Span(1, 5, 1, 11))], tmp_path, tmp_path)
    assert moved[0][1] not in two


def test_load_rejects_other_files(tmp_path):
    with pytest.raises(BaselineError, match="cannot read baseline"):
        load(tmp_path / "missing.json")
    write(tmp_path / "bad.json", "{")
    with pytest.raises(BaselineError, match="invalid JSON"):
        load(tmp_path / "bad.json")
    write(tmp_path / "other.json", '{"findings": []}')
    with pytest.raises(BaselineError, match="not a kllint baseline"):
        load(tmp_path / "other.json")


def test_cli_baseline_workflow(tmp_path, monkeypatch, fake_analysis):
    monkeypatch.chdir(tmp_path)
    source = write(tmp_path / "src" / "train.py", "a = BAD(x)\nb = RISKY(y)\n")
    written = run_cli(["check", "--write-baseline", "kllint-baseline.json", "src"])
    assert written.exit_code == 0
    assert "Wrote a baseline of 2 findings to kllint-baseline.json." in written.stderr
    data = json.loads((tmp_path / "kllint-baseline.json").read_text())
    assert data["kllint-baseline"] == 1
    assert [(e["path"], e["code"], e["line"]) for e in data["findings"]] == [
        ("src/train.py", "KL102", 1), ("src/train.py", "KL201", 2)]

    clean = run_cli(["check", "--baseline", "kllint-baseline.json", "src"])
    assert clean.exit_code == 0
    assert "2 findings hidden by the baseline" in clean.stderr

    # lines added above: still known; a new finding is reported
    write(source, "import torch\n\n\na = BAD(x)\nb = RISKY(y)\nc = BAD(new)\n")
    shifted = run_cli(["check", "--baseline", "kllint-baseline.json", "--output-format", "json", "src"])
    assert shifted.exit_code == 1
    assert [(d["line"], d["code"]) for d in json.loads(shifted.stdout)] == [(6, "KL102")]

    # a second identical finding is new too (occurrence index)
    write(source, "a = BAD(x)\nb = RISKY(y)\na = BAD(x)\n")
    twice = run_cli(["check", "--baseline", "kllint-baseline.json", "--output-format", "json", "src"])
    assert [(d["line"], d["code"]) for d in json.loads(twice.stdout)] == [(3, "KL102")]


def test_cli_baseline_from_another_folder(tmp_path, monkeypatch, fake_analysis):
    write(tmp_path / "proj" / "m.py", "a = BAD(x)\n")
    monkeypatch.chdir(tmp_path / "proj")
    assert run_cli(["check", "--write-baseline", "base.json", "."]).exit_code == 0
    monkeypatch.chdir(tmp_path)  # paths are relative to the baseline file, not to the cwd
    result = run_cli(["check", "--baseline", "proj/base.json", "proj"])
    assert result.exit_code == 0


def test_cli_bad_baseline_is_usage_error(tmp_path, monkeypatch, fake_analysis):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m.py", "x = 1\n")
    result = run_cli(["check", "--baseline", "nope.json", "m.py"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "kllint: error: nope.json: cannot read baseline: No such file or directory"
