"""Issue 35: the result cache's folder is kllint's alone. `check` keeps its cache only in a folder
it creates, an empty one, or one that carries kllint's CACHEDIR.TAG; never in a symbolic link
(nor through one inside the project); `clean` removes only what kllint wrote, only in a folder
with kllint's tag, and says what it left."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from kllint.cli import cli
from kllint.pipeline.cache import CACHE_DIR_NAME, TAG_SIGNATURE

TRAIN = ("import torch\n\n\ndef loss_fn(logp, ref_logp):\n"
         "    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1\n"
         "    loss = kl.mean()\n    loss.backward()\n")
needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink") or os.name != "posix", reason="POSIX symbolic links")


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A git project (a `.git` folder with a HEAD) with one file with a finding; the current folder."""
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".gitignore").write_text("build/\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    (root / "train.py").write_text(TRAIN)
    monkeypatch.chdir(root)
    return root


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry under `folder` (not following links): relative path -> bytes of a file, None otherwise."""
    found = {}
    for path in sorted(folder.rglob("*")):
        found[path.relative_to(folder).as_posix()] = (path.read_bytes() if path.is_file() and not path.is_symlink()
                                                      else None)
    return found


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_the_project_folder_is_refused_as_cache_dir_and_clean_leaves_it(project):
    before = tree(project)
    checked = invoke("check", ".", "--cache-dir", ".")
    assert checked.exit_code == 2, checked.stderr
    assert checked.stderr.startswith("kllint: error: --cache-dir .: ") and "not a kllint cache folder" in checked.stderr
    assert "Traceback" not in checked.stderr and checked.stdout == ""
    cleaned = invoke("clean", "--cache-dir", ".")
    assert cleaned.exit_code == 2 and "does not look like a kllint cache" in cleaned.stderr
    assert tree(project) == before  # .git, the sources and the project's .gitignore as they were


def test_a_project_folder_an_older_kllint_tagged_loses_only_kllints_entries(project):
    """Before issue 35, `check --cache-dir .` wrote its tag, .gitignore and entries into the project."""
    before = tree(project)
    os.remove(project / ".gitignore")  # the older kllint wrote its own .gitignore where none was
    assert invoke("check", ".", "--cache-dir", "cache").exit_code == 1
    for name in ("CACHEDIR.TAG", ".gitignore", "v3"):
        os.rename(project / "cache" / name, project / name)
    os.rmdir(project / "cache")
    again = invoke("check", ".", "--cache-dir", ".")  # kllint's tag: its folder (discovery skips it, a cache)
    assert again.exit_code == 0 and "not a kllint cache" not in again.stderr
    cleaned = invoke("clean", "--cache-dir", ".")
    assert cleaned.exit_code == 0, cleaned.stderr
    assert "left" in cleaned.stderr and ".git" in cleaned.stderr and "train.py" in cleaned.stderr
    del before[".gitignore"]
    assert tree(project) == before  # kllint's tag, .gitignore and entries gone, all else as it was


def test_an_untagged_kllint_cache_folder_is_neither_used_nor_removed(project):
    folder = project / CACHE_DIR_NAME
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    checked = invoke("check", "--output-format", "json", ".")
    assert checked.exit_code == 1 and checked.stdout.startswith("[")
    assert checked.stderr.count("without the cache") == 1 and str(folder) in checked.stderr
    assert tree(folder) == {"notes.txt": b"mine"}
    explicit = invoke("check", ".", "--cache-dir", CACHE_DIR_NAME)
    assert explicit.exit_code == 2 and "not a kllint cache folder" in explicit.stderr
    cleaned = invoke("clean")
    assert cleaned.exit_code == 2 and "does not look like a kllint cache" in cleaned.stderr
    assert tree(folder) == {"notes.txt": b"mine"}
    quiet = invoke("check", "-q", ".")
    assert quiet.exit_code == 1 and "without the cache" not in quiet.stderr


def test_another_tools_cache_tag_is_not_kllints(project, tmp_path):
    other = tmp_path / "other-cache"
    other.mkdir()
    (other / "CACHEDIR.TAG").write_text(TAG_SIGNATURE + "\n# This file is a cache directory tag created by pytest.\n")
    (other / "data").write_text("theirs")
    assert invoke("check", ".", "--cache-dir", str(other)).exit_code == 2
    cleaned = invoke("clean", "--cache-dir", str(other))
    assert cleaned.exit_code == 2 and "does not look like a kllint cache" in cleaned.stderr
    assert sorted(p.name for p in other.iterdir()) == ["CACHEDIR.TAG", "data"]


def test_an_empty_folder_is_adopted_and_clean_removes_it(project, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert invoke("check", ".", "--cache-dir", str(empty)).exit_code == 1
    tag = (empty / "CACHEDIR.TAG").read_text().splitlines()
    assert tag[0] == TAG_SIGNATURE and any("kllint" in line for line in tag[1:])
    assert list((empty / "v3").rglob("*.json"))
    cleaned = invoke("clean", "--cache-dir", str(empty))
    assert cleaned.exit_code == 0 and f"Removed {empty}" in cleaned.stderr
    assert not empty.exists()


@needs_symlinks
def test_a_symlinked_cache_folder_gets_nothing_written_through_it(project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / CACHE_DIR_NAME).symlink_to(elsewhere, target_is_directory=True)
    checked = invoke("check", "--output-format", "json", ".")
    assert checked.exit_code == 1 and checked.stderr.count("without the cache") == 1
    assert "symbolic link" in checked.stderr
    assert list(elsewhere.iterdir()) == []
    explicit = invoke("check", ".", "--cache-dir", CACHE_DIR_NAME)
    assert explicit.exit_code == 2 and "symbolic link" in explicit.stderr
    assert list(elsewhere.iterdir()) == []
    # a tagged folder behind the link: clean does not follow it either
    assert invoke("check", ".", "--cache-dir", str(elsewhere)).exit_code == 1
    entries = tree(elsewhere)
    cleaned = invoke("clean")
    assert cleaned.exit_code == 2 and "symbolic link" in cleaned.stderr
    assert tree(elsewhere) == entries and (project / CACHE_DIR_NAME).is_symlink()


@needs_symlinks
def test_a_cache_dir_reached_through_a_link_in_the_project_is_refused(project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / "ci").symlink_to(elsewhere, target_is_directory=True)
    checked = invoke("check", ".", "--cache-dir", "ci/kllint")
    assert checked.exit_code == 2 and "symbolic link" in checked.stderr
    assert list(elsewhere.iterdir()) == []


def test_clean_keeps_what_kllint_did_not_write_in_its_cache(project):
    assert invoke("check", ".").exit_code == 1
    folder = project / CACHE_DIR_NAME
    (folder / "notes.txt").write_text("mine")
    (folder / "v3" / "keep").mkdir()
    (folder / "v3" / "keep" / "data.bin").write_bytes(b"\0")
    entries = list((folder / "v3").rglob("*.json"))
    assert entries
    cleaned = invoke("clean")
    assert cleaned.exit_code == 0, cleaned.stderr
    assert "notes.txt" in cleaned.stderr and "v3/keep" in cleaned.stderr
    assert not any(path.exists() for path in entries)
    assert (folder / "notes.txt").read_text() == "mine" and (folder / "v3" / "keep" / "data.bin").is_file()
    assert sorted(tree(folder)) == ["notes.txt", "v3", "v3/keep", "v3/keep/data.bin"]  # tag and .gitignore gone
    again = invoke("check", ".")  # no longer kllint's folder, and not empty
    assert again.exit_code == 1 and again.stderr.count("without the cache") == 1
    assert sorted(tree(folder)) == ["notes.txt", "v3", "v3/keep", "v3/keep/data.bin"]
