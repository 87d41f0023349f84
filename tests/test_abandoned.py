"""No silent give-up: functions the analysis abandons are reported (issue: step budget and call
depth limit on a path that carries log-probs)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kllint.analysis import interpreter
from kllint.analysis.checker import check_source

CHAIN = '''import torch


def level5(logp, ref):
    return torch.exp(ref - logp) - (ref - logp) - 1


def level4(logp, ref):
    return level5(logp, ref)


def level3(logp, ref):
    return level4(logp, ref)


def level2(logp, ref):
    return level3(logp, ref)


def level1(logp, ref):
    return level2(logp, ref)


def compute_loss(logp, ref_logp, mask):
    kl = level1(logp, ref_logp)
    return (kl * mask).sum() / mask.sum()
'''

LONG = '''import torch


def compute_loss(logp, ref_logp, mask):
    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
''' + "".join(f"    x{i} = kl * {i}\n" for i in range(40)) + '''    return (kl * mask).sum()
'''


def _notes(text: str) -> tuple[list[str], list[str]]:
    notes: list[str] = []
    found = check_source(text, "train.py", Path("train.py"), notes=notes)
    return [d.code for d in found], notes


def test_a_call_cut_by_the_depth_limit_with_log_probs_is_reported() -> None:
    _, notes = _notes(CHAIN)
    assert any("`level5` not followed (call depth limit" in note for note in notes), notes
    assert all(note.startswith("train.py:") for note in notes)


def test_an_entry_point_out_of_steps_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interpreter, "MAX_STEPS", 30)
    _, notes = _notes(LONG)
    assert "train.py:4: analysis of `compute_loss` abandoned: step budget of 30 exhausted" in notes


def test_a_complete_analysis_has_no_notes() -> None:
    codes, notes = _notes(LONG)
    assert notes == [] and "KL102" in codes
