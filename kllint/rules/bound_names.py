"""Names a rewrite can reuse: a plain name an earlier statement binds to the expression the
rewrite would otherwise name afresh, when nothing since has changed it or what it reads."""
from __future__ import annotations

import ast

from kllint.analysis.module import ModuleInfo
from kllint.rules.rewrite import Statement


def _block_of(root: ast.AST, node: ast.stmt) -> list[ast.stmt] | None:
    """The list of statements `node` is directly in."""
    for parent in ast.walk(root):
        for _, value in ast.iter_fields(parent):
            if isinstance(value, list) and any(item is node for item in value):
                return value
    return None


def _root_name(node: ast.expr) -> ast.expr:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node


def _touches(node: ast.AST, names: set[str]) -> bool:
    """Whether `node` may change one of `names`: binds it, stores into it or into a field or
    item of it, or calls an in-place method of it (`x.add_(1)`)."""
    for inner in ast.walk(node):
        if isinstance(inner, (ast.Name, ast.Attribute, ast.Subscript)) and not isinstance(inner.ctx, ast.Load):
            root = _root_name(inner)
            if isinstance(root, ast.Name) and root.id in names:
                return True
        elif isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and inner.name in names:
            return True
        elif isinstance(inner, (ast.Global, ast.Nonlocal)) and set(inner.names) & names:
            return True
        elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) \
                and inner.func.attr.endswith("_") and not inner.func.attr.startswith("_"):
            root = _root_name(inner.func.value)
            if isinstance(root, ast.Name) and root.id in names:
                return True
    return False


def bound_before(module: ModuleInfo, statement: Statement, expr: str) -> str | None:
    """A plain name an earlier statement of the same block binds to `expr` (compared as
    parsed), when no statement between there and `statement` changes that name or a name
    `expr` reads; the latest such name."""
    try:
        wanted = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    block = _block_of(statement.function or module.outline, statement.node)
    if block is None:
        return None
    reads = {n.id for n in ast.walk(wanted) if isinstance(n, ast.Name)}
    called = {id(n.func) for n in ast.walk(wanted) if isinstance(n, ast.Call)}
    # a field or item read (`self.anchor`, `batch["ref"]`) may be changed by any call between
    fields = any(isinstance(n, (ast.Attribute, ast.Subscript)) and id(n) not in called for n in ast.walk(wanted))
    key = ast.dump(wanted)
    position = next(i for i, s in enumerate(block) if s is statement.node)
    between: list[ast.stmt] = []
    for earlier in reversed(block[:position]):
        if isinstance(earlier, ast.Assign) and len(earlier.targets) == 1 \
                and isinstance(earlier.targets[0], ast.Name) and ast.dump(earlier.value) == key:
            name = earlier.targets[0].id
            if name not in reads and not any(_touches(node, reads | {name}) for node in between) \
                    and not (fields and any(isinstance(n, ast.Call) for node in between for n in ast.walk(node))):
                return name
        between.append(earlier)
    return None
