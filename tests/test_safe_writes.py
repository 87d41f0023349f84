"""Issue 14, what kllint runs and writes: a tampered cache never runs or writes code, fixes keep
files' encodings, owners and modes and stay inside the project, non-UTF-8 file names never
break a report, and the cache folder is never written through a symbolic link.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import pytest

from kllint.pipeline.manifest import NAME as MANIFEST
from kllint.report.paths import escape_path, unescape_path
from test_cli_support import fake_analysis, run_cli, write  # noqa: F401 - fixture
from test_hostile_files import GOOD, kllint

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file names, modes and links")


def _entries(cache: Path) -> list[Path]:
    """The per-file entries of a cache folder (not the manifest beside them)."""
    return sorted(p for p in cache.rglob("*.json") if p.name != MANIFEST)


def _load(entry: Path) -> dict:
    check, _, body = entry.read_bytes().partition(b"\n")
    assert hashlib.sha256(body).hexdigest().encode() == check
    return json.loads(body)


def _sign(entry: Path, data: dict) -> None:
    """Write an entry as an attacker who knows the format would: with a valid digest."""
    body = json.dumps(data).encode()
    entry.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


def _tamper(node, kind: str, change) -> int:
    """Apply `change` to every encoded object of class `kind` in a cache entry; returns how many."""
    count = 0
    if isinstance(node, dict):
        if node.get("@") == kind:
            change(node)
            count += 1
        for value in node.values():
            count += _tamper(value, kind, change)
    elif isinstance(node, list):
        for value in node:
            count += _tamper(value, kind, change)
    return count


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "good.py").write_text(GOOD)
    return tmp_path


# -- item 2: the cache is not trusted ------------------------------------------------------------

def test_tampered_fix_in_the_cache_is_never_written(project):
    cache = project / "cache"
    kllint(["check", "--cache-dir", str(cache), "."], project)
    [entry] = _entries(cache)
    data = _load(entry)

    def evil(fix: dict) -> None:
        fix["applicability"] = "safe"
        fix["replacement"] = "__import__('os').system('touch PWNED')"

    assert _tamper(data, "Fix", evil)
    _sign(entry, data)
    for option in ("--fix", "--diff"):
        result = kllint(["check", "--cache-dir", str(cache), option, "."], project)
        assert "PWNED" not in result.stdout  # neither in the diff nor in the findings reported after --fix
        assert (project / "good.py").read_text() == GOOD
    assert not (project / "PWNED").exists()


def test_tampered_codes_in_the_cache_are_not_written_by_add_noqa(project):
    cache = project / "cache"
    kllint(["check", "--cache-dir", str(cache), "."], project)
    [entry] = _entries(cache)
    data = _load(entry)
    assert _tamper(data, "Diagnostic", lambda d: d.update(message="evil"))
    _sign(entry, data)
    # the cached findings' codes are not what add-noqa writes: a fresh analysis gives them
    result = kllint(["check", "--cache-dir", str(cache), "--add-noqa", "."], project)
    assert result.returncode == 0, result.stderr
    assert "Added 1 noqa directive." in result.stderr
    assert "# noqa: KL102, KL201" in (project / "good.py").read_text()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None and importlib.util.find_spec("jax") is None,
                    reason="--confirm needs torch or jax")
def test_tampered_estimate_in_the_cache_is_never_executed(project):
    cache = project / "cache"
    kllint(["check", "--cache-dir", str(cache), "."], project)
    [entry] = _entries(cache)
    data = _load(entry)

    def evil(estimate: dict) -> None:
        estimate["setup"] = {"@t": ["__import__('pathlib').Path('PWNED').write_text('x')"]}
        estimate["source"] = "__import__('pathlib').Path('PWNED2').write_text('x')"

    assert _tamper(data, "Estimate", evil)
    _sign(entry, data)
    result = kllint(["check", "--cache-dir", str(cache), "--confirm", "--output-format", "json", "."], project,
                    timeout=600)
    assert result.returncode == 1, result.stderr
    assert not (project / "PWNED").exists() and not (project / "PWNED2").exists()
    assert any(d["confirmed"] for d in json.loads(result.stdout))  # confirmed from the fresh estimate


def test_flipped_byte_in_a_cache_entry_is_ignored_and_healed(project):
    cache = project / "cache"
    first = kllint(["check", "--cache-dir", str(cache), "--output-format", "json", "."], project)
    [entry] = _entries(cache)
    raw = entry.read_bytes()
    flipped = raw.replace(b"per-token", b"per-tokeN", 1)  # still valid JSON
    assert flipped != raw
    entry.write_bytes(flipped)
    second = kllint(["check", "--cache-dir", str(cache), "--output-format", "json", "."], project)
    assert second.stdout == first.stdout and "per-tokeN" not in second.stdout
    assert entry.read_bytes() == raw  # rewritten by the run


@posix_only
def test_symlinked_folder_inside_the_cache_is_not_written_through(project, tmp_path_factory):
    cache = project / "cache"
    kllint(["check", "--cache-dir", str(cache), "."], project)
    [entry] = _entries(cache)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    bucket = entry.parent
    for item in bucket.iterdir():
        item.unlink()
    bucket.rmdir()
    bucket.symlink_to(elsewhere, target_is_directory=True)
    (project / "good.py").write_text(GOOD + "\n# edited\n")
    result = kllint(["check", "--cache-dir", str(cache), "."], project)
    assert result.returncode == 1
    assert list(elsewhere.iterdir()) == []


def test_clean_names_the_other_project(tmp_path):
    here, other = tmp_path / "here", tmp_path / "other"
    for folder in (here, other):
        write(folder / "m.py", "x = 1\n")
        assert kllint(["check", "."], folder).returncode == 0
        assert (folder / ".kllint_cache").is_dir()
    result = kllint(["clean", "../other"], here)
    assert result.returncode == 0, result.stderr
    assert not (other / ".kllint_cache").exists()
    assert (here / ".kllint_cache").is_dir()


# -- item 7: PEP 263 encodings -------------------------------------------------------------------

LATIN1 = "# -*- coding: latin-1 -*-\n# caf\u00e9\ndef f(x):\n    return BAD(x)\n"


def test_fix_diff_and_add_noqa_keep_a_declared_encoding(tmp_path, monkeypatch, fake_analysis):
    target = tmp_path / "latin.py"
    target.write_bytes(LATIN1.encode("latin-1"))
    monkeypatch.chdir(tmp_path)
    diff = run_cli(["check", "--no-cache", "--diff", "latin.py"])
    assert diff.exit_code == 1, diff.stderr
    assert "+    return GOOD(x)" in diff.stdout
    fixed = run_cli(["check", "--no-cache", "--fix", "latin.py"])
    assert fixed.exit_code == 0, fixed.stderr
    assert target.read_bytes() == LATIN1.replace("BAD", "GOOD").encode("latin-1")
    target.write_bytes(LATIN1.encode("latin-1"))
    noqa = run_cli(["check", "--no-cache", "--add-noqa", "latin.py"])
    assert noqa.exit_code == 0, noqa.stderr
    assert "Added 1 noqa directive." in noqa.stderr
    assert target.read_bytes() == LATIN1.replace("BAD(x)", "BAD(x)  # noqa: KL102").encode("latin-1")


# -- item 8: file names that are not UTF-8 -------------------------------------------------------

def test_escape_path_is_reversible():
    for name in ("plain.py", "caf\u00e9.py", "caf\udce9.py", "back\\slash.py", "a\\xe9\udcff.py"):
        escaped = escape_path(name)
        escaped.encode("utf-8")  # valid Unicode
        assert unescape_path(escaped) == name
    assert escape_path("caf\u00e9.py") == "caf\u00e9.py"


@posix_only
def test_non_utf8_file_names_in_every_report(tmp_path, monkeypatch, fake_analysis):
    name = os.fsdecode(b"caf\xe9.py")
    try:
        (tmp_path / name).write_text("BAD(x)\n")
    except (OSError, UnicodeEncodeError):
        pytest.skip("the file system does not take non-UTF-8 names")
    monkeypatch.chdir(tmp_path)
    result = run_cli(["check", "--no-cache", "--output-format", "json", "--report", "sarif:out.sarif",
                      "--report", "json:out.json", "."])
    assert result.exit_code == 1, result.stderr
    for text in (result.stdout, (tmp_path / "out.json").read_text(encoding="utf-8")):
        assert [d["path"] for d in json.loads(text)] == ["caf\\xe9.py"]
        assert "\\udc" not in text
    sarif = json.loads((tmp_path / "out.sarif").read_text(encoding="utf-8"))
    [finding] = sarif["runs"][0]["results"]
    assert finding["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "caf%E9.py"
    baseline = run_cli(["check", "--no-cache", "--write-baseline", "base.json", "."])
    assert baseline.exit_code == 0, baseline.stderr
    assert json.loads((tmp_path / "base.json").read_text())["findings"][0]["path"] == "caf\\xe9.py"
    assert run_cli(["check", "--no-cache", "--baseline", "base.json", "."]).exit_code == 0


# -- item 9: where --fix writes ------------------------------------------------------------------

@posix_only
def test_fix_does_not_write_through_a_symlink_out_of_the_project(tmp_path, monkeypatch, fake_analysis):
    outside = write(tmp_path / "outside" / "lib.py", "BAD(x)\n")
    project = tmp_path / "project"
    write(project / "pyproject.toml", "[project]\nname = 'p'\n")
    (project / "lib.py").symlink_to(outside)
    inner = write(project / "inner.py", "BAD(y)\n")
    (project / "alias.py").symlink_to(inner)
    monkeypatch.chdir(project)
    result = run_cli(["check", "--no-cache", "--fix", "lib.py", "alias.py"])
    assert outside.read_text() == "BAD(x)\n"
    assert "is outside the project" in result.stderr
    assert inner.read_text() == "GOOD(y)\n"  # a link inside the project is followed
    assert "Fixed 1 finding." in result.stderr
    assert result.exit_code == 1


@posix_only
def test_fix_leaves_read_only_and_hard_linked_files_and_says_so(tmp_path, monkeypatch, fake_analysis):
    frozen = write(tmp_path / "frozen.py", "BAD(x)\n")
    frozen.chmod(0o444)
    linked = write(tmp_path / "linked.py", "BAD(x)\n")
    os.link(linked, tmp_path / "other_name.txt")
    monkeypatch.chdir(tmp_path)
    result = run_cli(["check", "--no-cache", "--fix", "frozen.py", "linked.py"])
    assert frozen.read_text() == linked.read_text() == "BAD(x)\n"
    assert "frozen.py: the file is read-only; not fixed" in result.stderr
    assert "linked.py: the file has 2 hard links" in result.stderr
    assert "Fixed" not in result.stderr  # was "Fixed 2 findings." although nothing was written
    assert result.exit_code == 1
    assert os.stat(frozen).st_mode & 0o777 == 0o444


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="changing owners needs root")
def test_fix_as_root_keeps_owner_and_mode(tmp_path, monkeypatch, fake_analysis):
    target = write(tmp_path / "owned.py", "BAD(x)\n")
    os.chown(target, 12345, 23456)
    target.chmod(0o640)
    monkeypatch.chdir(tmp_path)
    assert run_cli(["check", "--no-cache", "--fix", "owned.py"]).exit_code == 0
    st = os.stat(target)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (12345, 23456, 0o640)
    assert target.read_text() == "GOOD(x)\n"


# -- item 14: messages ---------------------------------------------------------------------------

def test_fix_not_applied_lines_are_not_wrapped(tmp_path, monkeypatch, fake_analysis):
    name = "a_rather_long_module_name_that_pushes_the_line_past_eighty_columns.py"
    write(tmp_path / name, "LOOP(x)\n")
    monkeypatch.chdir(tmp_path)
    result = run_cli(["check", "--no-cache", "--fix", name])
    lines = [line for line in result.stderr.splitlines() if "not applied" in line]
    assert lines == [f"kllint: {name}:1:1: fix for KL101 not applied (the result did not parse or still had "
                     "the finding)"]


def test_usage_errors_are_one_line(tmp_path):
    for args, words in ((["check", "--bogus"], "No such option"), (["check", "-j", "0"], "--jobs")):
        result = kllint(args, tmp_path)
        assert result.returncode == 2
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("kllint: error: ") and words in line
