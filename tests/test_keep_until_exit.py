"""A check on the command line ends with `os._exit` (kllint.exit), so the project index of its
run is held until then rather than freed object by object when the run returns
(`kllint.exit.keep_until_exit`, `run(keep_index=True)`). Only in such a process, and one index at
most: a library caller or a test frees it as before."""
from __future__ import annotations

import gc
import weakref
from pathlib import Path

from kllint import exit as process_exit
from kllint.analysis import index as index_module
from kllint.config import Settings
from kllint.pipeline.discovery import discover
from kllint.pipeline.run import run

FOR_FILE = index_module.IndexPerRoot.for_file
SOURCE = "import torch\n\n\ndef loss(logp, ref_logp):\n    kl = ref_logp - logp\n    return kl.mean()\n"


def _indexes_after_run(tmp_path: Path, monkeypatch, keep_index: bool) -> list[weakref.ref]:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "train.py").write_text(SOURCE)
    made: list[weakref.ref] = []

    def recording(self, path):
        found = FOR_FILE(self, path)
        made.append(weakref.ref(found))
        return found

    monkeypatch.setattr(index_module.IndexPerRoot, "for_file", recording)
    files = list(discover([str(tmp_path)], Settings()))
    run(files, Settings(), jobs=1, keep_index=keep_index)
    gc.collect()
    return made


def test_an_index_is_freed_when_the_run_returns_in_a_process_that_exits_normally(tmp_path, monkeypatch):
    monkeypatch.setattr(process_exit, "_kept", [])
    monkeypatch.setattr(process_exit, "_exits_fast", False)
    made = _indexes_after_run(tmp_path, monkeypatch, keep_index=True)
    assert made and all(ref() is None for ref in made)
    assert process_exit._kept == []


def test_a_fast_exiting_check_holds_its_last_index_only(tmp_path, monkeypatch):
    monkeypatch.setattr(process_exit, "_kept", [])
    monkeypatch.setattr(process_exit, "_exits_fast", False)
    process_exit.exits_fast()
    made = _indexes_after_run(tmp_path, monkeypatch, keep_index=True)
    assert made and made[-1]() is not None  # held: its teardown is left to os._exit
    (tmp_path / "again").mkdir()
    again = _indexes_after_run(tmp_path / "again", monkeypatch, keep_index=True)
    assert made[-1]() is None and again[-1]() is not None  # one index at most
    assert len(process_exit._kept) == 1
    process_exit._kept.clear()
    assert not _indexes_after_run(tmp_path, monkeypatch, keep_index=False)[-1]()  # fixes follow: freed
