"""The rule pages (`rules/<CODE>.md`) stay in step with the registry and the analysis.

Every registry code has exactly one page, titled `# <CODE> <name>`, with the fixed sections
in a fixed order; `kllint rule CODE` prints it. The Example snippet of each rule must fire
that rule and the Use-instead snippet must not (these two tests exercise the analysis).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from click.testing import CliRunner

from kllint.cli import cli
from kllint.rules.registry import BY_CODE, RULES

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "rules"
SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "References")
ALL_CODES = [rule.code for rule in RULES]
ANALYSED_CODES = [code for code in ALL_CODES if code not in ("KL900", "KL901")]  # KL901: tests/test_suppression_audit.py


def page_text(code: str) -> str:
    return (PAGES / f"{code}.md").read_text(encoding="utf-8")


def markdown_lines(text: str) -> list[tuple[str, bool]]:
    """Each line with a flag telling whether it is inside a fenced code block."""
    out: list[tuple[str, bool]] = []
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            out.append((line, True))
            in_fence = not in_fence
            continue
        out.append((line, in_fence))
    return out


def headings(text: str) -> list[str]:
    return [line for line, fenced in markdown_lines(text) if not fenced and line.startswith("#")]


def section(text: str, name: str) -> str:
    """The body of `## <name>` up to the next `## ` heading (code fences respected)."""
    body: list[str] = []
    inside = False
    for line, fenced in markdown_lines(text):
        if not fenced and line.startswith("## "):
            if inside:
                break
            inside = line == f"## {name}"
            continue
        if inside:
            body.append(line)
    return "\n".join(body)


def python_blocks(markdown: str) -> list[str]:
    """The contents of the ```python fenced blocks of a markdown fragment, in order."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in markdown.splitlines():
        stripped = line.strip()
        if current is None and stripped.startswith("```"):
            current = [] if stripped[3:].strip() in ("python", "py") else None
            if current is None:
                current = ["<not python>"]
            continue
        if current is not None and stripped.startswith("```"):
            if current[:1] != ["<not python>"]:
                blocks.append("\n".join(current) + "\n")
            current = None
            continue
        if current is not None:
            current.append(line)
    return blocks


def snippet(code: str, name: str) -> str:
    blocks = python_blocks(section(page_text(code), name))
    assert blocks, f"{code}: section '{name}' has no ```python block"
    return blocks[0]


# --- the pages and the registry -------------------------------------------------------------


@pytest.mark.parametrize("code", ALL_CODES)
def test_every_registry_code_has_a_page(code: str) -> None:
    assert (PAGES / f"{code}.md").is_file(), f"rules/{code}.md is missing"


def test_no_page_without_a_registry_entry() -> None:
    orphans = sorted(p.name for p in PAGES.glob("*.md") if p.stem not in BY_CODE)
    assert not orphans, f"pages without a registry entry: {orphans}"


def test_page_files_are_named_by_code_only() -> None:
    others = sorted(p.name for p in PAGES.iterdir() if p.suffix != ".md")
    assert not others, f"unexpected files in rules/: {others}"


@pytest.mark.parametrize("code", ALL_CODES)
def test_title_matches_registry(code: str) -> None:
    first = page_text(code).splitlines()[0]
    assert first == f"# {code} {BY_CODE[code].name}"


@pytest.mark.parametrize("code", ALL_CODES)
def test_sections_present_in_order(code: str) -> None:
    expected = [f"# {code} {BY_CODE[code].name}"] + [f"## {name}" for name in SECTIONS]
    assert headings(page_text(code)) == expected


@pytest.mark.parametrize("code", ALL_CODES)
def test_sections_are_not_empty(code: str) -> None:
    text = page_text(code)
    empty = [name for name in SECTIONS if not section(text, name).strip()]
    assert not empty, f"{code}: empty sections {empty}"


@pytest.mark.parametrize("code", ALL_CODES)
def test_fences_are_balanced(code: str) -> None:
    fences = [line for line in page_text(code).splitlines() if line.lstrip().startswith("```")]
    assert len(fences) % 2 == 0, f"{code}: unbalanced code fences"


@pytest.mark.parametrize("code", ALL_CODES)
def test_fix_safety_names_a_level(code: str) -> None:
    body = section(page_text(code), "Fix safety").lower()
    assert any(level in body for level in ("safe", "unsafe", "display-only")), body


@pytest.mark.parametrize("code", ANALYSED_CODES)
def test_snippets_are_valid_python(code: str) -> None:
    for name in ("Example", "Use instead"):
        ast.parse(snippet(code, name), filename=f"rules/{code}.md#{name}")


def test_syntax_error_page_example_does_not_parse() -> None:
    with pytest.raises(SyntaxError):
        ast.parse(snippet("KL900", "Example"))
    ast.parse(snippet("KL900", "Use instead"))


# --- the CLI ----------------------------------------------------------------------------------


def test_cli_rule_prints_the_page() -> None:
    result = CliRunner().invoke(cli, ["rule", "KL102"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == page_text("KL102").strip()


def test_cli_rule_accepts_lowercase_code_and_name() -> None:
    for selector in ("kl102", "k3-as-loss"):
        result = CliRunner().invoke(cli, ["rule", selector])
        assert result.exit_code == 0, (selector, result.output)
        assert result.output.startswith("# KL102 k3-as-loss")


@pytest.mark.parametrize("code", ALL_CODES)
def test_cli_rule_prints_every_page(code: str) -> None:
    result = CliRunner().invoke(cli, ["rule", code])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"# {code} {BY_CODE[code].name}")


def test_cli_rule_unknown_code_exits_2() -> None:
    result = CliRunner().invoke(cli, ["rule", "NOPE"])
    assert result.exit_code == 2


# --- the snippets against the analysis -------------------------------------------------------


def codes_found(source: str) -> list[str]:
    from kllint.api import check_source

    return sorted({d.code for d in check_source(source)})


@pytest.mark.parametrize("code", ANALYSED_CODES)
def test_example_fires_its_rule(code: str) -> None:
    found = codes_found(snippet(code, "Example"))
    assert code in found, f"{code}: the Example snippet did not fire {code} (found {found})"


@pytest.mark.parametrize("code", ANALYSED_CODES)
def test_use_instead_does_not_fire_its_rule(code: str) -> None:
    found = codes_found(snippet(code, "Use instead"))
    assert code not in found, f"{code}: the Use-instead snippet still fires {code} (found {found})"
