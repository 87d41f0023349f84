"""Inline suppressions (`# noqa: CODE`, `# kllint: ignore[...]`, `# kllint: file-ignore[...]`),
`blanket-noqa`, and `--add-noqa`."""
from __future__ import annotations

import json
import os
import stat

import pytest

from test_cli_support import fake_analysis, make_diagnostic, run_cli, write  # noqa: F401 - fixture

from kllint.diagnostics import Span
from kllint.pipeline.suppressions import Suppressions, add_noqa


def _hidden(text: str, line: int, code: str = "KL102", end_line: int | None = None, blanket: bool = False) -> bool:
    diagnostic = make_diagnostic(code, "m.py", Span(line, 1, end_line or line, 2))
    return Suppressions.parse(text, blanket_noqa=blanket).hides(diagnostic)


@pytest.mark.parametrize("comment", [
    "# noqa: KL102", "#noqa:KL102", "# NOQA: kl102", "# noqa: E501, KL102", "# noqa: E501 KL102",
    "# noqa:KL102,KL201", "# kllint: ignore[KL102] the reference is frozen", "# kllint: ignore[KL1]",
    "# type: ignore  # noqa: KL102",
])
def test_trailing_suppressions(comment):
    assert _hidden(f"x = f(a)  {comment}\n", 1)


@pytest.mark.parametrize("comment", ["# noqa: KL201", "# noqa", "# noqa E501", "# kllint: ignore[KL201]",
                                     "# kllint: ignore", "# noqa: KL1020"])
def test_other_codes_and_blanket_do_not_hide(comment):
    assert not _hidden(f"x = f(a)  {comment}\n", 1)


def test_blanket_noqa_only_when_configured():
    text = "x = f(a)  # noqa\n"
    assert not _hidden(text, 1)
    assert _hidden(text, 1, blanket=True)
    assert _hidden("x = f(a)  # noqa  -- style\n", 1, blanket=True)
    assert not _hidden("x = f(a)  # noqa: E501\n", 1, blanket=True)  # codes given: only those


def test_ignore_on_the_line_before():
    text = "# kllint: ignore[KL102] reviewed: uses the forward KL on purpose\nx = f(a)\ny = f(b)\n"
    assert _hidden(text, 2)
    assert not _hidden(text, 3)
    stacked = "    # kllint: ignore[KL102] reason\n    # kllint: ignore[KL201] other\n    x = f(a)\n"
    assert _hidden(stacked, 3, "KL102") and _hidden(stacked, 3, "KL201")
    # a trailing ignore covers only its own line
    assert not _hidden("z = 1  # kllint: ignore[KL102]\nx = f(a)\n", 2)
    # a noqa on the line before does not
    assert not _hidden("# noqa: KL102\nx = f(a)\n", 2)


def test_multiline_span_any_line():
    text = "loss = (\n    f(a)  # noqa: KL102\n)\n"
    assert _hidden(text, 1, end_line=3)
    assert not _hidden(text, 3, end_line=3)


def test_file_ignore():
    text = '"""Module."""\n# kllint: file-ignore[KL2, KL102]\n\nx = 1\n'
    assert _hidden(text, 4, "KL201")
    assert _hidden(text, 4, "KL102")
    assert not _hidden(text, 4, "KL101")


def test_comments_inside_strings_are_not_suppressions():
    text = 'DOC = """use `# kllint: file-ignore[KL1]` to silence"""\nx = f(a, "# noqa: KL102")\n'
    assert not _hidden(text, 2, "KL101")
    assert not _hidden(text, 2, "KL102")


def test_untokenizable_text_falls_back_to_line_scan():
    assert _hidden("x = f(a  # noqa: KL102\n", 1)


# --- --add-noqa --------------------------------------------------------------------------


def _diag(code, line, column=1, end_line=None, end_column=2):
    return make_diagnostic(code, "m.py", Span(line, column, end_line or line, end_column))


def test_add_noqa_appends_and_merges():
    text = "a = 1\nb = 2  # keep me\nc = 3  # noqa: E501\nd = 4   \n"
    new, count = add_noqa(text, [_diag("KL102", 1), _diag("KL201", 1), _diag("KL102", 2),
                                 _diag("KL102", 3), _diag("KL101", 4)])
    assert count == 4
    assert new == ("a = 1  # noqa: KL102, KL201\n"
                   "b = 2  # keep me  # noqa: KL102\n"
                   "c = 3  # noqa: E501, KL102\n"
                   "d = 4  # noqa: KL101\n")
    again, count = add_noqa(new, [_diag("KL102", 1), _diag("KL102", 3)])
    assert count == 0 and again == new


def test_add_noqa_avoids_strings_and_continuations():
    text = 'x = f("""a\nb""") + \\\n    g()\ny = 2\n'
    new, count = add_noqa(text, [_diag("KL102", 1, end_line=3)])
    assert count == 1
    assert new == 'x = f("""a\nb""") + \\\n    g()  # noqa: KL102\ny = 2\n'
    assert Suppressions.parse(new).hides(_diag("KL102", 1, end_line=3))


def test_add_noqa_keeps_crlf():
    new, count = add_noqa("a = 1\r\nb = 2\r\n", [_diag("KL102", 2)])
    assert new == "a = 1\r\nb = 2  # noqa: KL102\r\n"


def test_cli_suppressions_and_add_noqa(tmp_path, monkeypatch, fake_analysis):
    target = write(tmp_path / "m.py", "a = BAD(x)\nb = BAD(y)  # noqa: KL102\n"
                                      "# kllint: ignore[KL102] frozen reference\nc = BAD(z)\nd = RISKY(w)  # noqa\n")
    os.chmod(target, 0o640)
    monkeypatch.chdir(tmp_path)
    result = run_cli(["check", "--output-format", "json", "m.py"])
    assert [(d["line"], d["code"]) for d in json.loads(result.stdout)] == [(1, "KL102"), (5, "KL201")]
    added = run_cli(["check", "--add-noqa", "m.py"])
    assert added.exit_code == 0
    assert "Added 2 noqa directives." in added.stderr
    assert target.read_text() == ("a = BAD(x)  # noqa: KL102\nb = BAD(y)  # noqa: KL102\n"
                                  "# kllint: ignore[KL102] frozen reference\nc = BAD(z)\n"
                                  "d = RISKY(w)  # noqa  # noqa: KL201\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert run_cli(["check", "m.py"]).exit_code == 0
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_cli_blanket_noqa_config(tmp_path, monkeypatch, fake_analysis):
    write(tmp_path / "m.py", "a = BAD(x)  # noqa\n")
    monkeypatch.chdir(tmp_path)
    assert run_cli(["check", "m.py"]).exit_code == 1
    write(tmp_path / "pyproject.toml", "[tool.kllint]\nblanket-noqa = true\n")
    assert run_cli(["check", "m.py"]).exit_code == 0


def test_add_noqa_rejects_fix():
    result = run_cli(["check", "--add-noqa", "--fix", "."])
    assert result.exit_code == 2
    assert "--add-noqa cannot be combined with --fix" in result.stderr


WRAPPED = "kl = (  {head}\n    exp(d) - d - 1\n)\nother = (\n    exp(d) - d - 1\n)\n"


@pytest.mark.parametrize("head", ["# noqa: KL102", "# kllint: ignore[KL1] wrapped by the formatter"])
def test_a_suppression_on_the_first_line_of_a_wrapped_statement_covers_it(head):
    text = WRAPPED.format(head=head)
    assert _hidden(text, 2) and _hidden(text, 3)
    assert not _hidden(text, 5)  # the next statement is not covered
    assert not _hidden(text, 2, code="KL201")


def test_an_ignore_line_above_a_wrapped_statement_covers_it():
    text = "# kllint: ignore[KL102]\nkl = (\n    exp(d) - d - 1\n)\nafter = exp(d) - d - 1\n"
    assert _hidden(text, 3)
    assert not _hidden(text, 5)


def test_may_name_kllint_agrees_with_the_case_blind_search():
    # may_name_kllint tries the case-blind pattern only where the lower-cased text reads noqa,
    # kllint or kllınt: that holds while every character re takes for one of these letters lowers
    # to it (but for ı, and İ, which lowers to two characters)
    import re
    import sys

    from kllint.pipeline import suppressions

    every = "".join(map(chr, range(sys.maxunicode + 1)))
    for letter in "noqaklit":
        for char in re.findall(letter, every, re.IGNORECASE):
            assert char.lower() == letter or char in "\u0130\u0131", (letter, char)

    def searched(text: str) -> bool:
        return suppressions.names_a_suppression(text) and suppressions._MAY_NAME_KLLINT.search(text) is not None

    texts = ["x = 1  # noqa: E501\n", "x = 1  # NOQA: e501, kl102\n", "# noqa\n:  KL1\n", "# nOqA : E1 \u212aL2\n",
             "# noqa: E501\n# kll\u0131nt: ignore[KL1]\n", "# noqa: E501\n# kll\u0130nt: ignore[KL1]\n",
             "# \u0130 kllint: file-ignore[KL2]\n", "# \u0130 noqa: E501\n", "kllint\n# kLLint  :", "kllin t:", ""]
    for text in texts:
        assert suppressions.may_name_kllint(text) == searched(text), text
