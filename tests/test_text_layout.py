"""The full output as a person reads it on a terminal (issue 37, item 6): wrapped lines hang
under the text they continue, a long message's condition stands on a line of its own, the
summary counts the files with findings and the files checked, and only code is set in
backticks."""
from __future__ import annotations

import io
import json
import re

import pytest
from rich.cells import cell_len
from rich.console import Console

from kllint.diagnostics import Diagnostic, Span, TraceStep
from kllint.report import text
from kllint.report.wrap import breaks, split_condition
from kllint.rules.wording import as_code
from kllint.views import found_summary

PATH = "src/trainers/grpo_trainer.py"
CONDITION = ("(when `self.config.kl_estimator` is not 'k1' or 'k2' and `self.config.kl_estimator` "
             "does not end with '+')")
MESSAGE = ("k3 (exp(ref - logp) - (ref - logp) - 1) is differentiated as a loss: its expected gradient "
           "is that of the forward KL(ref || pi), not the reverse KL(pi || ref) " + CONDITION)
NOTE = "reduced over tokens by `agg_loss`, the helper that averages the per-token terms of every sequence"
HELP = ("route the gradient through k2 and keep the logged value: `k2 = 0.5 * (logp - ref) ** 2` then "
        "`kl = k2 - k2.detach() + kl.detach()`")


def _diagnostic(message: str = MESSAGE) -> Diagnostic:
    trace = (TraceStep(PATH, 12, 9, "k3 estimate"), TraceStep(PATH, 20, 5, NOTE))
    return Diagnostic("KL102", "k3-as-loss", "error", PATH, Span(12, 9, 12, 20), message, help=HELP, trace=trace)


def _render(diagnostic: Diagnostic, terminal: bool = True, width: int = 80) -> list[str]:
    buffer = io.StringIO()
    console = (Console(file=buffer, width=width, force_terminal=True, no_color=True, highlight=False)
               if terminal else Console(file=buffer, width=200, soft_wrap=True, no_color=True, highlight=False))
    text.render([diagnostic], console)
    return re.sub(r"\x1b\[[0-9;]*m", "", buffer.getvalue()).splitlines()  # bold and dim styles


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block(lines: list[str], start: str) -> list[str]:
    """The line starting with `start` and the indented lines that continue it."""
    index = next(i for i, line in enumerate(lines) if line.startswith(start))
    block = [lines[index]]
    for line in lines[index + 1:]:
        if _indent(line) <= _indent(lines[index]) or line.lstrip().startswith(("2.", "help:")):
            break
        block.append(line)
    return block


def _words(lines: list[str]) -> list[str]:
    return " ".join(line.strip() for line in lines).split()


@pytest.mark.parametrize("width", [80, 60])
def test_trace_steps_wrap_under_the_start_of_their_text(width):
    lines = _render(_diagnostic(), width=width)
    assert all(cell_len(line) <= width for line in lines), lines
    step = _block(lines, "  2. ")
    assert len(step) > 1, step
    assert all(_indent(line) == len("  2. ") for line in step[1:]), step
    assert _words(step) == f"2. {PATH}:20:5: {NOTE}".split()


def test_help_wraps_under_its_text():
    lines = _render(_diagnostic())
    block = _block(lines, "  help: ")
    assert len(block) > 1 and all(_indent(line) == len("  help: ") for line in block[1:]), block
    assert _words(block) == f"help: {HELP}".split()


def test_a_long_message_hangs_and_its_condition_has_a_line_of_its_own():
    lines = _render(_diagnostic())
    header = lines[:next(i for i, line in enumerate(lines) if line.startswith("  1. "))]  # no frame: no file
    assert header[0].startswith(f"{PATH}:12:9: KL102 ")
    assert all(_indent(line) >= 4 for line in header[1:]), header
    condition = next(i for i, line in enumerate(header) if line.startswith("    (when "))
    assert all(_indent(line) == 6 for line in header[condition + 1:]), header  # the condition hangs too
    assert _words(header[condition:]) == CONDITION.split()
    assert _words(header) == f"{PATH}:12:9: KL102 [k3-as-loss] {MESSAGE}".split()


def test_a_message_that_fits_keeps_its_condition_on_its_line():
    short = "k1 as a loss (when `mode` is 'k1')"
    d = Diagnostic("KL101", "k1-as-loss", "error", "a.py", Span(1, 1, 1, 2), short)
    assert _render(d)[0] == f"a.py:1:1: KL101 [k1-as-loss] {short}"


def test_files_and_pipes_keep_one_line_per_message_and_step():
    lines = _render(_diagnostic(), terminal=False)
    assert lines[0] == f"{PATH}:12:9: KL102 [k3-as-loss] {MESSAGE}"
    assert f"  2. {PATH}:20:5: {NOTE}" in lines
    assert f"  help: {HELP}" in lines


@pytest.mark.parametrize("message, main, condition", [
    (MESSAGE, MESSAGE[:-len(CONDITION) - 1], CONDITION),
    ("per-token KL terms are summed (partial gradient); the estimate is k2 when `cfg.p` is 'k2', k3 when `cfg.p` is 'k3'",
     "per-token KL terms are summed (partial gradient)", "the estimate is k2 when `cfg.p` is 'k2', k3 when `cfg.p` is 'k3'"),
    ("k1 as a loss (when `m` is 'k1' (the default))", "k1 as a loss", "(when `m` is 'k1' (the default))"),
    ("k1 as a loss (when it rains) and more", "k1 as a loss (when it rains) and more", None),
    ("k3 is biased (partial gradient)", "k3 is biased (partial gradient)", None),
])
def test_split_condition(message, main, condition):
    assert split_condition(message) == (main, condition)


def test_breaks_fold_a_word_wider_than_a_line():
    plain = "ab " + "x" * 25
    offsets = breaks(plain, 10, 8)
    pieces = [plain[a:b].strip() for a, b in zip([0] + offsets, offsets + [len(plain)])]
    assert pieces[0] == "ab" and all(len(p) <= 8 for p in pieces[1:]) and "".join(pieces[1:]) == "x" * 25


def test_summary_counts_files_with_findings_and_files_checked():
    d = _diagnostic()
    other = Diagnostic("KL201", "per-token-kl-loss", "error", "b.py", Span(1, 1, 1, 2), "m")
    assert found_summary([d, d, other], 7) == "Found 3 findings in 2 files (7 checked)."
    assert found_summary([d], 1) == "Found 1 finding in 1 file (1 checked)."
    assert found_summary([], 3) == "Found 0 findings (3 files checked)."


@pytest.mark.parametrize("words, expected", [
    ("the policy-gradient coefficient", "the policy-gradient coefficient"),
    ("the helper", "the helper"),
    ("rewards", "`rewards`"),
    ("self.advantages[:, -1]", "`self.advantages[:, -1]`"),
    (".sum()", "`.sum()`"),
    ("k2 = 0.5 * d ** 2", "`k2 = 0.5 * d ** 2`"),
])
def test_only_code_is_set_in_backticks(words, expected):
    assert as_code(words) == expected


def test_no_finding_on_the_fixtures_sets_prose_in_backticks():
    from pathlib import Path

    from test_cli_support import run_cli

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    result = run_cli(["check", "--no-cache", "--output-format", "json", str(fixtures)])
    quoted = {q for d in json.loads(result.stdout) for field in [d["message"], d["help"]] + [s["note"] for s in d["trace"]]
              for q in re.findall(r"`([^`]*)`", field)}
    assert quoted and all(as_code(q) == f"`{q}`" for q in quoted), sorted(q for q in quoted if as_code(q) != f"`{q}`")
