"""Issue 35, item 7: `kllint server` answers every request, whatever the client sends, and keeps
serving. Driven over stdio with raw JSON-RPC frames (Content-Length headers), not through a
client library that would refuse to send them: invalid params (-32602), an id that is not one
(-32600), a body that is not JSON or not UTF-8 (-32700, id null), JSON that is not a JSON-RPC
message (-32600), any request after `shutdown` (-32600), and `exit` (status 0 after `shutdown`,
else 1, as the LSP asks). A buffer the analysis fails on (whatever it raises) is published with
a KL900 saying it was not checked, never as an empty list that looks clean.

These are the probes of the adversarial campaign, kept: each waits with a timeout, since the
failure they catch is a client waiting forever.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

pytest.importorskip("pygls")

TIMEOUT = float(os.environ.get("KLLINT_LSP_TEST_TIMEOUT", "60"))  # seconds a client waits for one answer
K3_BUFFER = ("import torch\n\n\ndef loss_fn(logp, ref_logp):\n"
             "    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1\n"
             "    loss = kl.mean()\n    loss.backward()\n")


def frame(message: Any) -> bytes:
    """One JSON-RPC frame: a Content-Length header and the body (`bytes` are sent as they are)."""
    body = message if isinstance(message, bytes) else json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Wire:
    """`kllint server` in a child process, spoken to in raw frames. `preamble` is Python run in
    the server process before it starts (to make the analysis fail on purpose)."""

    def __init__(self, cwd: Path, preamble: str = "") -> None:
        self.log = open(cwd / "server.log", "w+b")  # noqa: SIM115 - closed in close(); never a full pipe
        code = preamble + "\nfrom kllint.cli import main\nmain()\n"
        self.proc = subprocess.Popen([sys.executable, "-c", code, "server"], cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log)
        self.messages: queue.Queue = queue.Queue()
        self.seen: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    self.messages.put(None)
                    return
                if line == b"\r\n":
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            self.messages.put(json.loads(out.read(length)))

    def send(self, message: Any) -> None:
        self.proc.stdin.write(frame(message))
        self.proc.stdin.flush()

    def wait_for(self, wanted: Callable[[dict], bool], timeout: float = TIMEOUT) -> dict:
        """The first message (from now) for which `wanted` is true; fails after `timeout` s."""
        end = time.monotonic() + timeout
        while True:
            try:
                message = self.messages.get(timeout=max(end - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no answer within {timeout} s; received: {self.seen[-5:]}") from None
            if message is None:
                raise AssertionError(f"the server ended; its log: {self.stderr()[-2000:]}")
            self.seen.append(message)
            if wanted(message):
                return message

    def answer(self, msg_id: Any, timeout: float = TIMEOUT) -> dict:
        return self.wait_for(lambda m: "id" in m and m["id"] == msg_id and "method" not in m, timeout)

    def request(self, msg_id: Any, method: str, params: Any = None) -> dict:
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, **({} if params is None else {"params": params})})
        return self.answer(msg_id)

    def initialize(self, root: Path) -> None:
        reply = self.request(0, "initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": {},
                                               "initializationOptions": {"debounceMs": 0}})
        assert "capabilities" in reply["result"]
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})

    def open(self, path: Path, text: str) -> str:
        uri = path.as_uri()
        self.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": text}}})
        return uri

    def published(self, uri: str) -> list[dict]:
        return self.wait_for(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                             and m["params"]["uri"] == uri)["params"]["diagnostics"]

    def still_serving(self, msg_id: Any = "alive") -> None:
        """A valid request is still answered (a hover nobody has a finding for: null)."""
        reply = self.request(msg_id, "textDocument/hover", {"textDocument": {"uri": "file:///nowhere.py"},
                                                            "position": {"line": 0, "character": 0}})
        assert "error" not in reply and reply["result"] is None, reply

    def stderr(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def exit_status(self, timeout: float = TIMEOUT) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.log.close()


def _started(folder: Path):
    (folder / "pyproject.toml").write_text("[project]\nname = 'demo'\n", encoding="utf-8")
    server = Wire(folder)
    server.initialize(folder)
    return server


@pytest.fixture
def wire(tmp_path: Path):
    server = _started(tmp_path)
    yield server
    server.close()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One server for the cases of the bad-message tests: each must leave it serving the next."""
    server = _started(tmp_path_factory.mktemp("shared"))
    yield server
    server.close()


def _error(reply: dict, code: int, msg_id: Any) -> str:
    assert set(reply) == {"jsonrpc", "id", "error"} and reply["jsonrpc"] == "2.0", reply
    assert reply["id"] == msg_id, reply
    assert reply["error"]["code"] == code, reply
    return reply["error"]["message"]


def test_invalid_params_are_answered_with_invalid_params_naming_the_field(wire):
    message = _error(wire.request(7, "textDocument/hover", {"textDocument": 5, "position": {"line": 0, "character": 0}}),
                     -32602, 7)
    assert "textDocument/hover" in message and "$.params.textDocument" in message
    missing = _error(wire.request("s", "textDocument/codeAction", {"textDocument": {"uri": "file:///a.py"}}), -32602, "s")
    assert "required field missing" in missing
    wire.still_serving()


@pytest.mark.parametrize("body", [b'{"jsonrpc": "2.0", "id": 3, "method": ', b"not json at all", b"{}}",
                                  b'{"jsonrpc": "2.0", "id": 3, "method": "shutdown", "params": \xff}',
                                  b"[" * 100_000], ids=["cut", "text", "extra", "not-utf8", "deep"])
def test_a_body_that_is_not_json_is_a_parse_error_with_id_null(shared, body):
    shared.send(body)
    message = _error(shared.answer(None), -32700, None)
    assert message.startswith("Parse error")
    shared.still_serving()


@pytest.mark.parametrize("message, msg_id", [
    ([{"jsonrpc": "2.0", "id": 1, "method": "shutdown"}], None),  # a batch: not in the LSP
    (5, None),
    ({"id": 9, "method": "textDocument/hover"}, 9),  # no "jsonrpc"
    ({"jsonrpc": "1.0", "id": 10, "method": "textDocument/hover"}, 10),
    ({"jsonrpc": "2.0", "id": 11, "method": 42}, 11),
    ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "textDocument/hover",
      "params": {"textDocument": {"uri": "file:///a.py"}, "position": {"line": 0, "character": 0}}}, None),
    ({"jsonrpc": "2.0"}, None),
], ids=["batch", "number", "no-jsonrpc", "version-1", "method-number", "id-object", "empty"])
def test_json_that_is_not_a_jsonrpc_request_is_an_invalid_request(shared, message, msg_id):
    shared.send(message)
    _error(shared.answer(msg_id), -32600, msg_id)
    shared.still_serving()


def test_unknown_methods_and_invalid_notifications_keep_the_server_serving(wire, tmp_path):
    _error(wire.request(12, "kllint/nothing", {}), -32601, 12)
    wire.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": 5}})
    logged = wire.wait_for(lambda m: m.get("method") == "window/logMessage")
    assert "notification ignored" in logged["params"]["message"]
    uri = wire.open(tmp_path / "train.py", K3_BUFFER)
    assert {d["code"] for d in wire.published(uri)} >= {"KL102"}


def test_requests_after_shutdown_are_invalid_requests_and_exit_ends_with_0(wire, tmp_path):
    uri = wire.open(tmp_path / "train.py", K3_BUFFER)
    wire.published(uri)
    assert wire.request(20, "shutdown") == {"jsonrpc": "2.0", "id": 20, "result": None}
    hover = {"textDocument": {"uri": uri}, "position": {"line": 4, "character": 10}}
    assert "shut down" in _error(wire.request(21, "textDocument/hover", hover), -32600, 21)
    _error(wire.request(22, "shutdown"), -32600, 22)
    _error(wire.request(23, "kllint/nothing", {}), -32600, 23)
    wire.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {  # a notification: no answer
        "textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": "x = 1\n"}]}})
    wire.send({"jsonrpc": "2.0", "method": "exit"})
    assert wire.exit_status() == 0
    assert not [m for m in wire.seen if m.get("method") == "textDocument/publishDiagnostics"
                and m["params"].get("version") == 2]


def test_exit_without_shutdown_ends_with_1(wire):
    wire.send({"jsonrpc": "2.0", "method": "exit"})
    assert wire.exit_status() == 1


def test_a_deeply_nested_buffer_is_published_with_its_findings_or_a_kl900(wire, tmp_path):
    deep = K3_BUFFER.replace("    loss = kl.mean()\n", "    x = " + "-" * 500 + "1\n    loss = kl.mean()\n")
    parens = K3_BUFFER.replace("    loss = kl.mean()\n", "    x = " + "(" * 1000 + "1" + ")" * 1000 + "\n"
                               "    loss = kl.mean()\n")
    for name, text in (("minus.py", deep), ("parens.py", parens)):
        found = wire.published(wire.open(tmp_path / name, text))
        assert found, f"{name}: published nothing, as if the buffer were clean"
        assert {d["code"] for d in found} & {"KL102", "KL900"}, found
    wire.still_serving()


@pytest.mark.parametrize("raised", ["RuntimeError('boom')", "RecursionError()", "AnalysisStopped(1.0)",
                                    "MemoryError()"])
def test_whatever_the_analysis_raises_the_buffer_gets_a_kl900_saying_it_was_not_checked(tmp_path, raised):
    preamble = ("import kllint.pipeline.run as run_module\nfrom kllint.guard import AnalysisStopped\n"
                f"def broken(*args, **kwargs):\n    raise {raised}\nrun_module.run = broken\n")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n", encoding="utf-8")
    server = Wire(tmp_path, preamble)
    try:
        server.initialize(tmp_path)
        uri = server.open(tmp_path / "train.py", K3_BUFFER)
        [diagnostic] = server.published(uri)
        assert diagnostic["code"] == "KL900" and diagnostic["range"]["start"] == {"line": 0, "character": 0}
        assert diagnostic["message"].startswith("kllint could not check this file (internal error: ")
        assert raised.split("(")[0] in diagnostic["message"]
        server.still_serving()
    finally:
        server.close()


def test_the_server_never_dies_on_a_stream_of_garbage(wire, tmp_path):
    """Everything above in one session, then a real check still works."""
    garbage: list[Any] = [b"{", b"\x00\x01", None, True, "text", [], {}, {"jsonrpc": "2.0", "id": None, "method": "x"},
                          {"jsonrpc": "2.0", "id": 1.5, "method": "textDocument/hover"},
                          {"jsonrpc": "2.0", "id": 30, "method": "textDocument/hover", "params": None},
                          {"jsonrpc": "2.0", "id": 31, "method": "textDocument/hover", "params": [1, 2]},
                          {"jsonrpc": "2.0", "id": 32, "result": 5}, {"jsonrpc": "2.0", "id": 33, "error": 5}]
    for message in garbage:
        wire.send(message if isinstance(message, bytes) else json.dumps(message).encode())
    for msg_id in (30, 31):
        assert wire.answer(msg_id)["error"]["code"] in (-32602, -32600, -32603)
    uri = wire.open(tmp_path / "train.py", K3_BUFFER)
    assert {d["code"] for d in wire.published(uri)} >= {"KL102"}
    wire.still_serving()
    assert wire.proc.poll() is None
