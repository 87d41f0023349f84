"""Callable values the interpreter builds and the call handlers (`kllint.analysis.calls`) consume:
a method waiting for its call, an attribute of something unknown, an `nn.KLDivLoss` instance,
and the string methods evaluated on known option strings."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libcst as cst

from kllint.analysis.values import Literal, Mapping, Sequence, Unknown, Value

# methods of a known option string the analysis evaluates (`"k3+".endswith("+")`)
STRING_METHODS = frozenset({"endswith", "startswith", "lower", "upper", "strip", "rstrip", "lstrip", "removesuffix",
                            "removeprefix", "replace", "split", "rsplit", "partition", "rpartition"})
# views of a dict the analysis built (`losses.values()`)
MAPPING_VIEWS = frozenset({"values", "items", "keys"})


@dataclass(frozen=True)
class KLDivModule:
    """An `nn.KLDivLoss(...)` instance."""

    reduction: str | None
    explicit: bool
    log_target: bool


@dataclass(frozen=True)
class BoundMethod:
    """`tensor.method` or `model.method`, waiting for its call."""

    obj: Any
    name: str


@dataclass(frozen=True)
class UnresolvedAttribute:
    """An attribute of something unknown (`trainer.args`), remembered by name."""

    owner: str
    attr: str

    @property
    def name(self) -> str:
        """The attribute's name (what an unknown call of it is called)."""
        return self.attr


def string_method(text: str, name: str, args: list[Value]) -> Value:
    """The result of `text.name(*args)` when every argument is a literal string (or a count:
    `path.rsplit(".", 1)`), else Unknown; the parts of a split are a tuple of strings."""
    if not all(isinstance(a, Literal) and isinstance(a.value, (str, int)) and not isinstance(a.value, bool)
               for a in args):
        return Unknown(name)
    try:
        result = getattr(text, name)(*(a.value for a in args))
    except (TypeError, ValueError):
        return Unknown(name)
    if isinstance(result, (list, tuple)):
        return Sequence(tuple(Literal(part) for part in result))
    return Literal(result)


def mapping_view(mapping: Mapping, name: str) -> Value:
    """`d.values()`, `d.items()` or `d.keys()` of a dict with literal string keys, as a tuple."""
    if name == "values":
        return Sequence(tuple(value for _, value in mapping.items))
    if name == "keys":
        return Sequence(tuple(Literal(key) for key, _ in mapping.items))
    return Sequence(tuple(Sequence((Literal(key), value)) for key, value in mapping.items))


def string_item(text: str, elements, key: Value) -> Value:
    """`text[i]` or `text[a:b]` with literal bounds; Unknown otherwise."""
    if len(elements) != 1:
        return Unknown()
    part = elements[0].slice
    if isinstance(part, cst.Index):
        if isinstance(key, Literal) and isinstance(key.value, int) and -len(text) <= key.value < len(text):
            return Literal(text[key.value])
        return Unknown()
    bounds = []
    for bound in (part.lower, part.upper, part.step):
        if bound is None:
            bounds.append(None)
            continue
        number = int_literal(bound)
        if number is None:
            return Unknown()
        bounds.append(number)
    return Literal(text[slice(*bounds)])


def int_literal(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(node.expression, cst.Integer):
        return -int(node.expression.value)
    return None
