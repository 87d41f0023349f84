"""The GitHub Action (`action.yml`, issue 37 item 8): its metadata, and its steps run locally
the way the runner runs a composite action (tests/action_runner.py) on a small git repository
with one finding: annotations in the log, a SARIF report valid against the official schema,
the upload step with that file, and the job failing on findings unless told otherwise.

The install step (a virtual environment and `pip install` of the action's checkout) needs a
package index; the other tests replace it by this checkout's Python with `PYTHONPATH` set, and
one `network` test runs it for real."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from action_runner import Unsupported, evaluate, run_action  # noqa: E402
from test_sarif import _errors, validator  # noqa: E402,F401 - the schema's validator fixture

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "KL102" / "reference_from_the_policy_with_adapters_off.py"
INSTALLED = {"install": {"python": sys.executable}}
CHECKOUT = {"PYTHONPATH": str(ROOT), "NO_COLOR": "1"}

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("git") is None,
                                reason="needs bash and git")


def _action() -> dict:
    return yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A git repository with one training file that has findings (KL102 and KL201, twice)."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shutil.copy(FIXTURE, repo / "src" / "train.py")
    (repo / "README.md").write_text("a sample project\n", encoding="utf-8")
    return repo


def _run(repo: Path, tmp_path: Path, **inputs: str):
    temp = tmp_path / "runner"
    temp.mkdir(exist_ok=True)
    return run_action(ROOT, repo, {k.replace("_", "-"): v for k, v in inputs.items()}, temp,
                      replaced=INSTALLED, env=CHECKOUT)


def test_the_action_is_composite_with_its_inputs():
    action = _action()
    assert action["runs"]["using"] == "composite"
    defaults = {name: spec.get("default") for name, spec in action["inputs"].items()}
    assert defaults == {"paths": ".", "select": "", "output-format": "github", "args": "",
                        "sarif-file": "kllint.sarif", "upload-sarif": "true", "fail-on-findings": "true"}
    assert all(spec.get("description") for spec in action["inputs"].values())
    steps = {step.get("id", step["name"]): step for step in action["runs"]["steps"]}
    assert 'pip install' in steps["install"]["run"] and '"$GITHUB_ACTION_PATH"' in steps["install"]["run"]
    (upload,) = [s for s in action["runs"]["steps"] if "uses" in s]
    assert upload["uses"] == "github/codeql-action/upload-sarif@v3"
    assert "inputs.upload-sarif" in upload["if"] and "!cancelled()" in upload["if"]


def test_findings_annotate_write_valid_sarif_upload_it_and_fail_the_job(repository, tmp_path, validator):
    run = _run(repository, tmp_path)
    check = run.step("kllint check")
    assert check.returncode == 0, check.stderr  # findings are not an error of the step
    assert run.outputs["check"]["exit-code"] == "1"
    annotations = [line for line in check.stdout.splitlines() if line.startswith("::error ")]
    assert len(annotations) == 4 and all("file=src/train.py," in line for line in annotations), check.stdout
    log = json.loads((repository / "kllint.sarif").read_text(encoding="utf-8"))
    assert _errors(validator, log) == []
    results = log["runs"][0]["results"]
    assert sorted(r["ruleId"] for r in results) == ["KL102", "KL102", "KL201", "KL201"]
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results} == {"src/train.py"}
    upload = run.step("Upload SARIF to code scanning")
    assert upload.ran and upload.with_ == {"sarif_file": "kllint.sarif"}
    fail = run.step("Fail on findings")
    assert fail.ran and fail.returncode == 1 and "::error title=kllint::" in fail.stdout
    assert run.failed


def test_fail_on_findings_false_reports_without_failing(repository, tmp_path):
    run = _run(repository, tmp_path, fail_on_findings="false")
    assert run.outputs["check"]["exit-code"] == "1"
    assert not run.step("Fail on findings").ran and not run.failed
    assert run.step("Upload SARIF to code scanning").ran


def test_upload_sarif_false_skips_the_upload_but_writes_the_file(repository, tmp_path):
    run = _run(repository, tmp_path, upload_sarif="false", sarif_file="reports/kllint.sarif",
               output_format="concise")
    assert not run.step("Upload SARIF to code scanning").ran
    assert run.outputs["check"]["sarif"] == "reports/kllint.sarif"
    assert (repository / "reports" / "kllint.sarif").is_file()
    assert "src/train.py:35:14: KL102" in run.step("kllint check").stdout
    assert run.failed


def test_a_clean_repository_passes_and_still_uploads(repository, tmp_path, validator):
    (repository / "src" / "train.py").write_text("def f(x):\n    return x + 1\n", encoding="utf-8")
    run = _run(repository, tmp_path)
    assert run.outputs["check"]["exit-code"] == "0" and not run.failed
    assert run.step("Upload SARIF to code scanning").ran
    log = json.loads((repository / "kllint.sarif").read_text(encoding="utf-8"))
    assert _errors(validator, log) == [] and log["runs"][0]["results"] == []


def test_paths_select_and_args_reach_kllint(repository, tmp_path):
    (repository / "other dir").mkdir()
    shutil.copy(FIXTURE, repository / "other dir" / "loss.py")
    run = _run(repository, tmp_path, paths="'other dir'", select="KL2", args="--ignore 'KL102' --exit-zero")
    annotations = [line for line in run.step("kllint check").stdout.splitlines() if line.startswith("::error ")]
    assert annotations and all("file=other dir/loss.py," in a and "title=KL201" in a for a in annotations)
    assert run.outputs["check"]["exit-code"] == "0" and not run.failed  # --exit-zero from `args`


@pytest.mark.parametrize("inputs, words", [({"args": "--select 'KL1"}, "`args` input is not shell words"),
                                           ({"args": "--no-such-option"}, "No such option")])
def test_bad_inputs_fail_with_a_message_and_no_traceback(repository, tmp_path, inputs, words):
    run = _run(repository, tmp_path, **inputs)
    check = run.step("kllint check")
    assert check.returncode == 2 and run.failed
    assert words in check.stderr and "Traceback" not in check.stderr + check.stdout
    assert not run.step("Fail on findings").ran


def test_the_readme_workflow_runs_the_action_with_its_inputs(repository, tmp_path, validator):
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [block] = [b for b in re.findall(r"^```yaml\n(.*?)^```", readme, flags=re.MULTILINE | re.DOTALL) if "jobs:" in b]
    [job] = yaml.safe_load(block)["jobs"].values()
    [step] = [s for s in job["steps"] if s.get("uses", "").startswith("kllint/kllint@")]
    run = _run(repository, tmp_path, **{k.replace("-", "_"): str(v) for k, v in step.get("with", {}).items()})
    assert run.outputs["check"]["exit-code"] == "1" and run.failed
    assert _errors(validator, json.loads((repository / "kllint.sarif").read_text(encoding="utf-8"))) == []
    section = readme[readme.index("### GitHub Actions"):readme.index("### pre-commit")]
    assert ".whl" not in section and "build --wheel" not in section  # nothing to build and commit


def test_the_runner_evaluates_what_the_action_uses():
    context = {"inputs": {"upload-sarif": "False"}, "steps": {"check": {"exit-code": "1"}},
               "action_path": "/a", "status": {"success": True, "failure": False, "always": True, "cancelled": False}}
    assert evaluate("!cancelled() && inputs.upload-sarif != 'false'", context) is False  # GitHub ignores case
    assert evaluate("steps.check.outputs.exit-code == '1' && (inputs.upload-sarif || 'x')", context) == "False"
    assert evaluate("steps.other.outputs.sarif != ''", context) is False
    with pytest.raises(Unsupported):
        evaluate("github.event_name == 'push'", context)


@pytest.mark.network
@pytest.mark.slow
def test_the_install_step_installs_the_checkout(repository, tmp_path):
    """The real install step: a virtual environment and `pip install` of this checkout (from
    a package index, for its dependencies and build backend)."""
    temp = tmp_path / "runner"
    temp.mkdir()
    run = run_action(ROOT, repository, {}, temp, env={"NO_COLOR": "1"})
    install = run.step("Install kllint")
    assert install.returncode == 0, install.stderr[-2000:]
    assert run.outputs["install"]["python"].startswith(str(temp))
    assert run.outputs["check"]["exit-code"] == "1" and run.failed
