"""The call handlers (`kllint.analysis.calls`) use the interpreter through the protocols of
`kllint.analysis.protocols` only: the interpreter and its frames must provide every member the
protocols declare, with the same parameters, or a handler would fail at run time."""
from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path

from kllint.analysis.index import ProjectIndex
from kllint.analysis.interpreter import Frame, Interpreter
from kllint.analysis.protocols import FrameLike, InterpreterLike


def _protocol_methods(protocol: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(protocol).items()
            if callable(member) and not name.startswith("__")}


def _protocol_attributes(protocol: type) -> set[str]:
    return set(getattr(protocol, "__annotations__", {}))


def _parameters(signature: inspect.Signature) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in signature.parameters.values()]


def test_the_interpreter_has_every_method_the_call_handlers_use_with_the_same_parameters() -> None:
    for name, expected in _protocol_methods(InterpreterLike).items():
        actual = inspect.signature(getattr(Interpreter, name))
        assert _parameters(actual) == _parameters(expected), name


def test_the_interpreter_has_every_attribute_the_call_handlers_read() -> None:
    index = ProjectIndex()
    module = index.module_for_file("import torch\n", Path("train.py"), "train.py")
    interpreter = Interpreter(module, index)
    missing = [name for name in _protocol_attributes(InterpreterLike) if not hasattr(interpreter, name)]
    assert not missing


def test_a_frame_has_every_field_and_method_the_call_handlers_use() -> None:
    frame_fields = {f.name for f in fields(Frame)}
    assert _protocol_attributes(FrameLike) <= frame_fields
    for name, expected in _protocol_methods(FrameLike).items():
        assert _parameters(inspect.signature(getattr(Frame, name))) == _parameters(expected), name
