"""`kllint server` driven by a real LSP client over stdio (pytest-lsp): diagnostics on open,
change (debounced) and save, the trace as related information, the rule page on hover, and
code actions whose edits clear the finding once applied."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls")
pytest_lsp = pytest.importorskip("pytest_lsp")

from lsprotocol import types  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
K3_LOSS = (FIXTURES / "fixes" / "kl102_grpo_token_k3.py").read_text(encoding="utf-8")
K3_EXPR = "torch.exp(ref_logp - logp) - (ref_logp - logp) - 1"
K3_LINE = next(i for i, line in enumerate(K3_LOSS.splitlines()) if K3_EXPR in line)
CLEAN = "import torch\n\n\ndef f(x):\n    return x + 1\n"


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "kllint", "server"]))
async def client(lsp_client: LanguageClient, tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n", encoding="utf-8")
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=tmp_path.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=tmp_path.as_uri(), name="demo")],
        initialization_options={"unsafeFixes": True, "debounceMs": 200}))
    yield
    await lsp_client.shutdown_session()


async def _published(client: LanguageClient, uri: str, timeout: float = 120) -> list[types.Diagnostic]:
    while True:
        params = await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), timeout)
        if params.uri == uri:
            return list(params.diagnostics)


def _open(client: LanguageClient, path: Path, text: str) -> str:
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return uri


def _change(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


def _apply(text: str, edits: list[types.TextEdit]) -> str:
    lines = text.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        start = sum(len(line) for line in lines[:edit.range.start.line]) + edit.range.start.character
        end = sum(len(line) for line in lines[:edit.range.end.line]) + edit.range.end.character
        text = text[:start] + edit.new_text + text[end:]
        lines = text.splitlines(keepends=True)
    return text


@pytest.mark.asyncio(loop_scope="function")
async def test_open_publishes_kl102_at_its_range_with_trace_and_hover(client: LanguageClient, tmp_path: Path):
    uri = _open(client, tmp_path / "train.py", K3_LOSS)
    found = await _published(client, uri)
    kl102 = [d for d in found if d.code == "KL102"]
    assert len(kl102) == 1 and {d.code for d in found} == {"KL102", "KL201"}
    start = K3_LOSS.splitlines()[K3_LINE].index(K3_EXPR)
    assert kl102[0].range == types.Range(types.Position(K3_LINE, start), types.Position(K3_LINE, start + len(K3_EXPR)))
    assert kl102[0].severity == types.DiagnosticSeverity.Error and kl102[0].source == "kllint"
    assert kl102[0].code_description.href.endswith("/rules/KL102.md")
    notes = [info.message for info in kl102[0].related_information]
    assert "k3 estimate" in notes and all(info.location.uri == uri for info in kl102[0].related_information)

    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(K3_LINE, start + 3)))
    assert hover is not None and hover.contents.kind == types.MarkupKind.Markdown
    assert hover.contents.value.startswith("# KL102 k3-as-loss") and "# KL201" in hover.contents.value
    nothing = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(0, 0)))
    assert nothing is None


@pytest.mark.asyncio(loop_scope="function")
async def test_code_action_fixes_kl102_and_the_change_clears_it(client: LanguageClient, tmp_path: Path):
    uri = _open(client, tmp_path / "train.py", K3_LOSS)
    found = await _published(client, uri)
    kl102 = next(d for d in found if d.code == "KL102")
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=kl102.range,
        context=types.CodeActionContext(diagnostics=[kl102], only=[types.CodeActionKind.QuickFix])))
    fixes = [a for a in actions if "(KL102)" in a.title]
    assert len(fixes) == 1 and fixes[0].title.endswith("(unsafe)") and fixes[0].kind == types.CodeActionKind.QuickFix
    edits = fixes[0].edit.changes[uri]
    # the rewrite binds names on lines of its own: the edit replaces whole lines, from the stale
    # comment above the statement to the end of the statement's line
    assert len(edits) == 1 and edits[0].range.start == types.Position(K3_LINE - 1, 0)
    assert edits[0].range.end.line == K3_LINE
    fixed = _apply(K3_LOSS, edits)
    assert "    k2 = 0.5 * log_ratio ** 2\n    kl = k2 - k2.detach() + k3.detach()  # expect: KL102,KL201\n" in fixed
    _change(client, uri, 2, fixed)
    after = await _published(client, uri)
    assert [d.code for d in after] == ["KL201"]  # KL102 cleared; the per-token credit stays


@pytest.mark.asyncio(loop_scope="function")
async def test_unsafe_fixes_are_offered_only_on_request_and_fix_all(client: LanguageClient, tmp_path: Path):
    uri = _open(client, tmp_path / "train.py", K3_LOSS)
    kl102 = next(d for d in await _published(client, uri) if d.code == "KL102")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"kllint": {"unsafeFixes": False}}))
    await _published(client, uri)  # re-checked with the new settings
    context = types.CodeActionContext(diagnostics=[kl102])
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=kl102.range, context=context))
    assert not [a for a in actions or [] if "KL102" in a.title]
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"kllint": {"unsafeFixes": True}}))
    await _published(client, uri)
    every = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=kl102.range,
        context=types.CodeActionContext(diagnostics=[], only=["source.fixAll"])))
    assert [a.kind for a in every] == ["source.fixAll.kllint"]
    fixed = _apply(K3_LOSS, every[0].edit.changes[uri])
    _change(client, uri, 2, fixed)
    assert [d.code for d in await _published(client, uri)] == ["KL201"]


@pytest.mark.asyncio(loop_scope="function")
async def test_changes_are_debounced_and_save_and_close_publish(client: LanguageClient, tmp_path: Path):
    path = tmp_path / "train.py"
    uri = _open(client, path, CLEAN)
    assert await _published(client, uri) == []
    for version, text in ((2, K3_LOSS), (3, CLEAN), (4, K3_LOSS)):  # typed faster than the debounce
        _change(client, uri, version, text)
    params = await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 120)
    assert params.version == 4 and {d.code for d in params.diagnostics} == {"KL102", "KL201"}

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n[tool.kllint]\nignore = ['KL201']\n")
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    assert [d.code for d in await _published(client, uri)] == ["KL102"]  # the closest configuration applies

    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    assert await _published(client, uri) == []


@pytest.mark.asyncio(loop_scope="function")
async def test_helpers_of_the_project_are_resolved_from_disk(client: LanguageClient, tmp_path: Path):
    # the helper computes the log-ratio, the open buffer writes the k3 estimate of it (findings
    # are placed where the estimate is written): only a helper read from disk makes it one
    (tmp_path / "helpers.py").write_text(
        "def log_ratio(logprob, ref_logprob):\n    return ref_logprob - logprob\n", encoding="utf-8")
    uri = _open(client, tmp_path / "train.py", "from helpers import log_ratio\n\n\ndef loss_fn(logprob, ref_logprob):\n"
                                               "    log_r = log_ratio(logprob, ref_logprob)\n"
                                               "    return (log_r.exp() - log_r - 1).mean()\n")
    found = await _published(client, uri)
    kl102 = next(d for d in found if d.code == "KL102")
    assert any(info.location.uri == (tmp_path / "helpers.py").as_uri() for info in kl102.related_information)


def test_ranges_are_in_the_clients_utf16_units():
    from pygls.workspace.position_codec import PositionCodec

    from kllint.diagnostics import Span
    from kllint.server.convert import to_range, to_span

    lines = ['s = "😋"; kl = logp - ref\n']
    span = Span(1, 10, 1, 25)  # `kl = logp - ref` in code points
    rng = to_range(span, lines, PositionCodec(types.PositionEncodingKind.Utf16))
    assert (rng.start.character, rng.end.character) == (10, 25)  # the emoji is two UTF-16 units
    assert to_span(rng, lines, PositionCodec(types.PositionEncodingKind.Utf16)) == span
    utf32 = to_range(span, lines, PositionCodec(types.PositionEncodingKind.Utf32))
    assert (utf32.start.character, utf32.end.character) == (9, 24)
