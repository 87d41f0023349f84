"""GitHub Actions annotations: format, escaping, repository-relative paths, golden file."""
from __future__ import annotations

import os
from pathlib import Path

from test_cli_support import fake_analysis, make_diagnostic, run_cli, write  # noqa: F401 - fixture

from kllint.diagnostics import Span
from kllint.report import github

GOLDEN = Path(__file__).parent / "golden" / "github.txt"


def test_escaping():
    assert github.escape_data("100% a\r\nb: c, d") == "100%25 a%0D%0Ab: c, d"
    assert github.escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"


def test_annotation_fields():
    error = make_diagnostic("KL102", "x.py", Span(3, 5, 4, 9), "k3: wrong, 50% of the time\nsecond line")
    line = github.annotation(error, "dir,with:odd/x.py")
    assert line == ("::error file=dir%2Cwith%3Aodd/x.py,line=3,col=5,endLine=4,endColumn=9,"
                    "title=KL102 k3-as-loss::KL102 k3: wrong, 50%25 of the time%0Asecond line\n")
    warning = make_diagnostic("KL502", "x.py", Span(1, 1, 1, 2), "mean reduction")
    assert github.annotation(warning, "x.py").startswith("::warning file=x.py,line=1,col=1,")


def _sample():
    return [
        make_diagnostic("KL201", "src/train.py", Span(12, 16, 12, 48),
                        "per-token KL is averaged over tokens: the future-token credit is lost.",
                        help="sum the per-token KL into a reward-to-go, or use the sequence-level k2"),
        make_diagnostic("KL102", "src/train.py", Span(12, 16, 12, 48),
                        "k3 is differentiated: gradient of KL(ref || pi), not KL(pi || ref)."),
        make_diagnostic("KL502", "src/distill,v2.py", Span(3, 1, 5, 2), "reduction='mean' divides by 100%\r\nof classes."),
    ]


def test_golden():
    text = github.render(_sample(), root=Path("/repo"), cwd=Path("/repo"))
    if os.environ.get("KLLINT_UPDATE_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")
    assert all(line.startswith(("::error ", "::warning ")) for line in text.splitlines())
    assert len(text.splitlines()) == 3  # one line per finding, whatever the message holds


def test_cli_github_paths_relative_to_repository(tmp_path, monkeypatch, fake_analysis):
    (tmp_path / ".git").mkdir()
    write(tmp_path / "a" / "b" / "m.py", "x = WARN(y)\nz = BAD(w)\n")
    monkeypatch.chdir(tmp_path / "a")
    result = run_cli(["check", "--output-format", "github", "b"])
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "::warning file=a/b/m.py,line=1,col=5,endLine=1,endColumn=12,title=KL502 kl-div-mean-reduction"
        "::KL502 WARN misuses the KL gradient.%0Ahelp: use the k1 reward instead",
        "::error file=a/b/m.py,line=2,col=5,endLine=2,endColumn=11,title=KL102 k3-as-loss"
        "::KL102 BAD misuses the KL gradient.%0Ahelp: use the k1 reward instead",
    ]
    assert result.stderr == ""
