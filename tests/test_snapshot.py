"""Behaviour snapshot: every finding on the repository's fixtures and on the shared annotated
cases, recorded in full (code, span, message, help, trace steps, fix and its rewritten text,
estimate) under `tests/golden/` and compared field by field (tests/snapshot.py).

Where the fixture tests check *which* codes are reported on which lines, this test pins
*everything* kllint says, so that a rewrite of the engine that changes any word, column, trace
step or fix shows up as a readable difference (the file, the finding, the fields that changed).

Update on purpose: `KLLINT_UPDATE_SNAPSHOT=1 python -m pytest -q tests/test_snapshot.py`
rewrites `tests/golden/snapshot_fixtures.json` (and `snapshot_cases.json` when the cases are
found); review `git diff tests/golden` before committing.

The cases are the development set's `cases/` folder: the folder named by `KLLINT_DEV_SET`, or a
sibling of the checkout holding `real/labels.jsonl` and `tools/real_corpus.py` (as `.ci/run`
finds it). Without it the cases test is skipped. The runs are shared with
tests/test_fixtures.py (`snapshot.analyse`), so in a full run no file is analysed twice.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from snapshot import GOLDEN, analyse, check_snapshot, differences, field_differences, snapshot_of_files

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
SUFFIXES = (".py", ".ipynb")


def development_set() -> Path | None:
    """The development-set folder: `KLLINT_DEV_SET`, else a sibling of the checkout holding
    `real/labels.jsonl` and `tools/real_corpus.py`; None when there is none."""
    named = os.environ.get("KLLINT_DEV_SET", "").strip()
    candidates = [Path(named).expanduser()] if named else sorted(p for p in ROOT.parent.iterdir() if p.is_dir())
    for candidate in candidates:
        if (candidate / "real" / "labels.jsonl").is_file() and (candidate / "tools" / "real_corpus.py").is_file():
            return candidate.resolve()
    return None


def corpus_files(folder: Path) -> list[Path]:
    """The Python files and notebooks under `folder`, sorted (no `__pycache__`)."""
    return sorted(p for p in folder.rglob("*") if p.suffix in SUFFIXES and p.is_file() and "__pycache__" not in p.parts)


DEV_SET = development_set()
CASES = DEV_SET / "cases" if DEV_SET is not None and (DEV_SET / "cases").is_dir() else None


def test_fixture_findings_match_the_snapshot() -> None:
    check_snapshot(GOLDEN / "snapshot_fixtures.json", snapshot_of_files(corpus_files(FIXTURES), ROOT))


@pytest.mark.skipif(CASES is None, reason="no development set (KLLINT_DEV_SET or a sibling folder with its cases/)")
def test_case_findings_match_the_snapshot() -> None:
    assert CASES is not None
    check_snapshot(GOLDEN / "snapshot_cases.json", snapshot_of_files(corpus_files(CASES), CASES))


# --- the comparison itself ------------------------------------------------------------------------


def _finding(**changes) -> dict:
    base = {"code": "KL102", "name": "k3-as-loss", "severity": "error", "path": "a.py", "cell": None,
            "line": 3, "column": 5, "end_line": 3, "end_column": 20, "message": "k3 as a loss", "help": "use k2",
            "trace": [{"path": "a.py", "cell": None, "line": 3, "column": 5, "note": "k3 estimate"}],
            "fix": {"applicability": "unsafe", "description": "k2", "replacement": "k2", "region": None},
            "confirmed": None}
    return dict(base, **changes)


def test_a_changed_field_is_named_with_both_values() -> None:
    old = {"files": {"a.py": [_finding()]}}
    new = {"files": {"a.py": [_finding(message="k3 is a loss", end_column=21)]}}
    [line] = differences(old, new)
    assert line.startswith("a.py: KL102 at 3:5 changed")
    assert '"k3 as a loss" -> "k3 is a loss"' in line and "end_column: 20 -> 21" in line


def test_trace_and_fix_differences_name_the_step() -> None:
    changed = _finding(trace=[{"path": "a.py", "cell": None, "line": 4, "column": 5, "note": "k3 estimate"}],
                       fix={"applicability": "unsafe", "description": "k2", "replacement": "k2 - k2.detach()",
                            "region": None})
    found = field_differences(_finding(), changed)
    assert "trace[0].line: 3 -> 4" in found
    assert 'fix.replacement: "k2" -> "k2 - k2.detach()"' in found


def test_gone_new_and_moved_files_are_reported() -> None:
    old = {"files": {"a.py": [_finding()], "b.py": []}}
    new = {"files": {"a.py": [_finding(code="KL201", name="per-token-kl-loss")], "c.py": []}}
    found = differences(old, new)
    assert found == ["a.py: finding gone: KL102 at 3:5: k3 as a loss",
                     "a.py: new finding: KL201 at 3:5: k3 as a loss",
                     "b.py: no longer in the corpus (had 0 findings)",
                     "c.py: new in the corpus, 0 findings"]
    assert differences(old, old) == []


def test_a_difference_fails_with_the_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from snapshot import UPDATE_VARIABLE, dumps

    monkeypatch.delenv(UPDATE_VARIABLE, raising=False)
    golden = tmp_path / "golden.json"
    golden.write_text(dumps({"files": {"a.py": [_finding()]}}))
    check_snapshot(golden, {"files": {"a.py": [_finding()]}})
    with pytest.raises(AssertionError, match=f"(?s)1 differences.*line: 3 -> 9.*{UPDATE_VARIABLE}=1"):
        check_snapshot(golden, {"files": {"a.py": [_finding(line=9)]}})
    monkeypatch.setenv(UPDATE_VARIABLE, "1")
    check_snapshot(golden, {"files": {"a.py": [_finding(line=9)]}})
    assert '"line": 9' in golden.read_text()


def test_devset_tee_passes_kllint_through_and_keeps_its_report(tmp_path: Path) -> None:
    """The development-set run goes through tests/devset_tee.py: its copy of the CLI's JSON report
    gives the same records as the library run (without `estimate`, which JSON does not carry)."""
    import shutil
    import subprocess
    import sys

    from snapshot import record, snapshot_of_reports

    tree = tmp_path / "demo-1.0"
    source = FIXTURES / "fixes" / "kl102_grpo_token_k3.py"
    (tree / "pkg").mkdir(parents=True)
    shutil.copy(source, tree / "pkg" / source.name)
    reports = tmp_path / "reports"
    command = [sys.executable, str(ROOT / "tests" / "devset_tee.py"), str(reports),
               "check", str(tree), "--output-format", "json", "--no-cache"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 1, done.stderr
    assert '"code": "KL102"' in done.stdout
    snapshot = snapshot_of_reports(reports)
    assert snapshot["exit_codes"] == {"demo-1.0": 1}
    [(name, found)] = snapshot["files"].items()
    assert name == "demo-1.0/pkg/kl102_grpo_token_k3.py"
    library = [record(d, tree) for d in analyse(tree / "pkg" / source.name).diagnostics]
    assert found == [{k: v for k, v in r.items() if k != "estimate"} for r in library]
    assert {f["code"] for f in found} == {"KL102", "KL201"}


def test_files_stopped_by_the_time_budget_are_not_compared() -> None:
    old = {"stopped": ["t/slow.py"], "files": {"a.py": [_finding()]}}
    new = {"stopped": [], "files": {"a.py": [_finding()], "t/slow.py": [_finding(path="t/slow.py")]}}
    assert differences(old, new) == []
    assert differences(old, {"stopped": [], "files": {"t/slow.py": []}}) == [
        "a.py: no longer in the corpus (had 1 findings)"]
