"""Suppression comments are checked themselves: unknown codes are a warning on stderr, and the
opt-in rule KL901 reports (and `--fix` removes) suppressions that hide nothing."""
from __future__ import annotations

import json

import pytest

from test_cli_support import fake_analysis, run_cli, write  # noqa: F401 - fixture

from kllint.config import Settings
from kllint.pipeline.selection import filter_found
from kllint.rules.registry import select_codes
from kllint.pipeline.suppression_audit import unknown_codes, unused_suppressions


@pytest.fixture
def project(tmp_path, monkeypatch, fake_analysis):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_kl901_is_opt_in():
    assert "KL901" not in Settings().active_codes
    assert "KL901" not in select_codes(["KL"], [])
    assert "KL901" in select_codes(["ALL"], [], ["KL901"])
    assert "KL901" in select_codes(["unused-suppression"], [])
    assert "KL901" in select_codes(["KL9"], [])


def test_unknown_codes_warn_but_other_tools_codes_do_not():
    text = "x = 1  # noqa: E501, KL999\ny = 2  # kllint: ignore[KL1O2] reason\nz = 3  # noqa: KL1\n"
    warnings = unknown_codes(text, "m.py")
    assert len(warnings) == 2
    assert warnings[0].startswith("m.py:1:22: warning: unknown rule code 'KL999'")
    assert "'KL1O2'" in warnings[1] and warnings[1].startswith("m.py:2:")


def test_unknown_code_warning_in_a_run_keeps_the_exit_code(project):
    write(project / "m.py", "x = 1  # noqa: KL999\n")
    result = run_cli(["check", "--no-cache", "m.py"])
    assert result.exit_code == 0
    assert "m.py:1:16: warning: unknown rule code 'KL999'" in result.stderr
    quiet = run_cli(["check", "--no-cache", "-q", "m.py"])
    assert "warning" not in quiet.stderr


def test_unused_and_used_suppressions(project):
    write(project / "m.py", "a = BAD(x)  # noqa: KL102\nb = 1  # noqa: KL102\nc = BAD(y)  # noqa: KL102, KL201\n"
                            "# kllint: ignore[KL5] no kl_div here\nd = 2\n")
    result = run_cli(["check", "--no-cache", "--extend-select", "KL901", "--output-format", "json", "m.py"])
    found = json.loads(result.stdout)
    assert [(d["code"], d["line"]) for d in found] == [("KL901", 2), ("KL901", 3), ("KL901", 4)]
    assert all(d["fix"]["applicability"] == "safe" for d in found)
    assert found[1]["fix"]["replacement"] == "KL102"  # only the unused code goes
    # without KL901 selected, nothing is reported
    plain = run_cli(["check", "--no-cache", "--output-format", "json", "m.py"])
    assert json.loads(plain.stdout) == []


def test_fix_removes_unused_suppressions(project):
    source = ("a = BAD(x)  # noqa: KL102\nb = 1  # noqa: KL102\nc = BAD(y)  # noqa: KL102, KL201\n"
              "# kllint: ignore[KL5] no kl_div here\nd = 2\ne = 3  # type: ignore  # noqa: KL102\n")
    write(project / "m.py", source)
    result = run_cli(["check", "--no-cache", "--extend-select", "KL901", "--fix", "m.py"])
    assert result.exit_code == 0, result.stdout + result.stderr
    assert (project / "m.py").read_text() == ("a = BAD(x)  # noqa: KL102\nb = 1\nc = BAD(y)  # noqa: KL102\n"
                                              "d = 2\ne = 3  # type: ignore  \n")


def test_codes_of_rules_not_enabled_are_not_judged():
    text = "b = 1  # noqa: KL102\n"
    assert unused_suppressions(text, "m.py", [], frozenset({"KL901", "KL201"})) == []
    assert len(unused_suppressions(text, "m.py", [], frozenset({"KL901", "KL102"}))) == 1


def test_kl901_page_example_fires_and_use_instead_does_not(tmp_path, monkeypatch):
    from test_rule_pages import snippet

    monkeypatch.chdir(tmp_path)
    for section, expected in (("Example", ["KL901"]), ("Use instead", [])):
        write(tmp_path / "m.py", snippet("KL901", section))
        result = run_cli(["check", "--no-cache", "--isolated", "--extend-select", "KL901",
                          "--output-format", "json", "m.py"])
        assert [d["code"] for d in json.loads(result.stdout)] == expected, section


def test_filter_found_keeps_kl901_sorted_and_suppressible():
    settings = Settings(extend_select=("KL901",))
    text = "b = 1  # noqa: KL102  # noqa: KL901\n"
    assert filter_found([], text, "m.py", settings) == []


def test_a_suppression_heading_a_wrapped_statement_is_used_by_a_finding_inside():
    from test_cli_support import make_diagnostic
    from kllint.diagnostics import Span

    text = "kl = (  # noqa: KL102\n    exp(d) - d - 1\n)\n"
    inside = make_diagnostic("KL102", "m.py", Span(2, 5, 2, 19))
    active = frozenset({"KL901", "KL102"})
    assert unused_suppressions(text, "m.py", [inside], active) == []
    below = make_diagnostic("KL102", "m.py", Span(4, 5, 4, 19))
    assert len(unused_suppressions(text + "x = 1\n", "m.py", [below], active)) == 1
