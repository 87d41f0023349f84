"""Exhaustive check of the annotated fixtures (and of the `KLLINT_EXTRA_CASES` folder when set,
see tests/extra_cases.py).

Grammar:
- `# expect: KL102,KL201` at the end of a line: each listed code must be reported there.
- `# ok`: a line a naive tool is likely to flag; nothing may be reported there (no finding's
  primary location, even one whose trace passes through an expected line).
- any other line: nothing expected.

A diagnostic matches an expectation when the codes are equal and the annotated line lies in
the diagnostic's primary line range or is the line of one of its trace steps. Every
expectation must be matched (else: a miss) and every diagnostic must match an expectation
(else: an extra). A second diagnostic with the same code and primary line as a matched one
counts as matched.

Layout of `fixtures/`: `fixtures/<CODE>/*.py` are positive cases for CODE, except files named
`ok_*.py`, which are negative cases for CODE (they may expect other codes);
`fixtures/negative/*.py` is correct code: only `# ok` annotations.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from extra_cases import SKIP_REASON, extra_cases_dir
from snapshot import analyse

from kllint.rules.registry import BY_CODE, OPT_IN, RULES

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
EXTRA_CASES = extra_cases_dir()

EXPECT_RE = re.compile(r"#\s*expect:\s*(?P<codes>[A-Za-z0-9_, ]+?)\s*$")
OK_RE = re.compile(r"#\s*ok\b")
CODE_RE = re.compile(r"^KL\d{3}$")

MIN_POSITIVE = 3
MIN_NEGATIVE_FILES = 12
CODES_WITH_NEGATIVES = ("KL401", "KL402", "KL403", "KL501", "KL502", "KL503", "KL601")
MIN_NEGATIVE_PER_CODE = 2
CODES_NEEDING_JAX = ("KL101", "KL102", "KL201")


@dataclass
class Annotations:
    expects: dict[int, list[str]] = field(default_factory=dict)
    ok_lines: set[int] = field(default_factory=set)

    @property
    def pairs(self) -> list[tuple[int, str]]:
        return [(line, code) for line, codes in sorted(self.expects.items()) for code in codes]


def _comments(text: str) -> list[tuple[int, str]]:
    """(line, comment) for every comment token; a regex fallback for files that do not tokenize."""
    try:
        return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                if tok.type == tokenize.COMMENT]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        found = []
        for number, line in enumerate(text.splitlines(), start=1):
            index = line.find("#")
            if index >= 0:
                found.append((number, line[index:]))
        return found


def parse_annotations(path: Path) -> Annotations:
    notes = Annotations()
    for line, comment in _comments(path.read_text(encoding="utf-8")):
        match = EXPECT_RE.search(comment)
        if match:
            codes = [code.strip() for code in match.group("codes").split(",") if code.strip()]
            notes.expects.setdefault(line, []).extend(codes)
        elif OK_RE.search(comment):
            notes.ok_lines.add(line)
    return notes


# --- discovery ----------------------------------------------------------------------------------


def fixture_files() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*.py") if "__pycache__" not in p.parts)


def extra_case_files() -> list[Path]:
    if EXTRA_CASES is None:
        return []
    return sorted(EXTRA_CASES.glob("*.py"))


def _ids(paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        try:
            out.append(path.relative_to(ROOT).as_posix())
        except ValueError:
            out.append("extra-cases/" + path.name)
    return out


def positive_files(code: str) -> list[Path]:
    folder = FIXTURES / code
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("ok_")) if folder.is_dir() else []


def negative_files(code: str) -> list[Path]:
    folder = FIXTURES / code
    return sorted(folder.glob("ok_*.py")) if folder.is_dir() else []


FIXTURE_FILES = fixture_files()
CASE_FILES = extra_case_files()
CASE_PARAMS = [pytest.param(p, id=i) for p, i in zip(CASE_FILES, _ids(CASE_FILES))] or [
    pytest.param(None, id="extra-cases-absent", marks=pytest.mark.skip(reason=SKIP_REASON)),
]


# --- matching -----------------------------------------------------------------------------------


def _same_file(step_path: str, diag_path: str, file: Path) -> bool:
    if step_path == diag_path:
        return True
    try:
        return Path(step_path).resolve() == file.resolve()
    except OSError:
        return False


def _lines(diagnostic, file: Path) -> tuple[range, set[int]]:
    primary = range(diagnostic.span.line, max(diagnostic.span.line, diagnostic.span.end_line) + 1)
    trace = {step.line for step in diagnostic.trace if _same_file(step.path, diagnostic.path, file)}
    return primary, trace


def _matches(diagnostic, line: int, code: str, file: Path) -> bool:
    if diagnostic.code != code:
        return False
    primary, trace = _lines(diagnostic, file)
    return line in primary or line in trace


def _describe(diagnostic, file: Path) -> str:
    _, trace = _lines(diagnostic, file)
    span = diagnostic.span
    where = f"{span.line}:{span.column}-{span.end_line}:{span.end_column}"
    steps = f" trace lines {sorted(trace)}" if trace else ""
    return f"{diagnostic.code} at {where}{steps}: {diagnostic.message}"


def check_annotated_file(file: Path) -> None:
    notes = parse_annotations(file)
    result = analyse(file)  # `check_paths([file])`, shared with tests/test_snapshot.py
    diagnostics = list(result.diagnostics)
    source = file.read_text(encoding="utf-8").splitlines()

    def text_of(line: int) -> str:
        return source[line - 1].strip() if 0 < line <= len(source) else ""

    misses = [(line, code) for line, code in notes.pairs
              if not any(_matches(d, line, code, file) for d in diagnostics)]
    matched = [d for d in diagnostics if any(_matches(d, line, code, file) for line, code in notes.pairs)]
    matched_keys = {(d.code, d.span.line) for d in matched}
    extras = [d for d in diagnostics
              if not any(d is m for m in matched) and (d.code, d.span.line) not in matched_keys]
    on_ok_lines = [d for d in diagnostics if d.span.line in notes.ok_lines and not any(d is e for e in extras)]

    problems: list[str] = []
    for note in result.internal_errors:
        problems.append(f"  internal error: {note}")
    for line, code in misses:
        problems.append(f"  MISS  line {line}: expected {code}  | {text_of(line)}")
    for d in extras:
        problems.append(f"  EXTRA line {d.span.line}: {_describe(d, file)}  | {text_of(d.span.line)}")
    for d in on_ok_lines:  # matched through its trace, but placed on a line that must stay clean
        problems.append(f"  ON OK LINE {d.span.line}: {_describe(d, file)}  | {text_of(d.span.line)}")
    assert not problems, f"{file}:\n" + "\n".join(problems)


# --- the exhaustive checks ------------------------------------------------------------------------


@pytest.mark.parametrize("file", FIXTURE_FILES, ids=_ids(FIXTURE_FILES))
def test_fixture_findings_match_annotations(file: Path) -> None:
    check_annotated_file(file)


@pytest.mark.parametrize("file", CASE_PARAMS)
def test_extra_case_findings_match_annotations(file: Path) -> None:
    check_annotated_file(file)


# --- hygiene of the fixture tree -----------------------------------------------------------------


def test_fixture_folders_are_codes_or_negative() -> None:
    folders = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and p.name != "__pycache__")
    unknown = [name for name in folders if name not in ("negative", "fixes", "notebooks") and name not in BY_CODE]
    assert not unknown, f"fixture folders that are not rule codes: {unknown}"


@pytest.mark.parametrize("file", FIXTURE_FILES, ids=_ids(FIXTURE_FILES))
def test_fixture_has_module_docstring(file: Path) -> None:
    tree = ast.parse(file.read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), f"{file} has no module docstring saying what it shows"


@pytest.mark.parametrize("file", FIXTURE_FILES + CASE_FILES, ids=_ids(FIXTURE_FILES + CASE_FILES))
def test_annotations_name_registry_codes(file: Path) -> None:
    bad = [(line, code) for line, code in parse_annotations(file).pairs
           if not CODE_RE.match(code) or code not in BY_CODE]
    assert not bad, f"{file}: unknown codes in annotations {bad}"


# KL900 is about unreadable files; opt-in rules (KL901) are tested with their option in their own tests
@pytest.mark.parametrize("code", [rule.code for rule in RULES if rule.code != "KL900" and rule.code not in OPT_IN])
def test_every_rule_has_positive_fixtures(code: str) -> None:
    files = positive_files(code)
    assert len(files) >= MIN_POSITIVE, f"{code}: {len(files)} positive fixture files, need {MIN_POSITIVE}"
    for file in files:
        codes = {c for _, c in parse_annotations(file).pairs}
        assert code in codes, f"{file} is a positive fixture of {code} but expects only {sorted(codes)}"


@pytest.mark.parametrize("code", CODES_WITH_NEGATIVES)
def test_rules_have_negative_fixtures(code: str) -> None:
    files = negative_files(code)
    assert len(files) >= MIN_NEGATIVE_PER_CODE, f"{code}: {len(files)} ok_ fixtures, need {MIN_NEGATIVE_PER_CODE}"
    for file in files:
        codes = {c for _, c in parse_annotations(file).pairs}
        assert code not in codes, f"{file} is a negative fixture of {code} but expects it"


@pytest.mark.parametrize("code", CODES_NEEDING_JAX)
def test_jax_positive_fixture_exists(code: str) -> None:
    jax_files = [p for p in positive_files(code) if re.search(r"^import jax", p.read_text(encoding="utf-8"), re.M)]
    assert jax_files, f"{code}: no JAX positive fixture"


def test_negative_folder() -> None:
    files = sorted((FIXTURES / "negative").glob("*.py"))
    assert len(files) >= MIN_NEGATIVE_FILES, f"fixtures/negative has {len(files)} files, need {MIN_NEGATIVE_FILES}"
    for file in files:
        notes = parse_annotations(file)
        assert not notes.expects, f"{file}: a negative fixture must not expect findings ({notes.pairs})"
        assert notes.ok_lines, f"{file}: a negative fixture should mark the lines a naive tool flags with # ok"
