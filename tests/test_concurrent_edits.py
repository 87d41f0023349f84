"""Issue 35, item 5: `--fix`, `--unsafe-fixes` and `--add-noqa` (also on notebooks) never overwrite
an edit saved while kllint ran. The file is replaced only if it still holds the bytes that were
analysed, compared just before the rename (kllint.atomic.replacing); otherwise the edit stays,
stderr says "changed while kllint ran" and the file's findings remain (exit 1).

The concurrent save is made by wrapping the function the fix path calls between its read of the
file and its write (the fix, the notebook fix, the noqa edit), as an editor saving at that moment.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from test_cli_support import fake_analysis, run_cli, write  # noqa: F401 - fixture

SAVED = "BAD(x)\n# saved by the editor while kllint ran\n"


def _save_during(monkeypatch, module, name: str, target: Path, data: bytes, keep_times: bool = False) -> list[bytes]:
    """Wrap `module.name` so that `target` is saved right after each call returns: with `data`,
    followed by a line counting the saves after the first; returns the bytes of each save."""
    original = getattr(module, name)
    saves: list[bytes] = []

    def wrapped(*args, **kwargs):
        result = original(*args, **kwargs)
        before = os.stat(target)
        saves.append(data + (f"# save {len(saves) + 1}\n".encode() if saves else b""))
        target.write_bytes(saves[-1])
        if keep_times:  # a save that not even the modification time gives away
            os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
        return result

    monkeypatch.setattr(module, name, wrapped)
    return saves


@pytest.mark.parametrize("args", [["--fix"], ["--fix", "--unsafe-fixes"]])
def test_fix_keeps_an_edit_saved_during_the_run(tmp_path, monkeypatch, fake_analysis, args):
    import kllint.fix

    target = write(tmp_path / "train.py", "BAD(x)\nRISKY(y)\n")
    other = write(tmp_path / "other.py", "BAD(z)\n")
    monkeypatch.chdir(tmp_path)
    # train.py is saved after each fix_text: after other.py's (fixed first), before train.py is
    # read, which changes nothing, and after train.py's own, which must keep it from being written
    saves = _save_during(monkeypatch, kllint.fix, "fix_text", target, SAVED.encode())
    result = run_cli(["check", "--no-cache", *args, "train.py", "other.py"])
    assert len(saves) == 2
    assert target.read_bytes() == saves[-1]  # was the fixed text: the editor's save was lost
    assert other.read_text() == "GOOD(z)\n"  # a file nobody touched is still fixed
    assert "kllint: train.py: changed while kllint ran; not fixed" in result.stderr
    assert "Fixed 1 finding." in result.stderr
    assert "train.py:1:1: KL102" in result.stdout  # its findings are still reported
    assert result.exit_code == 1


def test_a_same_size_save_with_the_old_modification_time_is_still_seen(tmp_path, monkeypatch, fake_analysis):
    import kllint.fix

    target = write(tmp_path / "train.py", "BAD(x)\n")
    monkeypatch.chdir(tmp_path)
    same_size = b"BAD(y)\n"
    _save_during(monkeypatch, kllint.fix, "fix_text", target, same_size, keep_times=True)
    result = run_cli(["check", "--no-cache", "--fix", "train.py"])
    assert target.read_bytes() == same_size
    assert "changed while kllint ran; not fixed" in result.stderr
    assert result.exit_code == 1


def test_add_noqa_keeps_an_edit_saved_during_the_run(tmp_path, monkeypatch, fake_analysis):
    import kllint.pipeline.suppressions as suppressions

    target = write(tmp_path / "train.py", "BAD(x)\n")
    monkeypatch.chdir(tmp_path)
    saves = _save_during(monkeypatch, suppressions, "add_noqa", target, SAVED.encode())
    result = run_cli(["check", "--no-cache", "--add-noqa", "train.py"])
    assert target.read_bytes() == saves[-1] == SAVED.encode()
    assert "kllint: train.py: changed while kllint ran; no noqa directive added" in result.stderr
    assert "Added 0 noqa directives." in result.stderr
    assert result.exit_code == 1


def _notebook(source: list[str]) -> str:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
    return json.dumps({"cells": [cell], "metadata": {"language_info": {"name": "python"}},
                       "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


@pytest.mark.parametrize("option", ["--fix", "--add-noqa"])
def test_a_notebook_saved_during_the_run_is_kept(tmp_path, monkeypatch, fake_analysis, option):
    import kllint.notebook.fix

    target = write(tmp_path / "nb.ipynb", _notebook(["BAD(x)\n"]))
    monkeypatch.chdir(tmp_path)
    saved = _notebook(["BAD(x)\n", "y = 1\n"]).encode()
    name = "fix_notebook" if option == "--fix" else "add_noqa_notebook"
    saves = _save_during(monkeypatch, kllint.notebook.fix, name, target, saved)
    result = run_cli(["check", "--no-cache", option, "nb.ipynb"])
    assert saves == [saved]
    assert target.read_bytes() == saved
    assert "nb.ipynb: changed while kllint ran" in result.stderr
    assert result.exit_code == 1


def test_fix_file_of_the_api_keeps_a_concurrent_save(tmp_path, monkeypatch, fake_analysis):
    import kllint.fix
    from kllint.config import Settings
    from kllint.pipeline.discovery import Discovered

    target = write(tmp_path / "train.py", "BAD(x)\n")
    saves = _save_during(monkeypatch, kllint.fix, "fix_text", target, SAVED.encode())
    with pytest.raises(kllint.fix.FileChanged, match="changed while kllint ran; not fixed"):
        kllint.fix.fix_file(Discovered(target, "train.py"), Settings())
    assert target.read_bytes() == saves[-1] == SAVED.encode()


def test_without_a_concurrent_save_the_file_is_fixed(tmp_path, monkeypatch, fake_analysis):
    target = write(tmp_path / "train.py", "BAD(x)\n")
    monkeypatch.chdir(tmp_path)
    result = run_cli(["check", "--no-cache", "--fix", "train.py"])
    assert target.read_text() == "GOOD(x)\n"
    assert "changed while" not in result.stderr
    assert result.exit_code == 0


# -- the primitive ------------------------------------------------------------------------------

def test_replacing_with_expect_refuses_a_changed_target_and_leaves_no_temporary(tmp_path):
    from kllint.atomic import TargetChanged, replacing

    target = tmp_path / "f.py"
    target.write_bytes(b"old\n")
    with pytest.raises(TargetChanged):
        with replacing(target, expect=b"old\n") as handle:
            handle.write(b"new\n")
            target.write_bytes(b"edited\n")  # a save while the new file is written
    assert target.read_bytes() == b"edited\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.py"]
    with replacing(target, expect=b"edited\n") as handle:  # unchanged: replaced
        handle.write(b"new\n")
    assert target.read_bytes() == b"new\n"


def test_holds_compares_the_bytes_not_only_the_size(tmp_path):
    from kllint.atomic import holds

    target = tmp_path / "f.py"
    target.write_bytes(b"abc")
    assert holds(target, b"abc")
    assert not holds(target, b"abd")  # same size
    assert not holds(target, b"abcd") and not holds(target, b"ab")
    assert not holds(tmp_path / "missing.py", b"abc")
    assert not holds(tmp_path, b"")  # a folder


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_holds_does_not_block_on_a_fifo_put_in_place_of_the_file(tmp_path):
    from kllint.atomic import holds

    fifo = tmp_path / "f.py"
    os.mkfifo(fifo)
    done: list[bool] = []
    thread = threading.Thread(target=lambda: done.append(holds(fifo, b"")), daemon=True)
    thread.start()
    thread.join(10)
    assert done == [False]


def test_an_editor_saving_in_a_loop_never_loses_a_save(tmp_path, monkeypatch, fake_analysis):
    """A thread saves the file again and again while `--fix` runs (a slow analysis): whatever the
    timing, the file ends as the editor's last save or as kllint's fix of what it read, and a
    lost save is reported. Every save keeps the finding, so a fix of any of them would be GOOD."""
    import kllint.fix

    target = write(tmp_path / "train.py", "BAD(x)\n")
    monkeypatch.chdir(tmp_path)
    original = kllint.fix.fix_text

    def slow(*args, **kwargs):
        time.sleep(0.3)
        return original(*args, **kwargs)

    monkeypatch.setattr(kllint.fix, "fix_text", slow)
    stop = threading.Event()
    saves: list[bytes] = []

    def editor() -> None:
        count = 0
        while not stop.is_set():
            count += 1
            data = f"BAD(x)\n# save {count}\n".encode()
            temporary = tmp_path / f".train.py.{count}"
            temporary.write_bytes(data)
            os.replace(temporary, target)  # as editors save: never a half-written file
            saves.append(data)
            time.sleep(0.01)

    thread = threading.Thread(target=editor, daemon=True)
    thread.start()
    try:
        result = run_cli(["check", "--no-cache", "--fix", "train.py"])
    finally:
        stop.set()
        thread.join(10)
    final = target.read_bytes()
    assert len(saves) > 5
    assert final == saves[-1] or final.startswith(b"GOOD(x)\n")
    assert "changed while kllint ran; not fixed" in result.stderr
