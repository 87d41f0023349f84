"""Excludes made only of plain names are decided without pathspec, with pathspec's answers.

`kllint.pipeline.discovery._matches` (named paths) and `_Excludes` (a folder walk) skip pathspec when no component of the path is one of the
excluded names and every pattern is a plain name; these tests compare it with pathspec's own
answer on paths that do and do not hold an excluded name, and check that a pre-commit style run
(named files, `--force-exclude`, the default excludes) and a walk of a folder without an
excluded name or a `.gitignore` do not import pathspec at all.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pathspec
import pytest

from kllint.config import DEFAULT_EXCLUDES
from kllint.config import Settings
from kllint.pipeline.discovery import _Excludes, _matches, _plain_names

CHECKOUT = Path(__file__).resolve().parents[1]

PATHS = [
    "src/train.py", "build/train.py", "src/build/x.py", "src/build", "venv", "venvs/a.py", "my_venv/a.py",
    "a/.git/hooks/x.py", "a/git/x.py", "dist.py", "pkg/dist/__init__.py", "node_modules", "x/__pycache__/m.py",
    "site-packages/torch/nn.py", "lib/site-packages2/a.py", ".venv/lib/a.py", ".venvx/a.py", "./src/./ok.py",
]


def _pathspec_answer(patterns: tuple[str, ...], rel: str, is_dir: bool, anchored: bool) -> bool:
    """The answer of the matching rule with pathspec asked for every sub-path, as before."""
    spec = pathspec.GitIgnoreSpec.from_lines(patterns)
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if not parts:
        return False
    suffix = "/" if is_dir else ""
    starts = range(1) if anchored else range(len(parts))
    if any(spec.match_file("/".join(parts[i:]) + suffix) for i in starts):
        return True
    return any(spec.match_file("/".join(parts[i:j]) + "/") for i in starts for j in range(i + 1, len(parts)))


@pytest.mark.parametrize("patterns", [DEFAULT_EXCLUDES, DEFAULT_EXCLUDES + ("generated",),
                                      DEFAULT_EXCLUDES + ("*_pb2.py",), ("build/",), ("src/build",)])
@pytest.mark.parametrize("anchored", [True, False])
@pytest.mark.parametrize("is_dir", [True, False])
def test_plain_names_agree_with_pathspec(patterns, anchored, is_dir):
    for rel in PATHS:
        assert _matches(patterns, rel, is_dir, anchored) == _pathspec_answer(patterns, rel, is_dir, anchored), rel


def test_only_plain_names_take_the_short_way():
    assert _plain_names(DEFAULT_EXCLUDES) == frozenset(DEFAULT_EXCLUDES)
    for pattern in ("*.py", "build/", "src/build", "!keep", "a b", "\\#x", "[ab]", "..", "."):
        assert _plain_names(DEFAULT_EXCLUDES + (pattern,)) is None, pattern


def test_named_files_with_default_excludes_do_not_import_pathspec(tmp_path):
    k3_loss = ("import torch\n\n\ndef kl_loss(logp, ref_logp):\n"
               "    return (torch.exp(ref_logp - logp) - (ref_logp - logp) - 1).mean()\n")
    (tmp_path / "train.py").write_text(k3_loss)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "gen.py").write_text(k3_loss)
    env = dict(os.environ, PYTHONPATH=str(CHECKOUT))
    command = [sys.executable, "-X", "importtime", "-m", "kllint", "check", "--force-exclude", "--no-cache",
               "--output-format", "json", "train.py"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr[-2000:]  # checked: the finding is reported
    assert "KL102" in done.stdout
    assert "pathspec" not in done.stderr
    # a named file below an excluded folder is still excluded (there pathspec decides)
    done = subprocess.run(command[:-1] + ["build/gen.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pathspec" in done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("patterns", [DEFAULT_EXCLUDES, DEFAULT_EXCLUDES + ("generated",), ("*_pb2.py",),
                                      ("build/",), ("src/build",)])
@pytest.mark.parametrize("suffix", ["", "/"])
def test_walk_excludes_agree_with_pathspec(patterns, suffix):
    excludes = _Excludes(Settings(exclude=patterns))
    spec = pathspec.GitIgnoreSpec.from_lines(patterns)
    for rel in PATHS:
        assert excludes.match_file(rel + suffix) == spec.match_file(rel + suffix), rel


def _walk(tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(CHECKOUT))
    command = [sys.executable, "-X", "importtime", "-m", "kllint", "check", "--no-cache", "--output-format",
               "json", "."]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)


def test_walk_without_excluded_names_does_not_import_pathspec(tmp_path):
    k3_loss = ("import torch\n\n\ndef kl_loss(logp, ref_logp):\n"
               "    return (torch.exp(ref_logp - logp) - (ref_logp - logp) - 1).mean()\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(k3_loss)
    done = _walk(tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert '"src/train.py"' in done.stdout
    assert "pathspec" not in done.stderr
    # an excluded folder met on the way is skipped (pathspec decides), and so is a .gitignore's
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "gen.py").write_text(k3_loss)
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "try.py").write_text(k3_loss)
    (tmp_path / ".gitignore").write_text("scratch/\n")
    done = _walk(tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "pathspec" in done.stderr
    assert '"src/train.py"' in done.stdout and "gen.py" not in done.stdout and "try.py" not in done.stdout
