"""What each module of the project binds by its imports, defines, and uses in each function.

A module is read with `ast` once per text. Its units are its top-level functions, the methods of
its top-level classes and its module-level code (`<module>`, the `if __name__ == "__main__":`
block among it); for each unit, the dotted names it reads (`f`, `mod.f`, `self.loss_fn`), the
attributes of `self` it stores and what it stores there.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from kllint.analysis.outline import FUNCTION_DEFS, dotted, identifiers, top_level_statements

MODULE_UNIT = "<module>"
_LEAVES = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


@dataclass
class Unit:
    """A function, a method (`cls` its class) or the module-level code of a module."""

    cls: str
    name: str
    line: int
    reads: frozenset[str] = frozenset()  # dotted names read (`f`, `mod.f`, `self.x.y`)
    self_reads: frozenset[str] = frozenset()  # attributes of `self` read (`loss_fn` of `self.loss_fn(...)`)
    self_stores: dict[str, frozenset[str]] = field(default_factory=dict)  # attr -> dotted names its value reads
    imports: tuple = ()  # the import statements inside it
    identifiers: frozenset[str] = frozenset()  # as `kllint.analysis.outline.identifiers` reads them

    @property
    def key(self) -> tuple[str, str]:
        return self.cls, self.name


@dataclass
class ModuleOutline:
    """One module: `bindings` maps a name bound by an import to (module, attribute or None);
    `star` lists the modules of `from m import *`; `definitions` its top-level functions and
    classes; `classes` the methods of each class and its bases as written."""

    path: Path
    package: str  # the package its relative imports start from
    bindings: dict[str, tuple[str, str | None]]
    star: list[str]
    definitions: frozenset[str]
    classes: dict[str, tuple[frozenset[str], tuple[str, ...]]]
    units: list[Unit]


def outline_module(path: Path, text: str, dotted_name: str) -> ModuleOutline | None:
    """The outline of the module at `path` named `dotted_name`; None when Python rejects it."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    package = dotted_name if path.name == "__init__.py" else dotted_name.rpartition(".")[0]
    bindings: dict[str, tuple[str, str | None]] = {}
    star: list[str] = []
    definitions: set[str] = set()
    classes: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}
    units: list[Unit] = []
    module_code: list[ast.stmt] = []
    for statement, _ in top_level_statements(tree.body):
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            star.extend(_bind(statement, package, bindings, first=True))
        elif isinstance(statement, FUNCTION_DEFS):
            definitions.add(statement.name)
            units.append(_unit("", statement))
        elif isinstance(statement, ast.ClassDef):
            definitions.add(statement.name)
            methods = [item for item in statement.body if isinstance(item, FUNCTION_DEFS)]
            bases = tuple(name for name in (dotted(base) for base in statement.bases) if name)
            classes[statement.name] = (frozenset(m.name for m in methods), bases)
            units.extend(_unit(statement.name, method) for method in methods)
        else:
            module_code.append(statement)
    # imports inside functions bind names too (`from .utils import f` in a method)
    for unit in units:
        for node in unit.imports:
            _bind(node, package, bindings, first=False)
    if module_code:
        units.append(Unit("", MODULE_UNIT, module_code[0].lineno, *_uses(module_code),
                          frozenset().union(*(identifiers(statement) for statement in module_code))))
    return ModuleOutline(path, package, bindings, star, frozenset(definitions), classes, units)


def _bind(node: ast.Import | ast.ImportFrom, package: str, bindings: dict[str, tuple[str, str | None]],
          first: bool) -> list[str]:
    """Record the names an import binds (replacing earlier bindings when `first`, else only
    where none is known); the modules it star-imports."""
    found: list[tuple[str, tuple[str, str | None]]] = []
    stars: list[str] = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            head = alias.name.split(".")[0]
            found.append((alias.asname, (alias.name, None)) if alias.asname else (head, (head, None)))
    else:
        base = _absolute(node, package)
        if base is None:
            return stars
        for alias in node.names:
            if alias.name == "*":
                stars.append(base)
            else:
                found.append((alias.asname or alias.name, (base, alias.name)))
    for name, target in found:
        if first:
            bindings[name] = target
        else:
            bindings.setdefault(name, target)
    return stars


def _absolute(node: ast.ImportFrom, package: str) -> str | None:
    """The module `from <dots><module> import ...` reads (None above the top-level package)."""
    if not node.level:
        return node.module or ""
    parts = package.split(".") if package else []
    if node.level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _unit(cls: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Unit:
    return Unit(cls, node.name, node.lineno, *_uses(node.body + node.decorator_list), identifiers(node))


def _uses(statements: list[ast.AST]) -> tuple:
    """The dotted names the statements read, the attributes of `self` they read, what they store
    on `self` (attribute -> dotted names the stored value reads) and their import statements."""
    reads: set[str] = set()
    self_reads: set[str] = set()
    stores: dict[str, set[str]] = {}
    imports: list[ast.stmt] = []
    stack: list[ast.AST] = list(statements)
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is ast.Constant or isinstance(node, _LEAVES):
            continue
        if kind is ast.Import or kind is ast.ImportFrom:
            imports.append(node)
            continue
        if kind is ast.Attribute or kind is ast.Name:
            name = dotted(node)
            if name is not None:
                reads.add(name)
                parts = name.split(".")
                if parts[0] == "self" and len(parts) > 1 and isinstance(node.ctx, ast.Load):
                    self_reads.add(parts[1])
                continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                name = dotted(target)
                if name is not None and name.startswith("self.") and name.count(".") == 1:
                    stores.setdefault(name[5:], set()).update(_names_in(node.value))
        stack.extend(ast.iter_child_nodes(node))
    return frozenset(reads), frozenset(self_reads), {k: frozenset(v) for k, v in stores.items()}, tuple(imports)


def _names_in(node: ast.AST) -> set[str]:
    found: set[str] = set()
    for item in ast.walk(node):
        if isinstance(item, (ast.Attribute, ast.Name)):
            name = dotted(item)
            if name is not None:
                found.add(name)
    return found
