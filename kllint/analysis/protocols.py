"""What the call handlers (`kllint.analysis.calls`) need from the interpreter that runs them and
from its frames, as protocols: the interpreter hands itself to the handlers, which never import
it (`kllint.analysis.interpreter.Interpreter` and `Frame` satisfy these)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import libcst as cst

from kllint.analysis.values import Anchor, ClassRef, Condition, FunctionRef, Model, Tensor, Value

if TYPE_CHECKING:
    from kllint.analysis.algebra import Algebra
    from kllint.analysis.facts import SinkKind
    from kllint.analysis.fields import FieldStore
    from kllint.analysis.module import ModuleInfo


class FrameLike(Protocol):
    """One function activation, as the call handlers read it."""

    module: "ModuleInfo"
    no_grad: bool
    adapters_off: bool
    conditions: tuple[Condition, ...]
    call_stack: tuple[Anchor, ...]
    root: cst.CSTNode | None

    def child(self, **changes: Any) -> "FrameLike":
        """A copy of the frame with `changes`."""
        ...


class InterpreterLike(Protocol):
    """The interpreter, as the call handlers use it: its state (the checked module, the term
    algebra, the field store, the project's vocabulary) and the operations they call back."""

    entry: "ModuleInfo"
    algebra: "Algebra"
    fields: "FieldStore"
    vocab: Any

    def anchor(self, node: cst.CSTNode, frame: FrameLike) -> Anchor:
        """Where `node` is, in the frame's module and conditions."""
        ...

    def emit(self, frame: FrameLike, fact: Any) -> None:
        """Record an observation (unless the frame only computes a value)."""
        ...

    def call(self, func: Value, args: list[Value], kwargs: dict[str, Value], node: cst.Call,
             frame: FrameLike) -> Value:
        """The value of calling `func`."""
        ...

    def call_function(self, ref: FunctionRef, args: list[Value], kwargs: dict[str, Value], node: cst.CSTNode,
                      frame: FrameLike, defaults_as_literals: bool = True) -> Value:
        """Follow a project function with these arguments."""
        ...

    def find_method(self, cls: ClassRef, name: str, seen: int = 0) -> FunctionRef | None:
        """A method of a class, through its bases."""
        ...

    def attribute(self, base: Value, attr: str, node: cst.CSTNode, frame: FrameLike) -> Value:
        """`base.attr` (also `getattr(base, "attr")`)."""
        ...

    def resolve_import(self, qualname: str, hops: int = 0) -> Value:
        """What an imported dotted name refers to (a project module, class or function, or a library name)."""
        ...

    def arith(self, op: str, left: Value, right: Value, node: cst.CSTNode, frame: FrameLike) -> Value:
        """`left op right`."""
        ...

    def as_tensor(self, value: Value, name: str = "t") -> Tensor:
        """A value as a tensor (a network as its logits)."""
        ...

    def detach_value(self, value: Value) -> Value:
        """The value without gradient."""
        ...

    def loss_sink(self, value: Value, node: cst.CSTNode, frame: FrameLike, kind: "SinkKind", name: str = "",
                  entry_key: str = "") -> None:
        """Record that `value` is differentiated at `node`."""
        ...

    def metric_sink(self, value: Value, node: cst.CSTNode, frame: FrameLike, how: str, depth: int = 0) -> None:
        """Record that `value` is read out as a number or logged at `node` (`depth`: how deep
        in containers the recursion is; callers leave it)."""
        ...

    def value_from_name(self, name: str, anchor: Anchor | None, frame: FrameLike, parameter: bool = False,
                        detached_source: bool = False) -> Value:
        """The value a name stands for when nothing else says (roles from names)."""
        ...

    def forwarded_network(self, model: Model, node: cst.CSTNode, frame: FrameLike) -> Model:
        """The network a forward at `node` runs, noted; the reference when dataflow made it one."""
        ...

    def note_role(self, anchor: Anchor | None, frame: FrameLike, value: Value | str, evidence: str) -> None:
        """Record the evidence for the role of a value formed at `anchor` (`RoleEvidence`)."""
        ...

    def depth_matters(self, frame: FrameLike) -> int:
        """The frame's depth, for a decision that depends on it."""
        ...

    def tensor_item(self, base: Tensor, key: Value, node: cst.CSTNode, frame: FrameLike) -> Value:
        """`base[key]` or `base.get(key)` of a tensor-like value."""
        ...

    def _element(self, iterable: Value, node: cst.BaseExpression, frame: FrameLike) -> Value:
        """An element of an iterable (what a `for` loop binds)."""
        ...
