"""`kllint check`: exit codes, stdout/stderr separation, output formats, --report, --statistics,
progress and summaries of large runs, and one-line usage errors."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from test_cli_support import fake_analysis, run_cli, write  # noqa: F401 - fixture

from kllint.session import CheckOptions, run_check


@pytest.fixture
def project(tmp_path, monkeypatch, fake_analysis):
    write(tmp_path / "pkg" / "loss.py", "import torch\n\ndef loss(x):\n    return BAD(x)\n")
    write(tmp_path / "pkg" / "clean.py", "def ok(x):\n    return x\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_findings_exit_1_clean_exit_0(project):
    result = run_cli(["check", "pkg"])
    assert result.exit_code == 1
    assert "pkg/loss.py:4:12: KL102" in result.stdout
    assert "Found 1 finding in 1 file (2 checked)." in result.stderr
    assert "Found" not in result.stdout
    clean = run_cli(["check", "pkg/clean.py"])
    assert clean.exit_code == 0
    assert "Found 0 findings (1 file checked)." in clean.stderr


def test_exit_zero(project):
    result = run_cli(["check", "--exit-zero", "pkg"])
    assert result.exit_code == 0
    assert "KL102" in result.stdout


@pytest.mark.parametrize("fmt", ["json", "sarif", "github"])
def test_machine_formats_keep_stdout_pure(project, fmt):
    result = run_cli(["check", "--output-format", fmt, "pkg"])
    assert result.exit_code == 1
    if fmt in ("json", "sarif"):
        json.loads(result.stdout)  # nothing else on stdout
    else:
        assert all(line.startswith("::error ") for line in result.stdout.splitlines())
    assert "Found" not in result.stderr  # no human summary with machine formats


def test_concise(project):
    result = run_cli(["check", "--output-format", "concise", "pkg"])
    assert result.stdout == "pkg/loss.py:4:12: KL102 [*] BAD misuses the KL gradient.\n"


def test_report_writes_extra_formats(project):
    result = run_cli(["check", "--output-format", "github", "--report", "sarif:out/kllint.sarif",
                      "--report", "json:out/kllint.json", "--report", "full:out/full.txt", "pkg"])
    assert result.exit_code == 1
    assert result.stdout.startswith("::error file=pkg/loss.py,line=4,col=12")
    sarif = json.loads((project / "out" / "kllint.sarif").read_text())
    assert sarif["runs"][0]["results"][0]["ruleId"] == "KL102"
    data = json.loads((project / "out" / "kllint.json").read_text())
    assert [d["code"] for d in data] == ["KL102"]
    full = (project / "out" / "full.txt").read_text()
    assert "pkg/loss.py:4:12: KL102 [k3-as-loss]" in full
    assert "\x1b[" not in full


@pytest.mark.parametrize("value,message", [
    ("sarif", "expects FORMAT:PATH"),
    ("xml:out.xml", "unknown format 'xml'"),
])
def test_bad_report_option_is_one_line_usage_error(project, value, message):
    result = run_cli(["check", "--report", value, "pkg"])
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_missing_path_and_bad_selector(project):
    missing = run_cli(["check", "nope.py"])
    assert missing.exit_code == 2
    assert missing.stderr.strip() == "kllint: error: nope.py: no such file or directory"
    bad = run_cli(["check", "--select", "KL9999", "pkg"])
    assert bad.exit_code == 2
    assert "unknown rule selector 'KL9999'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_select_ignore_on_command_line(project):
    write(project / "pkg" / "more.py", "y = WARN(z)\n")
    only = run_cli(["check", "--output-format", "concise", "--select", "KL5", "pkg"])
    assert [line.split()[1] for line in only.stdout.splitlines()] == ["KL502"]
    ignored = run_cli(["check", "--output-format", "concise", "--ignore", "k3-as-loss", "pkg"])
    assert [line.split()[1] for line in ignored.stdout.splitlines()] == ["KL502"]


def test_statistics_prints_only_the_table(project):
    write(project / "pkg" / "more.py", "a = BAD(x)\nb = BAD(y)\nc = WARN(z)\n")
    result = run_cli(["check", "--statistics", "--output-format", "concise", "pkg"])
    assert result.exit_code == 1
    assert result.stdout == "3\tKL102\t[*] k3-as-loss\n1\tKL502\tkl-div-mean-reduction\n"
    assert result.stderr == ""  # no findings, no summary, no hints: only the table
    as_json = run_cli(["check", "--statistics", "--output-format", "json", "pkg"])
    assert json.loads(as_json.stdout) == [
        {"code": "KL102", "name": "k3-as-loss", "count": 3, "fixable": True},
        {"code": "KL502", "name": "kl-div-mean-reduction", "count": 1, "fixable": False}]


def test_syntax_error_is_a_finding_not_a_crash(project):
    write(project / "pkg" / "broken.py", "def f(:\n")
    result = run_cli(["check", "--output-format", "json", "pkg"])
    assert result.exit_code == 1
    codes = {(d["path"], d["code"]) for d in json.loads(result.stdout)}
    assert ("pkg/broken.py", "KL900") in codes


def test_internal_error_exits_2_with_one_line(project, monkeypatch):
    import kllint.rules.dispatch as dispatch

    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(dispatch, "check_source", explode)
    result = run_cli(["check", "pkg/clean.py"])
    assert result.exit_code == 2
    assert "pkg/clean.py: internal error: RuntimeError: boom" in result.stderr


def _many_files(root, count):
    for index in range(count):
        write(root / "big" / f"m{index:03d}.py", "x = BAD(a)\n" if index % 50 == 0 else "x = 1\n")


def test_large_run_shows_progress_on_terminal_and_summary(tmp_path, monkeypatch, fake_analysis, capsys):
    _many_files(tmp_path, 205)
    monkeypatch.chdir(tmp_path)
    err_buffer = io.StringIO()
    err = Console(file=err_buffer, force_terminal=True, width=100)
    stdout = io.StringIO()
    calls = []
    import kllint.session as session

    real_analyse = session._analyse

    def spy(files, resolver, show_progress, console, **options):
        calls.append(show_progress)
        return real_analyse(files, resolver, show_progress, console, **options)

    monkeypatch.setattr(session, "_analyse", spy)
    code = run_check(CheckOptions(paths=("big",), output_format="concise"), stdout=stdout, err=err,
                     is_terminal=lambda: True)
    assert code == 1
    assert calls == [True]
    assert "\x1b[" not in stdout.getvalue()  # the bar never reaches stdout
    assert "checking" in err_buffer.getvalue()
    text = err_buffer.getvalue()
    assert "Findings per code" not in text  # summary tables only when asked (--statistics)
    # machine format or no terminal: no progress bar, no summary tables
    for fmt, terminal in (("json", True), ("concise", False)):
        calls.clear()
        err_buffer.truncate(0)
        run_check(CheckOptions(paths=("big",), output_format=fmt), stdout=io.StringIO(), err=err,
                  is_terminal=lambda terminal=terminal: terminal)
        assert calls == [False]


def test_no_summary_tables_unasked_in_large_runs(tmp_path, monkeypatch, fake_analysis):
    _many_files(tmp_path, 205)
    monkeypatch.chdir(tmp_path)
    result = run_cli(["check", "--output-format", "json", "big"])
    assert "Findings per code" not in result.stderr
    json.loads(result.stdout)
    human = run_cli(["check", "--output-format", "concise", "big"])
    assert "Findings per" not in human.stderr and "KL102" not in human.stderr
    assert human.stderr.startswith("Found 5 findings in 5 files (205 checked).")


def test_console_script_has_no_traceback_on_bad_config(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.kllint]\nselect = 3\n")
    write(tmp_path / "a.py", "x = 1\n")
    proc = subprocess.run([sys.executable, "-m", "kllint", "check", "a.py"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "`select` must be a list of strings" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_console_script_exit_status_and_output_survive_the_fast_exit(tmp_path):
    """The console script ends with os._exit (kllint.exit): the status click chose and every
    byte of a large report must still come out."""
    write(tmp_path / "clean.py", "x = 1\n")
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    command = [sys.executable, "-m", "kllint", "check", "--no-cache", "--output-format", "json"]
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    clean = subprocess.run([*command, "clean.py"], cwd=tmp_path, capture_output=True, text=True, env=buffered)
    assert (clean.returncode, json.loads(clean.stdout)) == (0, [])
    found = subprocess.run([*command, str(fixtures)], cwd=tmp_path, capture_output=True, text=True, env=buffered)
    assert found.returncode == 1
    assert len(found.stdout) > 65536  # more than any pipe or stdio buffer
    assert len(json.loads(found.stdout)) > 50
    usage = subprocess.run([*command, "--select", "NOPE", "clean.py"], cwd=tmp_path, capture_output=True, text=True)
    assert usage.returncode == 2 and usage.stdout == "" and "Traceback" not in usage.stderr


def test_exit_status_follows_sys_exit():
    from kllint.exit import exit_status

    assert [exit_status(None), exit_status(0), exit_status(1), exit_status(2), exit_status("message")] == [0, 0, 1, 2, 1]
