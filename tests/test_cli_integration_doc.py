"""The README's workflow and docs/integration.md stay true: the workflow uses the action with inputs it has, its
pre-commit snippet names real hooks, and its references cover every key and option."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kllint.cli import check
from kllint.config import KNOWN_KEYS, VOCAB_KEYS, OUTPUT_FORMATS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
# the workflow and the pre-commit snippet live in the README; the reference in docs/integration.md
DOC = "\n".join((ROOT / name).read_text(encoding="utf-8") for name in ("README.md", "docs/integration.md"))


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", DOC, flags=re.MULTILINE | re.DOTALL)


def _workflow() -> dict:
    [block] = [b for b in _blocks("yaml") if "jobs:" in b]
    return yaml.safe_load(block)


def _steps() -> list[dict]:
    workflow = _workflow()
    [job] = workflow["jobs"].values()
    return job["steps"]


def test_workflow_shape():
    """The README's workflow uses the action (tests/test_action.py runs it with these inputs)."""
    workflow = _workflow()
    assert workflow["permissions"]["security-events"] == "write"  # the action uploads SARIF
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as true
    assert "pull_request" in triggers
    [step] = [s for s in _steps() if s.get("uses", "").startswith("kllint/kllint@")]
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    assert set(step.get("with", {})) <= set(action["inputs"])
    assert not any("wheel" in str(s) or ".whl" in str(s) for s in _steps())


def test_precommit_snippet_names_real_hooks():
    snippets = [yaml.safe_load(b) for b in _blocks("yaml") if "repos:" in b]
    manifest = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    entries = {hook["id"]: hook["entry"] for hook in manifest}
    remote = [repo for snippet in snippets for repo in snippet["repos"] if repo["repo"] != "local"]
    local = [repo for snippet in snippets for repo in snippet["repos"] if repo["repo"] == "local"]
    assert remote and local
    for repo in remote:  # pre-commit needs an immutable rev: a full commit SHA until a tag exists
        assert re.fullmatch(r"[0-9a-f]{40}", str(repo["rev"])), repo["rev"]
        assert {hook["id"] for hook in repo["hooks"]} <= set(entries)
    for repo in local:  # the local hook runs what the manifest's hook runs
        for hook in repo["hooks"]:
            assert hook["entry"] == entries[hook["id"]] and hook["language"] == "system"
            assert hook["types_or"] == ["python", "pyi"] and hook["require_serial"] is True
    assert "- id: kllint-fix" in DOC
    for hook_id, entry in entries.items():
        assert f"| `{hook_id}` | `{entry}` |" in DOC


def test_config_reference_covers_every_key_and_parses():
    for key in KNOWN_KEYS:
        assert f"| `{key}` |" in DOC, key
    for key in VOCAB_KEYS:
        assert f"| `vocab.{key}` |" in DOC, key
    from kllint.config import parse_table

    for block in _blocks("toml"):
        data = tomllib.loads(block)
        if "tool" in data and "kllint" in data["tool"]:
            parse_table(data["tool"]["kllint"], "docs/integration.md")
    assert any(tomllib.loads(b).get("tool", {}).get("ruff", {}).get("lint", {}).get("external") == ["KL"]
               for b in _blocks("toml"))


def test_every_check_option_is_documented():
    for param in check.params:
        for opt in getattr(param, "opts", []):
            if opt.startswith("--") and opt != "--help":
                assert f"`{opt}" in DOC, opt
    for fmt in OUTPUT_FORMATS:
        assert f"`{fmt}`" in DOC


@pytest.mark.parametrize("snippet", ["# noqa: KL102", "# kllint: ignore[KL201]", "# kllint: file-ignore[KL2]"])
def test_suppression_syntax_documented(snippet):
    assert snippet in DOC
