"""The analysis of a file leaves no reference cycles: everything it built is freed by reference
counting when `check_source` returns, so the cyclic garbage collector (run rarely during an
analysis, `kllint.memory`) never has to find a file's parsed trees and expressions."""
from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from kllint import memory
from kllint.rules import dispatch
from kllint.rules.dispatch import check_source
from kllint.analysis.interpreter import Interpreter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CASES = sorted(path for path in FIXTURES.glob("KL*/*.py"))


@pytest.fixture
def analysis_objects(monkeypatch: pytest.MonkeyPatch) -> list[weakref.ref]:
    """Weak references to the interpreter, its algebra and the entry module of each analysis."""
    refs: list[weakref.ref] = []

    class Recording(Interpreter):
        def __init__(self, entry, index, vocab=None) -> None:
            super().__init__(entry, index, vocab)
            refs.extend([weakref.ref(self), weakref.ref(self.algebra), weakref.ref(entry)])

    monkeypatch.setattr(dispatch, "Interpreter", Recording)
    return refs


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_analysis_is_freed_without_the_collector(path: Path, analysis_objects: list[weakref.ref]) -> None:
    gc.collect()
    gc.disable()
    try:
        check_source(path.read_text(encoding="utf-8"), path.name, path)
        assert analysis_objects, "the analysis did not run"
        alive = [type(ref()).__name__ for ref in analysis_objects if ref() is not None]
        assert not alive, f"kept alive by a reference cycle after analysing {path.name}: {alive}"
    finally:
        gc.enable()


def test_thresholds_are_restored_after_a_run() -> None:
    before = gc.get_threshold()
    with memory.analysis_thresholds():
        assert gc.get_threshold() == memory.ANALYSIS_THRESHOLDS
    assert gc.get_threshold() == before
