"""The JSON-RPC side of `kllint server`: every request gets an answer, whatever the client sends.

pygls 2 (`pygls.protocol.JsonRPCProtocol`) leaves some messages unanswered, and a client waiting
for the answer then waits forever:

- a request whose params do not fit the method's type (`{"textDocument": 5}` for a hover): the
  converter's error is raised inside `json.loads`, before the request's id is known, and only
  logged. Here it is answered with -32602 Invalid params, naming the field (-32600 Invalid
  request when the id itself is not an integer or a string);
- a request after `shutdown`: dropped. Here it is answered with -32600 Invalid request, as the
  LSP specification asks; notifications are still dropped, and `exit` still ends the server;
- a body that is not JSON (or not UTF-8, or nested past the parser's limit): logged. Here it is
  answered with -32700 Parse error and id null (JSON-RPC 2.0, section 5.1);
- a body that is JSON but not a request, notification or response (an array, a number, an
  object without `jsonrpc: "2.0"`): an AttributeError, logged. Here a -32600 with the message's
  id when it has a usable one, else null.

The server keeps reading after each of them. Only pygls's hooks are used: `structure_message`
and `handle_message` of the protocol, and the server's `report_server_error`, which pygls's read
loop calls with the exception `json.loads` raised.
"""
from __future__ import annotations

import json
import logging
import re
from typing import Any

import attrs
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest, JsonRpcParseError
from pygls.protocol import LanguageServerProtocol

log = logging.getLogger("kllint.server")


@attrs.define
class Refused:
    """A message that cannot be handled, and the error to answer it with (`answer` False: a
    notification, never answered; `id` None: answered with a null id)."""

    id: int | str | None
    error: JsonRpcException
    answer: bool = True


def _id_of(data: Any) -> int | str | None:
    """The message's id if it is one JSON-RPC allows (an integer or a string), else None."""
    value = data.get("id") if isinstance(data, dict) else getattr(data, "id", None)
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


def _answerable(data: Any) -> bool:
    """Whether a message that is not valid is answered: yes, unless it looks like a
    notification (a method, no id) or a response of the client (an id, a result or an error)."""
    has = (lambda key: key in data) if isinstance(data, dict) else (lambda key: hasattr(data, key))
    if not isinstance(data, dict) and not attrs.has(type(data)):
        return True  # an array, a number, a string, null
    if has("method"):
        return has("id")
    return not (has("id") and (has("result") or has("error")))


def _camel(path: str) -> str:
    """`$.params.text_document.uri` as the client wrote it: `$.params.textDocument.uri`."""
    return re.sub(r"_([a-z])", lambda match: match.group(1).upper(), path)


def _why(exc: BaseException) -> str:
    """The fields of a request that did not fit its type, as `expected str @ $.params.x` lines."""
    import cattrs

    cause = exc.__cause__
    if isinstance(cause, cattrs.ClassValidationError):
        try:
            return "; ".join(_camel(line) for line in cattrs.transform_error(cause, path="$"))
        except Exception:  # noqa: BLE001 - the message is a courtesy
            pass
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)


def error_response(msg_id: int | str | None, error: JsonRpcException) -> dict[str, Any]:
    """A JSON-RPC error response; `id` is written even when null (lsprotocol's type leaves a
    null id out)."""
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data is not None:
        body["data"] = error.data
    return {"jsonrpc": "2.0", "id": msg_id, "error": body}


NOT_JSONRPC = 'Invalid request: not a JSON-RPC 2.0 request (an object with "jsonrpc": "2.0" and a string "method")'


class KllintProtocol(LanguageServerProtocol):
    """pygls's language server protocol that answers every request (see the module's text)."""

    def structure_message(self, data: dict[str, Any]):
        """The typed message of the object `data` (`json.loads` gives every object, the nested
        ones first): unchanged without `jsonrpc` (params; or a message `handle_message` refuses),
        a `Refused` one when a message does not fit its method's type."""
        if "jsonrpc" not in data:
            return data
        if data["jsonrpc"] != self.VERSION or "method" in data and not isinstance(data["method"], str):
            if "method" in data or _answerable(data):  # else a response of the client: pygls ignores it
                return Refused(_id_of(data), JsonRpcInvalidRequest(NOT_JSONRPC), _answerable(data))
        if "method" in data and "id" in data and _id_of(data) is None:  # (null, a float, an object, ...)
            return Refused(None, JsonRpcInvalidRequest(
                f"Invalid request: the id must be an integer or a string, not {json.dumps(data['id'])[:40]}"))
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "method" not in data:
                if not _answerable(data):  # a response of the client that does not fit: pygls logs it
                    raise
                return Refused(_id_of(data), JsonRpcInvalidRequest(NOT_JSONRPC))
            error = JsonRpcInvalidParams(f"Invalid params for {data['method'][:100]}: {_why(exc)}")
            return Refused(_id_of(data), error, answer="id" in data)

    def handle_message(self, message: Any) -> None:
        """Handle one message; answer what pygls would leave unanswered (see the module's text)."""
        if isinstance(message, Refused):
            if message.answer:
                self.send_error(message.id, message.error)
            else:  # nobody waits for an answer: say it where the editor shows the server's log
                self.notify(types.WINDOW_LOG_MESSAGE, types.LogMessageParams(
                    types.MessageType.Warning, f"kllint: notification ignored: {message.error.message}"))
            return
        if not attrs.has(type(message)) or getattr(message, "jsonrpc", None) != self.VERSION:
            if _answerable(message):
                self.send_error(_id_of(message), JsonRpcInvalidRequest(NOT_JSONRPC))
            else:
                log.warning("ignored a notification or response that is not JSON-RPC 2.0")
            return
        if self._shutdown and getattr(message, "method", types.EXIT) != types.EXIT:
            if hasattr(message, "id") and hasattr(message, "method"):  # a request: InvalidRequest (LSP)
                self.send_error(message.id, JsonRpcInvalidRequest(
                    f"Invalid request: the server is shut down ({message.method}); only `exit` is accepted"))
            return
        super().handle_message(message)

    @property
    def shut_down(self) -> bool:
        """Whether the client sent `shutdown` (then only `exit` is accepted)."""
        return self._shutdown

    def send_error(self, msg_id: int | str | None, error: JsonRpcException) -> None:
        """Answer request `msg_id` (None: null) with `error`."""
        self._send_data(error_response(msg_id, error))

    def refuse_unparsable(self, error: BaseException) -> bool:
        """Answer a body `json.loads` could not read with -32700 Parse error (id null); whether
        `error` was such a failure (a JSON syntax error, bytes that are not UTF-8, nesting too deep)."""
        if isinstance(error, (json.JSONDecodeError, UnicodeDecodeError, RecursionError)):
            reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
            self.send_error(None, JsonRpcParseError(f"Parse error: {reason}"[:300]))
            return True
        return False
