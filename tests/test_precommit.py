"""pre-commit integration: the hook manifest, and real `git commit`s through the real pre-commit.

pre-commit installs the hook from a git repository at a revision. The checkout may hold
uncommitted and untracked changes (`pre-commit try-repo` would drop the untracked ones), so the
tests snapshot the working tree (tracked and untracked files, minus ignored ones) into a
temporary repository and point `.pre-commit-config.yaml` at its commit. PRE_COMMIT_HOME is a
temporary folder shared by the tests of this module, so the hook's virtualenv is built once.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

CHECKOUT = Path(__file__).resolve().parents[1]
# a syntax error in a file that names a KL (one naming none is skipped unparsed, as files the
# prefilter rejects are)
BROKEN_KL = "def kl_penalty(:\n    pass\n"
K3_LOSS = """import torch


def grpo_loss(logp, ref_logp, adv, mask, beta=0.04):
    per_token_kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    loss = -(torch.exp(logp - logp.detach()) * adv.unsqueeze(1) - beta * per_token_kl)
    return ((loss * mask).sum(1) / mask.sum(1)).mean()
"""


def _git(*args: str, cwd: Path, env: dict | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _env(home: Path) -> dict:
    env = dict(os.environ)
    env.update(PRE_COMMIT_HOME=str(home), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid", NO_COLOR="1",
               PRE_COMMIT_COLOR="never")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(name, None)
    return env


def test_manifest():
    hooks = {hook["id"]: hook for hook in yaml.safe_load((CHECKOUT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"kllint", "kllint-fix"}
    assert hooks["kllint"]["entry"] == "kllint check --force-exclude"
    assert hooks["kllint-fix"]["entry"] == "kllint check --fix --force-exclude"
    for hook in hooks.values():
        assert hook["language"] == "python"
        assert hook["types_or"] == ["python", "pyi"]
        assert hook["require_serial"] is True


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory):
    """A git repository holding a snapshot of the checkout's working tree; (path, sha)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=CHECKOUT, capture_output=True, check=True).stdout.decode().split("\0")
    snapshot = tmp_path_factory.mktemp("hook-repo")
    for name in filter(None, listed):
        source = CHECKOUT / name
        if source.is_file():
            target = snapshot / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    env = _env(tmp_path_factory.mktemp("unused"))
    _git("init", "-q", cwd=snapshot, env=env)
    _git("add", "-A", cwd=snapshot, env=env)
    _git("commit", "-q", "--no-verify", "-m", "snapshot", cwd=snapshot, env=env)
    return snapshot, _git("rev-parse", "HEAD", cwd=snapshot, env=env).strip()


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory):
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture
def project(tmp_path, hook_repo, pre_commit_home):
    """A git repository with pre-commit installed and the `kllint` hook configured."""
    repo, sha = hook_repo
    env = _env(pre_commit_home)
    _git("init", "-q", cwd=tmp_path, env=env)
    config = {"repos": [{"repo": str(repo), "rev": sha, "hooks": [{"id": "kllint"}]}]}
    (tmp_path / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "pyproject.toml").write_text("[tool.kllint]\nextend-exclude = [\"generated/\"]\n")
    _git("add", "-A", cwd=tmp_path, env=env)
    _git("commit", "-q", "--no-verify", "-m", "setup", cwd=tmp_path, env=env)
    subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=tmp_path, env=env, check=True,
                   capture_output=True)
    return tmp_path, env


def _commit(project, files: dict[str, str]) -> subprocess.CompletedProcess:
    root, env = project
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    _git("add", "-A", cwd=root, env=env)
    return subprocess.run(["git", "commit", "-m", "change"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.slow
@pytest.mark.network  # pre-commit builds the hook venv: pip fetches the dependencies
def test_commit_with_finding_fails_and_clean_commit_passes(project):
    broken = _commit(project, {"bad.py": BROKEN_KL})
    output = broken.stdout + broken.stderr
    assert broken.returncode != 0, output
    assert "kllint" in output and "Failed" in output
    assert "bad.py:" in output and "KL900" in output  # the finding is shown
    root, env = project
    _git("reset", "-q", "HEAD", "--", "bad.py", cwd=root, env=env)
    (root / "bad.py").unlink()
    clean = _commit(project, {"ok.py": "def f(x):\n    return x + 1\n"})
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "Passed" in clean.stdout + clean.stderr


@pytest.mark.slow
@pytest.mark.network
def test_force_exclude_keeps_configured_excludes(project):
    result = _commit(project, {"generated/bad.py": "def f(:\n    pass\n", "ok.py": "x = 1\n"})
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.network
def test_analysis_e2e_k3_commit_fails_with_kl102(project):
    """Needs the real analysis (kllint/analysis): fails until it lands."""
    result = _commit(project, {"grpo.py": K3_LOSS})
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "grpo.py:5:" in output and "KL102" in output


def _readme_local_hook_config() -> str:
    import re

    readme = (CHECKOUT / "README.md").read_text(encoding="utf-8")
    [block] = [b for b in re.findall(r"^```yaml\n(.*?)^```", readme, flags=re.MULTILINE | re.DOTALL)
               if "repo: local" in b]
    return block


@pytest.mark.slow
def test_readme_local_hook_works_as_written(tmp_path, pre_commit_home):
    """The README's `repo: local` hook, copied verbatim, fails a commit with a finding."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "kllint"  # `kllint` on PATH runs this checkout, as an installed kllint would
    shim.write_text(f"#!/bin/sh\nPYTHONPATH={CHECKOUT} exec {sys.executable} -m kllint \"$@\"\n")
    shim.chmod(0o755)
    repo = tmp_path / "repo"
    repo.mkdir()
    env = _env(pre_commit_home)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    _git("init", "-q", cwd=repo, env=env)
    (repo / ".pre-commit-config.yaml").write_text(_readme_local_hook_config())
    _git("add", "-A", cwd=repo, env=env)
    _git("commit", "-q", "--no-verify", "-m", "setup", cwd=repo, env=env)
    subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=repo, env=env, check=True,
                   capture_output=True)
    result = _commit((repo, env), {"bad.py": BROKEN_KL})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "KL900" in output, output
    _git("reset", "-q", "HEAD", "--", "bad.py", cwd=repo, env=env)
    (repo / "bad.py").unlink()
    clean = _commit((repo, env), {"ok.py": "x = 1\n"})
    assert clean.returncode == 0, clean.stdout + clean.stderr
