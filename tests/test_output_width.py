"""Output people read on narrow terminals: code frames are cropped (never wrapped) with the carets
under the code they mark, and the gradcheck table never truncates a verdict."""
from __future__ import annotations

import io

import pytest
from rich.cells import cell_len
from rich.console import Console

from kllint.diagnostics import Diagnostic, Span
from kllint.report import text


def _render(tmp_path, monkeypatch, line: str, column: int, end_column: int, width: int = 80) -> list[str]:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text("import torch\n" + line + "\n")
    d = Diagnostic("KL102", "k3-as-loss", "error", "m.py", Span(2, column, 2, end_column),
                   "k3 is differentiated as a loss: its expected gradient is that of the forward KL")
    buffer = io.StringIO()
    text.render([d], Console(file=buffer, width=width, no_color=True, force_terminal=False))
    return buffer.getvalue().splitlines()


def _frame(lines: list[str]) -> tuple[str, str]:
    index = next(i for i, line in enumerate(lines) if line.lstrip().startswith("2 | "))
    return lines[index], lines[index + 1]


def _marked(code_line: str, caret_line: str) -> str:
    start = caret_line.index("^")
    end = caret_line.rindex("^") + 1
    return code_line[start:end]


TERM = "(torch.exp(ref_logp - logp) - (ref_logp - logp) - 1)"


@pytest.mark.parametrize("width", [80, 60, 100])
def test_long_line_is_cropped_with_carets_under_the_span(tmp_path, monkeypatch, width):
    prefix = "    loss = " + " + ".join(f"w{i} * term_{i}" for i in range(12)) + " + beta * "
    line = prefix + TERM + ".mean() + other_term * another_weight"
    column = len(prefix) + 1
    lines = _render(tmp_path, monkeypatch, line, column, column + len(TERM), width)
    assert all(cell_len(out) <= width for out in lines), lines
    code_line, caret_line = _frame(lines)
    assert code_line.split(" | ", 1)[1].startswith("…")  # shifted left, says so
    marked = _marked(code_line, caret_line)
    assert marked and TERM.startswith(marked.rstrip("…")), (code_line, caret_line)


def test_short_line_is_unchanged(tmp_path, monkeypatch):
    line = "    loss = beta * " + TERM
    column = line.index(TERM) + 1
    code_line, caret_line = _frame(_render(tmp_path, monkeypatch, line, column, column + len(TERM)))
    assert code_line.endswith(line)
    assert _marked(code_line, caret_line) == TERM


def test_long_line_with_span_at_the_start_is_cropped_on_the_right(tmp_path, monkeypatch):
    line = TERM + " * " + " + ".join(f"weight_{i}" for i in range(20))
    lines = _render(tmp_path, monkeypatch, line, 1, 1 + len(TERM))
    code_line, caret_line = _frame(lines)
    assert code_line.endswith("…") and cell_len(code_line) <= 80
    assert _marked(code_line, caret_line) == TERM


def test_files_and_pipes_get_whole_lines(tmp_path, monkeypatch):
    from kllint.session import _Context, render

    monkeypatch.chdir(tmp_path)
    line = "    loss = " + " + ".join(f"weight_{i} * term_{i}" for i in range(30)) + " + " + TERM
    (tmp_path / "m.py").write_text("import torch\n" + line + "\n")
    column = line.index(TERM) + 1
    d = Diagnostic("KL102", "k3-as-loss", "error", "m.py", Span(2, column, 2, column + len(TERM)), "k3 as a loss")
    out = render("full", [d], _Context(frozenset(), []))
    code_line, caret_line = _frame(out.splitlines())
    assert code_line.endswith(line) and _marked(code_line, caret_line) == TERM


def test_frame_shift():
    assert text.frame_shift(10, 5, 60) == 0
    shift = text.frame_shift(150, 20, 60)
    assert 0 < 150 - shift and 150 + 20 - shift <= 60  # the whole span is visible
    wide = text.frame_shift(150, 200, 60)
    assert 150 - wide == 60 // 4  # a span wider than the room starts a quarter in


@pytest.fixture(scope="module")
def gradcheck_results():
    pytest.importorskip("torch")
    from kllint.gradcheck.check import check_expression
    from kllint.gradcheck.policies import make_problem

    return [check_expression("torch.exp(ref - logp) - (ref - logp) - 1", problem=make_problem(None, t))
            for t in (1, 3)]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_gradcheck_table_never_truncates_the_verdict(gradcheck_results, width):
    from kllint.gradcheck.report import render_table

    buffer = io.StringIO()
    render_table(gradcheck_results, Console(file=buffer, width=width, no_color=True))
    out = buffer.getvalue()
    table = out.split("V=4, T=1:")[0]
    assert "…" not in table, table
    assert all(cell_len(line) <= width for line in out.splitlines())
    flat = " ".join(part.strip(" │┃") for part in table.split())
    for verdict in ("forward-kl", "partial", "missing", "future-token", "credit)", "0.898", "0.721"):
        assert verdict in flat, (verdict, table)
    if width >= 80:
        assert "partial forward-kl (missing future-token credit)" in table


def test_gradcheck_table_keeps_its_rows_on_a_wide_console(gradcheck_results):
    from kllint.gradcheck.report import render_table

    buffer = io.StringIO()
    render_table(gradcheck_results, Console(file=buffer, width=200, no_color=True))
    assert "│ torch.exp(ref - logp) - (ref - logp) - 1 │ 4 │ 1 │ loss" in buffer.getvalue()
