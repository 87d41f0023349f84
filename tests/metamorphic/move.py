"""Every top-level function and class of a module moved into its own module of a package.

`foo.py` (module `pkg.foo`) becomes the package `foo/`:

- `foo/m_<name>.py` for each top-level `def` / `class`: the imports it uses (reduced to the
  names it uses), `from pkg.foo.m_<other> import <other>` for the other definitions it uses,
  `from pkg.foo.common import ...` for the module-level names it uses, then its source, copied
  line for line (comments, `# expect:` and `# noqa` included).
- `foo/common.py`: the module's imports and the module-level statements that use no definition
  (constants, `criterion = nn.KLDivLoss(...)`), in their order.
- `foo/__init__.py`: the docstring, the imports, the names of `common` and of every
  `m_<name>` (so `from pkg.foo import name` still works), and the statements that use a
  definition (`grad_fn = jax.grad(loss)`, `if __name__ == "__main__":` blocks) where they were.

A package's own `__init__.py` keeps its folder: its definitions move into new modules beside it.
Every new file has a line map: its line `i` (1-based) came from the original line
`origin[i - 1]`, or was generated (`None`). A module that cannot be split faithfully (two
top-level statements on a line, a name bound twice at module level, `global` in a definition,
definitions that import each other in a cycle) raises `MoveError`: the caller keeps it as it is.
"""
from __future__ import annotations

import ast
import keyword
import symtable
from dataclasses import dataclass, field

COMMON = "common"


class MoveError(Exception):
    """The module cannot be split without changing what its names mean."""


@dataclass
class NewFile:
    text: list[str] = field(default_factory=list)
    origin: list[int | None] = field(default_factory=list)

    def generated(self, *lines: str) -> None:
        for line in lines:
            self.text.append(line)
            self.origin.append(None)

    def copied(self, source: list[str], first: int, last: int) -> None:
        for number in range(first, last + 1):
            self.text.append(source[number - 1])
            self.origin.append(number)

    @property
    def code(self) -> str:
        return "\n".join(self.text) + "\n"


def module_name_for(name: str) -> str:
    """The module a definition `name` moves to."""
    return f"m_{name}"


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decorators])


def _import_bindings(node: ast.Import | ast.ImportFrom) -> list[tuple[str, ast.alias]]:
    if isinstance(node, ast.Import):
        return [(alias.asname or alias.name.split(".")[0], alias) for alias in node.names]
    return [(alias.asname or alias.name, alias) for alias in node.names if alias.name != "*"]


def _is_star(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names)


class _Bound(ast.NodeVisitor):
    """Names a module-level statement binds in the module (not inside functions or classes)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.names.add(node.id)

    def _definition(self, node) -> None:
        self.names.add(node.name)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _definition

    def visit_Import(self, node: ast.Import) -> None:
        self.names.update(name for name, _ in _import_bindings(node))

    visit_ImportFrom = visit_Import

    def _scope(self, node) -> None:  # comprehension and lambda variables are their own
        return

    visit_Lambda = visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _scope


def _bound(node: ast.stmt) -> set[str]:
    visitor = _Bound()
    visitor.visit(node)
    return visitor.names


def _loaded(*nodes: ast.AST | None) -> set[str]:
    return {n.id for node in nodes if node is not None for n in ast.walk(node) if isinstance(n, ast.Name)}


def _global_names(table: symtable.SymbolTable) -> set[str]:
    names: set[str] = set()
    for symbol in table.get_symbols():
        if symbol.is_declared_global() and symbol.is_assigned():
            raise MoveError(f"`global {symbol.get_name()}` in `{table.get_name()}`")
        if symbol.is_global():
            names.add(symbol.get_name())
    for child in table.get_children():
        names |= _global_names(child)
    return names


def _free_names(node: ast.stmt, table: symtable.SymbolTable | None) -> set[str]:
    """Module-level names a definition uses: in what the module evaluates (decorators, bases,
    defaults, annotations) and, through its symbol table, in its body."""
    outside: list[ast.AST] = list(node.decorator_list)
    if isinstance(node, ast.ClassDef):
        outside += node.bases + node.keywords
    else:
        args = node.args
        outside += args.defaults + [d for d in args.kw_defaults if d is not None] + [node.returns]
        outside += [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
                    if a is not None]
    names = _loaded(*outside)
    if table is not None:
        names |= _global_names(table)
    return names - {node.name}


def _relative(node: ast.ImportFrom, deeper: bool) -> ast.ImportFrom:
    """`node` as written in a module one package deeper than the original (relative imports)."""
    if not deeper or not node.level:
        return node
    return ast.ImportFrom(module=node.module, names=node.names, level=node.level + 1)


def _reduced(node: ast.Import | ast.ImportFrom, used: set[str], deeper: bool) -> list[str]:
    if _is_star(node):
        return [ast.unparse(_relative(node, deeper))]
    aliases = [alias for name, alias in _import_bindings(node) if name in used]
    if not aliases:
        return []
    if isinstance(node, ast.Import):
        return [ast.unparse(ast.Import(names=aliases))]
    return [ast.unparse(_relative(ast.ImportFrom(module=node.module, names=aliases, level=node.level), deeper))]


@dataclass
class _Module:
    source: list[str]
    docstring: ast.stmt | None = None
    future: list[ast.ImportFrom] = field(default_factory=list)
    imports: list[ast.Import | ast.ImportFrom] = field(default_factory=list)
    definitions: dict[str, ast.stmt] = field(default_factory=dict)
    others: list[ast.stmt] = field(default_factory=list)
    order: list[ast.stmt] = field(default_factory=list)


def _outline(source: str) -> _Module:
    tree = ast.parse(source)
    module = _Module(source.splitlines())
    spans: list[tuple[int, int]] = []
    bound_by: dict[str, str] = {}

    def bind(names, kind: str) -> None:  # statements may rebind each other's names (see `_dependent_statements`)
        for name in names:
            if bound_by.setdefault(name, kind) != kind or kind == "definition" and name in module.definitions:
                raise MoveError(f"`{name}` is bound by a {bound_by[name]} and a {kind} at module level")

    for index, node in enumerate(tree.body):
        spans.append((_first_line(node), node.end_lineno))
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            module.docstring = node
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
            module.future.append(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module.imports.append(node)
            bind([name for name, _ in _import_bindings(node)], "import")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind([node.name], "definition")
            module.definitions[node.name] = node
            module.order.append(node)
        else:
            bind(_bound(node), "statement")
            module.others.append(node)
            module.order.append(node)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        if start <= end:
            raise MoveError(f"two top-level statements on line {start}")
    return module


def _tables(source: str) -> dict[tuple[str, int], symtable.SymbolTable]:
    top = symtable.symtable(source, "<module>", "exec")
    return {(child.get_name(), child.get_lineno()): child for child in top.get_children()}


def _dependent_statements(module: _Module) -> tuple[set[int], set[str], set[str]]:
    """The module-level statements (by id) that use a definition, directly or through another
    such statement; the names they bind; the names the other statements bind."""
    reached = set(module.definitions)
    dependent: set[int] = set()
    for node in module.others:
        if _loaded(node) & reached:
            dependent.add(id(node))
            reached |= _bound(node)
    shared = {name for node in module.others if id(node) not in dependent for name in _bound(node)}
    late = reached - set(module.definitions)
    if shared & late:
        raise MoveError(f"`{sorted(shared & late)[0]}` is bound both before and after a definition it needs")
    return dependent, late, shared


def _positions(module: _Module, uses: dict[str, set[str]], late: set[str]) -> dict[str, float]:
    """Where `__init__` imports each definition: at its own place, or after the statements that
    bind the `__init__` names it (or a definition it imports) needs at import time."""
    index = {id(node): i for i, node in enumerate(module.order)}
    binder = {name: index[id(node)] for node in module.others for name in _bound(node) if name in late}
    position: dict[str, float] = {}

    def place(name: str, visiting: tuple[str, ...] = ()) -> float:
        if name in position:
            return position[name]
        if name in visiting:
            raise MoveError(f"definitions import each other: {' -> '.join((*visiting, name))}")
        at = float(index[id(module.definitions[name])])
        for used in uses[name]:
            if used in binder:
                at = max(at, binder[used] + 0.5)
            elif used in module.definitions:
                at = max(at, place(used, (*visiting, name)))
        position[name] = at
        return at

    for name in module.definitions:
        place(name)
    for node in module.others:  # a statement that uses a definition must still come after its import
        for used in _loaded(node) & set(module.definitions):
            if position[used] > index[id(node)]:
                raise MoveError(f"line {node.lineno} uses `{used}` before its module can be imported")
    return position


def move_definitions(source: str, package: str, deeper: bool = True) -> dict[str, NewFile]:
    """The files of the package that replaces the module with text `source` (file name in the
    package folder -> `NewFile`); `package` is the dotted name of that package (the module's
    own name, or its package's for an `__init__.py`, then `deeper=False`). No definition: {}."""
    module = _outline(source)
    if not module.definitions:
        return {}
    for name in module.definitions:
        if keyword.iskeyword(module_name_for(name)):
            raise MoveError(f"no module name for `{name}`")
    tables = _tables(source)
    dependent, late, shared = _dependent_statements(module)
    uses = {name: _free_names(node, tables.get((name, node.lineno))) for name, node in module.definitions.items()}
    position = _positions(module, uses, late)
    future = [ast.unparse(node) for node in module.future]
    files: dict[str, NewFile] = {}

    for name, node in module.definitions.items():
        new = files[module_name_for(name) + ".py"] = NewFile()
        new.generated(*future)
        for imported in module.imports:
            new.generated(*_reduced(imported, uses[name], deeper))
        for other in sorted(uses[name] & set(module.definitions)):
            new.generated(f"from {package}.{module_name_for(other)} import {other}")
        for names, where in ((uses[name] & shared, f"{package}.{COMMON}"), (uses[name] & late, package)):
            if names:
                new.generated(f"from {where} import {', '.join(sorted(names))}")
        new.generated("", "")
        new.copied(module.source, _first_line(node), node.end_lineno)

    if shared:
        common = files[COMMON + ".py"] = NewFile()
        common.generated(*future)
        common.generated(*(ast.unparse(_relative(n, deeper) if isinstance(n, ast.ImportFrom) else n)
                           for n in module.imports))
        for node in module.others:
            if id(node) not in dependent:
                common.copied(module.source, _first_line(node), node.end_lineno)

    init = files["__init__.py"] = NewFile()
    if module.docstring is not None:
        init.copied(module.source, module.docstring.lineno, module.docstring.end_lineno)
    init.generated(*future)
    init.generated(*(ast.unparse(_relative(n, deeper) if isinstance(n, ast.ImportFrom) else n) for n in module.imports))
    if shared:
        init.generated(f"from {package}.{COMMON} import {', '.join(sorted(shared))}")
    index = {id(node): i for i, node in enumerate(module.order)}
    steps = [(position[name], 1, name) for name in module.definitions]
    steps += [(float(index[id(node)]), 0, node) for node in module.others if id(node) in dependent]
    for _, _, step in sorted(steps, key=lambda item: (item[0], item[1])):
        if isinstance(step, str):
            init.generated(f"from {package}.{module_name_for(step)} import {step}")
        else:
            init.copied(module.source, _first_line(step), step.end_lineno)
    return files
