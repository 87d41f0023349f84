"""The result cache (kllint.pipeline.cache, `.kllint_cache/`): hits, misses, invalidation when the file,
the settings or an imported project module changes, robustness against damaged entries, and the
`--no-cache`, `--cache-dir` options and the `kllint clean` command."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kllint.pipeline.manifest import NAME as MANIFEST
from kllint.pipeline import cache as cache_module
from kllint.pipeline.cache import CACHE_DIR_NAME, TAG_SIGNATURE, ResultCache, default_directory, project_root
from kllint.cli import cli
from kllint.config import Settings
from kllint.pipeline.discovery import discover
from kllint.pipeline.run import run
from kllint.report import json as report_json

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"

# The KL estimate is written in train.py (findings are placed where the estimate is written: one
# place per finding), from a log-ratio its helper module computes: the helper decides the verdict.
# HELPER gives log(pi_ref / pi), train.py's k3 of it is KL102; SWAPPED_HELPER gives log(pi / pi_ref),
# the same k3 then estimates the other direction (KL103): an edit of the helper alone changes
# what is reported in train.py, so a cache entry of train.py kept after it would be stale.
HELPER = """import torch


def log_ratio(logprob, ref_logprob):
    return ref_logprob - logprob
"""
SWAPPED_HELPER = HELPER.replace("return ref_logprob - logprob", "return logprob - ref_logprob")
TRAIN = """import torch

from pkg.kl import log_ratio


def masked_mean(values, mask):
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def actor_loss(logprob, ref_logprob, advantages, response_mask, kl_coef=0.001):
    pg = -advantages * torch.exp(logprob - logprob.detach())
    log_r = log_ratio(logprob, ref_logprob)
    kld = log_r.exp() - log_r - 1
    return masked_mean(pg, response_mask) + kl_coef * masked_mean(kld, response_mask)
"""
# The other layout: the k3 estimate written in the helper module (reported there), judged a loss
# by its caller in train.py: the finding is stored with train.py's entry (`Outcome.foreign`).
K3_HELPER = """import torch


def kl_penalty(logprob, ref_logprob):
    log_r = ref_logprob - logprob
    return log_r.exp() - log_r - 1
"""
K1_HELPER = K3_HELPER.replace("return log_r.exp() - log_r - 1", "return -log_r")
K3_TRAIN = """import torch

from pkg.kl import kl_penalty


def masked_mean(values, mask):
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def actor_loss(logprob, ref_logprob, advantages, response_mask, kl_coef=0.001):
    pg = -advantages * torch.exp(logprob - logprob.detach())
    kld = kl_penalty(logprob, ref_logprob)
    return masked_mean(pg, response_mask) + kl_coef * masked_mean(kld, response_mask)
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """tmp_path/proj: pyproject.toml, pkg/__init__.py, pkg/kl.py (a log-ratio helper), pkg/train.py
    (a k3 of it as a loss)."""
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "kl.py").write_text(HELPER)
    (root / "pkg" / "train.py").write_text(TRAIN)
    monkeypatch.chdir(root)
    return root


def check(paths: list[str], directory: Path | None, settings: Settings | None = None, jobs: int = 1):
    settings = settings or Settings()
    cache = ResultCache.open(directory) if directory is not None else None
    files = list(discover(paths, settings))
    result = run(files, settings, jobs=jobs, cache=cache)
    return result, cache


def read_entry(path):
    """The JSON of a cache entry (its first line is the sha256 of the rest)."""
    check, _, body = path.read_bytes().partition(b"\n")
    assert hashlib.sha256(body).hexdigest().encode() == check
    return json.loads(body)


def write_entry(path, data):
    """Write a cache entry with a valid digest line."""
    body = json.dumps(data).encode()
    path.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


def codes(result) -> list[tuple[str, int, str]]:
    return [(d.path, d.span.line, d.code) for d in result.diagnostics]


def test_project_root_and_default_directory(tmp_path):
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "pyproject.toml").write_text("")
    assert project_root(["b/c"], cwd=tmp_path / "a") == (tmp_path / "a").resolve()
    assert project_root([tmp_path / "a" / "b" / "c", tmp_path / "a" / "b"]) == (tmp_path / "a").resolve()
    assert default_directory(["b/c"], cwd=tmp_path / "a") == (tmp_path / "a").resolve() / CACHE_DIR_NAME
    (tmp_path / "a" / "b" / ".git").mkdir()
    assert project_root([tmp_path / "a" / "b" / "c"]) == (tmp_path / "a" / "b").resolve()
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    if not any((folder / m).exists() for folder in (lonely, *lonely.parents) for m in ("pyproject.toml", ".git")):
        # paths outside the current folder without a project marker: their own folder (issue 14:
        # `kllint clean ../other` removed the current project's cache); inside it: the current folder
        assert project_root([lonely], cwd=tmp_path / "a") == lonely.resolve()
        (lonely / "sub").mkdir()
        assert project_root(["sub"], cwd=lonely) == lonely.resolve()


def test_cache_folder_is_tagged_and_ignored(project):
    check(["pkg"], project / CACHE_DIR_NAME)
    folder = project / CACHE_DIR_NAME
    assert (folder / "CACHEDIR.TAG").read_text().startswith(TAG_SIGNATURE + "\n")
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"
    assert not list(folder.rglob("*.tmp"))  # atomic writes leave no temporary files


def test_second_run_hits_and_gives_the_same_result(project):
    directory = project / CACHE_DIR_NAME
    first, cache = check(["pkg"], directory)
    assert (cache.hits, cache.misses) == (0, 3)
    assert ("pkg/train.py", 13, "KL102") in codes(first)
    second, cache = check(["pkg"], directory)
    assert (cache.hits, cache.misses) == (3, 0)
    assert report_json.render(second.diagnostics) == report_json.render(first.diagnostics)


def test_changing_the_file_misses(project):
    directory = project / CACHE_DIR_NAME
    check(["pkg"], directory)
    (project / "pkg" / "train.py").write_text(TRAIN + "\n# edited\n")
    result, cache = check(["pkg"], directory)
    assert (cache.hits, cache.misses) == (2, 1)
    assert ("pkg/train.py", 13, "KL102") in codes(result)


def test_changing_an_imported_helper_invalidates_the_importer(project):
    directory = project / CACHE_DIR_NAME
    before, _ = check(["pkg/train.py"], directory)
    assert {c for _, _, c in codes(before)} >= {"KL102"}
    (project / "pkg" / "kl.py").write_text(SWAPPED_HELPER)  # the log-ratio swapped: a different finding
    after, cache = check(["pkg/train.py"], directory)
    assert cache.misses == 1 and cache.hits == 0
    fresh, _ = check(["pkg/train.py"], None)
    assert codes(after) == codes(fresh)
    assert "KL103" in {c for _, _, c in codes(after)} and "KL102" not in {c for _, _, c in codes(after)}
    again, cache = check(["pkg/train.py"], directory)
    assert cache.hits == 1 and codes(again) == codes(after)


def test_a_helper_that_appears_invalidates_the_importer(project):
    directory = project / CACHE_DIR_NAME
    (project / "pkg" / "kl.py").unlink()
    before, _ = check(["pkg/train.py"], directory)
    assert "KL102" not in {c for _, _, c in codes(before)}
    (project / "pkg" / "kl.py").write_text(HELPER)
    after, cache = check(["pkg/train.py"], directory)
    assert cache.misses == 1
    assert "KL102" in {c for _, _, c in codes(after)}


def test_comment_edit_of_a_helper_keeps_the_importer_but_code_edits_do_not(project):
    directory = project / CACHE_DIR_NAME
    before, _ = check(["pkg/train.py"], directory)
    helper = project / "pkg" / "kl.py"
    # comments and blank lines between statements, and after the last one: same code digest
    helper.write_text(HELPER.replace("\n\ndef ", "\n# the log-ratio of the k3 estimate\ndef ") + "\n# end\n")
    same, cache = check(["pkg/train.py"], directory)
    assert (cache.hits, cache.misses) == (1, 0) and codes(same) == codes(before)
    # a line inserted before a statement moves it: positions are part of what the analysis reads
    helper.write_text("\n" + HELPER)
    _, cache = check(["pkg/train.py"], directory)
    assert (cache.hits, cache.misses) == (0, 1)
    # a comment inside a definition is part of its code (libcst keeps it, fixes quote it)
    helper.write_text(HELPER.replace("    return ref_logprob", "    # log r\n    return ref_logprob"))
    _, cache = check(["pkg/train.py"], directory)
    assert cache.misses == 1
    helper.write_text(SWAPPED_HELPER)  # same lines, other code
    after, cache = check(["pkg/train.py"], directory)
    fresh, _ = check(["pkg/train.py"], None)
    assert cache.misses == 1 and codes(after) == codes(fresh) and "KL103" in {c for _, _, c in codes(after)}


def test_a_symlinked_helper_pointed_at_another_copy_invalidates_the_importer(project):
    # the analysis names a module by its real path (trace steps show it): a symlink pointed at
    # a copy that differs only in comments (the same code digest) is still a change
    for name in ("impl_a", "impl_b"):
        (project / name).mkdir()
    (project / "impl_a" / "kl.py").write_text(HELPER)
    (project / "impl_b" / "kl.py").write_text(HELPER + "# the copy for the B runs\n")
    helper = project / "pkg" / "kl.py"
    helper.unlink()
    try:
        helper.symlink_to(Path("..") / "impl_a" / "kl.py")
    except OSError:
        pytest.skip("no symlinks here")
    directory = project / CACHE_DIR_NAME
    check(["pkg/train.py"], directory)
    helper.unlink()
    helper.symlink_to(Path("..") / "impl_b" / "kl.py")
    after, cache = check(["pkg/train.py"], directory)
    fresh, _ = check(["pkg/train.py"], None)
    assert cache.misses == 1
    assert report_json.render(after.diagnostics) == report_json.render(fresh.diagnostics)
    assert "impl_b" in report_json.render(after.diagnostics)


def test_a_symlinked_helper_folder_pointed_at_another_copy_invalidates_the_importer(project):
    # the same for a folder above the helper: its real path is resolved folder by folder
    for name in ("impl_a", "impl_b"):
        (project / name).mkdir()
        (project / name / "__init__.py").write_text("")
    (project / "impl_a" / "kl.py").write_text(HELPER)
    (project / "impl_b" / "kl.py").write_text(HELPER + "# the copy for the B runs\n")
    folder = project / "pkg" / "helpers"
    try:
        folder.symlink_to(Path("..") / "impl_a", target_is_directory=True)
    except OSError:
        pytest.skip("no symlinks here")
    (project / "pkg" / "train.py").write_text(TRAIN.replace("from pkg.kl import", "from pkg.helpers.kl import"))
    directory = project / CACHE_DIR_NAME
    check(["pkg/train.py"], directory)
    _, cache = check(["pkg/train.py"], directory)
    assert (cache.hits, cache.misses) == (1, 0)
    folder.unlink()
    folder.symlink_to(Path("..") / "impl_b", target_is_directory=True)
    after, cache = check(["pkg/train.py"], directory)
    fresh, _ = check(["pkg/train.py"], None)
    assert cache.misses == 1
    assert report_json.render(after.diagnostics) == report_json.render(fresh.diagnostics)
    assert "impl_b" in report_json.render(after.diagnostics)


def test_a_helper_that_stops_parsing_invalidates_the_importer(project):
    directory = project / CACHE_DIR_NAME
    check(["pkg/train.py"], directory)
    (project / "pkg" / "kl.py").write_text(HELPER + "\n# (\ndef broken(:\n")
    after, cache = check(["pkg/train.py"], directory)
    fresh, _ = check(["pkg/train.py"], None)
    assert cache.misses == 1 and codes(after) == codes(fresh)


def _helper_writes_the_estimate(project: Path) -> None:
    """The other layout: pkg/kl.py writes the k3 estimate, pkg/train.py makes it a loss."""
    (project / "pkg" / "kl.py").write_text(K3_HELPER)
    (project / "pkg" / "train.py").write_text(K3_TRAIN)


def test_a_finding_placed_in_a_helper_by_its_caller_is_cached_and_refreshed_with_the_helper(project):
    _helper_writes_the_estimate(project)
    directory = project / CACHE_DIR_NAME
    first, cache = check(["pkg"], directory)
    assert (cache.hits, cache.misses) == (0, 3)
    assert {(p, c) for p, _, c in codes(first)} == {("pkg/kl.py", "KL102"), ("pkg/kl.py", "KL201")}
    second, cache = check(["pkg"], directory)  # kl.py's findings come from train.py's entry
    assert (cache.hits, cache.misses) == (3, 0) and codes(second) == codes(first)
    (project / "pkg" / "kl.py").write_text(K1_HELPER)  # k3 -> k1: a different finding
    after, cache = check(["pkg"], directory)
    assert (cache.hits, cache.misses) == (1, 2)  # kl.py and its importer analysed again
    assert codes(after) == codes(check(["pkg"], None)[0])
    assert ("pkg/kl.py", "KL101") in {(p, c) for p, _, c in codes(after)}
    assert "KL102" not in {c for _, _, c in codes(after)}  # the old entry's placed finding is gone


def test_a_caller_that_stops_making_the_estimate_a_loss_leaves_no_finding_in_the_cached_helper(project):
    _helper_writes_the_estimate(project)
    directory = project / CACHE_DIR_NAME
    first, _ = check(["pkg"], directory)
    assert ("pkg/kl.py", "KL102") in {(p, c) for p, _, c in codes(first)}
    (project / "pkg" / "train.py").write_text(
        K3_TRAIN.replace(" + kl_coef * masked_mean(kld, response_mask)", ""))
    after, cache = check(["pkg"], directory)
    assert (cache.hits, cache.misses) == (2, 1)  # kl.py's own entry is a hit: nothing stale in it
    assert codes(after) == codes(check(["pkg"], None)[0]) == []


def test_a_helper_checked_alone_gets_its_callers_findings_cold_and_warm(project):
    # the run also analyses (and caches) the modules calling into the checked file; what they
    # place in it is reported, what they place elsewhere is not, also from their cache entries
    _helper_writes_the_estimate(project)
    directory = project / CACHE_DIR_NAME
    cold, cache = check(["pkg/kl.py"], directory)
    assert (cache.hits, cache.misses) == (0, 2)  # kl.py and train.py, its caller
    assert {(p, c) for p, _, c in codes(cold)} == {("pkg/kl.py", "KL102"), ("pkg/kl.py", "KL201")}
    warm, cache = check(["pkg/kl.py"], directory)
    assert (cache.hits, cache.misses) == (2, 0) and codes(warm) == codes(cold)
    caller, cache = check(["pkg/train.py"], directory)
    assert cache.hits == 1 and codes(caller) == []  # written in kl.py, which is not checked
    (project / "pkg" / "train.py").write_text(
        K3_TRAIN.replace(" + kl_coef * masked_mean(kld, response_mask)", ""))
    after, cache = check(["pkg/kl.py"], directory)
    assert codes(after) == codes(check(["pkg/kl.py"], None)[0]) == []


def test_a_helper_let_go_by_the_prefilter_still_gets_its_callers_findings(project):
    # a helper whose code names no KL nor reference is skipped unparsed when checked; its
    # caller's analysis still follows it and places the estimate there (cold, and from the
    # manifest's skipped result when warm)
    helper = K3_HELPER.replace("kl_penalty", "penalty").replace("ref_logprob", "b").replace("logprob", "a")
    (project / "pkg" / "util.py").write_text(helper)
    (project / "pkg" / "train.py").write_text(K3_TRAIN.replace("from pkg.kl import kl_penalty",
                                                               "from pkg.util import penalty as kl_penalty"))
    directory = project / CACHE_DIR_NAME
    for hits in (0, 4):  # __init__.py, kl.py, train.py, util.py
        result, cache = check(["pkg"], directory)
        assert cache.hits == hits
        assert {(p, c) for p, _, c in codes(result)} == {("pkg/util.py", "KL102"), ("pkg/util.py", "KL201")}
    assert codes(result) == codes(check(["pkg"], None)[0])


def test_findings_placed_in_a_checked_file_given_by_its_absolute_path_are_reported(project):
    _helper_writes_the_estimate(project)
    directory = project / CACHE_DIR_NAME
    for paths in ([str(project.resolve() / "pkg")], [str(project.resolve() / "pkg" / "kl.py")]):
        for cached in (None, directory, directory):
            result, _ = check(paths, cached)
            assert {(p, c) for p, _, c in codes(result)} == {
                ((project.resolve() / "pkg" / "kl.py").as_posix(), code) for code in ("KL102", "KL201")}


def test_unrelated_module_does_not_invalidate(project):
    directory = project / CACHE_DIR_NAME
    check(["pkg/train.py"], directory)
    (project / "pkg" / "other.py").write_text("x = 1\n")
    _, cache = check(["pkg/train.py"], directory)
    assert cache.hits == 1


def test_selection_is_reapplied_on_hits_and_settings_are_part_of_the_key(project):
    directory = project / CACHE_DIR_NAME
    check(["pkg"], directory)
    narrowed = Settings(select=("KL201",), ignore=("KL101",), per_file_ignores=(("pkg/kl.py", ("KL102",)),))
    result, cache = check(["pkg"], directory, narrowed)
    assert {c for _, _, c in codes(result)} == {"KL201"}
    assert cache.hits == 3  # the selection is applied to the cached results, no new analysis
    full, cache = check(["pkg"], directory)
    assert cache.hits == 3 and "KL102" in {c for _, _, c in codes(full)}
    from kllint.config import Vocab

    other = Settings(vocab=Vocab(reference_names=("anchor_logps",)))
    _, cache = check(["pkg"], directory, other)
    assert cache.misses == 3  # what the analysis reads: its own entries


def test_suppression_comment_edit_is_seen(project):
    directory = project / CACHE_DIR_NAME
    check(["pkg"], directory)
    text = (project / "pkg" / "train.py").read_text().replace(
        "kld = log_r.exp() - log_r - 1", "kld = log_r.exp() - log_r - 1  # noqa: KL102, KL201")
    (project / "pkg" / "train.py").write_text(text)
    result, _ = check(["pkg"], directory)
    assert not [c for c in codes(result) if c[0] == "pkg/train.py" and c[2] in ("KL102", "KL201")]


def test_corrupt_and_foreign_entries_are_misses(project):
    directory = project / CACHE_DIR_NAME
    first, _ = check(["pkg"], directory)
    entries = sorted((directory / cache_module.FORMAT).glob("*/*.json"))  # beside them: the manifest
    assert len(entries) == 3
    entries[0].write_bytes(b"\x00garbage")
    write_entry(entries[1], {"implementation": "x", "found": 3})
    data = read_entry(entries[2])
    data["found"] = [{"@": "NotAClass"}]
    write_entry(entries[2], data)  # a valid digest over content that is not a cache entry
    (directory / cache_module.FORMAT / MANIFEST).unlink()  # it would serve the skipped file
    second, cache = check(["pkg"], directory)
    assert cache.misses == 3
    assert report_json.render(second.diagnostics) == report_json.render(first.diagnostics)
    third, cache = check(["pkg"], directory)  # rewritten
    assert cache.hits == 3


def test_cache_dir_that_cannot_be_created_is_an_error(project):
    blocker = project / "not-a-folder"
    blocker.write_text("")
    assert ResultCache.open(blocker / "cache") is None
    result = CliRunner().invoke(cli, ["check", "--output-format", "json", "--cache-dir", str(blocker / "cache"), "pkg"])
    assert result.exit_code == 2  # named by the user: not silently ignored
    assert "--cache-dir" in result.stderr and "cannot create" in result.stderr
    assert result.stdout == ""


def test_default_cache_that_cannot_be_created_is_skipped(project):
    (project / ".kllint_cache").write_text("")  # a file where the default cache folder goes
    result = CliRunner().invoke(cli, ["check", "--output-format", "json", "pkg"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root can write anywhere")
def test_read_only_cache_is_skipped(project):  # pragma: no cover - not run as root
    directory = project / CACHE_DIR_NAME
    check(["pkg"], directory)
    os.chmod(directory / cache_module.FORMAT, 0o500)
    try:
        (project / "pkg" / "train.py").write_text(TRAIN + "\n")
        result, _ = check(["pkg"], directory)
        assert "KL102" in {c for _, _, c in codes(result)}
    finally:
        os.chmod(directory / cache_module.FORMAT, 0o700)


def test_parallel_run_fills_the_cache_and_warm_run_matches(project):
    for index in range(10):
        shutil.copy(sorted(FIXTURES.glob("KL1*/*.py"))[index], project / "pkg" / f"copy{index}.py")
    directory = project / CACHE_DIR_NAME
    cold, cache = check(["pkg"], directory, jobs=2)
    assert cache.misses == 13
    warm, cache = check(["pkg"], directory, jobs=2)
    assert cache.hits == 13
    plain, _ = check(["pkg"], None, jobs=1)
    assert report_json.render(cold.diagnostics) == report_json.render(warm.diagnostics) \
        == report_json.render(plain.diagnostics)
    (project / "pkg" / "kl.py").write_text(SWAPPED_HELPER)
    changed, cache = check(["pkg"], directory, jobs=2)
    assert cache.misses >= 2  # kl.py and train.py (and any copy that imports nothing is a hit)
    assert codes(changed) == codes(check(["pkg"], None)[0])


def test_command_line_cache_and_clean(project):
    runner = CliRunner()
    args = ["check", "--output-format", "json", "pkg"]
    first = runner.invoke(cli, ["check", "--output-format", "json", "--no-cache", "pkg"])
    assert first.exit_code == 1
    assert not (project / CACHE_DIR_NAME).exists()
    second = runner.invoke(cli, args)
    assert (project / CACHE_DIR_NAME / "CACHEDIR.TAG").is_file()
    third = runner.invoke(cli, args)
    assert first.stdout == second.stdout == third.stdout
    cleaned = runner.invoke(cli, ["clean"])
    assert cleaned.exit_code == 0
    assert f"Removed {project.resolve() / CACHE_DIR_NAME}" in cleaned.stderr
    assert not (project / CACHE_DIR_NAME).exists()
    again = runner.invoke(cli, ["clean"])
    assert again.exit_code == 0 and "No cache to remove" in again.stderr


def test_cache_dir_option_and_clean_refuses_other_folders(project, tmp_path):
    runner = CliRunner()
    elsewhere = tmp_path / "ci-cache"
    result = runner.invoke(cli, ["check", "--output-format", "json", "--cache-dir", str(elsewhere), "pkg"])
    assert result.exit_code == 1
    assert (elsewhere / "CACHEDIR.TAG").is_file() and not (project / CACHE_DIR_NAME).exists()
    assert runner.invoke(cli, ["clean", "--cache-dir", str(elsewhere)]).exit_code == 0
    assert not elsewhere.exists()
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("data")
    refused = runner.invoke(cli, ["clean", "--cache-dir", str(precious)])
    assert refused.exit_code == 2
    assert "does not look like a kllint cache" in refused.stderr
    assert (precious / "keep.txt").is_file()
    both = runner.invoke(cli, ["check", "--no-cache", "--cache-dir", str(elsewhere), "pkg"])
    assert both.exit_code == 2


def test_replaced_analysis_does_not_share_entries(project, monkeypatch):
    directory = project / CACHE_DIR_NAME
    real, _ = check(["pkg"], directory)
    import kllint.rules.dispatch as dispatch

    with monkeypatch.context() as patch:
        patch.setattr(dispatch, "check_source", lambda *args, **kwargs: [])
        fake, cache = check(["pkg"], directory)
    assert cache.hits == 0 and codes(fake) == []
    again, cache = check(["pkg"], directory)  # the fake results replaced the entries: analysed again
    assert cache.hits == 0 and codes(again) == codes(real)


def test_console_script_warm_run_identical(project):
    command = [sys.executable, "-m", "kllint", "check", "--output-format", "json", "pkg"]
    cold = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=300)
    warm = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=300)
    assert cold.returncode == warm.returncode == 1
    assert cold.stdout == warm.stdout and "Traceback" not in cold.stderr + warm.stderr


def test_hit_on_a_file_with_an_encoding_cookie(project):
    source = "# -*- coding: latin-1 -*-\n" + TRAIN.replace("import torch\n", "import torch\nNAME = 'été'\n", 1)
    (project / "pkg" / "train.py").write_bytes(source.encode("latin-1"))
    directory = project / CACHE_DIR_NAME
    first, _ = check(["pkg/train.py"], directory)
    assert "KL102" in {c for _, _, c in codes(first)}
    second, cache = check(["pkg/train.py"], directory)
    assert cache.hits == 1 and codes(second) == codes(first)


def _reads_of(monkeypatch, wanted: Path) -> list[Path]:
    """Record each read of `wanted` by the cache from now on."""
    reads: list[Path] = []
    original = cache_module.read_regular

    def recording(path, *args, **kwargs):
        if Path(path).resolve() == wanted.resolve():
            reads.append(Path(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(cache_module, "read_regular", recording)
    return reads


def test_a_hit_on_a_file_without_suppressions_reads_nothing_and_keeps_its_findings(project, monkeypatch):
    directory = project / CACHE_DIR_NAME
    first, _ = check(["pkg/train.py"], directory)
    reads = _reads_of(monkeypatch, project / "pkg" / "train.py")
    all_codes = Settings(select=("ALL",))  # KL901 audits suppressions: none to audit here
    for settings in (Settings(), all_codes, Settings(ignore=("KL102",))):
        result, cache = check(["pkg/train.py"], directory, settings)
        fresh, _ = check(["pkg/train.py"], None, settings)
        assert cache.hits == 1 and codes(result) == codes(fresh)
    assert reads == []
    assert "KL102" in {c for _, _, c in codes(first)}


def test_a_hit_on_a_file_that_names_a_suppression_reads_it_again(project, monkeypatch):
    directory = project / CACHE_DIR_NAME
    train = project / "pkg" / "train.py"
    train.write_text(TRAIN.replace("kld = log_r.exp() - log_r - 1",
                                   "kld = log_r.exp() - log_r - 1  # noqa: KL102"))
    first, _ = check(["pkg/train.py"], directory)
    reads = _reads_of(monkeypatch, train)
    second, cache = check(["pkg/train.py"], directory)
    assert cache.hits == 1 and codes(second) == codes(first) and len(reads) == 1
    assert "KL102" not in {c for _, _, c in codes(second)}


def test_an_absent_candidate_module_that_appears_in_a_listed_folder_invalidates(project):
    # `from pkg.kl import ...` also probes `pkg/kl/__init__.py`; the folders of absent candidates are
    # listed once per run: a candidate that appears there (here: a module folder) must be seen
    directory = project / CACHE_DIR_NAME
    check(["pkg/train.py"], directory)
    _, cache = check(["pkg/train.py"], directory)
    assert cache.hits == 1
    (project / "pkg" / "kl.py").rename(project / "pkg" / "old_kl.py")
    (project / "pkg" / "kl").mkdir()
    (project / "pkg" / "kl" / "__init__.py").write_text(SWAPPED_HELPER)
    after, cache = check(["pkg/train.py"], directory)
    assert cache.misses == 1 and "KL103" in {c for _, _, c in codes(after)}


@pytest.mark.skipif(sys.platform != "linux", reason="a file name that is not UTF-8 needs a byte-named file system")
def test_a_file_whose_name_is_not_utf8_is_cached(project):
    odd = os.fsdecode(b"pkg/tr\xffin.py")
    shutil.copy(project / "pkg" / "train.py", odd)
    directory = project / CACHE_DIR_NAME
    first, cache = check([odd], directory)
    assert cache.misses == 1 and "KL102" in {c for _, _, c in codes(first)}
    second, cache = check([odd], directory)
    assert cache.hits == 1 and codes(second) == codes(first)


def test_an_absent_module_with_a_non_ascii_name_is_looked_up_whatever_the_listing_says(project, monkeypatch):
    # a file system may store `café.py` decomposed (macOS) and still find it under the composed
    # name Python imports: a listing cannot tell, so such a name is looked up itself
    import unicodedata

    from kllint.pipeline import fingerprints

    (project / "pkg" / "train.py").write_text(TRAIN.replace("from pkg.kl import", "from pkg.café import"))
    directory = project / CACHE_DIR_NAME
    check(["pkg/train.py"], directory)
    (project / "pkg" / "café.py").write_text(SWAPPED_HELPER)
    listdir = os.listdir
    monkeypatch.setattr(fingerprints.os, "listdir",
                        lambda folder: [unicodedata.normalize("NFD", name) for name in listdir(folder)])
    after, cache = check(["pkg/train.py"], directory)
    assert cache.misses == 1 and "KL103" in {c for _, _, c in codes(after)}


def test_an_absent_candidate_in_folders_that_did_not_exist_invalidates_once_they_are_created(project):
    # the folders of absent candidates that are not there are told from the listing of the folder
    # above (`pkg/sub` missing from `pkg`'s listing: `pkg/sub/deep` is missing too); once created
    # with the module in them, the recorded absence no longer holds
    (project / "pkg" / "train.py").write_text(TRAIN.replace("from pkg.kl import", "from pkg.sub.deep.kl import"))
    directory = project / CACHE_DIR_NAME
    check(["pkg/train.py"], directory)
    _, cache = check(["pkg/train.py"], directory)
    assert cache.hits == 1
    entry = next(e for e in map(read_entry, (directory / "v3").glob("*/*.json")) if e["deps"])
    assert str(project / "pkg" / "sub" / "deep" / "kl.py") in entry["deps"]
    (project / "pkg" / "sub" / "deep").mkdir(parents=True)
    for folder in ("sub", "sub/deep"):
        (project / "pkg" / folder / "__init__.py").write_text("")
    (project / "pkg" / "sub" / "deep" / "kl.py").write_text(SWAPPED_HELPER)
    after, cache = check(["pkg/train.py"], directory)
    assert cache.misses == 1 and "KL103" in {c for _, _, c in codes(after)}


def test_an_init_file_added_above_a_folder_between_runs_changes_the_package_and_invalidates(project):
    # package roots are memoised per folder and per parent within a run, never across runs
    (project / "a" / "b" / "c").mkdir(parents=True)
    (project / "a" / "b" / "c" / "m.py").write_text(TRAIN)
    directory = project / CACHE_DIR_NAME
    check(["a/b/c/m.py"], directory)
    _, cache = check(["a/b/c/m.py"], directory)
    assert (cache.hits, cache.misses) == (1, 0)
    (project / "a" / "b" / "__init__.py").write_text("")
    _, cache = check(["a/b/c/m.py"], directory)
    assert (cache.hits, cache.misses) == (0, 1)
    entry = next(e for e in map(read_entry, (directory / "v3").glob("*/*.json")) if e["path"].endswith("m.py"))
    assert entry["package"][:2] == [str((project / "a").resolve()), "b.c.m"]
