"""`kllint server`: a Language Server (pygls) over stdio.

- diagnostics are published when a Python document is opened or saved, and after each change
  once the buffer has been still for `debounceMs` (default 300 ms); the buffer is checked as the
  file it will be saved as (closest configuration, helpers of its project read from disk);
- each diagnostic links to its rule page, and its trace (estimate -> sink) is the related
  information;
- hovering a finding shows its rule page (`kllint rule CODE`);
- code actions: a quick fix per finding whose fix is safe, and, when the client asks for them
  with the `unsafeFixes` setting, per finding with an unsafe fix; `source.fixAll.kllint` applies
  all of them (as `kllint check --fix [--unsafe-fixes]`). Every fix is verified as `--fix`
  verifies it before it is offered.

Settings come as `initializationOptions` or in `workspace/didChangeConfiguration` (under a
`kllint` key or at the top level): `{"unsafeFixes": false, "debounceMs": 300}`. The analysis runs
in one worker thread, one buffer at a time; a result for an outdated version is dropped. A buffer
that could not be checked (an internal error, an invalid configuration) gets one KL900 diagnostic
on its first line saying why, never an empty list that looks clean. Every request is answered,
also invalid ones and those after `shutdown` (kllint.server.protocol); `exit` ends the process
with 0 after `shutdown`, else 1.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from kllint import __version__
from kllint.diagnostics import Diagnostic, Span
from kllint.server.documents import Checked, check_buffer, fix_all, fix_edit
from kllint.server.convert import not_checked, to_lsp, to_range, to_span
from kllint.server.protocol import KllintProtocol

FIX_ALL = "source.fixAll.kllint"
PYTHON_SUFFIXES = (".py", ".pyi")
log = logging.getLogger("kllint.server")


@dataclass
class Result:
    """The findings of one version of a document, and the fixes computed for it so far."""

    version: int | None
    text: str
    diagnostics: tuple[Diagnostic, ...]
    edits: dict[tuple, Any] = field(default_factory=dict)


class KllintServer(LanguageServer):
    """The language server: open documents' results, settings, the debounce timers."""

    def __init__(self) -> None:
        super().__init__("kllint", __version__, protocol_cls=KllintProtocol)
        self.unsafe_fixes = False
        self.debounce = 0.3
        self.results: dict[str, Result] = {}
        self.pending: dict[str, asyncio.Task] = {}
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kllint-analysis")

    def configure(self, options: Any) -> None:
        """Apply `{"unsafeFixes": bool, "debounceMs": int}` (possibly under a `kllint` key)."""
        if not isinstance(options, dict):
            return
        options = options.get("kllint", options) if isinstance(options.get("kllint", options), dict) else options
        if isinstance(options.get("unsafeFixes"), bool):
            self.unsafe_fixes = options["unsafeFixes"]
        if isinstance(options.get("debounceMs"), (int, float)) and options["debounceMs"] >= 0:
            self.debounce = options["debounceMs"] / 1000

    async def in_worker(self, function, *args):
        """Run `function(*args)` in the analysis thread."""
        return await asyncio.get_running_loop().run_in_executor(self.worker, function, *args)

    def report_server_error(self, error: Exception, source: Any) -> None:
        """pygls's hook for errors no request answers: a body its read loop could not parse
        (`source` is then JsonRpcException) is answered with -32700; the rest as pygls does."""
        from pygls.exceptions import JsonRpcException

        if source is JsonRpcException and isinstance(self.protocol, KllintProtocol) \
                and self.protocol.refuse_unparsable(error):
            return
        super().report_server_error(error, source)


server = KllintServer()


def _path(uri: str) -> Path | None:
    path = to_fs_path(uri)
    if path is None:
        return None
    return Path(path) if Path(path).suffix in PYTHON_SUFFIXES else None


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _file_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    except OSError:
        return []


def _codec(ls: KllintServer, uri: str):
    return ls.workspace.get_text_document(uri).position_codec


async def lint(ls: KllintServer, uri: str) -> None:
    """Check the open document `uri` and publish its diagnostics (unless it changed meanwhile)."""
    path = _path(uri)
    if path is None or uri not in ls.workspace.text_documents:
        return
    document = ls.workspace.get_text_document(uri)
    version, text = document.version, document.source
    try:
        checked = await ls.in_worker(check_buffer, path, text)
    except Exception as exc:  # noqa: BLE001 - check_buffer never raises; the thread could not run it
        checked = Checked((), (f"internal error: {type(exc).__name__}: {exc}",))
    if uri not in ls.workspace.text_documents or ls.workspace.get_text_document(uri).version != version:
        return
    ls.results[uri] = Result(version, text, checked.diagnostics)
    lines, codec = _lines(text), document.position_codec
    published, unshown = [], []
    for d in checked.diagnostics:
        try:
            published.append(to_lsp(d, lines, codec, Path.cwd(), _file_lines))
        except Exception as exc:  # noqa: BLE001 - one finding that cannot be placed hides no other
            unshown.append(f"internal error: {d.code} at {d.span.line}:{d.span.column} cannot be shown "
                           f"({type(exc).__name__})")
    for note in (*checked.errors, *unshown):
        ls.window_log_message(types.LogMessageParams(types.MessageType.Warning, f"kllint: {note}"))
    reason = checked.errors[0] if checked.errors else unshown[0] if unshown and not published else None
    if reason is not None and not any(d.code == "KL900" for d in checked.diagnostics):
        published.insert(0, not_checked(reason, lines, codec))  # never an empty list that looks clean
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, version=version,
                                                                        diagnostics=published))


def _schedule(ls: KllintServer, uri: str, delay: float) -> None:
    previous = ls.pending.pop(uri, None)
    if previous is not None:
        previous.cancel()

    async def later() -> None:
        if delay:
            await asyncio.sleep(delay)
        ls.pending.pop(uri, None)
        try:
            await lint(ls, uri)
        except Exception as exc:  # noqa: BLE001 - a task's error would be lost: say it, keep serving
            log.exception("checking %s failed", uri)
            ls.window_log_message(types.LogMessageParams(
                types.MessageType.Error, f"kllint: {uri} was not checked: internal error: {type(exc).__name__}: {exc}"))

    ls.pending[uri] = asyncio.ensure_future(later())


@server.feature(types.INITIALIZE)
def initialize(ls: KllintServer, params: types.InitializeParams) -> None:
    """Read the settings from `initializationOptions`."""
    ls.configure(params.initialization_options)


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(ls: KllintServer, params: types.DidChangeConfigurationParams) -> None:
    """New settings: check the open documents again."""
    ls.configure(params.settings)
    for uri in list(ls.results):
        _schedule(ls, uri, 0)


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: KllintServer, params: types.DidOpenTextDocumentParams) -> None:
    """Check a document as soon as it is opened."""
    _schedule(ls, params.text_document.uri, 0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: KllintServer, params: types.DidChangeTextDocumentParams) -> None:
    """Check a changed document once it has been still for the debounce delay."""
    _schedule(ls, params.text_document.uri, ls.debounce)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: KllintServer, params: types.DidSaveTextDocumentParams) -> None:
    """Check a saved document now (its configuration or helpers may have changed too)."""
    _schedule(ls, params.text_document.uri, 0)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: KllintServer, params: types.DidCloseTextDocumentParams) -> None:
    """Forget a closed document and clear its diagnostics."""
    uri = params.text_document.uri
    pending = ls.pending.pop(uri, None)
    if pending is not None:
        pending.cancel()
    if ls.results.pop(uri, None) is not None:
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


def _current(ls: KllintServer, uri: str) -> Result | None:
    result = ls.results.get(uri)
    if result is None or uri not in ls.workspace.text_documents:
        return None
    return result if ls.workspace.get_text_document(uri).version == result.version else None


def _contains(span: Span, line: int, column: int) -> bool:
    return (span.line, span.column) <= (line, column) <= (span.end_line, span.end_column)


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: KllintServer, params: types.HoverParams) -> types.Hover | None:
    """The rule page of the findings under the cursor."""
    from kllint.rules.registry import rule_page

    uri = params.text_document.uri
    result = _current(ls, uri)
    if result is None:
        return None
    lines, codec = _lines(result.text), _codec(ls, uri)
    at = to_span(types.Range(params.position, params.position), lines, codec)
    under = [d for d in result.diagnostics if _contains(d.span, at.line, at.column)]
    pages = []
    for code in dict.fromkeys(d.code for d in under):
        try:
            pages.append(rule_page(code))
        except (KeyError, OSError):
            continue
    if not pages:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(pages)),
                       range=to_range(under[0].span, lines, codec))


def _wants(only: list[str] | None, kind: str) -> bool:
    return only is None or any(kind == k or kind.startswith(k + ".") for k in only)


def _overlaps(a: Span, b: Span) -> bool:
    return (a.line, a.column) <= (b.end_line, b.end_column) and (b.line, b.column) <= (a.end_line, a.end_column)


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
    code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL]))
async def code_action(ls: KllintServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    """Quick fixes for the findings in the range, and `source.fixAll.kllint`."""
    uri = params.text_document.uri
    result, path = _current(ls, uri), _path(uri)
    if result is None or path is None:
        return None
    lines, codec = _lines(result.text), _codec(ls, uri)
    wanted = to_span(params.range, lines, codec)
    only = list(params.context.only) if params.context.only else None
    unsafe = ls.unsafe_fixes
    actions: list[types.CodeAction] = []
    if _wants(only, types.CodeActionKind.QuickFix):
        for d in result.diagnostics:
            if d.fix is None or not _overlaps(d.span, wanted):
                continue
            key = ("one", d.code, d.span, unsafe)
            if key not in result.edits:
                result.edits[key] = await ls.in_worker(fix_edit, path, result.text, d, unsafe)
            edit = result.edits[key]
            if edit is None:
                continue
            safety = "" if d.fix.applicability == "safe" else " (unsafe)"
            actions.append(types.CodeAction(
                title=f"kllint: {d.fix.description} ({d.code}){safety}",
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[to_lsp(d, lines, codec, Path.cwd())],
                is_preferred=d.fix.applicability == "safe",
                edit=types.WorkspaceEdit(changes={uri: [types.TextEdit(to_range(edit.span, lines, codec), edit.text)]})))
    if only is not None and _wants(only, FIX_ALL):  # source actions only when asked for
        key = ("all", unsafe)
        if key not in result.edits:
            result.edits[key] = await ls.in_worker(fix_all, path, result.text, unsafe)
        new_text, count = result.edits[key]
        if count:
            whole = types.Range(types.Position(0, 0), types.Position(len(lines), 0))
            actions.append(types.CodeAction(
                title=f"kllint: fix all ({count} {'finding' if count == 1 else 'findings'})", kind=FIX_ALL,
                edit=types.WorkspaceEdit(changes={uri: [types.TextEdit(whole, new_text)]})))
    return actions


def serve() -> int:
    """Run the server on stdin/stdout until the client says exit (or closes stdin); returns the
    exit status the LSP asks for: 0 after a `shutdown` request, else 1."""
    logging.basicConfig(level=logging.WARNING, format="kllint server: %(message)s")
    server.start_io()
    return 0 if isinstance(server.protocol, KllintProtocol) and server.protocol.shut_down else 1
