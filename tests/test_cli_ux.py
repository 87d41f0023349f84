"""The command line a Ruff user expects: named paths under excluded folders, -q / -v,
--show-files, --show-settings, --output-file, --exclude / --extend-exclude, --show-fixes,
--exit-non-zero-on-fix, `[*]` markers, the unsafe-fix hints, `rules --output-format json` and
an unusable --cache-dir."""
from __future__ import annotations

import json

import pytest

from test_cli_support import fake_analysis, run_cli, write  # noqa: F401 - fixture


@pytest.fixture
def project(tmp_path, monkeypatch, fake_analysis):
    write(tmp_path / "pkg" / "loss.py", "import torch\n\ndef loss(x):\n    return BAD(x)\n")
    write(tmp_path / "pkg" / "risky.py", "def loss(x):\n    return RISKY(x)\n")
    write(tmp_path / "pkg" / "clean.py", "def ok(x):\n    return x\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("folder", ["build", "dist", "venv", "site-packages", "lib/site-packages"])
def test_named_paths_under_default_excludes_are_checked(project, folder):
    write(project / folder / "gen" / "m.py", "a = BAD(x)\n")
    write(project / folder / "gen" / "__pycache__" / "c.py", "a = BAD(x)\n")
    for named in (folder, f"{folder}/gen", f"{folder}/gen/m.py"):
        result = run_cli(["check", "--no-cache", "--output-format", "concise", named])
        assert result.exit_code == 1, (named, result.stderr)
        assert result.stdout.splitlines() == [f"{folder}/gen/m.py:1:5: KL102 [*] BAD misuses the KL gradient."]
    # discovery from above still skips them; --force-exclude applies the excludes to named paths
    assert folder not in run_cli(["check", "--no-cache", "--output-format", "concise", "."]).stdout
    forced = run_cli(["check", "--no-cache", "--force-exclude", f"{folder}/gen/m.py"])
    assert forced.exit_code == 0 and "no Python files found" in forced.stderr


def test_no_python_file_is_said_on_stderr(project):
    (project / "empty").mkdir()
    result = run_cli(["check", "--no-cache", "empty"])
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "kllint: warning: no Python files found under empty" in result.stderr
    assert run_cli(["check", "--no-cache", "-q", "empty"]).stderr == ""


def test_quiet_prints_findings_only(project):
    result = run_cli(["check", "--no-cache", "-q", "--output-format", "concise", "pkg"])
    assert result.exit_code == 1
    assert "KL102" in result.stdout and result.stderr == ""
    assert run_cli(["check", "-q", "-v", "pkg"]).exit_code == 2


def test_verbose_lists_files_and_notes(project, monkeypatch):
    import kllint.pipeline.prefilter as prefilter

    monkeypatch.setattr(prefilter, "might_matter", lambda text, vocab=None: "BAD" in text or "RISKY" in text)
    monkeypatch.setattr(prefilter, "code_might_matter", lambda outline, vocab=None: True)
    result = run_cli(["check", "--no-cache", "-v", "--output-format", "concise", "pkg"])
    assert "kllint: analysed: pkg/loss.py" in result.stderr
    assert "kllint: skipped by the prefilter: pkg/clean.py" in result.stderr
    assert "kllint: files: 2 analysed, 1 skipped by the prefilter" in result.stderr
    assert "analysed" not in result.stdout
    warm = run_cli(["check", "-v", "pkg"])
    warm = run_cli(["check", "-v", "pkg"])
    assert "kllint: cached: pkg/loss.py" in warm.stderr


def test_verbose_reports_abandoned_analysis(project, monkeypatch):
    import kllint.rules.dispatch as dispatch

    def too_deep(*args, **kwargs):
        raise RecursionError

    monkeypatch.setattr(dispatch, "check_source", too_deep)
    result = run_cli(["check", "--no-cache", "-v", "pkg/loss.py"])
    assert "kllint: pkg/loss.py: analysis abandoned: expression nesting too deep" in result.stderr


def test_per_file_notes_reach_verbose_output(project, monkeypatch):
    """The -v plumbing takes any per-file notes `analyse_file` returns (the analysis adds more later)."""
    import kllint.pipeline.run as run_module

    real = run_module.analyse_file

    def noted(item, *args, **kwargs):
        outcome = real(item, *args, **kwargs)
        outcome.file_notes.append("analysis abandoned in `f`: step budget exhausted")
        return outcome

    monkeypatch.setattr(run_module, "analyse_file", noted)
    result = run_cli(["check", "--no-cache", "-v", "-j", "1", "pkg/loss.py"])
    assert "kllint: pkg/loss.py: analysis abandoned in `f`: step budget exhausted" in result.stderr


def test_verbose_lists_functions_the_analysis_gave_up_on(tmp_path, monkeypatch):
    from test_abandoned import CHAIN

    write(tmp_path / "train.py", CHAIN)
    monkeypatch.chdir(tmp_path)
    result = run_cli(["check", "--no-cache", "-v", "train.py"])
    notes = [line for line in result.stderr.splitlines() if "not followed (call depth limit" in line]
    assert notes and notes[0].startswith("kllint: train.py:") and "train.py: train.py" not in notes[0]
    quiet = run_cli(["check", "--no-cache", "train.py"])
    assert "not followed" not in quiet.stderr  # listed only with -v


def test_show_files_and_show_settings(project):
    write(project / "pyproject.toml", '[tool.kllint]\nignore = ["KL502"]\n')
    files = run_cli(["check", "--show-files", "pkg"])
    assert files.exit_code == 0
    assert files.stdout == "pkg/clean.py\npkg/loss.py\npkg/risky.py\n"
    settings = run_cli(["check", "--show-settings", "--extend-exclude", "gen/", "pkg"])
    assert settings.exit_code == 0
    assert "# settings for: pkg/clean.py" in settings.stdout
    assert f"# configuration file: {project / 'pyproject.toml'}" in settings.stdout
    assert 'ignore = ["KL502"]' in settings.stdout and 'extend-exclude = ["gen/"]' in settings.stdout
    assert "KL502" not in settings.stdout.split("# active rules:")[1]


def test_output_file(project):
    result = run_cli(["check", "--no-cache", "--output-format", "json", "--output-file", "out/findings.json", "pkg"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert [d["code"] for d in json.loads((project / "out" / "findings.json").read_text())] == ["KL102", "KL201"]
    full = run_cli(["check", "--no-cache", "-o", "out/full.txt", "pkg"])
    assert "\x1b[" not in (project / "out" / "full.txt").read_text()
    assert "Found 2 findings" in full.stderr


def test_exclude_and_extend_exclude_on_the_command_line(project):
    write(project / "pyproject.toml", '[tool.kllint]\nexclude = ["pkg/risky.py"]\n')
    default = run_cli(["check", "--no-cache", "--output-format", "concise", "."])
    assert "risky" not in default.stdout and "loss.py" in default.stdout
    extended = run_cli(["check", "--no-cache", "--output-format", "concise", "--extend-exclude", "loss.py", "."])
    assert extended.stdout == ""
    replaced = run_cli(["check", "--no-cache", "--output-format", "concise", "--exclude", "loss.py", "."])
    assert "risky.py" in replaced.stdout and "loss.py" not in replaced.stdout  # replaces the configured list


def test_show_fixes_and_exit_non_zero_on_fix(project):
    preview = run_cli(["check", "--no-cache", "--show-fixes", "pkg"])
    assert "Fixable with --fix:" in preview.stderr and "pkg/loss.py:4:12: KL102 [k3-as-loss] rewrite BAD" in preview.stderr
    write(project / "only" / "m.py", "a = BAD(x)\n")
    fixed = run_cli(["check", "--no-cache", "--fix", "--show-fixes", "only"])
    assert fixed.exit_code == 0
    assert "Fixed:\n  only/m.py:1:5: KL102 [k3-as-loss] rewrite BAD" in fixed.stderr
    write(project / "only" / "m.py", "a = BAD(x)\n")
    strict = run_cli(["check", "--no-cache", "--fix", "--exit-non-zero-on-fix", "only"])
    assert strict.exit_code == 1 and (project / "only" / "m.py").read_text() == "a = GOOD(x)\n"
    again = run_cli(["check", "--no-cache", "--fix", "--exit-non-zero-on-fix", "only"])
    assert again.exit_code == 0  # nothing left to fix, nothing changed


def test_fixable_markers_and_unsafe_hints(project):
    concise = run_cli(["check", "--no-cache", "--output-format", "concise", "pkg"])
    assert "pkg/loss.py:4:12: KL102 [*] BAD" in concise.stdout
    assert "pkg/risky.py:2:12: KL201 RISKY" in concise.stdout  # unsafe: not fixed by --fix alone
    assert "1 hidden fix can be enabled with the `--unsafe-fixes` option.\n" in concise.stderr
    assert "Preview them with `--unsafe-fixes --diff`" in concise.stderr
    unsafe = run_cli(["check", "--no-cache", "--output-format", "concise", "--unsafe-fixes", "pkg"])
    assert "pkg/risky.py:2:12: KL201 [*] RISKY" in unsafe.stdout
    diff = run_cli(["check", "--no-cache", "--diff", "pkg"])
    assert diff.exit_code == 1 and "+    return GOOD(x)" in diff.stdout
    assert "1 hidden fix can be enabled with the `--unsafe-fixes` option.\n" in diff.stderr
    assert "Add `--unsafe-fixes` to include them in the diff." in diff.stderr
    full = run_cli(["check", "--no-cache", "pkg/loss.py"])
    assert "KL102 [k3-as-loss] [*] BAD" in full.stdout


def test_rules_as_json():
    result = run_cli(["rules", "--output-format", "json"])
    rules = json.loads(result.stdout)
    by_code = {rule["code"]: rule for rule in rules}
    assert by_code["KL102"] == {"code": "KL102", "name": "k3-as-loss", "severity": "error",
                                "summary": by_code["KL102"]["summary"], "default": True}
    assert by_code["KL901"]["default"] is False
    assert "(opt-in)" in run_cli(["rules"]).stdout


def test_cache_dir_that_cannot_be_created_is_an_error(project):
    (project / "file").write_text("")
    result = run_cli(["check", "--cache-dir", "file/cache", "pkg"])
    assert result.exit_code == 2
    assert result.stderr.startswith("kllint: error: --cache-dir file/cache: cannot create the folder")


def test_bare_kllint_prints_the_formatted_help_and_exits_2() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "kllint"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0].startswith("Usage: ") and "COMMAND" in lines[0]
    assert "Commands:" in lines and any(line.strip().startswith("check") for line in lines)
