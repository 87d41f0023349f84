"""Walking libcst trees: the names an expression reads and the names a block assigns (memoised
per node), over the child fields that are not layout."""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, TypeVar

import libcst as cst

_NAME_CACHE: dict[tuple[str, int], tuple[Any, Any]] = {}
T = TypeVar("T")


def cached_per_node(kind: str, node: Any, compute: Callable[[], T]) -> T:
    """Memoised per node; the entry keeps the node alive so that its id is never reused."""
    key = (kind, id(node))
    found = _NAME_CACHE.get(key)
    if found is None or found[0] is not node:
        if len(_NAME_CACHE) > 20_000:  # its entries keep parsed trees alive
            _NAME_CACHE.clear()
        found = _NAME_CACHE[key] = (node, compute())
    return found[1]


def assigned_names(statements: list[cst.CSTNode]) -> list[str]:
    """The names the statements assign (not inside nested definitions), in order, memoised."""
    return cached_per_node("assigned", statements[0] if statements else None, lambda: _collect_assigned(statements))


def _collect_assigned(statements: list[cst.CSTNode]) -> list[str]:
    names: list[str] = []
    for statement in statements:
        for node in walk_nodes(statement, skip=(cst.FunctionDef,)):
            if isinstance(node, cst.AssignTarget):
                names.extend(bound_names(node.target))
            elif isinstance(node, cst.AugAssign):
                names.extend(bound_names(node.target))
    return list(dict.fromkeys(names))


def used_names(node: cst.CSTNode) -> list[str]:
    """The names the expression reads (`_collect_used`), in order, memoised."""
    return cached_per_node("used", node, lambda: _collect_used(node))


def _collect_used(node: cst.CSTNode) -> list[str]:
    """Names read in an expression: `a` of `a.b.c`, not `b` or `c`; lambdas are not entered."""
    names: list[str] = []
    for item in walk_nodes(node, skip=(cst.Lambda,), attribute_values=True):
        if isinstance(item, cst.Name):
            names.append(item.value)
    return list(dict.fromkeys(names))


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
_LAYOUT = ("whitespace", "lpar", "rpar", "comma", "semicolon", "leading_lines", "lines_after", "header", "footer",
           "newline", "lbracket", "rbracket", "lbrace", "rbrace", "colon", "equal", "star", "dot", "operator")


def values_used(node: cst.CSTNode) -> list[str]:
    """The names whose own values an expression uses (memoised): `mode` of `mode == "k3"`,
    `mode[:-1]` or `mode.endswith("+")`, but not `cfg` of `cfg.kl_type`: reading an attribute
    of an object is a read of something else (a configuration field read here), while calling
    a method of the value (a string's `endswith`) uses the value itself."""
    return cached_per_node("values", node, lambda: _collect_values(node))


def _collect_values(node: cst.CSTNode) -> list[str]:
    names: list[str] = []
    stack: list[Any] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, cst.Name):
            names.append(item.value)
        elif isinstance(item, cst.Lambda):
            continue
        elif isinstance(item, cst.Attribute):
            continue  # an attribute read: `cfg.mode` is not `cfg`'s value
        elif isinstance(item, cst.Call):
            func = item.func
            stack.append(func.value if isinstance(func, cst.Attribute) else func)  # `mode.endswith(...)`
            stack.extend(arg.value for arg in item.args)
        else:
            for name in _child_fields(type(item)):
                child = getattr(item, name)
                if isinstance(child, cst.CSTNode):
                    stack.append(child)
                elif isinstance(child, (list, tuple)):
                    stack.extend(c for c in child if isinstance(c, cst.CSTNode))
    return list(dict.fromkeys(names))


def _child_fields(kind: type) -> tuple[str, ...]:
    found = _CHILD_FIELDS.get(kind)
    if found is None:
        found = _CHILD_FIELDS[kind] = tuple(f.name for f in fields(kind) if not f.name.startswith(_LAYOUT))
    return found


def walk_nodes(root: cst.CSTNode, skip: tuple[type, ...] = (), attribute_values: bool = False):
    """`root` and the nodes below it (layout-only fields skipped; nodes of the `skip` types are
    yielded but not entered). With `attribute_values`, an Attribute is entered on its `value` side only."""
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, skip):
            continue
        if attribute_values and isinstance(node, cst.Attribute):
            stack.append(node.value)
            continue
        children: list[cst.CSTNode] = []
        for name in _child_fields(type(node)):
            child = getattr(node, name)
            if isinstance(child, cst.CSTNode):
                children.append(child)
            elif isinstance(child, (list, tuple)):
                children.extend(c for c in child if isinstance(c, cst.CSTNode))
        stack.extend(reversed(children))  # pre-order, in source order


def bound_names(target: cst.BaseExpression) -> list[str]:
    """The names a binding target binds: `a` and `b` of `a, *b = ...`, none of `a[i] = ...`."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in bound_names(e.value)]
    if isinstance(target, cst.StarredElement):
        return bound_names(target.value)
    return []
