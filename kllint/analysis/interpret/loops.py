"""What a loop does to the values it carries, read from its syntax: whether it walks the
positions of a sequence (a returns or GAE loop: its running value credits each token with the
tokens after it) or repeats over items of the same shape (teachers, micro-batches, samples:
an accumulation there is a sum of tensors of one shape, not a reduction over tokens)."""
from __future__ import annotations

import libcst as cst

from kllint.analysis.interpret.walk import assigned_names, bound_names, cached_per_node, used_names, walk_nodes
from kllint.analysis.module import dotted_name

_FLIPS = ("reversed", "flip", "fliplr", "flipud")


def walks_positions(node: cst.For | cst.While) -> bool:
    """Whether the loop steps through the positions of a sequence: it runs backwards (`reversed`,
    a negative `range` step, `[::-1]`, a `flip`), or its cursor (the loop target; for a
    `while`, a name the body assigns) picks a position on an inner axis of a tensor (`x[:, t]`,
    `x[..., t + 1]`); a `while` whose counter indexes anything (`rewards[t]`) too. A loop over a
    list of teachers or micro-batches does neither (`logps[name]` is a key, not a position)."""
    return cached_per_node("walks_positions", node, lambda: _walks_positions(node))


def _walks_positions(node: cst.For | cst.While) -> bool:
    body = list(node.body.body)
    if isinstance(node, cst.For):
        if runs_backwards(node.iter):
            return True
        cursors = set(bound_names(node.target))
    else:
        cursors = set(assigned_names(body))
    if not cursors:
        return False
    for statement in body:
        for item in walk_nodes(statement, skip=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            if not isinstance(item, cst.Subscript):
                continue
            indexed = [element for element in item.slice if isinstance(element.slice, cst.Index)
                       and cursors & set(used_names(element.slice.value))]
            if indexed and (len(item.slice) > 1 or isinstance(node, cst.While)):
                return True
    return False


def runs_backwards(iterable: cst.BaseExpression) -> bool:
    """`reversed(...)`, `range(T - 1, -1, -1)`, `x[::-1]`, `x.flip(1)` / `torch.flip(x, ...)`."""
    for item in walk_nodes(iterable, skip=(cst.Lambda,)):
        if isinstance(item, cst.Call):
            called = (dotted_name(item.func) or "").rsplit(".", 1)[-1]
            if called in _FLIPS:
                return True
            if called == "range" and len(item.args) == 3 and _negative(item.args[2].value):
                return True
        elif isinstance(item, cst.Subscript):
            for element in item.slice:
                if isinstance(element.slice, cst.Slice) and element.slice.step is not None \
                        and _negative(element.slice.step):
                    return True
    return False


def _negative(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus)


def accumulating(body: list[cst.CSTNode], name: str):
    """The statements of `body` (not in nested definitions) that store into `name` a value
    computed from it: `name += x`, `name = name + x`."""
    for statement in body:
        for item in walk_nodes(statement, skip=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            if isinstance(item, cst.AugAssign) and isinstance(item.target, cst.Name) and item.target.value == name:
                yield item
            elif isinstance(item, cst.Assign) and any(
                    isinstance(t.target, cst.Name) and t.target.value == name for t in item.targets) \
                    and name in used_names(item.value):
                yield item
