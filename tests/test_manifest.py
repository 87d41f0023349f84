"""The cache's manifest (kllint.pipeline.manifest): a file's digest from its `stat` signature
while it is unchanged and not racily new, and the prefilter-skipped files served without their
entries; whatever is wrong with it is a miss, never a wrong result."""
from __future__ import annotations

import os

import pytest

from kllint.config import Settings
from kllint.pipeline import cache as cache_module
from kllint.pipeline import manifest as manifest_module
from kllint.pipeline.cache import CACHE_DIR_NAME, ResultCache
from kllint.pipeline.discovery import discover
from kllint.pipeline.manifest import Manifest
from kllint.pipeline.run import run
from kllint.report import json as report_json

TRAIN = """\
import torch


def loss_fn(logp, ref_logp):
    log_ratio = ref_logp - logp
    return (torch.exp(log_ratio) - log_ratio - 1).sum()


def step(model, batch):
    loss_fn(model(batch), batch["ref_logps"]).backward()
"""


@pytest.fixture
def reads(monkeypatch):
    """The files the manifest reads to hash them (its `read_regular`, but for the manifest itself)."""
    seen: list[str] = []
    real = manifest_module.read_regular

    def counting(path, limit, follow_symlinks=True):
        if not os.fspath(path).endswith(manifest_module.NAME):
            seen.append(os.fspath(path))
        return real(path, limit, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(manifest_module, "read_regular", counting)
    return seen


def _manifest(folder, implementation="impl"):
    """A manifest in `folder` for files of at most 1 MiB."""
    return Manifest(folder, implementation, 1 << 20, 1 << 20)


def _old_enough(monkeypatch):
    # every file of a test is seconds old, its change time included (no call can set it back):
    # a margin below zero makes all of them count as settled
    monkeypatch.setattr(manifest_module, "RACY_NS", -10**18)


def test_a_settled_file_is_read_once_and_then_known_by_its_signature(tmp_path, reads, monkeypatch):
    _old_enough(monkeypatch)
    target = tmp_path / "a.py"
    target.write_text("x = 1\n")
    first = _manifest(tmp_path)
    digest = first.digest(target)
    first.save()
    again = _manifest(tmp_path)
    assert again.digest(target) == digest
    assert reads == [str(target)]  # the second run did not read it


def test_same_size_edit_is_seen_even_with_the_old_modification_time(tmp_path, reads, monkeypatch):
    _old_enough(monkeypatch)
    target = tmp_path / "a.py"
    target.write_text("x = 1\n")
    before = os.stat(target)
    first = _manifest(tmp_path)
    old = first.digest(target)
    first.save()
    target.write_text("x = 2\n")  # same size; the modification time put back, the change time cannot be
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    if os.stat(target).st_ctime_ns == before.st_ctime_ns:
        pytest.skip("this file system's timestamps are too coarse to tell the two writes apart")
    again = _manifest(tmp_path)
    new = again.digest(target)
    assert new != old and len(reads) == 2


def test_a_racily_new_file_is_read_again(tmp_path, reads):
    # written just now: its timestamps are within RACY_NS of the recording, so the row is not
    # trusted (an edit within the clock's granularity could keep them)
    target = tmp_path / "a.py"
    target.write_text("x = 1\n")
    manifest = _manifest(tmp_path)
    assert manifest.digest(target) == manifest.digest(target)
    assert len(reads) == 2


def test_a_digest_is_recorded_under_the_signature_taken_before_the_read(tmp_path, monkeypatch):
    # an editor saving while the run analyses the file: the recorded signature is the one of the
    # bytes read, so the next run sees a different file and reads it again
    _old_enough(monkeypatch)
    target = tmp_path / "a.py"
    target.write_text("x = 1\n")
    before = manifest_module.signature_of(target)
    manifest = _manifest(tmp_path)
    target.write_text("x = 22\n")  # saved after the run read "x = 1"
    manifest.remember(target, "stale", before)
    manifest.save()
    assert _manifest(tmp_path).digest(target) != "stale"


def test_a_path_through_a_symbolic_link_and_dotdot_is_not_its_namesake(tmp_path, monkeypatch):
    # `pkg/link/../a.py` is `other/a.py` to the system, not `pkg/a.py` as the text reads
    _old_enough(monkeypatch)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "other" / "x").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "other" / "a.py").write_text("y = 2\n")
    (tmp_path / "pkg" / "link").symlink_to(tmp_path / "other" / "x")
    monkeypatch.chdir(tmp_path)
    manifest = _manifest(tmp_path)
    through = manifest.digest("pkg/link/../a.py")
    assert through == manifest.digest(tmp_path / "other" / "a.py") != manifest.digest("pkg/a.py")


def test_a_read_only_cache_records_nothing_as_settled(tmp_path, monkeypatch):
    _old_enough(monkeypatch)
    monkeypatch.setattr(manifest_module, "_reference", lambda entries: None)
    target = tmp_path / "a.py"
    target.write_text("x = 1\n")
    manifest = _manifest(tmp_path)
    manifest.digest(target)
    assert manifest.digests == {}


def test_a_manifest_nested_too_deeply_is_ignored_and_the_run_goes_on(tmp_path, monkeypatch):
    import hashlib

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    directory = tmp_path / CACHE_DIR_NAME
    first, _ = _check(directory)
    body = ('{"digests":' + "[" * 100_000 + "]" * 100_000 + "}").encode()
    (directory / cache_module.FORMAT / manifest_module.NAME).write_bytes(
        hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    (tmp_path / "pkg" / "train.py").write_text(TRAIN + "\n")  # analysed again, stored again
    second, cache = _check(directory)
    assert second == first and cache.misses == 1


def test_nothing_but_regular_files_of_bounded_size_has_a_digest(tmp_path):
    manifest = Manifest(tmp_path, "impl", 4, 1 << 20)
    (tmp_path / "big.py").write_text("x = 12345\n")
    assert manifest.digest(tmp_path / "big.py") is None
    assert manifest.digest(tmp_path) is None
    assert manifest.digest(tmp_path / "missing.py") is None


@pytest.mark.parametrize("damage", ["garbage", "foreign", "wrong types"])
def test_a_damaged_manifest_is_ignored(tmp_path, damage, monkeypatch):
    _old_enough(monkeypatch)
    target = tmp_path / "a.py"
    target.write_text("x = 1\n")
    manifest = _manifest(tmp_path)
    good = manifest.digest(target)
    manifest.remember_skipped("entry", good)
    manifest.save()
    path = tmp_path / manifest_module.NAME
    if damage == "garbage":
        path.write_bytes(b"\x00garbage")
    else:
        import hashlib
        import json

        body = (json.dumps({"implementation": "impl", "digests": {str(target): [1, 2, 3, 4, 5, "f" * 64]},
                            "skipped": {"entry": "f" * 64}}) if damage == "foreign"
                else json.dumps({"implementation": "impl", "digests": {str(target): "x"}, "skipped": []})).encode()
        path.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    again = _manifest(tmp_path)
    assert again.digest(target) == good
    assert not again.skipped_result("entry", good)


def test_skipped_results_belong_to_one_implementation(tmp_path):
    manifest = _manifest(tmp_path)
    manifest.remember_skipped("entry", "a" * 64)
    manifest.save()
    assert _manifest(tmp_path).skipped_result("entry", "a" * 64)
    assert not _manifest(tmp_path, "other").skipped_result("entry", "a" * 64)


def _check(directory):
    settings = Settings()
    cache = ResultCache.open(directory)
    result = run(list(discover(["pkg"], settings)), settings, jobs=1, cache=cache)
    return report_json.render(result.diagnostics), cache


def test_a_skipped_file_is_served_by_the_manifest_and_an_edit_is_analysed(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(TRAIN)
    (tmp_path / "pkg" / "util.py").write_text("def double(x):\n    return 2 * x\n")
    monkeypatch.chdir(tmp_path)
    directory = tmp_path / CACHE_DIR_NAME
    first, _ = _check(directory)
    assert '"KL102"' in first
    for entry in (directory / cache_module.FORMAT).glob("*/*.json"):
        if b'"found":[]' in entry.read_bytes() and b'"filtered":false' in entry.read_bytes():
            entry.unlink()  # the skipped file's own entry: the manifest alone serves it
    second, cache = _check(directory)
    assert second == first and cache.hits == 2 and cache.misses == 0
    (tmp_path / "pkg" / "util.py").write_text("def step(logp, ref_logp):\n    (logp - ref_logp).sum().backward()\n")
    third, cache = _check(directory)
    assert cache.misses == 1 and third.count('"code"') == first.count('"code"') + 1
