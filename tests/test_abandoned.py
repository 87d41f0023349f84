"""No silent give-up: functions the analysis abandons are reported (issue: step budget and call
depth limit on a path that carries log-probs)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kllint.analysis import interpreter
from kllint.analysis.interpret import frames
from kllint.rules.dispatch import check_source

def _chain(levels: int) -> str:
    """`compute_loss` -> level1 -> ... -> level<levels>, which builds k3."""
    parts = ["import torch\n\n\n", f"def level{levels}(logp, ref):\n",
             "    return torch.exp(ref - logp) - (ref - logp) - 1\n\n\n"]
    for i in range(levels - 1, 0, -1):
        parts.append(f"def level{i}(logp, ref):\n    return level{i + 1}(logp, ref)\n\n\n")
    parts.append("def compute_loss(logp, ref_logp, mask):\n    kl = level1(logp, ref_logp)\n"
                 "    return (kl * mask).sum() / mask.sum()\n")
    return "".join(parts)


# one level deeper than the interpreter follows
CHAIN = _chain(interpreter.MAX_DEPTH + 1)

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
    assert any(f"`level{interpreter.MAX_DEPTH + 1}` not followed (call depth limit" in note for note in notes), notes
    assert all(note.startswith("train.py:") for note in notes)


def test_an_entry_point_out_of_steps_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frames, "MAX_STEPS", 30)
    _, notes = _notes(LONG)
    assert "train.py:4: analysis of `compute_loss` abandoned: step budget of 30 exhausted" in notes


def test_a_complete_analysis_has_no_notes() -> None:
    codes, notes = _notes(LONG)
    assert notes == [] and "KL102" in codes


COSTLY_HELPER = '''import torch


def diagnostics(stat, mask):
    out = {}
''' + "".join(f"    out['d{i}'] = (stat * mask * {i}).sum().item()\n" for i in range(60)) + '''    return out


def compute_loss(logp, ref_logp, mask):
    metrics = diagnostics(logp - ref_logp, mask)
    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    return (kl * mask).sum() / mask.sum(), metrics
'''


def test_a_costly_helper_is_cut_and_the_rest_of_its_caller_still_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry point out of steps is run again with a share of the budget per followed call:
    the helper that spends its share gives an unknown value (reported), the KL loss beside its
    call is still found."""
    _, notes = _notes(COSTLY_HELPER)
    assert notes == []
    monkeypatch.setattr(frames, "MAX_STEPS", 400)
    monkeypatch.setattr(frames, "CALL_SHARE", 100)
    codes, notes = _notes(COSTLY_HELPER)
    assert sorted(codes) == ["KL102", "KL201"], codes
    assert notes == ["train.py:70: analysis of `compute_loss` abandoned: call of `diagnostics` not followed past "
                     "its share of the step budget (100 steps); its result is unknown"], notes


def test_an_entry_point_still_out_of_steps_on_its_rerun_is_abandoned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frames, "MAX_STEPS", 100)
    monkeypatch.setattr(frames, "CALL_SHARE", 90)
    codes, notes = _notes(COSTLY_HELPER)
    assert codes == []
    assert "train.py:69: analysis of `compute_loss` abandoned: step budget of 100 exhausted" in notes, notes


def _helper_chain(levels: int) -> str:
    """The functions of `_chain` without the entry point: level1 -> ... -> level<levels>."""
    return _chain(levels).split("def compute_loss")[0]


ENTRY = ("from {module} import level1\n\n\ndef compute_loss(logp, ref_logp, mask):\n"
         "    kl = level1(logp, ref_logp)\n    return (kl * mask).sum() / mask.sum()\n")


def test_a_helper_cut_from_two_files_is_listed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two files reach the same cut of a helper module: one line for `-v`, counted once."""
    from click.testing import CliRunner

    from kllint.cli import cli

    (tmp_path / "helpers.py").write_text(_helper_chain(interpreter.MAX_DEPTH + 1))
    (tmp_path / "train.py").write_text(ENTRY.format(module="helpers"))
    (tmp_path / "train2.py").write_text(ENTRY.format(module="helpers") + "\n\ndef other(logp, ref_logp, mask):\n"
                                        "    return level1(logp, ref_logp).mean()\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["check", "--no-cache", "-v", "."])
    assert result.exit_code in (0, 1), result.output
    depth = interpreter.MAX_DEPTH
    line = (f"helpers.py:9: analysis of `level{depth}` abandoned: call of `level{depth + 1}` not followed "
            f"(call depth limit {depth}) with log-probs or KL terms among its arguments")
    assert result.stderr.count(line) == 1, result.stderr
    assert "The analysis gave up on 1 function " in result.stderr, result.stderr


def test_the_same_cut_in_two_helper_modules_is_two_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines that differ only by the module are both listed."""
    from kllint.api import check_paths

    for name in ("helpers_a", "helpers_b"):
        (tmp_path / f"{name}.py").write_text(_helper_chain(interpreter.MAX_DEPTH + 1))
    (tmp_path / "train.py").write_text(
        "from helpers_a import level1\nfrom helpers_b import level1 as other_level1\n\n\n"
        "def compute_loss(logp, ref_logp, mask):\n    kl = level1(logp, ref_logp) + other_level1(logp, ref_logp)\n"
        "    return (kl * mask).sum() / mask.sum()\n")
    monkeypatch.chdir(tmp_path)
    result = check_paths(["train.py"])
    assert [note.split(":")[0] for note in result.abandoned] == ["helpers_a.py", "helpers_b.py"], result.abandoned
